// The device team (comm/device/) on stand-in GPUs: the collectives logic
// GPU replicas run (agreement, shards, the reduce's buffers, copies, message
// buffers, events, side streams), over the host runtime, so that CI runs it
// without a GPU. Each result is bitwise the host's reduction in replica
// order, for every op, type and edge count at 1, 2, 3 and 5 replicas; the
// contract (mismatch, timeout, refusals); DeviceTeamCollectives on
// DeviceStandIn computes, and a MirroredStrategy over stand-in GPUs that
// reduces through it (bitwise the CPU replicas' training).
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <strata/comm/device/communicator.hpp>
#include <strata/comm/device/host_runtime.hpp>
#include <strata/core/half.hpp>
#include <strata/core/partition.hpp>
#include <strata/kernels/host/device_stand_in.hpp>
#include <strata/nn.hpp>
#include <strata/device/stand_in_collectives.hpp>

#include "support/blobs.hpp"
#include "device/replica_values.hpp"
#include "device/host_as_gpu.hpp"
#include "support/watchdog.hpp"

namespace device_team_test {  // each file in its own namespace: the unity group joins them

namespace {

using namespace std::chrono_literals;
using Runtime = strata::detail::HostRuntime;
using Team = strata::BasicDeviceTeam<Runtime>;
using Comm = strata::BasicDeviceCommunicator<Runtime>;
using strata::detail::HostStream;
using strata_test::replica_values;
using strata_test::rethrow_first;
using strata_test::require_bitwise;

//! Runs fn(comm, r) on p replica threads of `team`; the first exception of each replica is kept (index r).
std::vector<std::exception_ptr> run_team(Team& team, const std::function<void(Comm&, int)>& fn) {
  const int p = team.size();
  team.reset();
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(p));
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r)
    threads.emplace_back([&, r] {
      try {
        Comm comm = team.communicator(r, HostStream{team.devices()[static_cast<std::size_t>(r)]});
        fn(comm, r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
        team.abort(r, "test replica failed");
      }
      team.depart(r);
    });
  for (auto& t : threads) t.join();
  return errors;
}



//! The host's reduction of `in` in replica order, written out the plain way (not reduce_range).
template <class T, class Op>
std::vector<T> reference(const std::vector<std::vector<T>>& in) {
  const std::size_t n = in.empty() ? 0 : in[0].size();
  std::vector<T> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    T acc = in[0][i];
    for (std::size_t s = 1; s < in.size(); ++s) acc = Op::combine(acc, in[s][i]);
    if constexpr (std::is_same_v<Op, strata::MeanOp>) acc /= static_cast<T>(in.size());
    out[i] = acc;
  }
  return out;
}


//! A buffer of `v` starting `pad` elements past an aligned address (the kernel's unaligned path on a GPU).
template <class T>
struct Buf {
  Buf(const std::vector<T>& v, std::size_t pad) : store(v.size() + pad + 1), pad_(pad), n(v.size()) {
    std::copy(v.begin(), v.end(), store.begin() + static_cast<std::ptrdiff_t>(pad));
  }
  std::span<T> span() { return {store.data() + pad_, n}; }
  [[nodiscard]] std::vector<T> read() const {
    return {store.begin() + static_cast<std::ptrdiff_t>(pad_), store.begin() + static_cast<std::ptrdiff_t>(pad_ + n)};
  }
  std::vector<T> store;
  std::size_t pad_, n;
};

template <class T, class Op>
void check_all_reduce(Team& team, std::size_t n, bool in_place, std::size_t pad) {
  const int p = team.size();
  std::vector<std::vector<T>> in;
  for (int r = 0; r < p; ++r)
    in.push_back(replica_values<T>(n, 1000u * static_cast<unsigned>(r) + 7u, std::is_same_v<Op, strata::ProductOp>));
  const auto want = reference<T, Op>(in);
  std::vector<std::vector<T>> got(static_cast<std::size_t>(p));
  rethrow_first(run_team(team, [&](Comm& c, int r) {
    const auto me = static_cast<std::size_t>(r);
    Buf<T> a(in[me], pad);
    if (in_place) {
      c.all_reduce(a.span(), Op{});
      got[me] = a.read();
    } else {
      Buf<T> out(std::vector<T>(n), pad);
      c.all_reduce(std::span<const T>(a.span()), out.span(), Op{});
      got[me] = out.read();
      require_bitwise(a.read(), in[me], "the input of an out-of-place all_reduce");
    }
  }));
  const std::string what = std::string(strata::dtype_name<T>()) + " " + std::string(Op::name) + " p=" +
                           std::to_string(p) + " n=" + std::to_string(n) + (in_place ? " in place" : " out of place");
  for (int r = 0; r < p; ++r) require_bitwise(got[static_cast<std::size_t>(r)], want, what + " replica " + std::to_string(r));
}

template <class T>
void check_every_op(Team& team) {
  const auto q = static_cast<std::size_t>(team.size());
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, q + 1, std::size_t{1001}, std::size_t{65539}}) {
    check_all_reduce<T, strata::SumOp>(team, n, true, 0);
    check_all_reduce<T, strata::MinOp>(team, n, false, 0);
    check_all_reduce<T, strata::MaxOp>(team, n, true, 1);
    check_all_reduce<T, strata::ProductOp>(team, n, false, 1);
    if constexpr (std::is_floating_point_v<T>) check_all_reduce<T, strata::MeanOp>(team, n, true, 3);
  }
}

}  // namespace

TEST_CASE("stand-in GPUs: all_reduce of every op, type and edge count is the host's reduction in replica order, bitwise") {
  strata_test::Watchdog dog("device team all_reduce", 120s);
  for (int p : {1, 2, 3, 5}) {
    CAPTURE(p);
    Team team{std::vector<int>(static_cast<std::size_t>(p), 0)};
    check_every_op<float>(team);
    check_every_op<double>(team);
    check_every_op<std::int32_t>(team);
    check_every_op<std::int64_t>(team);
  }
}

TEST_CASE("stand-in GPUs: bf16 and fp16 sums add in FP32 once (all_reduce, reduce_scatter), broadcast copies the bits") {
  strata_test::Watchdog dog("device team 16 bits", 60s);
  const auto check = [](auto t, int p, std::size_t n) {
    using T = decltype(t);
    Team team{std::vector<int>(static_cast<std::size_t>(p), 0)};
    std::vector<std::vector<T>> in;
    std::vector<std::vector<float>> wide;
    for (int r = 0; r < p; ++r) {
      std::vector<T> v;
      for (float x : replica_values<float>(n, 77u * static_cast<unsigned>(r) + 5u, false)) v.push_back(T(x));
      in.push_back(v);
    }
    std::vector<std::uint16_t> want(n);
    for (std::size_t i = 0; i < n; ++i) {
      float acc = static_cast<float>(in[0][i]);
      for (int s = 1; s < p; ++s) acc += static_cast<float>(in[static_cast<std::size_t>(s)][i]);
      want[i] = T(acc).bits;
    }
    const auto bits = [](std::span<const T> v) {
      std::vector<std::uint16_t> out;
      for (const T& x : v) out.push_back(x.bits);
      return out;
    };
    rethrow_first(run_team(team, [&](Comm& c, int r) {
      const auto me = static_cast<std::size_t>(r);
      std::vector<T> a = in[me], b = in[me];
      const strata::Range mine = strata::shard_range(n, static_cast<std::size_t>(p), me);
      std::vector<T> shard(mine.size());
      c.all_reduce(std::span<T>(a), strata::Sum);
      c.reduce_scatter(std::span<const T>(b), std::span<T>(shard), strata::Sum);
      c.broadcast(std::span<T>(b), p - 1);
      CHECK(bits(a) == want);
      CHECK(bits(shard) == std::vector<std::uint16_t>(want.begin() + static_cast<std::ptrdiff_t>(mine.begin),
                                                      want.begin() + static_cast<std::ptrdiff_t>(mine.end)));
      CHECK(bits(b) == bits(in[static_cast<std::size_t>(p - 1)]));
    }));
  };
  for (int p : {2, 3}) {
    CAPTURE(p);
    for (std::size_t n : {std::size_t{0}, std::size_t{5}, std::size_t{4099}}) {
      CAPTURE(n);
      check(strata::bf16{}, p, n);
      check(strata::fp16{}, p, n);
    }
  }
}

TEST_CASE("stand-in GPUs: broadcast, reduce_scatter (uneven shards) and all_gather (uneven inputs)") {
  strata_test::Watchdog dog("device team copies", 60s);
  const int p = 3;
  Team team{{0, 0, 1}};  // two stand-in devices: the team enables "peer access" between them
  const std::size_t n = 10;  // shards of 4, 3, 3
  rethrow_first(run_team(team, [&](Comm& c, int r) {
    const auto me = static_cast<std::size_t>(r);
    std::vector<float> data(n, static_cast<float>(r + 1));
    c.broadcast(std::span<float>(data), 1);
    CHECK(data == std::vector<float>(n, 2.f));
    std::vector<float> in(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<float>(i) * static_cast<float>(r + 1);
    const strata::Range mine = strata::shard_range(n, p, me);
    std::vector<float> shard(mine.size());
    c.reduce_scatter(std::span<const float>(in), std::span<float>(shard), strata::Sum);
    for (std::size_t i = 0; i < shard.size(); ++i) CHECK(shard[i] == static_cast<float>(mine.begin + i) * 6.f);
    std::vector<float> mine_in(me + 1, static_cast<float>(r));  // 1, 2 and 3 elements
    std::vector<float> all(6);
    c.all_gather(std::span<const float>(mine_in), std::span<float>(all));
    CHECK(all == std::vector<float>{0, 1, 1, 2, 2, 2});
  }));
}

TEST_CASE("stand-in GPUs: every collective records each replica's ready and done events once") {
  Team team{{0, 0}};
  rethrow_first(run_team(team, [&](Comm& c, int) {
    std::vector<float> v(7, 1.f);
    for (int i = 0; i < 5; ++i) c.all_reduce(std::span<float>(v), strata::Sum);
    c.barrier();
  }));
  for (int r = 0; r < 2; ++r) {
    CHECK(team.ready(r).records() == 6);
    CHECK(team.done(r).records() == 6);
  }
}

TEST_CASE("stand-in GPUs: send/recv around a ring reuse the team's message buffers; a size mismatch is named on the receiver") {
  strata_test::Watchdog dog("device team send/recv", 60s);
  Team team{{0, 0, 0}};
  const auto ring = [&] {
    rethrow_first(run_team(team, [&](Comm& c, int r) {
      const int next = (r + 1) % 3, prev = (r + 2) % 3;
      std::vector<float> out(1000, static_cast<float>(r)), in(1000);
      c.send(std::span<const float>(out), next, 4);
      c.recv(std::span<float>(in), prev, 4);
      CHECK(in == std::vector<float>(1000, static_cast<float>(prev)));
    }));
  };
  ring();
  const std::size_t made = team.message_buffers();
  CHECK(made == 3);
  for (int i = 0; i < 4; ++i) ring();
  CHECK(team.message_buffers() == made);  // reused from step to step
  const auto errors = run_team(team, [&](Comm& c, int r) {
    if (r == 0) c.send(std::span<const float>(std::vector<float>(5)), 1, 0);
    if (r == 1) {
      std::vector<float> in(6);
      c.recv(std::span<float>(in), 0, 0);
    }
  });
  REQUIRE(errors[1]);
  CHECK_THROWS_WITH_AS(std::rethrow_exception(errors[1]),
                       doctest::Contains("expected float32, 6 elements but replica 0 sent float32, 5 elements"),
                       strata::CollectiveMismatch);
}

TEST_CASE("stand-in GPUs: replicas that disagree raise CollectiveMismatch on every replica, naming each call") {
  Team team{{0, 0}};
  const auto errors = run_team(team, [&](Comm& c, int r) {
    std::vector<float> v(r == 0 ? 4 : 5);
    c.all_reduce(std::span<float>(v), strata::Sum);
  });
  for (const auto& e : errors) {
    REQUIRE(e);
    CHECK_THROWS_AS(std::rethrow_exception(e), strata::CollectiveMismatch);
  }
}

TEST_CASE("stand-in GPUs: a replica that never arrives is a CollectiveTimeout naming it, within the timeout") {
  strata_test::Watchdog dog("device team timeout", 60s);
  Team team{{0, 0, 0}, {.timeout = 300ms}};
  std::chrono::steady_clock::duration waited{};
  const auto errors = run_team(team, [&](Comm& c, int r) {
    if (r == 2) {  // stalled: it never calls, and returns only after the others gave up
      std::this_thread::sleep_for(1500ms);
      return;
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<float> v(8);
    try {
      c.all_reduce(std::span<float>(v), strata::Sum);
    } catch (...) {
      if (r == 0) waited = std::chrono::steady_clock::now() - t0;
      throw;
    }
  });
  CHECK(waited < 1200ms);  // released by the deadline, not by the stalled replica's return
  int timeouts = 0;
  for (int r : {0, 1}) {
    REQUIRE(errors[static_cast<std::size_t>(r)]);
    try {
      std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
    } catch (const strata::CollectiveError& e) {
      CHECK(std::string(e.what()).find("missing: replica 2") != std::string::npos);
      timeouts += dynamic_cast<const strata::CollectiveTimeout*>(&e) != nullptr;
    }
  }
  CHECK(timeouts >= 1);  // the first to time out; the other may be released by its abort
  CHECK(team.quiesce().empty());  // the stand-in's queued work has ended
}

TEST_CASE("a device team of no replicas, too many or a negative device is an Error that says so") {
  CHECK_THROWS_WITH_AS(Team{std::vector<int>{}}, doctest::Contains("no replicas"), strata::Error);
  CHECK_THROWS_WITH_AS(Team{std::vector<int>(33, 0)}, doctest::Contains("holds at most 32"), strata::Error);
  CHECK_THROWS_WITH_AS((Team{{0, -1}}), doctest::Contains("replica 1 names device -1"), strata::Error);
}

// DeviceTeamCollectives: what a MirroredStrategy's GPU replicas reduce with, here on stand-in computes.
TEST_CASE("stand-in collectives: the device team's direct reduce, side streams for the started forms, 16-bit wires") {
  strata_test::Watchdog dog("stand-in collectives", 60s);
  const auto devices = strata::virtual_gpus(0, 3);
  auto coll = strata::detail::make_stand_in_collectives(devices, {});
  CHECK(coll->choice().find("direct reduce") != std::string::npos);
  auto* team_colls = dynamic_cast<strata::detail::StandInTeamCollectives*>(coll.get());
  REQUIRE(team_colls);
  std::vector<std::exception_ptr> errors(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      try {
        strata::kernels::DeviceStandIn c{0};
        const float me = static_cast<float>(r + 1);
        std::vector<float> g(11, me);
        coll->all_reduce_sum(r, c, g.data(), g.size());
        CHECK(g == std::vector<float>(11, 6.f));
        std::vector<float> b(9, me);
        strata::Work w = coll->all_reduce_sum_async(r, c, b.data(), b.size());
        w.wait();
        CHECK(b == std::vector<float>(9, 6.f));
        std::vector<float> shard(strata::shard_range(10, 3, static_cast<std::size_t>(r)).size());
        std::vector<float> in(10, me), gathered(10);
        coll->reduce_scatter_sum_async(r, c, in.data(), shard.data(), 10).wait();
        CHECK(shard == std::vector<float>(shard.size(), 6.f));
        coll->all_gather_async(r, c, shard.data(), gathered.data(), 10).wait();
        CHECK(gathered == std::vector<float>(10, 6.f));
        std::vector<strata::bf16> wire(5, strata::bf16(me));
        coll->wire(r, c, {.kind = strata::detail::WireCall::Kind::all_reduce, .format = strata::WireFormat::bf16,
                          .in = wire.data(), .out = wire.data(), .n = wire.size(), .started = true})
            .wait();
        for (const auto& x : wire) CHECK(static_cast<float>(x) == 6.f);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
        coll->abort(r, "replica failed");
      }
    });
  for (auto& t : threads) t.join();
  rethrow_first(errors);
  CHECK(team_colls->team().ready(0).records() == 5);  // each of the 5 calls above: one collective of the team
}

TEST_CASE("stand-in collectives: STRATA_GPU_ALLREDUCE=host_staged stages through host memory, as on a GPU") {
  ::setenv("STRATA_GPU_ALLREDUCE", "host_staged", 1);
  auto staged = strata::detail::make_stand_in_collectives(strata::virtual_gpus(0, 2), {});
  ::unsetenv("STRATA_GPU_ALLREDUCE");
  CHECK(dynamic_cast<strata::detail::StandInTeamCollectives*>(staged.get()) == nullptr);
  CHECK(staged->choice().find("stand-in GPUs in host memory") == 0);
  auto direct = strata::detail::make_stand_in_collectives(strata::gpus({0, 1}), {});
  CHECK(dynamic_cast<strata::detail::StandInTeamCollectives*>(direct.get()) != nullptr);
}

// The strategy's path: MirroredStrategy over stand-in GPUs reduces through the device team (this fails
// if HostAsGpu stops installing make_stand_in_collectives), bitwise the CPU replicas, with buckets.
TEST_CASE("MirroredStrategy over stand-in GPUs sums through the device team, bitwise the CPU replicas") {
  strata_test::Watchdog dog("mirrored through the device team", 120s);
  strata_test::HostAsGpu host;
  namespace nn = strata::nn;
  const auto data = strata_test::blobs(60, 5);
  const auto train = [&](bool gpus, std::size_t bucket_bytes) {
    strata::MirroredStrategy s{gpus ? strata::virtual_gpus(0, 3) : strata::cpu_replicas(3)};
    s.executor_options().bucket_bytes = bucket_bytes;
    auto m = s.scope([] { return nn::Sequential{nn::Input{{6}}, nn::Dense{16, {.activation = nn::Activation::ReLU}}, nn::Dense{3}}; });
    m.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 5});
    m.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(12)),
          {.epochs = 2, .verbose = nn::Verbosity::Silent});
    return std::make_pair(strata_test::flat_weights(m), m.gradient_reduction());
  };
  for (std::size_t bytes : {std::size_t{0}, std::size_t{256}}) {
    CAPTURE(bytes);
    const auto [cpu, cpu_choice] = train(false, bytes);
    const auto [gpu, gpu_choice] = train(true, bytes);
    CHECK(gpu == cpu);
    CHECK(gpu_choice.find("direct reduce") != std::string::npos);
  }
}

}  // namespace device_team_test
