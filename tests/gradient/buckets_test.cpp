// Gradient buckets (issue 25): the all-reduce cut into buckets started while
// backward goes on gives the flat reduction's weights bit for bit, the first
// bucket is under way before the first layer's backward runs, and a replica
// failing while buckets are in flight is named within the deadline. The same
// for GPU replicas, run on the host's compute (host_as_gpu.hpp): their
// buckets go through the device collectives' started sum (the device team's, on the stand-in's host runtime).
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <strata/strata.hpp>
#include <strata/gradient/buckets.hpp>
#include <strata/parallel/pipeline/pipeline_buckets.hpp>

#include "support/blobs.hpp"
#include "device/host_as_gpu.hpp"
#include "support/identity_layer.hpp"
#include "support/watchdog.hpp"

namespace buckets_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

using namespace std::chrono_literals;
namespace nn = strata::nn;
using strata::Range;

namespace {

//! What the probes saw: per replica, the buckets its thread had started
//! between its forward and its backward (the least over the steps), and
//! the steps probed.
struct Seen {
  std::atomic<std::uint64_t> least[3] = {~0ull, ~0ull, ~0ull};
  std::atomic<int> steps{0};
};
Seen seen;
std::atomic<int> fail_on{-1};  // the replica whose probe throws in backward (-1: none)

//! The identity, with a look from inside backward: how many gradient
//! buckets this replica's thread started since its forward (the layers
//! after it have run their backward by then); throws on replica fail_on.
class Probe final : public strata_test::Identity<Probe> {
 public:
  [[nodiscard]] std::string kind() const override { return "Probe"; }
  void on_forward(const nn::RunInfo& info) {
    replica_ = info.replica;
    at_forward_ = strata::detail::buckets_started_here();
  }
  void on_backward() {
    const std::uint64_t started = strata::detail::buckets_started_here() - at_forward_;
    auto& least = seen.least[replica_ % 3];
    for (std::uint64_t cur = least.load(); started < cur && !least.compare_exchange_weak(cur, started);) {
    }
    seen.steps.fetch_add(1);
    if (replica_ == fail_on.load()) throw std::runtime_error("probe: replica " + std::to_string(replica_) + " fails in backward");
  }

 private:
  int replica_ = 0;
  std::uint64_t at_forward_ = 0;
};

//! blobs_mlp's layers with a probe after the first Dense: two layers with
//! parameters (and their buckets) behind it in backward, one before.
nn::Sequential probed_mlp() {
  return nn::Sequential{nn::Input{{6}}, nn::Dense{16, {.activation = nn::Activation::Tanh, .l2 = 1e-3f}},
                        Probe{}, nn::Dense{8, {.l2 = 2e-3f}}, nn::ReLU{}, nn::Dense{3}};
}

//! The weights after `epochs` of Adam on blobs under Mirrored with `p`
//! replicas and buckets of `bytes` (0: flat).
std::vector<float> train(int p, std::size_t bytes, strata::ShardedUpdate sharded, int epochs = 3,
                         nn::Sequential (*make)() = probed_mlp, bool gpus = false) {
  strata::MirroredStrategy s{gpus ? strata::virtual_gpus(0, p) : strata::cpu_replicas(p)};
  s.executor_options().bucket_bytes = bytes;
  s.executor_options().sharded_update = sharded;
  const auto data = strata_test::blobs(150, 11);
  auto model = s.scope(make);
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}}, {.seed = 7});
  model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(32)),
            {.epochs = epochs, .verbose = nn::Verbosity::Silent});
  return strata_test::flat_weights(model);
}

void reset_seen() {
  for (auto& l : seen.least) l = ~0ull;
  seen.steps = 0;
}

}  // namespace

TEST_CASE("the bucket plan: whole variables from the end down, the first small, the last what remains") {
  using V = std::vector<std::size_t>;
  using P = std::vector<Range>;
  CHECK(strata::detail::plan_buckets(V{6, 2, 4}, 8) == P{{8, 12}, {6, 8}, {0, 6}});
  CHECK(strata::detail::plan_buckets(V{6, 2, 4}, 1) == P{{8, 12}, {6, 8}, {0, 6}});     // one variable each
  CHECK(strata::detail::plan_buckets(V{6, 2, 4}, 24) == P{{6, 12}, {0, 6}});            // 6 floats at least
  CHECK(strata::detail::plan_buckets(V{6, 2, 4}, 1 << 20) == P{{0, 12}});               // larger than the model
  CHECK(strata::detail::plan_buckets(V{3, 0, 1}, 4) == P{{3, 4}, {0, 3}});              // empty variables join one
  CHECK(strata::detail::plan_buckets(V{}, 4).empty());
  // DDP's small first bucket: the last variables' reduction starts once 1 MiB of them is final, the rest in 2 MiB
  // buckets (without it: {300000, 900000}, {0, 300000})
  CHECK(strata::detail::plan_buckets(V{300000, 300000, 300000}, 2 << 20) == P{{600000, 900000}, {0, 600000}});
}

TEST_CASE("buckets start as backward finishes them, in the plan's order whatever it tells") {
  const std::vector<Range> plan{{8, 12}, {6, 8}, {0, 6}};
  std::vector<float> grad(12, 1.f);
  std::vector<Range> started;
  auto start = [&](std::span<float> b) {
    started.push_back({static_cast<std::size_t>(b.data() - grad.data()),
                       static_cast<std::size_t>(b.data() - grad.data()) + b.size()});
    return strata::Work{};  // completed
  };
  strata::detail::GradientBuckets B;
  SUBCASE("layer by layer from the end") {
    B.begin(&plan, grad, start);
    CHECK(B.active());
    B.ready(10, 12);
    CHECK(started.empty());  // [8, 10) is not final yet
    B.ready(6, 10);
    CHECK(started == std::vector<Range>{{8, 12}, {6, 8}});
    B.ready(0, 6);
    CHECK(started.size() == 3);
    B.finish();
    CHECK(started == plan);
    CHECK(!B.active());
  }
  SUBCASE("told nothing: every bucket at the step's end") {
    B.begin(&plan, grad, start);
    B.finish();
    CHECK(started == plan);
  }
  SUBCASE("a range out of order: the rest wait for the step's end") {
    B.begin(&plan, grad, start);
    B.ready(8, 12);
    B.ready(0, 6);  // [6, 8) was skipped: not taken as final
    CHECK(started == std::vector<Range>{{8, 12}});
    B.ready(6, 8);
    CHECK(started.size() == 1);
    B.finish();
    CHECK(started == plan);
  }
}

// Tensor parallelism's member (tests/mpi/tensor_parallel_test.cpp): its own gradient in its layout, the
// buckets over the logical one. A bucket starts only once every own element it holds is final, whatever
// order the segments lie in; the others' places stay zero; a replicated segment only when the member adds it.
TEST_CASE("logical buckets: a member's layout told final starts the logical buckets it completes") {
  using strata::TensorSegment;
  const std::vector<TensorSegment> segs{{8, 4, false}, {0, 4, false}, {5, 2, true}};  // own: 10 floats
  const std::vector<Range> plan{{8, 12}, {4, 8}, {0, 4}};
  std::vector<float> own(10), logical(12, 0.f);
  for (std::size_t i = 0; i < own.size(); ++i) own[i] = static_cast<float>(i + 1);
  std::vector<Range> started;
  std::vector<std::vector<float>> seen;  // each bucket's values when it started
  auto start = [&](std::span<float> b) {
    const auto at = static_cast<std::size_t>(b.data() - logical.data());
    started.push_back({at, at + b.size()});
    seen.emplace_back(b.begin(), b.end());
    return strata::Work{};
  };
  strata::detail::LogicalBuckets lb;
  for (bool adds_replicated : {false, true}) {
    CAPTURE(adds_replicated);
    started.clear();
    seen.clear();
    std::fill(logical.begin(), logical.end(), 0.f);
    lb.begin(segs, adds_replicated, own, logical, &plan, start, {});
    lb.ready(8, 10);  // the replicated segment (logical [5, 7)): [8, 12) still waits on own [0, 4)
    CHECK(started.empty());
    lb.ready(4, 8);  // logical [0, 4): everything above own [0, 4)'s places is not final yet
    CHECK(started.empty());
    lb.ready(0, 4);  // logical [8, 12): every bucket is now whole, in the plan's order
    CHECK(started == plan);
    CHECK(seen[0] == std::vector<float>{1, 2, 3, 4});
    CHECK(seen[1] == (adds_replicated ? std::vector<float>{0, 9, 10, 0} : std::vector<float>{0, 0, 0, 0}));
    CHECK(seen[2] == std::vector<float>{5, 6, 7, 8});
    lb.finish();
  }
  SUBCASE("told nothing: every element placed and every bucket started at the step's end") {
    started.clear();
    std::fill(logical.begin(), logical.end(), 0.f);
    lb.begin(segs, false, own, logical, &plan, start, {});
    lb.finish();
    CHECK(started == plan);
    CHECK(logical == std::vector<float>{5, 6, 7, 8, 0, 0, 0, 0, 1, 2, 3, 4});
  }
}

namespace {
//! The copies' all-reduce as a test sees it: done at once, the buckets it was handed recorded.
struct RecordingLink {
  std::vector<Range> got;
  const float* base = nullptr;
  template <class T>  // (the 16-bit forms a compressed bucket would take: not used here)
  strata::Work all_reduce_async(std::span<T> b, strata::SumOp) {
    if constexpr (std::is_same_v<T, float>)
      got.push_back({static_cast<std::size_t>(b.data() - base), static_cast<std::size_t>(b.data() - base) + b.size()});
    return strata::Work{};
  }
};
}  // namespace

// A pipeline stage split by tensor parallelism (tests/mpi/pipeline_test.cpp): member t's buckets over its
// own layout, each one's non-finite values counted where the member counts them (member 0 the replicated).
TEST_CASE("a split stage's member buckets its own layout and counts only what it counts") {
  using strata::TensorSegment;
  const std::vector<TensorSegment> segs{{0, 3, false}, {10, 2, true}, {20, 3, false}};  // own: 8 floats
  const float nan = std::nanf("");
  for (std::size_t t : {std::size_t{0}, std::size_t{1}}) {
    CAPTURE(t);
    std::vector<float> g{1, nan, 3, nan, nan, 6, 7, nan};  // one NaN in each own segment, two in the replicated one
    strata::detail::CopyBuckets bk;
    bk.plan({}, Range{0, 0}, segs, 2, t, 1);  // a bucket per segment
    REQUIRE(bk.on());
    strata::detail::GradientCompression off;
    RecordingLink link;
    link.base = g.data();
    double bad = 0;
    const strata::LastBackward* last = bk.begin(g, off, 2, &bad, link);
    REQUIRE(last);
    last->ready->ready(5, 8);  // the last segment: its bucket starts, its NaN counted
    CHECK(link.got == std::vector<Range>{{5, 8}});
    CHECK(bad == 1);
    last->ready->ready(0, 5);
    bk.finish();
    CHECK(link.got == std::vector<Range>{{5, 8}, {3, 5}, {0, 3}});
    CHECK(bad == (t == 0 ? 4 : 2));  // member 1 does not count the replicated segment (member 0 does)
  }
}

TEST_CASE("bucketed and flat all-reduces give the same weights bit for bit") {
  strata_test::Watchdog dog("buckets bitwise", 120s);
  // the probed MLP's variables: 96+16 | 128+8 | 24+3 floats; buckets of 1, 128 and 600 bytes cut them into
  // 6, 3 and 2 buckets, 1 MiB into one
  for (int p : {2, 3}) {
    CAPTURE(p);
    const auto flat = train(p, 0, strata::ShardedUpdate::Off);
    for (std::size_t bytes : {std::size_t{1}, std::size_t{128}, std::size_t{600}, std::size_t{1} << 20}) {
      CAPTURE(bytes);
      reset_seen();
      CHECK(train(p, bytes, strata::ShardedUpdate::Off) == flat);
      CHECK(seen.steps.load() > 0);
    }
    // The sharded update (Auto from 3 replicas) keeps its flat reduce-scatter: the same bits too.
    if (p == 3) CHECK(train(p, 1, strata::ShardedUpdate::Auto) == flat);
  }
  // blobs_mlp itself (Dense, Dense, ReLU, Dense: no probe), 2 replicas
  CHECK(train(2, 1, strata::ShardedUpdate::Off, 2, strata_test::blobs_mlp) ==
        train(2, 0, strata::ShardedUpdate::Off, 2, strata_test::blobs_mlp));
}

TEST_CASE("the later layers' buckets are under way before the first layer's backward runs") {
  strata_test::Watchdog dog("buckets overlap", 60s);
  SUBCASE("one variable per bucket: the last two layers' four buckets") {
    reset_seen();
    train(2, 1, strata::ShardedUpdate::Off, 1);
    REQUIRE(seen.steps.load() > 0);
    CHECK(seen.least[0].load() == 4);
    CHECK(seen.least[1].load() == 4);
  }
  SUBCASE("one bucket larger than the model: it waits for the whole backward") {
    reset_seen();
    train(2, 1 << 20, strata::ShardedUpdate::Off, 1);
    CHECK(seen.least[0].load() == 0);
  }
  SUBCASE("flat") {
    reset_seen();
    train(2, 0, strata::ShardedUpdate::Off, 1);
    CHECK(seen.least[0].load() == 0);
  }
}

TEST_CASE("GPU replicas bucket too: the CPU flat run's bits, the later buckets under way in backward") {
  strata_test::Watchdog dog("buckets on GPU replicas", 120s);
  strata_test::HostAsGpu host;  // every gpu(i) computes on a stand-in, its collectives the device team's
  for (int p : {2, 3}) {
    CAPTURE(p);
    const auto flat = train(p, 0, strata::ShardedUpdate::Off);
    CHECK(train(p, 0, strata::ShardedUpdate::Off, 3, probed_mlp, true) == flat);
    for (std::size_t bytes : {std::size_t{1}, std::size_t{128}, std::size_t{1} << 20}) {
      CAPTURE(bytes);
      reset_seen();
      CHECK(train(p, bytes, strata::ShardedUpdate::Off, 3, probed_mlp, true) == flat);
      REQUIRE(seen.steps.load() > 0);
      // one variable per bucket: the last two layers' four started before the probe's backward; 128
      // bytes: two (the last layer's variables with the middle one's bias, 140 B; the middle one's
      // weight, 512 B); one bucket for the whole model: none
      const std::uint64_t expected = bytes == 1 ? 4 : bytes == 128 ? 2 : 0;
      for (int r = 0; r < p; ++r) CHECK(seen.least[r].load() == expected);
    }
  }
  // the sharded update keeps its flat reduce-scatter: no bucket starts, the same bits
  reset_seen();
  CHECK(train(3, 1, strata::ShardedUpdate::Auto, 2, probed_mlp, true) ==
        train(3, 0, strata::ShardedUpdate::Auto, 2, probed_mlp, true));
  CHECK(seen.least[0].load() == 0);
}

TEST_CASE("a replica failing while buckets are in flight is named within the deadline") {
  strata_test::Watchdog dog("buckets failure", 60s);
  strata_test::HostAsGpu host;  // the GPU replicas' case on the host's compute
  for (int run = 0; run < 4; ++run) {
    const int p = 2 + run % 2;
    const bool gpus = run >= 2;
    CAPTURE(p);
    CAPTURE(gpus);
    strata::CommOptions opts;
    opts.timeout = 5s;
    strata::MirroredStrategy s{gpus ? strata::virtual_gpus(0, p) : strata::cpu_replicas(p), opts};
    s.executor_options().bucket_bytes = 1;
    s.executor_options().sharded_update = strata::ShardedUpdate::Off;
    const auto data = strata_test::blobs(64, 3);
    auto model = s.scope(probed_mlp);
    model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 7});
    auto ds = strata::data::from_tensor_slices(data.x, data.y).batch(32);
    fail_on = 1;  // replica 1 throws after its last two layers' buckets started, the others wait on them
    const auto t0 = std::chrono::steady_clock::now();
    try {
      model.fit(s.distribute(ds), {.epochs = 1, .verbose = nn::Verbosity::Silent});
      FAIL("fit should have thrown");
    } catch (const strata::ReplicaError& e) {
      CHECK(e.replica() == 1);
      CHECK(std::string(e.what()).find("replica 1 of " + std::to_string(p)) != std::string::npos);
      CHECK(std::string(e.what()).find("probe: replica 1 fails in backward") != std::string::npos);
    }
    fail_on = -1;
    CHECK(std::chrono::steady_clock::now() - t0 < opts.timeout);  // released by the abort, not the timeout
    // the strategy and the model stay usable: the next epoch trains, bucketed
    auto h = model.fit(s.distribute(ds), {.epochs = 1, .verbose = nn::Verbosity::Silent});
    CHECK(std::isfinite(h.at("loss").back()));
  }
}

}  // namespace buckets_test
