// The run's timeline across MPI ranks (issue 24): trace::MpiSession merges
// every rank's part into the chief's file, one process per rank, on the
// chief's clock; read back by tests/trace/check_trace.py (Python's json).
// Run under mpirun -np 2.

#include <doctest/doctest.h>

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <strata/comm/mpi/trace_session.hpp>
#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/strategy/multi_worker.hpp>
#include <strata/strategy/multi_worker_pipeline.hpp>

#include "support/blobs.hpp"
#include "device/host_as_gpu.hpp"
#include "support/quick_workers.hpp"
#include "trace/trace_report.hpp"

namespace nn = strata::nn;
namespace trace = strata::trace;
using namespace std::chrono_literals;

namespace {

auto dataset() {
  static const strata_test::Blobs d = strata_test::blobs(64, 3);
  return strata::data::from_tensor_slices(d.x, d.y).batch(16);  // 4 global steps
}

template <class S>
void fit_one_epoch(S& s) {
  auto model = s.scope(strata_test::blobs_mlp);
  model.compile(nn::SGD{0.05}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
                {.seed = 7});
  model.fit(s.distribute(dataset()), {.epochs = 1, .verbose = nn::Verbosity::Silent});
}

//! A path every rank agrees on (the chief's temporary directory, on this host).
std::string shared_path(strata::MpiCommunicator& comm, const char* name) {
  std::int64_t pid[1] = {static_cast<std::int64_t>(::getpid())};
  comm.broadcast(std::span<std::int64_t>(pid), 0);
  const auto dir = std::filesystem::temp_directory_path() / ("strata_mpi_trace_" + std::to_string(pid[0]));
  if (comm.rank() == 0) std::filesystem::create_directories(dir);
  comm.barrier();
  return (dir / name).string();
}

//! One epoch of `s` under an MpiSession writing `name` where every rank agrees: the merged trace read back
//! on the chief (its directory removed after), nothing on the other ranks.
template <class S>
std::optional<strata_test::TraceReport> traced_epoch(S& s, const char* name) {
  auto& comm = s.communicator();
  const std::string path = shared_path(comm, name);
  {
    trace::MpiSession session{comm, {.path = path}};
    fit_one_epoch(s);
    session.finish();
  }
  if (comm.rank() != 0) return std::nullopt;
  auto r = strata_test::read_trace(path);
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
  return r;
}

}  // namespace

TEST_CASE("two workers: one file, a process per rank, every collective of every rank in order, clocks aligned") {
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(1), strata_test::quick_workers()};
  auto& comm = s.communicator();
  const std::string path = shared_path(comm, "workers.json");
  trace::MpiSession session{comm, {.path = path}};
  CHECK(session.clock_uncertainty_ns() >= 0);
  fit_one_epoch(s);
  // five all-reduces on the main threads, rank 1 late to each: rank 0's spans wait for it
  for (int k = 0; k < 5; ++k) {
    if (comm.rank() == 1) std::this_thread::sleep_for(20ms);
    float v[4] = {1, 2, 3, 4};
    comm.all_reduce(std::span<float>(v), strata::Sum);
  }
  session.finish();
  CHECK_FALSE(std::filesystem::exists(session.part_path(1)));  // merged, then removed
  if (comm.rank() != 0) return;
  const auto r = strata_test::read_trace(path);
  CHECK(r.processes.at("0") == "worker 0");
  CHECK(r.processes.at("1") == "worker 1");
  for (int w : {0, 1}) {
    const auto main = r.track("main", w), rep = r.track("replica 0", w);
    CHECK(r.count(main, "step", "train_step") == 4);
    CHECK(r.count(rep, "forward", "dense") == 4);
    CHECK(r.count(rep, "update", "update") == 4);
  }
  // the same collectives, in the same order, on both workers' replicas
  const std::string c0 = r.order(r.track("replica 0", 0), "collective");
  CHECK(c0.find("all_reduce") != std::string::npos);
  CHECK(c0 == r.order(r.track("replica 0", 1), "collective"));
  // on the chief's clock, each all-reduce overlaps its peer's: neither ends before the other began
  // (the last five on the main threads: fit's own sums of the totals come before)
  const auto a = r.spans(r.track("main", 0), "all_reduce"), b = r.spans(r.track("main", 1), "all_reduce");
  REQUIRE(a.size() >= 5);
  REQUIRE(a.size() == b.size());
  const double slack_us = 2000;  // the alignment's error: half a round trip, far under this on one host
  for (std::size_t k = a.size() - 5; k < a.size(); ++k) {
    CAPTURE(k);
    CHECK(a[k].ts <= b[k].ts + b[k].dur + slack_us);
    CHECK(b[k].ts <= a[k].ts + a[k].dur + slack_us);
    CHECK(a[k].dur > 10000);  // the chief waited for the late rank (20 ms)
  }
  std::filesystem::remove_all(std::filesystem::path(path).parent_path());
}

// --trace with GPU replicas across workers (stand-ins, tests/device/host_as_gpu.hpp: the device executor, the
// device team's local sum, the host-staged sum across workers): each worker's process, its replicas' spans.
TEST_CASE("two workers of two GPU replicas each (stand-ins): one file, every replica's steps and collectives") {
  strata_test::HostAsGpu host;
  strata::MultiWorkerMirroredStrategy s{strata::virtual_gpus(0, 2), strata_test::quick_workers()};
  const auto r = traced_epoch(s, "gpus.json");
  if (!r) return;  // the chief reads the merged file
  for (int w : {0, 1}) {
    CHECK(r->processes.at(std::to_string(w)) == "worker " + std::to_string(w));
    CHECK(r->count(r->track("main", w), "step", "train_step") == 4);
    for (const char* rep : {"replica 0", "replica 1"}) {
      CAPTURE(rep);
      CHECK(r->count(r->track(rep, w), "forward", "dense") == 4);
      CHECK(r->count(r->track(rep, w), "update", "update") == 4);
    }
  }
  CHECK(r->order(r->track("replica 0", 0), "collective") == r->order(r->track("replica 0", 1), "collective"));
}

TEST_CASE("a 1F1B pipeline over two ranks: each rank's track is its stage, in the schedule's order") {
  strata::MpiOptions quick;
  quick.timeout = 20s;
  strata::MultiWorkerPipelineStrategy s{quick};
  s.pipeline_options().micro_batches = 4;
  s.pipeline_options().schedule = strata::Schedule::OneFOneB;
  const auto traced = traced_epoch(s, "pipeline.json");
  if (!traced) return;
  const strata_test::TraceReport& r = *traced;
  for (std::size_t st = 0; st < 2; ++st) {
    const auto t = r.track("stage " + std::to_string(st), static_cast<int>(st));
    std::string step;
    for (const auto& task : strata::detail::stage_order(strata::Schedule::OneFOneB, st, 2, 4, true))
      step += (step.empty() ? "" : ",") + std::string(task.op == strata::detail::StageOp::F ? "F" : "B") +
              std::to_string(task.m);
    CHECK(r.flow(t) == step + "," + step + "," + step + "," + step);
  }
  CHECK(r.count(r.track("stage 1", 1), "collective", "recv") >= 16);
}

TEST_CASE("ZeRO 1 across workers: each step's reduce-scatter and all-gather waits are the replica's exposed time") {
  strata::MultiWorkerMirroredStrategy s{strata::cpu_replicas(1), strata_test::quick_workers()};
  s.executor_options().sharded_update = strata::ShardedUpdate::On;
  const auto traced = traced_epoch(s, "zero1.json");
  if (!traced) return;
  const strata_test::TraceReport& r = *traced;
  for (int w : {0, 1}) {  // (the collectives themselves run on the worker's progress thread)
    const auto rep = r.track("replica 0", w);
    CHECK(r.count(rep, "wait", "sharded_gradient") == 4);
    CHECK(r.count(rep, "wait", "sharded_values") == 4);
  }
}
