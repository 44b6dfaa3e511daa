// Command line shared by the examples: which strategy, how many replicas,
// and the training knobs; strata::with_strategy then builds the named
// strategy and hands it to the same model code, whatever its type.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <algorithm>

#include <strata/strata.hpp>
#include <strata/strategy/by_name.hpp>

namespace example {

struct Args {
  std::string strategy = "mirrored";  // on a GPU: one_device unless named
  bool strategy_named = false;
  std::string device = "auto";  // cpu | gpu | gpu:N | auto (a GPU when the program has the CUDA backend and one is present)
  int replicas = 0;  // 0: one per core, at least 32 rows of the batch each (cpu_replicas_for_batch)
  int workers = 2;   // parameter_server: worker threads
  int servers = 1;   // parameter_server: servers
  std::optional<std::uint64_t> staleness;  // parameter_server: bound (none: asynchronous)
  std::string cluster;  // parameter_server under mpirun: "chief:0 ps:1 worker:2,3" (default: by --servers)
  int epochs = 5;
  std::size_t batch = 128;
  std::string data;  // MNIST directory ("": the default cache)
  std::uint64_t seed = 0;
  std::string save;  // weights file to write after training
  std::size_t train_limit = 0;  // use only the first N training examples (0: all)
  bool quiet = false;
  double min_accuracy = -1;  // exit status 0 only at or above this test accuracy (-1: the example's bar)
  bool if_present = false;   // for the test suite: exit 77 ("skipped") when MNIST is not there
};

// `known`: the strategy names the program accepts (strata::strategy_names, or
// strata::MpiStrategies::names where it includes strata/strategy/by_name_mpi.hpp).
[[noreturn]] inline void usage(const char* prog, const std::string& why,
                               std::span<const std::string_view> known = strata::strategy_names) {
  std::string names;
  for (auto n : known) {
    if (!names.empty()) names += '|';  // (not "|" + name: GCC 12 -O3 warns falsely, -Wrestrict)
    names += n;
  }
  std::fprintf(stderr,
               "%s: %s\nusage: %s [--strategy %s] [--replicas N] [--device cpu|gpu|gpu:N|auto]\n"
               "          [--workers W] [--servers S] [--staleness K] [--cluster SPEC]   (parameter_server)\n"
               "          [--epochs N] [--batch N] [--data DIR] [--seed N] [--save FILE] [--train-limit N] [--quiet]\n"
               "          [--min-accuracy X] [--if-present]\n",
               prog, why.c_str(), prog, names.c_str());
  std::exit(2);
}

inline Args parse(int argc, char** argv, Args a = {},
                  std::span<const std::string_view> known = strata::strategy_names) {
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (k == "--quiet" || k == "--if-present") {
      (k == "--quiet" ? a.quiet : a.if_present) = true;
      continue;
    }
    if (i + 1 >= argc) usage(argv[0], "missing value after " + k, known);
    const std::string v = argv[++i];
    auto num = [&](auto& out) {
      char* end = nullptr;
      const long long n = std::strtoll(v.c_str(), &end, 10);
      if (!end || *end || n < 0) usage(argv[0], "expected a non-negative number after " + k + ", got " + v, known);
      out = static_cast<std::remove_reference_t<decltype(out)>>(n);
    };
    if (k == "--strategy") a.strategy = v, a.strategy_named = true;
    else if (k == "--device") {
      if (v != "cpu" && v != "gpu" && v != "auto" && v.rfind("gpu:", 0) != 0)
        usage(argv[0], "--device takes cpu, gpu, gpu:N or auto, got " + v, known);
      a.device = v;
    }
    else if (k == "--replicas") num(a.replicas);
    else if (k == "--workers") num(a.workers);
    else if (k == "--servers") num(a.servers);
    else if (k == "--cluster") a.cluster = v;
    else if (k == "--staleness") {
      std::uint64_t n = 0;
      num(n);
      a.staleness = n;
    }
    else if (k == "--epochs") num(a.epochs);
    else if (k == "--batch") num(a.batch);
    else if (k == "--data") a.data = v;
    else if (k == "--seed") num(a.seed);
    else if (k == "--save") a.save = v;
    else if (k == "--train-limit") num(a.train_limit);
    else if (k == "--min-accuracy") a.min_accuracy = std::strtod(v.c_str(), nullptr);
    else usage(argv[0], "unknown option " + k, known);
  }
  if (a.batch == 0) usage(argv[0], "--batch must be at least 1", known);
  if (a.workers < 1 || a.servers < 1) usage(argv[0], "--workers and --servers must be at least 1", known);
  if (std::find(known.begin(), known.end(), a.strategy) == known.end())
    usage(argv[0], "unknown strategy " + a.strategy, known);
  return a;
}

//! The device --device names: "auto" is the first GPU when the program can
//! train on one (strata::gpu_count()), else the CPU. On a GPU the default
//! strategy is one_device (strategies of several replicas run on CPUs so far).
inline strata::Device device_of(Args& a) {
  strata::Device d = strata::cpu(0);
  if (a.device == "gpu" || (a.device == "auto" && strata::gpu_count() > 0)) d = strata::gpu(0);
  else if (a.device.rfind("gpu:", 0) == 0) d = strata::gpu(std::atoi(a.device.c_str() + 4));
  if (d.is_gpu() && !a.strategy_named) a.strategy = "one_device";
  return d;
}

}  // namespace example
