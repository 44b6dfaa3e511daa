#pragma once
//! A recording of the run's timeline (core/trace.hpp) into a trace-event
//! JSON file that ui.perfetto.dev and chrome://tracing open: while a
//! Session lives, every span of every thread is recorded; a flusher thread
//! writes them out every `flush_every`, and at the end. The file is a
//! complete JSON array after every flush, so a run that dies (killed,
//! crashed, stopped by a signal) leaves a readable file up to its last
//! flush; on SIGTERM or SIGINT (when no other handler owns them) and on
//! std::terminate the session flushes before the process ends.
//!   strata::trace::Session trace{{.path = "run.json"}};   // ... train ...; trace.finish() or its destructor
//!
//! Without a path nothing is written: Session::totals() still gives each
//! track's own time per category (bench/train_bench --breakdown).

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <time.h>
#include <utility>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/core/trace.hpp>
#include <strata/core/trace_json.hpp>

namespace strata::trace {

struct Options {
  std::string path = {};                        //!< the JSON file ("": record totals only)
  std::size_t ring_events = 1 << 15;            //!< each thread's ring between flushes (events of 128 bytes)
  std::chrono::milliseconds flush_every{250};   //!< how often the flusher writes
  bool on_signals = true;                       //!< flush on SIGTERM/SIGINT where their action is the default
  int pid = 0;                                  //!< the process's id in the trace (an MPI rank)
  std::string process_name = {};                //!< its name ("": "process <pid>")
  //! Added to the steady clock's nanoseconds to make a timestamp (the MPI
  //! merge aligns ranks with it); nullopt: the session's start is 0.
  std::optional<std::int64_t> clock_shift_ns = {};
};

//! One track's own time per category (a span's time less its children's) and span counts.
struct TrackTotals {
  int tid = 0;
  std::string name;
  std::array<std::int64_t, kCategories> self_ns{};
  std::array<std::int64_t, kCategories> count{};
};

//! Each track's totals in the session that records now or recorded last
//! (empty before any): what a callback reads (nn::TensorBoard's time per category).
[[nodiscard]] inline std::vector<TrackTotals> recorded_totals() {
  detail::Recorder& rec = detail::recorder();
  std::lock_guard lock(rec.m);
  std::vector<TrackTotals> out;
  for (const auto& r : rec.rings) {
    TrackTotals t;
    t.tid = r->tid();
    t.name = r->name();
    for (std::size_t c = 0; c < kCategories; ++c) {
      t.self_ns[c] = r->self_ns(static_cast<Category>(c));
      t.count[c] = r->count(static_cast<Category>(c));
    }
    out.push_back(std::move(t));
  }
  return out;
}

class Session {
 public:
  explicit Session(Options o) : o_(std::move(o)) {
    detail::Recorder& rec = detail::recorder();
    if (rec.on.load()) throw Error("trace::Session: a session already records; finish it before starting another");
    if (!o_.path.empty()) {
      file_ = std::fopen(o_.path.c_str(), "w");
      if (!file_) throw Error("trace::Session: cannot write the trace file '" + o_.path + "'");
    }
    shift_ns_ = o_.clock_shift_ns ? *o_.clock_shift_ns : -now_ns();
    if (thread_name().empty()) name_thread("main");  // the thread that records the run
    {
      std::lock_guard lock(rec.m);
      rec.rings.clear();
      rec.next_tid = 0;
      rec.capacity = o_.ring_events ? o_.ring_events : 1;
      rec.generation.fetch_add(1, std::memory_order_acq_rel);
    }
    current() = this;
    if (o_.on_signals) install_handlers();
    rec.on.store(true, std::memory_order_release);
    flusher_ = std::thread([this] { flusher_loop(); });
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  ~Session() {
    try {
      finish();
    } catch (...) {  // a destructor reports nothing: finish() says why where it is called
    }
  }

  //! Writes every event recorded so far; the file is then complete JSON.
  void flush() {
    std::lock_guard lock(file_mutex_);
    write_locked();
  }

  //! Stops recording, writes the rest and closes the file (once; later calls do nothing).
  void finish() {
    if (finished_.exchange(true)) return;
    {
      std::lock_guard lock(wake_mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    if (flusher_.joinable()) flusher_.join();
    detail::recorder().on.store(false, std::memory_order_release);
    if (o_.on_signals) restore_handlers();
    std::lock_guard lock(file_mutex_);
    write_locked();
    if (current() == this) current() = nullptr;
    if (file_) {
      const bool bad = std::ferror(file_) != 0;
      std::fclose(file_);
      file_ = nullptr;
      if (bad) throw Error("trace::Session: writing the trace file '" + o_.path + "' failed (disk full?)");
    }
  }

  //! Each track's totals so far (all of them once finished).
  [[nodiscard]] std::vector<TrackTotals> totals() const { return recorded_totals(); }
  [[nodiscard]] const std::string& path() const noexcept { return o_.path; }
  //! Events written to the file so far.
  [[nodiscard]] std::size_t written() const noexcept { return written_.load(); }

 private:
  void write_locked() {
    std::vector<std::shared_ptr<Ring>> rings;
    {
      std::lock_guard lock(detail::recorder().m);
      rings = detail::recorder().rings;
    }
    std::string out;
    std::size_t n = 0;
    const auto add = [&](const auto& write_one) {
      out += first_ ? "\n" : ",\n";
      first_ = false;
      write_one(out);
      ++n;
    };
    if (!process_written_) {
      process_written_ = true;
      add([&](std::string& s) {
        json::process_name(s, o_.pid, o_.process_name.empty() ? "process " + std::to_string(o_.pid) : o_.process_name);
      });
    }
    for (const auto& r : rings) {
      if (r->take_renamed()) add([&](std::string& s) { json::thread_name(s, o_.pid, r->tid(), r->name()); });
      r->drain([&](const Event& e) { add([&](std::string& s) { json::event(s, e, o_.pid, r->tid(), shift_ns_); }); });
      if (const std::uint64_t lost = r->take_dropped())
        add([&](std::string& s) { json::dropped(s, o_.pid, r->tid(), lost, now_ns() + shift_ns_); });
    }
    if (!file_ || (n == 0 && opened_)) return;
    if (!opened_) {
      opened_ = true;
      out.insert(0, "[");
    } else {
      std::fseek(file_, close_at_, SEEK_SET);  // over the previous flush's closing bracket
    }
    std::fwrite(out.data(), 1, out.size(), file_);
    close_at_ = std::ftell(file_);
    std::fputs("\n]\n", file_);
    std::fflush(file_);
    written_.fetch_add(n);
  }

  void flusher_loop() {
    flusher_thread() = true;
    std::unique_lock lock(wake_mutex_);
    auto next = std::chrono::steady_clock::now() + o_.flush_every;
    while (!stop_) {
      // wake often enough to see a signal soon; flush on the period
      wake_.wait_for(lock, std::chrono::milliseconds(20));
      if (stop_) break;
      const int sig = signal_seen().exchange(0);
      if (sig == 0 && std::chrono::steady_clock::now() < next) continue;
      lock.unlock();
      try {
        flush();
      } catch (...) {  // a failed write shows in finish()
      }
      lock.lock();
      next = std::chrono::steady_clock::now() + o_.flush_every;
      if (sig != 0) signal_flushes().fetch_add(1);  // the signal's handler waits for this
    }
  }

  // --- signals and terminate ------------------------------------------------------------------------
  static Session*& current() noexcept {
    static Session* s = nullptr;
    return s;
  }
  static std::atomic<int>& signal_seen() noexcept {
    static std::atomic<int> s{0};
    return s;
  }
  struct Saved {
    struct sigaction term {};
    struct sigaction intr {};
    std::terminate_handler terminate = nullptr;
    bool installed = false;
  };
  static Saved& saved() noexcept {
    static Saved s;
    return s;
  }
  static std::atomic<std::uint64_t>& signal_flushes() noexcept {
    static std::atomic<std::uint64_t> n{0};
    return n;
  }
  static bool& flusher_thread() noexcept {
    thread_local bool f = false;
    return f;
  }
  //! SIGTERM or SIGINT: the flusher writes the trace out (this waits for it,
  //! at most 2 s, unless this is the flusher), then the signal does what it
  //! did before the session: the handler there was runs, or the default
  //! action ends the process. Only async-signal-safe calls here.
  static void on_signal(int sig, siginfo_t* info, void* ctx) {
    const std::uint64_t before = signal_flushes().load();
    signal_seen().store(sig);
    if (!flusher_thread())
      for (int i = 0; i < 200 && signal_flushes().load() == before; ++i) {
        struct timespec ten_ms {0, 10'000'000};
        ::nanosleep(&ten_ms, nullptr);
      }
    const struct sigaction& old = sig == SIGTERM ? saved().term : saved().intr;
    if (old.sa_flags & SA_SIGINFO) {
      if (old.sa_sigaction) old.sa_sigaction(sig, info, ctx);
    } else if (old.sa_handler == SIG_DFL) {
      ::sigaction(sig, &old, nullptr);  // ends the process once this handler returns (the signal is blocked here)
      ::raise(sig);
    } else if (old.sa_handler != SIG_IGN) {
      old.sa_handler(sig);
    }
  }
  static void on_terminate() {
    if (Session* s = current()) {
      if (s->file_mutex_.try_lock_for(std::chrono::seconds(1))) {
        try {
          s->write_locked();
        } catch (...) {
        }
        s->file_mutex_.unlock();
      }
    }
    if (saved().terminate) saved().terminate();
    std::abort();
  }
  static void install_handlers() {
    Saved& sv = saved();
    struct sigaction sa {};
    sa.sa_sigaction = &on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    ::sigaction(SIGTERM, &sa, &sv.term);
    ::sigaction(SIGINT, &sa, &sv.intr);
    sv.terminate = std::set_terminate(&on_terminate);
    sv.installed = true;
  }
  static void restore_handlers() {
    Saved& sv = saved();
    if (!sv.installed) return;
    sv.installed = false;
    ::sigaction(SIGTERM, &sv.term, nullptr);
    ::sigaction(SIGINT, &sv.intr, nullptr);
    std::set_terminate(sv.terminate);
  }

  Options o_;
  std::int64_t shift_ns_ = 0;
  std::FILE* file_ = nullptr;
  std::timed_mutex file_mutex_;
  bool first_ = true;
  bool opened_ = false;
  bool process_written_ = false;
  long close_at_ = 0;
  std::atomic<std::size_t> written_{0};
  std::atomic<bool> finished_{false};
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread flusher_;
};

}  // namespace strata::trace
