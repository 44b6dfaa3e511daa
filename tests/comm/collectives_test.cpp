// Every collective, every algorithm, every element-count edge case, p = 1..16
// (more replicas than cores included), in place and out of place.
#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <strata/strata.hpp>
#include <vector>

#include "support/watchdog.hpp"

namespace collectives_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

using namespace std::chrono_literals;

namespace {

constexpr int kMaxReplicas = 16;

// Small chunks so that the ring runs many segments even on small inputs.
strata::CommOptions test_options() {
  strata::CommOptions o;
  o.ring_chunk_bytes = 256;
  o.timeout = 60s;
  return o;
}

std::vector<std::size_t> counts_for(int p) {
  const auto P = static_cast<std::size_t>(p);
  return {0, 1, 2, P - 1 > 0 ? P - 1 : 1, P, P + 1, 3 * P + 1, 64, 1000, 4099};
}

template <class T>
T value(int r, std::size_t i, strata::detail::OpKind op) {
  using K = strata::detail::OpKind;
  if (op == K::product) return static_cast<T>(1 + (i + static_cast<std::size_t>(r)) % 2);
  if (op == K::min || op == K::max) return static_cast<T>(static_cast<long>((i * 31 + static_cast<std::size_t>(r) * 17) % 101) - 50);
  return static_cast<T>(static_cast<long>((i % 13) * static_cast<std::size_t>(r + 1)) - 20);
}

template <class Op, class T>
std::vector<T> expected(int p, std::size_t n) {
  std::vector<T> e(n);
  for (std::size_t i = 0; i < n; ++i) {
    T acc = value<T>(0, i, Op::kind);
    for (int r = 1; r < p; ++r) acc = Op::combine(acc, value<T>(r, i, Op::kind));
    if constexpr (std::same_as<Op, strata::MeanOp>) acc /= static_cast<T>(p);
    e[i] = acc;
  }
  return e;
}

template <class T>
bool close(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!strata::detail::close(a[i], b[i], {1e-6, 1e-6})) return false;
  return true;
}

// Runs all-reduce with Op over every count on p replicas; returns the number of
// failed checks (collected per replica, asserted on the caller's thread since
// doctest's assertions are not thread-safe).
template <class Algo, class Op, class T>
void check_all_reduce(strata::Strategy<strata::Synchronous, strata::Mirrored, Algo>& s, Op op) {
  const int p = s.num_replicas_in_sync();
  for (bool in_place : {true, false}) {
    for (std::size_t n : counts_for(p)) {
      auto results = s.run([&](auto& ctx) {
        const int r = ctx.replica_id_in_sync_group();
        std::vector<T> in(n), out(n, T{-1});
        for (std::size_t i = 0; i < n; ++i) in[i] = value<T>(r, i, Op::kind);
        if (in_place) {
          ctx.all_reduce(in, op);
          return in;
        }
        ctx.all_reduce(in, out, op);
        return out;
      });
      const auto want = expected<Op, T>(p, n);
      INFO("p=" << p << " n=" << n << " op=" << Op::name << " in_place=" << in_place);
      CHECK(close(results[0], want));
      for (int r = 1; r < p && n > 0; ++r)  // bitwise identical on every replica
        CHECK(std::memcmp(results[static_cast<std::size_t>(r)].data(), results[0].data(), n * sizeof(T)) == 0);
    }
  }
}

template <class Algo, class T>
void sweep_all_reduce() {
  for (int p = 1; p <= kMaxReplicas; ++p) {
    strata_test::Watchdog dog("all_reduce sweep p=" + std::to_string(p), 120s);
    strata::Strategy<strata::Synchronous, strata::Mirrored, Algo> s{strata::cpu_replicas(p), test_options()};
    check_all_reduce<Algo, strata::SumOp, T>(s, strata::Sum);
    check_all_reduce<Algo, strata::MinOp, T>(s, strata::Min);
    check_all_reduce<Algo, strata::MaxOp, T>(s, strata::Max);
    check_all_reduce<Algo, strata::ProductOp, T>(s, strata::Product);
    if constexpr (std::is_floating_point_v<T>) check_all_reduce<Algo, strata::MeanOp, T>(s, strata::Mean);
  }
}

}  // namespace

TEST_CASE_TEMPLATE("all_reduce (ring): every op, count and replica count", T, float, double, std::int32_t, std::int64_t) {
  sweep_all_reduce<strata::Ring, T>();
}

TEST_CASE_TEMPLATE("all_reduce (direct): every op, count and replica count", T, float, double, std::int32_t,
                   std::int64_t) {
  sweep_all_reduce<strata::Direct, T>();
}

TEST_CASE("all_reduce (auto): switches algorithm by size and agrees with both") {
  strata::CommOptions o = test_options();
  o.auto_ring_min_bytes = 4096;
  strata_test::Watchdog dog("auto all_reduce", 60s);
  strata::MirroredStrategy s{strata::cpu_replicas(3), o};
  s.run([](auto& ctx) {
    CHECK_EQ(ctx.communicator().auto_choice(4095), strata::Direct::name);
    CHECK_EQ(ctx.communicator().auto_choice(4096), strata::Ring::name);
  });
  check_all_reduce<strata::AutoReduce, strata::SumOp, float>(s, strata::Sum);
  for (std::size_t n : {1000u, 5000u}) {  // 4000 bytes -> direct, 20000 -> ring
    auto res = s.run([n](auto& ctx) {
      std::vector<float> v(n, 1.f + static_cast<float>(ctx.replica_id_in_sync_group()));
      ctx.all_reduce(v, strata::Sum);
      return v;
    });
    CHECK(res[0] == std::vector<float>(n, 6.f));
  }
}

TEST_CASE("all_reduce: large buffers over many ring segments, tensors as buffers") {
  strata_test::Watchdog dog("large all_reduce", 120s);
  for (int p : {2, 3, 5}) {
    strata::Strategy<strata::Synchronous, strata::Mirrored, strata::Ring> ring{strata::cpu_replicas(p)};
    strata::Strategy<strata::Synchronous, strata::Mirrored, strata::Direct> direct{strata::cpu_replicas(p)};
    const std::size_t n = (std::size_t{1} << 20) + 3;  // 4 MiB of floats, several 256 KiB chunks per replica
    auto step = [n](auto& ctx) {
      strata::Tensor<float> t{{n}, static_cast<float>(ctx.replica_id_in_sync_group() + 1)};
      ctx.all_reduce(t, strata::Sum);
      return t;
    };
    const float want = static_cast<float>(p * (p + 1) / 2);
    auto a = ring.run(step);
    auto b = direct.run(step);
    CHECK(a[0] == strata::Tensor<float>({n}, want));
    CHECK(b[static_cast<std::size_t>(p - 1)] == a[0]);
  }
}

TEST_CASE_TEMPLATE("broadcast: every root, every count", T, float, std::int64_t) {
  for (int p : {1, 2, 3, 7, 16}) {
    strata_test::Watchdog dog("broadcast p=" + std::to_string(p), 60s);
    strata::MirroredStrategy s{strata::cpu_replicas(p), test_options()};
    for (std::size_t n : counts_for(p))
      for (int root = 0; root < p; root += (p > 4 ? 3 : 1)) {
        auto res = s.run([&](auto& ctx) {
          std::vector<T> v(n);
          for (std::size_t i = 0; i < n; ++i) v[i] = value<T>(ctx.replica_id_in_sync_group(), i, strata::detail::OpKind::sum);
          ctx.broadcast(v, root);
          return v;
        });
        std::vector<T> want(n);
        for (std::size_t i = 0; i < n; ++i) want[i] = value<T>(root, i, strata::detail::OpKind::sum);
        for (auto& v : res) CHECK(v == want);
      }
  }
}

TEST_CASE_TEMPLATE("reduce_scatter then all_gather equals all_reduce, uneven shards", T, float, std::int32_t) {
  for (int p : {1, 2, 3, 4, 7, 16}) {
    strata_test::Watchdog dog("reduce_scatter p=" + std::to_string(p), 60s);
    strata::MirroredStrategy s{strata::cpu_replicas(p), test_options()};
    for (std::size_t n : counts_for(p)) {
      auto res = s.run([&](auto& ctx) {
        const int r = ctx.replica_id_in_sync_group();
        std::vector<T> in(n);
        for (std::size_t i = 0; i < n; ++i) in[i] = value<T>(r, i, strata::detail::OpKind::sum);
        const auto shard = strata::shard_range(n, static_cast<std::size_t>(p), static_cast<std::size_t>(r));
        std::vector<T> mine(shard.size()), all(n);
        ctx.reduce_scatter(in, mine, strata::Sum);
        ctx.all_gather(mine, all);
        return all;
      });
      for (auto& v : res) CHECK(v == expected<strata::SumOp, T>(p, n));
    }
  }
}

TEST_CASE("all_gather: inputs of different sizes concatenate in replica order") {
  strata_test::Watchdog dog("all_gather", 30s);
  strata::MirroredStrategy s{strata::cpu_replicas(4)};
  auto res = s.run([](auto& ctx) {
    const int r = ctx.replica_id_in_sync_group();
    std::vector<std::int32_t> in(static_cast<std::size_t>(r), r);  // replica 0 contributes nothing
    std::vector<std::int32_t> out(6);
    ctx.all_gather(in, out);
    return out;
  });
  for (auto& v : res) CHECK(v == std::vector<std::int32_t>{1, 2, 2, 3, 3, 3});
}

TEST_CASE("reduce_to_one: only the root's output is written, work is shared") {
  strata_test::Watchdog dog("reduce_to_one", 30s);
  for (int p : {1, 2, 5}) {
    strata::MirroredStrategy s{strata::cpu_replicas(p)};
    const std::size_t n = 1001;
    for (int root = 0; root < p; ++root) {
      auto res = s.run([&](auto& ctx) {
        const int r = ctx.replica_id_in_sync_group();
        std::vector<double> in(n, r + 1.0);
        std::vector<double> out(r == root ? n : 0);
        ctx.communicator().reduce_to_one(in, out, root, strata::Mean);
        return out;
      });
      for (int r = 0; r < p; ++r)
        CHECK(res[static_cast<std::size_t>(r)] == (r == root ? std::vector<double>(n, (p + 1) / 2.0) : std::vector<double>{}));
    }
  }
}

TEST_CASE("barrier: nobody passes until everyone has arrived") {
  strata_test::Watchdog dog("barrier", 30s);
  strata::MirroredStrategy s{strata::cpu_replicas(8)};
  std::atomic<int> arrived{0};
  auto seen = s.run([&](auto& ctx) {
    int min_seen = 1 << 30;
    for (int round = 1; round <= 50; ++round) {
      arrived.fetch_add(1);
      ctx.barrier();
      min_seen = std::min(min_seen, arrived.load() - 8 * (round - 1));
      ctx.barrier();
    }
    return min_seen;
  });
  for (int v : seen) CHECK(v == 8);
}

}  // namespace collectives_test
