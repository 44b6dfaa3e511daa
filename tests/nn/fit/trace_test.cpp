// The run's timeline (issue 24): strata::trace spans written by a
// trace::Session as trace-event JSON, read back by a reader that is not
// strata's (tests/trace/check_trace.py: Python's json, the nesting rule of
// a trace viewer). Spans nest on each thread; a full ring loses events and
// says how many; the file is complete JSON after every flush, so a run
// killed with SIGKILL or stopped by SIGTERM leaves a readable file; a fit
// under two mirrored replicas and a 1F1B pipeline shows every step, layer,
// collective and micro-batch where it ran.

#include <doctest/doctest.h>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <strata/core/trace_session.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>

#include "support/blobs.hpp"
#include "support/checkpoint_files.hpp"
#include "device/host_as_gpu.hpp"
#include "trace/trace_report.hpp"

extern char** environ;

namespace nn = strata::nn;
namespace trace = strata::trace;
using strata_test::read_trace;
using strata_test::TempDir;

namespace {

auto dataset() {
  static const strata_test::Blobs d = strata_test::blobs(64, 3);
  return strata::data::from_tensor_slices(d.x, d.y).batch(16);  // 4 steps
}

template <class S>
nn::Sequential fit_one_epoch(S& s, const std::vector<nn::Callback*>& callbacks = {}) {
  auto model = s.scope(strata_test::blobs_mlp);
  model.compile(nn::SGD{0.05}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
                {.seed = 7});
  model.fit(s.distribute(dataset()), {.epochs = 1, .verbose = nn::Verbosity::Silent, .callbacks = callbacks});
  return model;
}

//! Runs this test program again as a child, only the test case `name`, with STRATA_TRACE_CHILD=`arg`;
//! returns its wait status.
int run_child(const std::string& name, const std::string& arg) {
  std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string tc = "--test-case=" + name;
  std::string env = "STRATA_TRACE_CHILD=" + arg;
  std::vector<char*> argv{exe.data(), tc.data(), nullptr};
  std::vector<char*> envp{env.data()};
  for (char** e = environ; *e; ++e)
    if (!std::string_view(*e).starts_with("STRATA_TRACE_CHILD=")) envp.push_back(*e);
  envp.push_back(nullptr);
  pid_t pid = 0;
  REQUIRE(::posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data()) == 0);
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  return status;
}

}  // namespace

TEST_CASE("spans nest on each thread's track, named, with their arguments") {
  TempDir dir;
  const auto path = (dir.path / "t.json").string();
  {
    trace::Session session{{.path = path}};
    {
      trace::Span outer{"outer", trace::Category::Step, {{"step", 3}}};
      trace::Span a{"inner \"a\"", trace::Category::Forward};  // a name that needs escaping
      a.end();
      trace::Span b{"inner b", trace::Category::Backward, {{"layer", 1}, {"algorithm", "ring"}}};
      trace::annotate({"bytes", 4096});
    }
    std::thread t([] {
      trace::name_thread("helper");
      for (int i = 0; i < 5; ++i) trace::Span s{"work", trace::Category::Other};
    });
    t.join();
    const auto totals = session.totals();
    REQUIRE(totals.size() == 2);
    CHECK(totals[0].name == "main");
    CHECK(totals[0].count[static_cast<int>(trace::Category::Step)] == 1);
    CHECK(totals[1].count[static_cast<int>(trace::Category::Other)] == 5);
    // own time: the step's own time excludes its children's
    CHECK(totals[0].self_ns[static_cast<int>(trace::Category::Step)] >= 0);
  }
  const auto r = read_trace(path);
  const auto main = r.track("main"), helper = r.track("helper");
  CHECK(main.second != helper.second);
  CHECK(r.count(main, "step", "outer") == 1);
  CHECK(r.count(main, "forward", "inner_\"a\"") == 1);
  CHECK(r.count(helper, "other", "work") == 5);
  CHECK(r.args(main, "outer") == "step=3");
  CHECK(r.args(main, "inner_b") == "algorithm=ring,bytes=4096,layer=1");
  CHECK(r.lost() == 0);
}

TEST_CASE("off, a span records nothing; one session at a time; a path that cannot be written is an Error") {
  CHECK_FALSE(trace::enabled());
  { trace::Span s{"unseen", trace::Category::Other}; }
  TempDir dir;
  const auto path = (dir.path / "t.json").string();
  {
    trace::Session session{{.path = path}};
    CHECK(trace::enabled());
    CHECK_THROWS_AS(trace::Session({.path = (dir.path / "u.json").string()}), strata::Error);
    session.finish();
    CHECK_FALSE(trace::enabled());
    { trace::Span s{"after the end", trace::Category::Other}; }
    session.finish();  // twice: nothing more
  }
  const auto r = read_trace(path);
  CHECK(r.all.find("unseen") == std::string::npos);
  CHECK(r.all.find("after_the_end") == std::string::npos);
  CHECK_THROWS_WITH_AS(trace::Session({.path = (dir.path / "no" / "such" / "t.json").string()}),
                       doctest::Contains("cannot write the trace file"), strata::Error);
  CHECK_FALSE(trace::enabled());
}

TEST_CASE("a ring that fills between flushes loses the excess, and the trace says how many") {
  TempDir dir;
  const auto path = (dir.path / "t.json").string();
  {
    trace::Session session{{.path = path, .ring_events = 4, .flush_every = std::chrono::hours(1)}};
    for (int i = 0; i < 10; ++i) trace::Span s{"tick", trace::Category::Other};
    session.flush();
    for (int i = 0; i < 3; ++i) trace::Span s{"tock", trace::Category::Other};  // the ring has room again
  }
  const auto r = read_trace(path);
  const auto main = r.track("main");
  CHECK(r.count(main, "other", "tick") == 4);
  CHECK(r.count(main, "other", "tock") == 3);
  CHECK(r.lost() == 6);
}

TEST_CASE("the file is complete JSON after every flush") {
  TempDir dir;
  const auto path = (dir.path / "t.json").string();
  trace::Session session{{.path = path, .flush_every = std::chrono::hours(1)}};
  { trace::Span s{"first", trace::Category::Other}; }
  session.flush();
  const auto first = read_trace(path);
  CHECK(first.count(first.track("main"), "other", "first") == 1);
  session.flush();  // nothing new: unchanged
  { trace::Span s{"second", trace::Category::Other}; }
  session.flush();
  const auto r = read_trace(path);
  CHECK(r.count(r.track("main"), "other", "second") == 1);
  session.finish();
  CHECK(session.written() >= 4);  // the process name, the thread name, two spans
}

TEST_CASE("a fit under two mirrored replicas: steps, batches, layers, collectives and updates where they ran") {
  TempDir dir;
  const auto path = (dir.path / "mirrored.json").string();
  {
    strata::MirroredStrategy s{strata::cpu_replicas(2)};
    trace::Session session{{.path = path}};
    fit_one_epoch(s);
  }
  const auto r = read_trace(path);
  const auto main = r.track("main"), r0 = r.track("replica 0"), r1 = r.track("replica 1");
  CHECK(r.count(main, "step", "train_step") == 4);
  CHECK(r.count(main, "data", "next_batch") == 5);  // 4 batches, then the end
  for (const auto& t : {r0, r1}) {
    // blobs_mlp: dense, dense_1, re_lu, dense_2; forward and backward of each, every step
    CHECK(r.count(t, "forward", "dense") == 4);
    CHECK(r.count(t, "forward", "dense_2") == 4);
    CHECK(r.count(t, "backward", "dense") == 4);
    CHECK(r.count(t, "loss", "loss") == 4);
    CHECK(r.count(t, "update", "update") == 4);
    CHECK(r.args(t, "dense").find("rows=8") != std::string::npos);  // half of each batch of 16
  }
  // every collective of every replica, in the same order on both
  const std::string c0 = r.order(r0, "collective");
  CHECK(c0.size() > 0);
  CHECK(c0 == r.order(r1, "collective"));
  CHECK(r.args(r0, c0.substr(0, c0.find(','))).find("peers=2") != std::string::npos);
}

// --trace on GPU replicas (stand-ins, tests/device/host_as_gpu.hpp): the device executor's step records the same
// spans where they ran, its collectives (the device team's sums) on each replica's track.
TEST_CASE("a fit under two mirrored GPU replicas (stand-ins): steps, batches, layers, collectives and updates") {
  TempDir dir;
  const auto path = (dir.path / "gpus.json").string();
  {
    strata_test::HostAsGpu host;
    strata::MirroredStrategy s{strata::virtual_gpus(0, 2)};
    trace::Session session{{.path = path}};
    fit_one_epoch(s);
  }
  const auto r = read_trace(path);
  const auto main = r.track("main"), r0 = r.track("replica 0"), r1 = r.track("replica 1");
  CHECK(r.count(main, "step", "train_step") == 4);
  CHECK(r.count(main, "data", "next_batch") == 5);
  for (const auto& t : {r0, r1}) {
    CHECK(r.count(t, "forward", "dense") == 4);
    CHECK(r.count(t, "backward", "dense") == 4);
    CHECK(r.count(t, "loss", "loss") == 4);
    CHECK(r.count(t, "update", "update") == 4);
  }
  const std::string c0 = r.order(r0, "collective");
  CHECK(c0.size() > 0);
  CHECK(c0 == r.order(r1, "collective"));
}

TEST_CASE("a 1F1B pipeline: each stage's micro-batches in the schedule's order") {
  TempDir dir;
  const auto path = (dir.path / "pipeline.json").string();
  {
    strata::PipelineStrategy s{strata::cpu_replicas(2)};
    s.pipeline_options().micro_batches = 4;
    s.pipeline_options().schedule = strata::Schedule::OneFOneB;
    trace::Session session{{.path = path}};
    fit_one_epoch(s);
  }
  const auto r = read_trace(path);
  for (std::size_t st = 0; st < 2; ++st) {
    const auto t = r.track("stage " + std::to_string(st));
    std::string step;  // one step's order, as the schedule has it
    for (const auto& task : strata::detail::stage_order(strata::Schedule::OneFOneB, st, 2, 4, true))
      step += (step.empty() ? "" : ",") + std::string(task.op == strata::detail::StageOp::F ? "F" : "B") +
              std::to_string(task.m);
    CHECK(r.flow(t) == step + "," + step + "," + step + "," + step);  // 4 steps
    CHECK(r.count(t, "forward", "F3") == 4);
    CHECK(r.count(t, "backward", "B0") == 4);
  }
  // the activations and gradients between the stages, as messages
  CHECK(r.count(r.track("stage 1"), "collective", "recv") == 16);
  CHECK(r.count(r.track("stage 0"), "collective", "send") == 16);
}

// Run only as a child of the cases below (STRATA_TRACE_CHILD=mode:path): a
// fit that flushes its trace after its third step, then dies.
TEST_CASE("trace child: a run that dies") {
  const char* arg = std::getenv("STRATA_TRACE_CHILD");
  if (!arg) return;  // the parent's run: nothing here
  const std::string a = arg, mode = a.substr(0, a.find(':')), path = a.substr(a.find(':') + 1);
  std::signal(SIGTERM, SIG_DFL);  // the test runner's crash report is not this run's: the default action ends it
  trace::Session session{{.path = path, .flush_every = std::chrono::hours(1)}};
  struct Die : nn::Callback {
    trace::Session* session;
    std::string mode;
    void on_batch_end(int batch, const nn::Logs&) override {
      if (batch != 2) return;
      if (mode == "kill") {
        session->flush();
        std::raise(SIGKILL);
      }
      std::raise(SIGTERM);  // the session's flusher writes everything, then the process ends on it
      std::this_thread::sleep_for(std::chrono::seconds(20));
      std::_Exit(3);  // never reached when the signal ends the process
    }
  } die;
  die.session = &session;
  die.mode = mode;
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  fit_one_epoch(s, {&die});
  std::_Exit(4);  // the callback ends the run before this
}

TEST_CASE("a run killed with SIGKILL leaves a trace readable up to its last flush") {
  TempDir dir;
  const auto path = (dir.path / "killed.json").string();
  const int status = run_child("trace child: a run that dies", "kill:" + path);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  const auto r = read_trace(path);  // strict JSON: the flush completed
  CHECK(r.count(r.track("main"), "step", "train_step") == 3);
  CHECK(r.count(r.track("replica 1"), "forward", "dense") == 3);
}

TEST_CASE("a run ended by SIGTERM writes its trace before it ends") {
  TempDir dir;
  const auto path = (dir.path / "terminated.json").string();
  const int status = run_child("trace child: a run that dies", "term:" + path);
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGTERM);
  const auto r = read_trace(path);
  CHECK(r.count(r.track("main"), "step", "train_step") == 3);
  CHECK(r.count(r.track("main"), "callback", "on_batch_end") >= 2);
}
