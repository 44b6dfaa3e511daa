// Models trained with ParameterServerStrategy in one process: staleness 0
// matches synchronous training, asynchronous training learns, an injected
// worker failure still completes training (the step rescheduled), weights
// and evaluation go through the servers.
#include <doctest/doctest.h>

#include <stdlib.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <numeric>
#include <thread>

#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/nn/callbacks/backup_and_restore.hpp>
#include <strata/strategy/parameter_server.hpp>
#include <strata/strata.hpp>

#include "support/blobs.hpp"

#include "support/watchdog.hpp"

namespace ps_model_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

using namespace std::chrono_literals;
namespace nn = strata::nn;
using strata::Tensor;

namespace {

using strata_test::Blobs;
using strata_test::blobs;
using strata_test::blobs_mlp;
using strata_test::fit_blobs;
using strata_test::flat_weights;


double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::abs(a[i] - b[i])));
  return m;
}

}  // namespace

TEST_CASE("staleness 0 trains as synchronous training: W workers on batches of B = W replicas on batches of W*B") {
  strata_test::Watchdog dog("ps k=0 vs sync", 300s);
  const Blobs data = blobs(480, 3);
  for (int w : {1, 2, 3}) {
    for (int servers : {1, 2}) {
      CAPTURE(w);
      CAPTURE(servers);
      strata::ParameterServerStrategy ps{{.workers = w, .servers = servers, .staleness = 0,
                                          .partitioner = strata::FixedShardsPartitioner{.num_shards = 2}}};
      strata::CentralStorageStrategy sync{strata::cpu_replicas(w)};
      nn::History hp, hs;
      const auto a = fit_blobs(ps, data, 16, 3, &hp);
      const auto b = fit_blobs(sync, data, 16 * static_cast<std::size_t>(w), 3, &hs);
      CHECK(max_abs_diff(flat_weights(a), flat_weights(b)) < 2e-5);
      CHECK(hp.epochs().back().at("loss") == doctest::Approx(hs.epochs().back().at("loss")).epsilon(1e-4));
      CHECK(a.iterations() == 3 * 30);  // one step per batch of 16
    }
  }
}

TEST_CASE("asynchronous training learns with any number of workers and servers, bounded or not") {
  strata_test::Watchdog dog("ps async", 300s);
  const Blobs data = blobs(600, 3), test = blobs(300, 4);
  for (int w : {1, 3, 8}) {  // 8: more workers than cores
    for (std::optional<std::uint64_t> k : {std::optional<std::uint64_t>{}, std::optional<std::uint64_t>{1}}) {
      CAPTURE(w);
      CAPTURE(k.value_or(99));
      strata::ParameterServerStrategy ps{{.workers = w, .servers = 2, .staleness = k,
                                          .partitioner = strata::MaxSizePartitioner{.max_shard_bytes = 128}}};
      nn::History h;
      auto model = fit_blobs(ps, data, 16, 12, &h);
      CHECK(h.epochs().back().at("loss") < 0.6 * h.epochs().front().at("loss"));
      const auto logs = model.evaluate(strata::data::from_tensor_slices(test.x, test.y).batch(50));
      CHECK(logs.at("accuracy") > 0.85);
      // every server took pushes and pulls: the variables were sharded over both
      const auto pushes = ps.runtime().pushes_per_server(), pulls = ps.runtime().pulls_per_server();
      CHECK(pushes[0] > 0);
      CHECK(pushes[1] > 0);
      CHECK(pulls[1] > 0);
      CHECK(ps.coordinator().clock().max_observed_gap() <= k.value_or(1000));
    }
  }
}

TEST_CASE("a worker failing mid-training is reported, its step rescheduled, and training completes") {
  strata_test::Watchdog dog("ps failure", 300s);
  const Blobs data = blobs(480, 5);
  for (std::optional<std::uint64_t> k : {std::optional<std::uint64_t>{}, std::optional<std::uint64_t>{0}}) {
    CAPTURE(k.value_or(99));
    std::atomic<int> seen{0}, failed_worker{-1};
    strata::ParameterServerStrategy ps{
        {.workers = 3,
         .servers = 2,
         .staleness = k,
         .on_failure = [&](const strata::WorkerFailure& f) {
           CHECK(f.step == 10);
           ++seen;
         },
         .before_step = [&](const strata::WorkerContext& w) {
           if (w.step() == 10 && w.attempt() == 0) {  // whichever worker runs step 10 first fails
             failed_worker = w.worker();
             throw std::runtime_error("injected: the worker lost its node");
           }
           if (w.step() == 10) CHECK(w.worker() != failed_worker.load());  // rescheduled elsewhere
         }}};
    nn::History h;
    auto model = fit_blobs(ps, data, 16, 2, &h);
    REQUIRE(ps.runtime().failures().size() == 1);
    CHECK(ps.runtime().failures()[0].what.find("lost its node") != std::string::npos);
    CHECK(ps.runtime().failures()[0].worker == failed_worker.load());
    CHECK(seen.load() == 1);
    CHECK(ps.coordinator().live_workers() == 2);
    CHECK(model.iterations() == 2 * 30);
    CHECK(h.epochs().back().at("loss") < h.epochs().front().at("loss"));
    // every batch's rows were counted once: the epoch's mean loss matches an evaluation pass's scale
    CHECK(std::isfinite(h.epochs().back().at("loss")));
  }
}

TEST_CASE("under a parameter server, weights and evaluation go through the servers") {
  strata_test::Watchdog dog("ps weights", 120s);
  const Blobs data = blobs(96, 8);
  strata::ParameterServerStrategy ps{{.workers = 2, .servers = 2}};
  auto model = fit_blobs(ps, data, 16, 2);
  // the chief's copy is the servers' value after fit
  std::vector<float> servers(model.count_params());
  ps.runtime().read(servers);
  CHECK(servers == flat_weights(model));
  // set_weights reaches the servers; evaluation equals a plain model with those weights
  auto plain = blobs_mlp();
  plain.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}}, {.seed = 99});
  plain.build(strata::Shape{6});
  model.set_weights(plain.get_weights());
  ps.runtime().read(servers);
  CHECK(servers == flat_weights(plain));
  auto ds = strata::data::from_tensor_slices(data.x, data.y).batch(32);
  const auto a = model.evaluate(ps.distribute(ds)), b = plain.evaluate(ds);
  CHECK(a.at("loss") == doctest::Approx(b.at("loss")).epsilon(1e-6));
  CHECK(a.at("accuracy") == b.at("accuracy"));
  CHECK(strata::allclose(model.predict(data.x), plain.predict(data.x), {1e-6, 1e-6}));
  // a mismatched set leaves the servers unchanged
  auto bad = plain.get_weights();
  bad.pop_back();
  CHECK_THROWS_AS(model.set_weights(bad), strata::ShapeError);
  ps.runtime().read(servers);
  CHECK(servers == flat_weights(plain));
}

TEST_CASE("a step function that fails on every worker stops fit with the failures named") {
  strata_test::Watchdog dog("ps total failure", 120s);
  const Blobs data = blobs(64, 9);
  strata::ParameterServerStrategy ps{{.workers = 2,
                                      .on_failure = [](const strata::WorkerFailure&) {},
                                      .before_step = [](const strata::WorkerContext& w) {
                                        if (w.step() == 1) throw std::runtime_error("poisoned batch");
                                      }}};
  auto model = ps.scope(blobs_mlp);
  model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
  CHECK_THROWS_WITH_AS(model.fit(ps.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(16)),
                                 {.verbose = nn::Verbosity::Silent}),
                       doctest::Contains("poisoned batch"), strata::Error);
  CHECK(ps.runtime().failures().size() == 2);
}

namespace {
// The model of the preemption test: dropout (keyed by the step), Adam (its
// step per shard), and data shuffled afresh each epoch (the pass counters).
nn::Sequential preemptible_model(strata::ParameterServerStrategy& s) {
  auto m = s.scope([] {
    return nn::Sequential{nn::Input{{6}}, nn::Dense{16, {.activation = nn::Activation::Tanh}}, nn::Dropout{0.25f},
                          nn::Dense{3}};
  });
  m.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}}, {.seed = 11});
  return m;
}
auto preemptible_data(const Blobs& d) { return strata::data::from_tensor_slices(d.x, d.y).shuffle(400, 5).batch(16); }
}  // namespace

TEST_CASE("staleness 0 preempted by SIGTERM at any step resumes bitwise: the saved position is the rounds applied") {
  // 25 batches an epoch, 2 epochs. A signal stops scheduling; the steps in
  // flight land; the checkpoint must hold exactly what the servers applied,
  // in whole rounds, so that the rerun's rounds are the uninterrupted run's.
  strata_test::Watchdog dog("ps k=0 preemption", 600s);
  const Blobs data = blobs(400, 21);
  // 2 workers: a round's two gradients sum the same in either order (with 3
  // or more, which worker took which batch orders the sum: equal to rounding)
  for (int workers : {1, 2}) {
    CAPTURE(workers);
    const strata::ParameterServerOptions o{.workers = workers, .servers = 2, .staleness = 0,
                                           .partitioner = strata::FixedShardsPartitioner{.num_shards = 2}};
    std::vector<float> want;
    for (int rep = 0; rep < 2; ++rep) {  // the uninterrupted run is itself reproducible
      strata::ParameterServerStrategy s{o};
      auto m = preemptible_model(s);
      m.fit(s.distribute(preemptible_data(data)), {.epochs = 2, .verbose = nn::Verbosity::Silent});
      if (rep == 0) want = flat_weights(m);
      else REQUIRE(flat_weights(m) == want);
    }
    for (int rep = 0; rep < 3; ++rep)
      for (int signal_at : {1, 2, 3, 4, 5, 7, 10, 13, 24, 25, 26, 29, 33, 42}) {
        CAPTURE(rep);
        CAPTURE(signal_at);
        char tmpl[] = "/tmp/strata_ps_preempt_XXXXXX";
        REQUIRE(::mkdtemp(tmpl) != nullptr);
        const std::filesystem::path dir = tmpl;
        nn::BackupAndRestore backup{dir, {}};
        nn::LambdaCallback term;
        int seen = 0;
        term.on_batch_end_fn = [&](int, const nn::Logs&) {
          if (++seen == signal_at) std::raise(SIGTERM);
        };
        std::int64_t stopped_at = 0;
        {
          strata::ParameterServerStrategy s{o};
          auto m = preemptible_model(s);
          CHECK_THROWS_AS(m.fit(s.distribute(preemptible_data(data)),
                                {.epochs = 2, .verbose = nn::Verbosity::Silent, .callbacks = {&backup, &term}}),
                          nn::Preempted);
          stopped_at = m.iterations();
          CHECK(stopped_at >= signal_at);
        }
        strata::ParameterServerStrategy s{o};
        auto m = preemptible_model(s);
        m.fit(s.distribute(preemptible_data(data)), {.epochs = 2, .verbose = nn::Verbosity::Silent, .callbacks = {&backup}});
        CHECK(backup.resumed_from() == stopped_at);
        CHECK(m.iterations() == 50);
        CHECK(flat_weights(m) == want);
        std::error_code ec;
        std::filesystem::remove_all(dir, ec);
      }
  }
}

TEST_CASE("a 1 ms timeout at staleness 0: each fit succeeds or raises CollectiveTimeout, and its model can go first") {
  // A staleness wait past the deadline ends the run; a worker may still end
  // an empty step afterwards and complete a round, whose application calls
  // the optimizer of the model: the model (and with it its executor) goes
  // before the strategy here, as in the examples, where a 1 ms --timeout
  // crashed one run in 20.
  strata_test::Watchdog dog("ps 1 ms timeouts", 300s);
  const Blobs data = blobs(256, 31);
  int timed_out = 0;
  for (int run = 0; run < 30; ++run) {
    CAPTURE(run);
    strata::ParameterServerStrategy s{{.workers = 2, .servers = 2, .staleness = 0, .timeout = 1ms,
                                       .before_step = [run](const strata::WorkerContext& w) {
                                         if (w.worker() == 1 && (w.step() + static_cast<std::uint64_t>(run)) % 3 == 0)
                                           std::this_thread::sleep_for(2ms);  // a straggler past the deadline
                                       }}};
    auto m = s.scope(blobs_mlp);
    m.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 7});
    try {
      m.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(16)),
            {.epochs = 1, .verbose = nn::Verbosity::Silent});
    } catch (const strata::CollectiveTimeout&) {
      ++timed_out;
    }
    // leaving the scope: the model (and its executor) goes first, then the strategy
  }
  CHECK(timed_out > 0);
}

TEST_CASE("a model that goes before its parameter-server strategy takes its optimizer out of the servers' rounds") {
  // After the model (and its executor, whose optimizer the servers' update
  // calls) is gone, a round the workers complete applies nothing: before,
  // it called the destroyed optimizer.
  strata_test::Watchdog dog("ps model gone", 120s);
  const Blobs data = blobs(64, 33);
  strata::ParameterServerStrategy s{{.workers = 2, .servers = 1, .staleness = 0}};
  auto* rt = dynamic_cast<strata::InProcessParameterServers*>(&s.runtime());
  REQUIRE(rt != nullptr);
  { (void)fit_blobs(s, data, 16, 1); }  // trains, then goes
  std::vector<float> before(rt->store().total_elements()), after(before.size());
  rt->read(before);
  const std::vector<float> g(before.size(), 1.f);
  strata::StalenessClock& clock = rt->coordinator().clock();
  for (int w : {0, 1}) {  // a round with a gradient staged
    clock.begin(w);
    rt->push(w, g);
    clock.end(w);
  }
  rt->read(after);
  CHECK(after == before);
}

}  // namespace ps_model_test
