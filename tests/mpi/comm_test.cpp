// The MPI communicator under mpirun (2 or 4 ranks, shared memory or TCP):
// every collective and algorithm against exact expected values, every
// element-count edge, and the contract: disagreements, a rank that never
// arrives, a rank that aborts, each raising the right error on every rank.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include <strata/comm/mpi/communicator.hpp>

namespace comm_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

using namespace std::chrono_literals;

namespace {

strata::MpiCommunicator make(std::chrono::milliseconds timeout = 20s) {
  strata::MpiOptions o;
  o.timeout = timeout;
  o.ring_chunk_bytes = 4096;  // many ring segments even for small counts
  // The sweeps run AutoReduce measuring (its trials are real all-reduces
  // that must be right) except on the two-host run, where each of the dozens
  // of trials per size class costs milliseconds over the veth pair
  // (tests/mpi/two_hosts.sh sets STRATA_EXPECT_NODES); the measured choice
  // has its own test below.
  o.auto_tune = std::getenv("STRATA_EXPECT_NODES") == nullptr;
  return strata::MpiCommunicator::world(o);
}

// Element counts every algorithm must handle: empty, fewer than the ranks,
// not divisible by them, several ring segments with a last partial one.
std::vector<std::size_t> counts(int p) {
  const auto q = static_cast<std::size_t>(p);
  return {0, 1, 2, q - 1, q, q + 1, 17, 1000, 4097, 65537, 300001};
}

template <class T>
T value(int rank, std::size_t i) {
  return static_cast<T>((rank + 1) * static_cast<int>(i % 7 + 1));
}

// Every rank checks that all ranks hold bitwise the same bytes.
template <class T>
bool same_everywhere(strata::MpiCommunicator& c, const std::vector<T>& v) {
  std::vector<T> all(v.size() * static_cast<std::size_t>(c.size()));
  c.all_gather(v, all);
  for (int r = 1; r < c.size(); ++r)
    if (!std::equal(v.begin(), v.end(), all.begin() + static_cast<std::ptrdiff_t>(v.size()) * r)) return false;
  return true;
}

template <class T, class Op, class Algo>
void check_all_reduce(strata::MpiCommunicator& c, Op op, Algo algo) {
  const int p = c.size();
  for (std::size_t n : counts(p)) {
    CAPTURE(n);
    std::vector<T> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = value<T>(c.rank(), i);
    std::vector<T> out(n);
    c.all_reduce(v, out, op, algo);  // out of place
    c.all_reduce(v, op, algo);       // in place
    for (std::size_t i = 0; i < n; ++i) {
      const double k = static_cast<double>(i % 7 + 1);
      double want = 0;
      if constexpr (Op::kind == strata::detail::OpKind::sum) want = k * p * (p + 1) / 2;
      else if constexpr (Op::kind == strata::detail::OpKind::mean) want = k * (p + 1) / 2.0;
      else if constexpr (Op::kind == strata::detail::OpKind::min) want = k;
      else if constexpr (Op::kind == strata::detail::OpKind::max) want = k * p;
      else {
        want = 1;
        for (int r = 1; r <= p; ++r) want *= k * r;
      }
      if (static_cast<double>(v[i]) != doctest::Approx(want) || static_cast<double>(out[i]) != doctest::Approx(want)) {
        FAIL_CHECK("element " << i << ": got " << v[i] << " in place and " << out[i] << " out of place, want " << want);
        break;
      }
    }
  }
}

}  // namespace

TEST_CASE_TEMPLATE("all_reduce: every algorithm, operation and element count", T, float, double, std::int32_t,
                   std::int64_t) {
  auto c = make();
  REQUIRE(c.size() >= 2);
  auto ops = [&](auto algo) {
    CAPTURE(std::string(decltype(algo)::name));
    check_all_reduce<T>(c, strata::Sum, algo);
    if constexpr (std::floating_point<T>) check_all_reduce<T>(c, strata::Mean, algo);
    check_all_reduce<T>(c, strata::Min, algo);
    check_all_reduce<T>(c, strata::Max, algo);
    check_all_reduce<T>(c, strata::Product, algo);
  };
  ops(strata::Ring{});
  ops(strata::Direct{});
  ops(strata::Native{});
  ops(strata::AutoReduce{});
  CHECK(c.completed() > 0);
  CHECK(c.poisoned().empty());
}

TEST_CASE("all_reduce: ring and direct give bitwise the same result on every rank") {
  auto c = make();
  for (std::size_t n : {std::size_t{33}, std::size_t{100003}}) {
    std::vector<float> v(n);
    std::uint32_t s = 12345u + static_cast<std::uint32_t>(c.rank()) * 7919u;
    for (auto& x : v) {
      s = s * 1664525u + 1013904223u;
      x = static_cast<float>(s >> 8) / 16777216.f - 0.5f;
    }
    auto ring = v, direct = v;
    c.all_reduce(ring, strata::Sum, strata::Ring{});
    c.all_reduce(direct, strata::Sum, strata::Direct{});
    CHECK(same_everywhere(c, ring));
    CHECK(same_everywhere(c, direct));
  }
}

TEST_CASE("broadcast from every root, reduce_scatter and all_gather with uneven sizes") {
  auto c = make();
  const int p = c.size(), me = c.rank();
  for (int root = 0; root < p; ++root) {
    std::vector<double> v(1001, me == root ? 3.5 + root : -1.0);
    c.broadcast(v, root);
    CHECK(v.front() == 3.5 + root);
    CHECK(v.back() == 3.5 + root);
    std::vector<float> empty;
    c.broadcast(empty, root);
  }
  for (std::size_t n : counts(p)) {
    CAPTURE(n);
    std::vector<std::int64_t> in(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<std::int64_t>(i) * (me + 1);
    const strata::Range mine = strata::shard_range(n, static_cast<std::size_t>(p), static_cast<std::size_t>(me));
    std::vector<std::int64_t> out(mine.size());
    c.reduce_scatter(in, out, strata::Sum);
    for (std::size_t i = 0; i < out.size(); ++i)
      CHECK(out[i] == static_cast<std::int64_t>(mine.begin + i) * p * (p + 1) / 2);
  }
  // rank r contributes r elements (rank 0 none) of value r
  std::vector<int> in(static_cast<std::size_t>(me), me);
  std::vector<int> out(static_cast<std::size_t>(p * (p - 1) / 2), -1);
  c.all_gather(in, out);
  std::size_t k = 0;
  for (int r = 0; r < p; ++r)
    for (int j = 0; j < r; ++j) CHECK(out[k++] == r);
  c.barrier();
}

TEST_CASE("reduce_scatter and all_gather of large messages (the ring over blocks): exact, uneven, Mean, any size") {
  auto c = make();
  const int p = c.size(), me = c.rank();
  const auto up = static_cast<std::size_t>(p), ume = static_cast<std::size_t>(me);
  // from 256 KiB on (detail::mpi::ring_blocks_min_bytes) the ring runs: sizes not divisible by p, pieces of 1 MiB
  // not dividing the blocks, and a 16-byte chunk (blocks of thousands of pieces); integer-valued: sums are exact
  for (std::size_t n : {std::size_t{65536} + 3, std::size_t{1} << 20, std::size_t{(3 << 20) + 7}}) {
    CAPTURE(n);
    std::vector<float> in(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = static_cast<float>((i % 97) * static_cast<std::size_t>(me + 1));
    const strata::Range mine = strata::shard_range(n, up, ume);
    std::vector<float> out(mine.size(), -1.f);
    c.reduce_scatter(in, out, strata::Sum);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < out.size(); ++i)
      wrong += out[i] != static_cast<float>(((mine.begin + i) % 97) * up * (up + 1) / 2);
    CHECK(wrong == 0);
    std::vector<double> mean_in(n, static_cast<double>(me)), mean_out(mine.size());
    c.reduce_scatter(mean_in, mean_out, strata::Mean);
    CHECK(std::all_of(mean_out.begin(), mean_out.end(), [&](double v) { return v == (p - 1) / 2.0; }));
    // each rank its own block of a whole of n (rank r: shard_range(n, p, r)), joined in rank order
    std::vector<float> part(mine.size()), all(n, -1.f);
    for (std::size_t i = 0; i < part.size(); ++i) part[i] = static_cast<float>((mine.begin + i) % 1009);
    c.all_gather(part, all);
    wrong = 0;
    for (std::size_t i = 0; i < n; ++i) wrong += all[i] != static_cast<float>(i % 1009);
    CHECK(wrong == 0);
  }
  // blocks of very different sizes in the all-gather (rank r gives r * 100000 elements), and a tiny ring chunk
  std::vector<float> in(ume * 100000, static_cast<float>(me)), out(up * (up - 1) / 2 * 100000);
  c.all_gather(in, out);
  std::size_t k = 0, wrong = 0;
  for (int r = 0; r < p; ++r)
    for (std::size_t j = 0; j < static_cast<std::size_t>(r) * 100000; ++j) wrong += out[k++] != static_cast<float>(r);
  CHECK(wrong == 0);
  strata::MpiOptions small;
  small.ring_chunk_bytes = 16;
  auto tiny = strata::MpiCommunicator::world(small);
  const std::size_t n = 70001;
  std::vector<float> x(n, 1.f), y(strata::shard_range(n, up, ume).size());
  tiny.reduce_scatter(x, y, strata::Sum);
  CHECK(std::all_of(y.begin(), y.end(), [&](float v) { return v == static_cast<float>(p); }));
  c.barrier();
}

TEST_CASE("auto_choice: by size, the same on every rank, with its reason; forcing an algorithm") {
  strata::MpiOptions rules;
  rules.auto_tune = false;  // the size rules, not a measurement: the choices below are fixed
  auto c = strata::MpiCommunicator::world(rules);
  const auto small = c.auto_choice(1024);
  CHECK(small.algorithm == "direct");
  CHECK(small.reason.find("direct_max_bytes") != std::string::npos);
  CHECK(c.auto_choice(std::size_t{1} << 20).algorithm == "native");
  const auto big = c.auto_choice(std::size_t{64} << 20);
  CHECK(big.algorithm == "ring");
  CHECK(big.reason.find(c.shares_memory() ? "ring_min_bytes_shm" : "ring_min_bytes_net") != std::string::npos);
  strata::MpiOptions ring;
  ring.force_algorithm = "ring";
  auto forced = strata::MpiCommunicator::world(ring);
  CHECK(forced.auto_choice(8).algorithm == "ring");
  CHECK(forced.auto_choice(8).reason.find("forced") != std::string::npos);
  strata::MpiOptions tree;
  tree.force_algorithm = "tree";
  auto bad = strata::MpiCommunicator::world(tree);
  CHECK_THROWS_WITH_AS((void)bad.auto_choice(8), doctest::Contains("names no all-reduce algorithm"), strata::Error);
}

TEST_CASE("auto_choice measured: a size class's first calls try each algorithm, then every rank keeps the same") {
  // (MpiOptions::auto_tune is on by default)
  strata::MpiOptions o;
  o.tune_rounds = 1;
  auto c = strata::MpiCommunicator::world(o);
  const int p = c.size();
  const std::size_t n = 16384;  // 64 KiB of float: above the direct threshold, so measured
  const std::size_t bytes = n * sizeof(float);
  std::vector<std::string_view> tried;
  for (int call = 0; call < 200 && c.auto_choice(bytes).reason.find("not measured yet") != std::string::npos; ++call) {
    tried.push_back(c.auto_choice(bytes).algorithm);
    std::vector<float> v(n, static_cast<float>(c.rank() + 1));
    c.all_reduce(v, strata::Sum);
    CHECK(v[0] == static_cast<float>(p * (p + 1) / 2));  // trials are real all-reduces
    CHECK(v[n - 1] == static_cast<float>(p * (p + 1) / 2));
  }
  // native, ring, direct in turn, the same number of times each
  REQUIRE(tried.size() >= 3);
  CHECK(tried.size() < 200);
  CHECK(tried.size() % 3 == 0);
  const std::string_view order[] = {"native", "ring", "direct"};
  for (std::size_t i = 0; i < tried.size(); ++i) CHECK(tried[i] == order[i % 3]);
  const auto after = c.auto_choice(bytes);
  CAPTURE(after.reason);
  CHECK(after.reason.find("measured on this communicator's first calls") != std::string::npos);
  CHECK(after.reason.find("ring ") != std::string::npos);  // the times of what it tried
  CHECK(after.reason.find("median of 4 interleaved rounds") != std::string::npos);  // 64 KiB: 4 rounds at tune_rounds 1
  CHECK(c.auto_choice(40000).algorithm == after.algorithm);  // the same size class (32 KiB, 64 KiB]
  CHECK(c.auto_choice(std::size_t{1} << 20).reason.find("not measured yet") != std::string::npos);
  // every rank decided the same
  const std::vector<int> mine{after.algorithm == "native" ? 0 : after.algorithm == "ring" ? 1 : 2};
  std::vector<int> all(static_cast<std::size_t>(p));
  c.all_gather(mine, all);
  for (int r = 0; r < p; ++r) CHECK(all[static_cast<std::size_t>(r)] == mine[0]);
  std::vector<float> v(n, 1.f);
  c.all_reduce(v, strata::Sum);  // the kept algorithm, no longer measured
  CHECK(v[7] == static_cast<float>(p));
  CHECK(c.auto_choice(bytes).algorithm == after.algorithm);
}

TEST_CASE("auto_choice measured: every rank keeps the same algorithm, from the same agreed times, per size class") {
  auto c = strata::MpiCommunicator::world();  // default tune_rounds
  const int p = c.size();
  // three candidates (64 KiB, 1 MiB) and two (4 MiB: no direct above 1 MiB), but three at any size between
  // two ranks over a network
  for (const std::size_t n : {std::size_t{16} << 10, std::size_t{256} << 10, std::size_t{1} << 20}) {
    const std::size_t bytes = n * sizeof(float);
    CAPTURE(bytes);
    const bool network = c.auto_choice(bytes).reason.find("over a network") != std::string::npos;
    const std::size_t candidates = bytes <= (std::size_t{1} << 20) || (network && p == 2) ? 3 : 2;
    std::vector<float> v(n);
    int calls = 0;
    for (; calls < 200 && c.auto_choice(bytes).reason.find("not measured yet") != std::string::npos; ++calls) {
      std::fill(v.begin(), v.end(), static_cast<float>(c.rank() + 1));
      c.all_reduce(v, strata::Sum);
      REQUIRE(v[n / 2] == static_cast<float>(p * (p + 1) / 2));
    }
    CHECK(calls < 200);
    CHECK(static_cast<std::size_t>(calls) % candidates == 0);  // whole rounds of every candidate
    CHECK((c.auto_choice(bytes).reason.find("direct") != std::string::npos) == (candidates == 3));  // its time shown
    const auto choice = c.auto_choice(bytes);
    CAPTURE(choice.reason);
    // the whole sentence, medians and rounds won included, is the same on every rank
    const std::vector<std::int64_t> mine{static_cast<std::int64_t>(std::hash<std::string>{}(choice.reason))};
    std::vector<std::int64_t> all(static_cast<std::size_t>(p));
    c.all_gather(mine, all);
    for (int r = 0; r < p; ++r) CHECK(all[static_cast<std::size_t>(r)] == mine[0]);
    CHECK(choice.reason.find("median of") != std::string::npos);
  }
}

TEST_CASE("contract: ranks that disagree all raise CollectiveMismatch naming each rank's call") {
  auto c = make();
  const int me = c.rank(), p = c.size();
  // `odd`: the ranks' calls differ (not merely all invalid alike)
  auto expect_mismatch = [&](auto&& call, const char* what, bool odd = true) {
    CAPTURE(what);
    try {
      call();
      FAIL_CHECK("no error on rank " << me);
    } catch (const strata::CollectiveMismatch& e) {
      const std::string msg = e.what();
      CHECK(msg.find(what) != std::string::npos);
      for (int r = 0; r < p; ++r) CHECK(msg.find("rank " + std::to_string(r) + " called") != std::string::npos);
      CHECK((msg.find("disagree with rank 0") != std::string::npos) == odd);
    }
    // the communicator is still usable: the disagreement was caught before any data moved
    std::vector<float> ok(5, 1.f);
    c.all_reduce(ok, strata::Sum);
    CHECK(ok[4] == static_cast<float>(p));
  };
  for (auto algo : {std::string("ring"), std::string("direct"), std::string("direct-large"), std::string("native")}) {
    expect_mismatch([&] {
      // the last rank passes one element more; direct-large: data too big to travel with the header
      const std::size_t n = algo == "direct-large" ? 5000 : 100;
      std::vector<float> v(me == p - 1 ? n + 1 : n, 1.f);
      if (algo == "ring") c.all_reduce(v, strata::Sum, strata::Ring{});
      else if (algo.starts_with("direct")) c.all_reduce(v, strata::Sum, strata::Direct{});
      else c.all_reduce(v, strata::Sum, strata::Native{});
    }, "element counts differ");
  }
  expect_mismatch([&] {
    std::vector<float> v(8, 1.f);
    if (me == 1) c.all_reduce(v, strata::Max);
    else c.all_reduce(v, strata::Sum);
  }, "different collectives");
  expect_mismatch([&] {
    std::vector<float> f(8, 1.f);
    std::vector<double> d(8, 1.0);
    if (me == 0) c.all_reduce(d, strata::Sum);
    else c.all_reduce(f, strata::Sum);
  }, "float64");
  expect_mismatch([&] {  // rank 1 calls a barrier the others skip
    std::vector<float> v(8, 1.f);
    if (me == 1) c.barrier();
    c.all_reduce(v, strata::Sum);
  }, "different collectives");
  expect_mismatch([&] {
    std::vector<float> v(8, 1.f);
    c.broadcast(v, me == 0 ? 1 : 0);
  }, "roots differ");
  expect_mismatch([&] {
    std::vector<float> v(8, 1.f);
    c.broadcast(v, p);
  }, "is not a rank", false);
  expect_mismatch([&] {
    std::vector<float> in(10, 1.f), out(10);  // each shard is smaller than 10
    c.reduce_scatter(in, out, strata::Sum);
  }, "shard", false);
}

TEST_CASE("contract: a rank that never arrives is named by the others' CollectiveTimeout, within the timeout") {
  auto c = make(400ms);
  c.barrier();  // collective #1 completes everywhere
  if (c.rank() == 0) {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<float> v(16, 1.f);
    try {
      c.all_reduce(v, strata::Sum);
      FAIL_CHECK("no timeout");
    } catch (const strata::CollectiveTimeout& e) {
      const std::string msg = e.what();
      CHECK(msg.find("collective #2") != std::string::npos);
      CHECK(msg.find("never arrived") != std::string::npos);
      for (int r = 1; r < c.size(); ++r)
        CHECK(msg.find("rank " + std::to_string(r) + ": last completed collective #1") != std::string::npos);
    }
    const auto waited = std::chrono::steady_clock::now() - t0;
    CHECK(waited >= 400ms);
    CHECK(waited < 5s);
    CHECK(!c.poisoned().empty());
    CHECK_THROWS_WITH_AS(c.barrier(), doctest::Contains("unusable"), strata::CollectiveAborted);
  }
  // the other ranks skip the collective; everyone meets again on a fresh communicator
  auto again = make();
  again.barrier();
}

TEST_CASE("a rank that aborts brings every other rank's collective down with its reason") {
  auto c = make(20s);
  if (c.rank() == 1) {
    c.abort("replica 0 of 1 failed in Strategy::run: boom");
    CHECK_THROWS_WITH_AS(c.barrier(), doctest::Contains("unusable"), strata::CollectiveAborted);
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<double> v(1000, 1.0);
    try {
      c.all_reduce(v, strata::Sum);
      FAIL_CHECK("no error");
    } catch (const strata::CollectiveAborted& e) {
      CHECK(std::string(e.what()).find("rank 1 failed: replica 0 of 1 failed in Strategy::run: boom") !=
            std::string::npos);
    }
    CHECK(std::chrono::steady_clock::now() - t0 < 10s);  // the notice, not the timeout
  }
  auto again = make();
  again.barrier();
}

TEST_CASE("an interrupted rank leaves its collective at once") {
  auto c = make(20s);
  std::atomic<bool> stop{true};
  if (c.rank() == 0) {
    c.set_interrupt(&stop);
    const auto t0 = std::chrono::steady_clock::now();
    CHECK_THROWS_AS(c.barrier(), strata::CollectiveAborted);
    CHECK(std::chrono::steady_clock::now() - t0 < 5s);
  }
  auto again = make();
  again.barrier();
}

TEST_CASE("split: even and odd ranks form their own communicators") {
  auto c = make();
  auto half = c.split(c.rank() % 2, c.rank());
  CHECK(half.size() == (c.size() + 1 - c.rank() % 2) / 2);
  CHECK(half.rank() == c.rank() / 2);
  std::vector<int> v(3, c.rank());
  half.all_reduce(v, strata::Sum);
  int want = 0;
  for (int r = c.rank() % 2; r < c.size(); r += 2) want += r;
  CHECK(v[2] == want);
}

TEST_CASE("ranks on different hosts talk over the network (the two-host run sets STRATA_EXPECT_NODES=2)") {
  auto c = make();
  const char* nodes = std::getenv("STRATA_EXPECT_NODES");
  if (!nodes || std::string(nodes) != "2") return;
  CHECK(!c.shares_memory());
  CHECK(c.ranks_on_node() == 1);
  CHECK(c.auto_choice(std::size_t{64} << 20).reason.find("several nodes") != std::string::npos);
}

}  // namespace comm_test
