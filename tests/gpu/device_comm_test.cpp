// DeviceCommunicator: the collectives of GPU replicas that share a memory
// (virtual GPUs on GPU 0), against the host's reduction in replica order
// (bitwise: each element is reduced once, in the same order), for every op,
// type and element-count edge case at 2, 4 and 8 replicas; the contract
// (mismatch, timeout, host memory) and the device-side ordering of many
// back-to-back collectives.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <strata/core/half.hpp>
#include <strata/core/partition.hpp>
#include <strata/cuda/comm/communicator.hpp>
#include <strata/cuda/launch.hpp>

#include "device/replica_values.hpp"
#include "device_vector.hpp"

namespace device_comm_gpu_test {  // each file in its own namespace: the unity group joins them (tests/gpu/meson.build)

namespace {

using strata::DeviceCommunicator;
using strata::DeviceTeam;
using strata_test::replica_values;
using strata_test::rethrow_first;
using strata_test::require_bitwise;

//! A device buffer on GPU 0 through stream `s` (device_vector.hpp), `pad` elements past an aligned address.
template <class T>
struct DevBuf : gpu_test::DeviceVector<T> {
  DevBuf(cudaStream_t s, const std::vector<T>& v, std::size_t pad = 0) : gpu_test::DeviceVector<T>(v, 0, s, pad) {}
  DevBuf(cudaStream_t s, std::size_t n, std::size_t pad = 0) : DevBuf(s, std::vector<T>(n), pad) {}
};

//! Runs fn(comm, stream, r) on p replica threads of a team on GPU 0; the
//! first exception of each replica is kept (index r), as a strategy does.
std::vector<std::exception_ptr> run_team(
    DeviceTeam& team, const std::function<void(DeviceCommunicator&, cudaStream_t, int)>& fn) {
  const int p = team.size();
  team.reset();
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(p));
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r)
    threads.emplace_back([&, r] {
      try {
        strata::cuda::DeviceGuard g{team.devices()[static_cast<std::size_t>(r)]};
        strata::cuda::Stream stream{team.devices()[static_cast<std::size_t>(r)]};
        DeviceCommunicator comm = team.communicator(r, stream.get());
        fn(comm, stream.get(), r);
        stream.synchronize();
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
        team.abort(r, "test replica failed");
      }
      team.depart(r);
    });
  for (auto& t : threads) t.join();
  return errors;
}

template <class T, class Op>
std::vector<T> host_reduce(const std::vector<std::vector<T>>& in, std::size_t begin, std::size_t end) {
  std::vector<const T*> ptr;
  for (auto& v : in) ptr.push_back(v.data());
  std::vector<T> out(end - begin);
  T* o = out.data() - begin;  // reduce_range writes elements [begin, end)
  strata::detail::reduce_range<Op>(ptr.data(), ptr.size(), &o, 1, begin, end, in.size());
  return out;
}

std::vector<std::size_t> counts_for(int p) {
  const auto q = static_cast<std::size_t>(p);
  return {0, 1, q - 1, q + 1, 1001, (std::size_t{1} << 20) + 3};
}

template <class T, class Op>
void check_all_reduce(DeviceTeam& team, std::size_t n, bool in_place, std::size_t pad) {
  const int p = team.size();
  const bool prod = std::is_same_v<Op, strata::ProductOp>;
  std::vector<std::vector<T>> in;
  for (int r = 0; r < p; ++r) in.push_back(replica_values<T>(n, 1000u * static_cast<unsigned>(r) + 7u, prod));
  const auto want = host_reduce<T, Op>(in, 0, n);
  std::vector<std::vector<T>> got(static_cast<std::size_t>(p));
  rethrow_first(run_team(team, [&](DeviceCommunicator& c, cudaStream_t s, int r) {
    DevBuf<T> a(s, in[static_cast<std::size_t>(r)], pad);
    if (in_place) {
      c.all_reduce(a.span(), Op{});
      got[static_cast<std::size_t>(r)] = a.read();
    } else {
      DevBuf<T> out(s, n, pad);
      c.all_reduce(std::span<const T>(a.span()), out.span(), Op{});
      got[static_cast<std::size_t>(r)] = out.read();
      require_bitwise(a.read(), in[static_cast<std::size_t>(r)], "the input of an out-of-place all_reduce");
    }
  }));
  const std::string what = std::string(strata::dtype_name<T>()) + " " + std::string(Op::name) + " p=" +
                           std::to_string(p) + " n=" + std::to_string(n) + (in_place ? " in place" : " out of place") +
                           (pad ? " unaligned" : "");
  for (int r = 0; r < p; ++r) require_bitwise(got[static_cast<std::size_t>(r)], want, what + " replica " + std::to_string(r));
}

template <class T>
void check_every_op(DeviceTeam& team) {
  for (std::size_t n : counts_for(team.size())) {
    check_all_reduce<T, strata::SumOp>(team, n, true, 0);
    check_all_reduce<T, strata::MinOp>(team, n, false, 0);
    check_all_reduce<T, strata::MaxOp>(team, n, true, 1);
    check_all_reduce<T, strata::ProductOp>(team, n, false, 1);
    if constexpr (std::is_floating_point_v<T>) check_all_reduce<T, strata::MeanOp>(team, n, true, 0);
  }
}

}  // namespace

TEST_CASE("virtual GPUs: all_reduce of every op, type and edge count equals the host's reduction bitwise") {
  for (int p : {2, 4, 8}) {
    CAPTURE(p);
    DeviceTeam team{strata::virtual_gpus(0, p)};
    check_every_op<float>(team);
    check_every_op<double>(team);
    check_every_op<std::int32_t>(team);
    check_every_op<std::int64_t>(team);
  }
}

// bf16 and fp16 (gradient compression's): Sum adds in FP32 in replica order and rounds once, in the
// reduce kernel as in the host's reduce_range, so bitwise the host's; reduce_scatter gives each replica
// its shard of the same sums; broadcast copies the 16 bits.
namespace {
template <class T>
void check_wire(DeviceTeam& team, std::size_t n, std::size_t pad) {
  const int p = team.size();
  std::vector<std::vector<T>> in;
  for (int r = 0; r < p; ++r) {
    const auto f = replica_values<float>(n, 77u * static_cast<unsigned>(r) + 5u, false);
    std::vector<T> v;
    for (float x : f) v.push_back(T(x));
    in.push_back(std::move(v));
  }
  const auto want = host_reduce<T, strata::SumOp>(in, 0, n);
  std::vector<std::vector<T>> summed(static_cast<std::size_t>(p)), shards(summed), copied(summed);
  rethrow_first(run_team(team, [&](DeviceCommunicator& c, cudaStream_t s, int r) {
    const auto me = static_cast<std::size_t>(r);
    DevBuf<T> a(s, in[me], pad), b(s, in[me], pad);
    DevBuf<T> shard(s, strata::shard_range(n, static_cast<std::size_t>(p), me).size(), pad);
    c.all_reduce(a.span(), strata::Sum);
    c.reduce_scatter(std::span<const T>(b.span()), shard.span(), strata::Sum);
    c.broadcast(b.span(), p - 1);
    summed[me] = a.read();
    shards[me] = shard.read();
    copied[me] = b.read();
  }));
  const auto bits = [](const std::vector<T>& v) {
    std::vector<std::uint16_t> out;
    for (const T& x : v) out.push_back(x.bits);
    return out;
  };
  const std::string what = std::string(strata::dtype_name<T>()) + " p=" + std::to_string(p) + " n=" +
                           std::to_string(n) + (pad ? " unaligned" : "");
  for (int r = 0; r < p; ++r) {
    const auto me = static_cast<std::size_t>(r);
    const strata::Range mine = strata::shard_range(n, static_cast<std::size_t>(p), me);
    require_bitwise(bits(summed[me]), bits(want), what + " all_reduce, replica " + std::to_string(r));
    require_bitwise(bits(shards[me]),
                    std::vector<std::uint16_t>(bits(want).begin() + static_cast<std::ptrdiff_t>(mine.begin),
                                               bits(want).begin() + static_cast<std::ptrdiff_t>(mine.end)),
                    what + " reduce_scatter, replica " + std::to_string(r));
    require_bitwise(bits(copied[me]), bits(in.back()), what + " broadcast, replica " + std::to_string(r));
  }
}
}  // namespace

TEST_CASE("virtual GPUs: bf16 and fp16 sums add in FP32 once, as the host does (all_reduce, reduce_scatter)") {
  for (int p : {2, 3, 4}) {
    CAPTURE(p);
    DeviceTeam team{strata::virtual_gpus(0, p)};
    for (std::size_t n : counts_for(p))
      for (std::size_t pad : {std::size_t{0}, std::size_t{1}}) {
        check_wire<strata::bf16>(team, n, pad);
        check_wire<strata::fp16>(team, n, pad);
      }
  }
}

TEST_CASE("virtual GPUs: one replica copies its input (out of place) and leaves it (in place)") {
  DeviceTeam team{strata::virtual_gpus(0, 1)};
  check_all_reduce<float, strata::MeanOp>(team, 1001, false, 0);
  check_all_reduce<float, strata::SumOp>(team, 1001, true, 1);
}

TEST_CASE("virtual GPUs: broadcast, reduce_scatter (uneven shards) and all_gather (uneven inputs)") {
  for (int p : {2, 3, 4, 8}) {
    CAPTURE(p);
    DeviceTeam team{strata::virtual_gpus(0, p)};
    const auto up = static_cast<std::size_t>(p);
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, up + 1, std::size_t{100003}}) {
      CAPTURE(n);
      std::vector<std::vector<float>> in;
      for (int r = 0; r < p; ++r) in.push_back(replica_values<float>(n, 31u + static_cast<unsigned>(r), false));
      const auto sum = host_reduce<float, strata::SumOp>(in, 0, n);
      std::vector<std::vector<float>> bcast(up), shard(up), gathered(up);
      // all_gather: replica r contributes r + n elements (uneven).
      std::vector<float> concat;
      for (int r = 0; r < p; ++r) {
        auto v = replica_values<float>(n + static_cast<std::size_t>(r), 77u + static_cast<unsigned>(r), false);
        concat.insert(concat.end(), v.begin(), v.end());
      }
      rethrow_first(run_team(team, [&](DeviceCommunicator& c, cudaStream_t s, int r) {
        const auto ur = static_cast<std::size_t>(r);
        DevBuf<float> b(s, in[ur]);
        c.broadcast(b.span(), p - 1);
        bcast[ur] = b.read();
        DevBuf<float> a(s, in[ur]);
        DevBuf<float> out(s, strata::shard_range(n, up, ur).size());
        c.reduce_scatter(std::span<const float>(a.span()), out.span(), strata::Sum);
        shard[ur] = out.read();
        auto mine = replica_values<float>(n + ur, 77u + static_cast<unsigned>(r), false);
        DevBuf<float> g(s, mine, 1);  // unaligned too
        DevBuf<float> all(s, concat.size());
        c.all_gather(std::span<const float>(g.span()), all.span());
        gathered[ur] = all.read();
      }));
      for (int r = 0; r < p; ++r) {
        const auto ur = static_cast<std::size_t>(r);
        require_bitwise(bcast[ur], in[up - 1], "broadcast from the last replica");
        const auto range = strata::shard_range(n, up, ur);
        require_bitwise(shard[ur], std::vector<float>(sum.begin() + static_cast<std::ptrdiff_t>(range.begin),
                                                      sum.begin() + static_cast<std::ptrdiff_t>(range.end)),
                        "reduce_scatter's shard " + std::to_string(r));
        require_bitwise(gathered[ur], concat, "all_gather on replica " + std::to_string(r));
      }
    }
  }
}

TEST_CASE("virtual GPUs: 300 back-to-back all_reduces with device work between them stay ordered") {
  // Each step every replica adds (r + 1) to its vector on its stream, then
  // all-reduces (sum): a missing wait on the device shows as a wrong value.
  const int p = 4;
  const std::size_t n = 1 << 16;
  DeviceTeam team{strata::virtual_gpus(0, p)};
  std::vector<std::vector<float>> got(p);
  rethrow_first(run_team(team, [&](DeviceCommunicator& c, cudaStream_t s, int r) {
    DevBuf<float> x(s, std::vector<float>(n, 0.f));
    DevBuf<float> ones(s, std::vector<float>(n, 1.f));
    for (int step = 0; step < 300; ++step) {
      strata::cuda::detail::launch_axpy(s, static_cast<float>(r + 1), ones.get(), x.get(), n);
      c.all_reduce(x.span(), strata::Mean);
    }
    got[static_cast<std::size_t>(r)] = x.read();
  }));
  // x_{k+1} = x_k + mean(r + 1) = x_k + 2.5, exactly representable all the way.
  for (int r = 0; r < p; ++r) require_bitwise(got[static_cast<std::size_t>(r)], std::vector<float>(n, 750.f), "x after 300 steps");
}

TEST_CASE("virtual GPUs: send/recv around a ring, and a size mismatch named on the receiver") {
  const int p = 4;
  DeviceTeam team{strata::virtual_gpus(0, p)};
  std::vector<std::vector<float>> got(p);
  rethrow_first(run_team(team, [&](DeviceCommunicator& c, cudaStream_t s, int r) {
    DevBuf<float> mine(s, replica_values<float>(1000, 5u + static_cast<unsigned>(r), false));
    DevBuf<float> in(s, 1000);
    c.send(std::span<const float>(mine.span()), (r + 1) % p, 3);  // every replica sends first: must not wait
    c.recv(in.span(), (r + p - 1) % p, 3);
    got[static_cast<std::size_t>(r)] = in.read();
  }));
  for (int r = 0; r < p; ++r)
    require_bitwise(got[static_cast<std::size_t>(r)], replica_values<float>(1000, 5u + static_cast<unsigned>((r + p - 1) % p), false),
                    "the ring message");

  DeviceTeam two{strata::virtual_gpus(0, 2)};
  auto errors = run_team(two, [&](DeviceCommunicator& c, cudaStream_t s, int r) {
    DevBuf<float> b(s, r == 0 ? 10 : 11);
    if (r == 0) c.send(std::span<const float>(b.span()), 1, 0);
    else c.recv(b.span(), 0, 0);
  });
  REQUIRE(errors[1]);
  CHECK_THROWS_WITH_AS(std::rethrow_exception(errors[1]),
                       doctest::Contains("expected float32, 11 elements but replica 0 sent float32, 10 elements"),
                       strata::CollectiveMismatch);
}

TEST_CASE("virtual GPUs: replicas that disagree raise CollectiveMismatch on every replica, naming each call") {
  DeviceTeam team{strata::virtual_gpus(0, 3)};
  auto errors = run_team(team, [&](DeviceCommunicator& c, cudaStream_t s, int r) {
    DevBuf<float> b(s, r == 1 ? 11 : 10);
    c.all_reduce(b.span(), strata::Sum);
  });
  for (int r = 0; r < 3; ++r) {
    REQUIRE(errors[static_cast<std::size_t>(r)]);
    CHECK_THROWS_WITH_AS(std::rethrow_exception(errors[static_cast<std::size_t>(r)]),
                         doctest::Contains("replica 1 called all_reduce(sum, float32, 11 elements, device_direct)"),
                         strata::CollectiveMismatch);
  }
}

TEST_CASE("virtual GPUs: a replica that never arrives is a CollectiveTimeout naming it, within the timeout") {
  DeviceTeam team{strata::virtual_gpus(0, 3), {.timeout = std::chrono::milliseconds(300)}};
  std::atomic<bool> release{false};
  const auto t0 = std::chrono::steady_clock::now();
  auto errors = run_team(team, [&](DeviceCommunicator& c, cudaStream_t s, int r) {
    if (r == 2) {  // stalls (does not return, so it has not departed) until the others gave up
      while (!release.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return;
    }
    DevBuf<float> b(s, 100);
    try {
      c.all_reduce(b.span(), strata::Sum);
    } catch (...) {
      if (r == 0) release.store(true);
      throw;
    }
  });
  const auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(waited < std::chrono::seconds(3));
  // Replicas 0 and 1 both wait; the first to time out aborts the team, so
  // the other may see CollectiveAborted: one of them names the missing replica.
  std::exception_ptr timeout;
  for (int r = 0; r < 2; ++r) {
    REQUIRE(errors[static_cast<std::size_t>(r)]);
    try {
      std::rethrow_exception(errors[static_cast<std::size_t>(r)]);
    } catch (const strata::CollectiveTimeout&) {
      timeout = errors[static_cast<std::size_t>(r)];
    } catch (const strata::CollectiveAborted&) {
    }
  }
  REQUIRE(timeout);
  CHECK_THROWS_WITH_AS(std::rethrow_exception(timeout), doctest::Contains("missing: replica 2"),
                       strata::CollectiveTimeout);
}

TEST_CASE("virtual GPUs: host memory in a collective is an error naming the call, not a crash") {
  DeviceTeam team{strata::virtual_gpus(0, 1)};
  auto errors = run_team(team, [&](DeviceCommunicator& c, cudaStream_t, int) {
    std::vector<float> host(10, 1.f);
    c.all_reduce(std::span<float>(host), strata::Sum);
  });
  REQUIRE(errors[0]);
  CHECK_THROWS_WITH_AS(std::rethrow_exception(errors[0]),
                       doctest::Contains("DeviceCommunicator::all_reduce on replica 0 (GPU 0): the input is host memory"),
                       strata::Error);
}

TEST_CASE("DeviceTeam: CPU replicas, too many replicas and no replicas are errors that say so") {
  CHECK_THROWS_WITH_AS(DeviceTeam({strata::gpu(0), strata::cpu(0)}),
                       doctest::Contains("replica 1 is /cpu:0; a device team holds GPU replicas"), strata::Error);
  CHECK_THROWS_WITH_AS(DeviceTeam(strata::virtual_gpus(0, 33)), doctest::Contains("at most 32"), strata::Error);
  CHECK_THROWS_WITH_AS(DeviceTeam(std::vector<strata::Device>{}), doctest::Contains("no replicas"), strata::Error);
  CHECK_THROWS_WITH_AS(DeviceTeam({strata::gpu(strata::cuda::device_count())}),
                       doctest::Contains("there is no CUDA device"), strata::CudaError);
}

TEST_CASE("virtual GPUs: send/recv reuse the team's message buffers from step to step, queued messages included") {
  // A step that allocated or freed per message (or waited on the host for
  // the copy) is what a CUDA graph cannot capture: after the first steps the
  // team holds a fixed set of buffers, and every message still arrives.
  DeviceTeam team{strata::virtual_gpus(0, 2)};
  const std::size_t sizes[] = {1000, 17, 1000, 5000, 3, 5000, 1000};
  std::vector<std::vector<float>> got;
  std::size_t after_first = 0;
  for (int step = 0; step < 20; ++step) {
    const std::size_t n = sizes[static_cast<std::size_t>(step) % std::size(sizes)];
    std::vector<std::vector<float>> recv(3);
    rethrow_first(run_team(team, [&](DeviceCommunicator& c, cudaStream_t s, int r) {
      if (r == 0) {  // three messages in flight before the first is received
        for (unsigned k = 0; k < 3; ++k) {
          DevBuf<float> m(s, replica_values<float>(n, 100u * static_cast<unsigned>(step) + k, false));
          c.send(std::span<const float>(m.span()), 1, 4);
        }
        DevBuf<float> back(s, n);
        c.recv(back.span(), 1, 5);
        recv[0] = back.read();
      } else {
        DevBuf<float> in(s, n);
        for (auto& v : std::span(recv).subspan(1)) {
          c.recv(in.span(), 0, 4);
          v = in.read();
        }
        DevBuf<float> echo(s, replica_values<float>(n, 7u, false));
        c.send(std::span<const float>(echo.span()), 0, 5);
      }
    }));
    require_bitwise(recv[1], replica_values<float>(n, 100u * static_cast<unsigned>(step), false), "the first message");
    require_bitwise(recv[2], replica_values<float>(n, 100u * static_cast<unsigned>(step) + 1, false), "the second message");
    require_bitwise(recv[0], replica_values<float>(n, 7u, false), "the reply");
    if (step == static_cast<int>(std::size(sizes)) - 1) after_first = team.message_buffers();
  }
  CHECK(after_first >= 4);  // 3 in flight one way, 1 the other
  CHECK(team.message_buffers() == after_first);  // later steps made none
}

TEST_CASE("virtual GPUs: the async forms give the blocking results, and their Works complete") {
  static_assert(strata::AsyncCommunicator<DeviceCommunicator>);
  const int p = 3;
  const std::size_t n = 1001;
  DeviceTeam team{strata::virtual_gpus(0, p)};
  std::vector<std::vector<float>> in;
  for (int r = 0; r < p; ++r) in.push_back(replica_values<float>(n, 50u + static_cast<unsigned>(r), false));
  const auto sum = host_reduce<float, strata::SumOp>(in, 0, n);
  std::vector<std::vector<float>> reduced(p), shard(p), gathered(p), bcast(p);
  rethrow_first(run_team(team, [&](DeviceCommunicator& c, cudaStream_t s, int r) {
    const auto ur = static_cast<std::size_t>(r);
    DevBuf<float> a(s, in[ur]), b(s, in[ur]), root(s, in[ur]), all(s, n);
    DevBuf<float> out(s, strata::shard_range(n, static_cast<std::size_t>(p), ur).size());
    strata::Work w1 = c.all_reduce_async(a.span(), strata::Sum);
    strata::Work w2 = c.reduce_scatter_async(std::span<const float>(b.span()), out.span(), strata::Sum);
    w2.wait();
    strata::Work w3 = c.all_gather_async(std::span<const float>(out.span()), all.span());
    strata::Work w4 = c.broadcast_async(root.span(), 1);
    strata::Work w5 = c.barrier_async();
    while (!w5.test()) std::this_thread::yield();  // the stream is in order: the others are done too
    CHECK(w1.is_completed());
    CHECK(w4.test());
    w1.wait();
    w3.wait();
    reduced[ur] = a.read();
    shard[ur] = out.read();
    gathered[ur] = all.read();
    bcast[ur] = root.read();
  }));
  for (int r = 0; r < p; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    require_bitwise(reduced[ur], sum, "all_reduce_async");
    const auto range = strata::shard_range(n, static_cast<std::size_t>(p), ur);
    require_bitwise(shard[ur], std::vector<float>(sum.begin() + static_cast<std::ptrdiff_t>(range.begin),
                                                  sum.begin() + static_cast<std::ptrdiff_t>(range.end)),
                    "reduce_scatter_async");
    require_bitwise(gathered[ur], sum, "all_gather_async of the shards");
    require_bitwise(bcast[ur], in[1], "broadcast_async from replica 1");
  }
}

}  // namespace device_comm_gpu_test
