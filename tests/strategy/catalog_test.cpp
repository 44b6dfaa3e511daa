// The strategy catalogue (strata/strategy/catalog.hpp) agrees with what
// builds strategies by name (by_name.hpp) and with the examples' command
// line (examples/example_cli.hpp): every row constructs as what it says it
// is, the lists of names are its rows, and an unknown name lists them.
#include <doctest/doctest.h>

#include <cctype>
#include <set>
#include <string>
#include <vector>

#include <strata/strategy/by_name.hpp>
#include <strata/strategy/catalog.hpp>
#include <strata/execution/executor_options.hpp>

#include "../../examples/example_cli.hpp"
#include "strategy/strategy_sweep.hpp"

namespace catalog_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

namespace {

std::vector<std::string_view> in_process_catalog_names() {
  std::vector<std::string_view> out;
  for (const auto& s : strata::strategy_catalog)
    if (!s.needs_mpi) out.push_back(s.name);
  return out;
}

std::string flat(const std::string& text) {  // --help wraps its lines: compare word by word
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    if (std::isspace(static_cast<unsigned char>(text[i]))) {
      while (i < text.size() && std::isspace(static_cast<unsigned char>(text[i]))) ++i;
      out += ' ';
    } else {
      out += text[i++];
    }
  }
  return out;
}

}  // namespace

TEST_CASE("the catalogue: unique names, a help line each, the eight strategies") {
  std::set<std::string_view> names;
  for (const auto& s : strata::strategy_catalog) {
    CAPTURE(std::string(s.name));
    CHECK(names.insert(s.name).second);
    CHECK_FALSE(s.help.empty());
    CHECK(strata::find_strategy(s.name) == &s);
    CHECK(s.gpu() == strata::placement_on_gpus(s.placement));
    // a strategy takes at most one family of options
    CHECK(int{s.takes_replicas} + int{s.takes_ps_options} + int{s.takes_pipeline_options} <= 1);
  }
  CHECK(names == std::set<std::string_view>{"default", "one_device", "mirrored", "tensor_parallel", "central_storage",
                                            "parameter_server", "pipeline", "multi_worker_mirrored"});
  // only tensor_parallel is synchronous but not exact (its split products add in another order)
  for (const auto& s : strata::strategy_catalog) CHECK(s.exact == (s.name != "tensor_parallel"));
  // tensor_parallel's copies, and pipeline's stages (--tensor-parallel T splits each)
  CHECK(example::catalog_names([](const strata::StrategyInfo& s) { return s.takes_tensor_parallel; }) ==
        std::vector<std::string_view>{"tensor_parallel", "pipeline"});
  // --compression: every strategy whose gradient's sum travels (the replicas', or a pipeline's copies')
  CHECK(example::catalog_names([](const strata::StrategyInfo& s) { return s.takes_compression; }) ==
        std::vector<std::string_view>{"mirrored", "tensor_parallel", "pipeline", "multi_worker_mirrored"});
  // --bucket-mb: the same rows (a pipeline's copies sum by buckets across ranks); --zero: not the pipeline's
  CHECK(example::catalog_names([](const strata::StrategyInfo& s) { return s.takes_buckets; }) ==
        std::vector<std::string_view>{"mirrored", "tensor_parallel", "pipeline", "multi_worker_mirrored"});
  CHECK(example::catalog_names([](const strata::StrategyInfo& s) { return s.takes_gradient_options; }) ==
        std::vector<std::string_view>{"mirrored", "tensor_parallel", "multi_worker_mirrored"});
  CHECK(strata::find_strategy("mirored") == nullptr);
  CHECK(strata::find_strategy("") == nullptr);
}

TEST_CASE("by_name's lists are the catalogue's rows, in its order") {
  const auto expected = in_process_catalog_names();
  CHECK(std::vector<std::string_view>(strata::InProcessStrategies::names.begin(),
                                      strata::InProcessStrategies::names.end()) == expected);
  CHECK(&strata::strategy_names == &strata::InProcessStrategies::names);
  // what by_name_mpi.hpp's MpiStrategies::names is (that header needs an MPI target): every row
  constexpr auto all = strata::detail::strategy_names_where<strata::detail::any_strategy>();
  static_assert(all.size() == strata::strategy_catalog.size());
  for (std::size_t i = 0; i < all.size(); ++i) CHECK(all[i] == strata::strategy_catalog[i].name);
  // the examples' programs take the in-process names unless they say otherwise
  const example::Program p;
  CHECK(std::vector<std::string_view>(p.strategies.begin(), p.strategies.end()) == expected);
}

TEST_CASE("every in-process name of the catalogue constructs as what its row says") {
  int built = 0;
  for (const auto& info : strata::strategy_catalog) {
    if (info.needs_mpi) continue;
    CAPTURE(std::string(info.name));
    struct Seen {
      strata::PlacementKind placement;
      int replicas;
      bool synchronous;
      bool staged;
    };
    const auto seen = strata::with_strategy(info.name, strata_test::small_choice(3), [](auto& s) {
      using S = std::remove_cvref_t<decltype(s)>;
      return Seen{s.any().placement(), s.num_replicas_in_sync(),
                  std::same_as<typename S::sync_policy, strata::Synchronous>,
                  requires { s.pipeline_options(); }};
    });
    CHECK(seen.placement == info.placement);
    CHECK(seen.synchronous == info.synchronous);
    CHECK(seen.staged == !info.whole_model);
    if (info.takes_replicas) CHECK(seen.replicas == 3);  // the choice's replicas reach it
    if (info.takes_pipeline_options) CHECK(seen.replicas == 2);  // small_choice's 2 stages
    // a strategy whose replicas run on CPUs only refuses a GPU with a sentence
    if (!info.gpu()) {
      strata::StrategyChoice on_gpu = strata_test::small_choice();
      on_gpu.device = strata::gpu(0);
      const std::string refusal = std::string(info.name) + " runs its";
      CHECK_THROWS_WITH_AS(strata::with_strategy(info.name, on_gpu, [](auto&) {}), doctest::Contains(refusal.c_str()),
                           strata::Error);
    }
    ++built;
  }
  CHECK(built == static_cast<int>(in_process_catalog_names().size()));
}

TEST_CASE("an unknown name lists exactly the catalogue's in-process names; an MPI one names by_name_mpi.hpp") {
  const std::string known = strata::detail::join_names(in_process_catalog_names());
  const std::string misspelt = "unknown strategy 'mirored' (known: " + known + ")";
  const std::string empty = "unknown strategy '' (known: " + known + ")";
  CHECK_THROWS_WITH_AS(strata::with_strategy("mirored", 2, [](auto&) {}), misspelt.c_str(), strata::Error);
  CHECK_THROWS_WITH_AS(strata::with_strategy("", 2, [](auto&) {}), empty.c_str(), strata::Error);
  for (const auto& info : strata::strategy_catalog)
    if (info.needs_mpi) {
      CAPTURE(std::string(info.name));
      CHECK_THROWS_WITH_AS(strata::with_strategy(info.name, 2, [](auto&) {}),
                           doctest::Contains("needs the MPI backend: use with_mpi_strategy"), strata::Error);
    }
}

TEST_CASE("the examples' --help lists each strategy with the catalogue's line, and options by its properties") {
  const example::Program p{.options = {"--strategy", "--device", "--replicas", "--workers", "--stages", "--help"}};
  const std::string help = flat(example::usage_text("prog", p));
  std::string names;
  for (auto n : p.strategies) names += (names.empty() ? "" : "|") + std::string(n);
  CHECK(help.find("--strategy " + names + " ") != std::string::npos);
  for (auto n : p.strategies) {
    CAPTURE(std::string(n));
    CHECK(help.find(" " + std::string(n) + " " + flat(std::string(strata::find_strategy(n)->help))) !=
          std::string::npos);
  }
  // the strategies --device and --replicas name are the catalogue's gpu() and takes_replicas rows
  CHECK(help.find("where " + strata::detail::join_names(example::gpu_strategies(), " or ") + " train") !=
        std::string::npos);
  CHECK(help.find("of mirrored, tensor_parallel, central_storage, multi_worker_mirrored (per worker)") !=
        std::string::npos);
  CHECK(example::catalog_names([](const strata::StrategyInfo& s) { return s.takes_ps_options; }) ==
        std::vector<std::string_view>{"parameter_server"});
  CHECK(example::catalog_names([](const strata::StrategyInfo& s) { return s.takes_pipeline_options; }) ==
        std::vector<std::string_view>{"pipeline"});
}

// The examples' "gradients:" line for CPU replicas: the stage the mirrored executors run, in words.
TEST_CASE("describe_gradient names the ZeRO stage the mirrored executors run, in one process and across workers") {
  using strata::ShardedUpdate;
  auto said = [](ShardedUpdate mode, std::size_t local, int workers, std::size_t bucket = 0,
                 strata::Compression c = strata::Compression::None) {
    strata::ExecutorOptions o;
    o.sharded_update = mode;
    o.bucket_bytes = bucket;
    o.compression = c;
    return strata::describe_gradient(o, local, workers);
  };
  CHECK(said(ShardedUpdate::Auto, 4, 1) ==
        "the optimizer state sharded over the replicas (ZeRO 1) (the default at 4 replicas); one reduce-scatter after "
        "backward");
  CHECK(said(ShardedUpdate::Auto, 2, 1) ==
        "every replica holds the whole model (ZeRO 0) (the default at 2 replicas); one all-reduce after backward");
  // across workers Auto stays stage 0; On shards over every worker's replicas, one replica a worker too
  CHECK(said(ShardedUpdate::Auto, 4, 2) ==
        "every replica holds the whole model (ZeRO 0) (the default at 4 replicas); one all-reduce after backward");
  CHECK(said(ShardedUpdate::On, 1, 2) ==
        "the optimizer state sharded over the replicas of every worker (ZeRO 1); one reduce-scatter after backward");
  CHECK(said(ShardedUpdate::On, 1, 1) == "every replica holds the whole model (ZeRO 0); one all-reduce after backward");
  CHECK(said(ShardedUpdate::Gradients, 2, 3) ==
        "gradient and optimizer state sharded over the replicas of every worker (ZeRO 2); each layer's gradient "
        "reduce-scattered as backward ends it");
  CHECK(said(ShardedUpdate::Parameters, 3, 1) ==
        "values, gradient and optimizer state sharded over the replicas (ZeRO 3); each layer's gradient "
        "reduce-scattered as backward ends it");
  CHECK(said(ShardedUpdate::Gradients, 2, 1, 4 << 20) ==
        "gradient and optimizer state sharded over the replicas (ZeRO 2); the layers' gradients reduce-scattered by "
        "buckets of 4096 KiB as backward ends them");
  CHECK(said(ShardedUpdate::Parameters, 2, 1, 4 << 20, strata::Compression::BF16) ==
        "values, gradient and optimizer state sharded over the replicas (ZeRO 3); each layer's gradient "
        "reduce-scattered as backward ends it; bf16 on the wire (error feedback)");
  CHECK(said(ShardedUpdate::Off, 2, 1, 1 << 20) ==
        "every replica holds the whole model (ZeRO 0); buckets of 1024 KiB all-reduced as backward ends them");
  // compression does not change the stage Auto picks (ZeRO 1 reduce-scatters in 16 bits)
  CHECK(said(ShardedUpdate::Auto, 4, 1, 0, strata::Compression::BF16) ==
        "the optimizer state sharded over the replicas (ZeRO 1) (the default at 4 replicas); one reduce-scatter after "
        "backward; bf16 on the wire (error feedback)");
  CHECK(said(ShardedUpdate::Auto, 2, 1, 0, strata::Compression::FP16) ==
        "every replica holds the whole model (ZeRO 0) (the default at 2 replicas); one all-reduce after backward; "
        "fp16 on the wire (error feedback)");
}

TEST_CASE("the sweep runs a body under every in-process strategy that meets its needs, by the catalogue") {
  std::vector<std::string> ran;
  const int n = strata_test::for_each_strategy({}, [&](auto& s, const strata::StrategyInfo& info) {
    CHECK(s.any().placement() == info.placement);
    ran.emplace_back(info.name);
  });
  CHECK(n == static_cast<int>(ran.size()));
  CHECK(ran == strata_test::strategies_meeting({}));
  CHECK(ran.size() == in_process_catalog_names().size());
  // each need leaves out exactly the rows without the property
  for (const auto& name : strata_test::strategies_meeting({.synchronous = true}))
    CHECK(strata::find_strategy(name)->synchronous);
  for (const auto& name : strata_test::strategies_meeting({.whole_model = true}))
    CHECK(strata::find_strategy(name)->whole_model);
  CHECK(strata_test::strategies_meeting({.synchronous = true}).size() <
        strata_test::strategies_meeting({}).size());  // parameter_server is asynchronous
}

// (Built here, not trained: this test links no BLAS, which the host's
// compute that HostAsGpu installs needs; custom_loop_test trains under the sweep.)
TEST_CASE("the backend sweep runs every in-process row on CPUs and exactly the gpu() rows on GPU replicas") {
  std::vector<std::string> on_cpus, on_gpus;
  for (const strata_test::SweepRun& run : strata_test::backend_sweep({})) {
    const strata::StrategyInfo& info = *run.info;
    const bool gpu = run.backend == strata_test::Backend::HostAsGpu;
    CAPTURE(std::string(info.name));
    CAPTURE(std::string(strata_test::backend_name(run.backend)));
    const strata::StrategyChoice choice =
        gpu ? strata_test::gpu_choice(strata_test::small_choice()) : strata_test::small_choice();
    strata::with_strategy(info.name, choice, [&](auto& s) {
      CHECK(s.any().placement() == info.placement);
      // the replicas are where the backend says: GPUs 0 and 1 (gpu_choice), or CPUs
      if constexpr (requires { s.devices(); }) {
        for (const auto& d : s.devices()) CHECK(d.is_gpu() == gpu);
        if (gpu && info.takes_replicas) CHECK(s.devices() == std::vector<strata::Device>{strata::gpu(0), strata::gpu(1)});
      }
    });
    (gpu ? on_gpus : on_cpus).emplace_back(info.name);
  }
  CHECK(on_cpus == strata_test::strategies_meeting({}));
  std::vector<std::string> gpu_rows;
  for (const auto& info : strata::strategy_catalog)
    if (!info.needs_mpi && info.gpu()) gpu_rows.emplace_back(info.name);
  CHECK(on_gpus == gpu_rows);
  CHECK(on_gpus ==
        std::vector<std::string>{"default", "one_device", "mirrored", "tensor_parallel", "central_storage", "pipeline"});
  // a need leaves a row out on both backends
  for (const strata_test::SweepRun& run : strata_test::backend_sweep({.synchronous = true}))
    CHECK((run.info->synchronous && run.info->exact));
  CHECK(strata_test::backend_name(strata_test::Backend::Cpu) == "cpu");
  CHECK(strata_test::backend_name(strata_test::Backend::HostAsGpu) == "host-as-gpu");
}

}  // namespace catalog_test
