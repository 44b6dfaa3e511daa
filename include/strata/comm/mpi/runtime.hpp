#pragma once
//! MPI's lifetime in a strata process (Runtime, runtime()) and SerialMpi, its
//! one process-wide lock. The first MPI communicator initializes MPI with
//! MPI_THREAD_SERIALIZED unless the program did (under a deadline:
//! STRATA_MPI_INIT_TIMEOUT seconds, default 120, then this rank says what it
//! waited for and exits 1); MPI is finalized at exit, or after a failed
//! collective the exit waits at most the failing communicator's timeout,
//! then calls MPI_Abort. Every MPI call strata makes holds SerialMpi, on
//! whichever thread (a progress thread included), and a waiting operation
//! lets others in (SerialMpi::let_others_in); MPI calls a program makes
//! itself while strata's non-blocking work is pending must hold it too.
//! docs/collectives.md ("MPI and threads"), docs/fault-tolerance.md.
//!   detail::mpi::SerialMpi lock{"my MPI call", timeout};   // around a program's own MPI call

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include <unistd.h>

#include <strata/comm/mpi/mpi.hpp>
#include <strata/core/error.hpp>

namespace strata::detail::mpi {

//! Holds the process-wide MPI lock for one operation (see the top of this
//! header): taken in the order asked for (a ticket lock: a progress thread
//! that runs operation after operation cannot starve another thread), by a
//! thread that may already hold it (nested operations), and never waited for
//! longer than twice the longest timeout of any operation that asked for it
//! plus a second: past that, CollectiveTimeout names the operation holding it.
//!   detail::mpi::SerialMpi lock("all_reduce", options.timeout);
class SerialMpi {
 public:
  SerialMpi(const char* what, std::chrono::milliseconds timeout) {
    if (std::string busy = acquire(what, timeout); !busy.empty()) throw CollectiveTimeout(busy);
  }
  //! For a destructor: past the bound it goes on without the lock rather than throw.
  SerialMpi(const char* what, std::chrono::milliseconds timeout, std::nothrow_t) {
    try {
      (void)acquire(what, timeout);
    } catch (...) {
    }
  }
  SerialMpi(const SerialMpi&) = delete;
  SerialMpi& operator=(const SerialMpi&) = delete;
  ~SerialMpi() {
    if (!held_ || depth() == 0 || --depth() > 0) return;  // (0: lost in a handover that timed out)
    State& s = state();
    {
      std::lock_guard lk(s.mu);
      s.what = "none";
      ++s.serving;
      while (s.abandoned.erase(s.serving)) ++s.serving;  // tickets whose waiters gave up
    }
    s.cv.notify_all();
  }

 private:
  //! Takes the lock (or a nested hold of it); empty on success, else why not.
  std::string acquire(const char* what, std::chrono::milliseconds timeout) {
    if (depth() > 0) {  // this thread holds it already
      ++depth();
      held_ = true;
      return {};
    }
    State& s = state();
    std::unique_lock lk(s.mu);
    s.longest = std::max(s.longest, timeout);
    const std::uint64_t ticket = s.next++;
    const auto bound = 2 * s.longest + std::chrono::seconds(1);
    if (!s.cv.wait_for(lk, bound, [&] { return s.serving == ticket; })) {
      s.abandoned.insert(ticket);
      return std::string("strata: ") + what + " could not start: another strata MPI operation (" + s.what +
             ") has held MPI for over " + std::to_string(bound.count()) +
             " ms (one thread at a time calls MPI: MPI_THREAD_SERIALIZED)";
    }
    s.what = what;
    depth() = 1;
    held_ = true;
    return {};
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::uint64_t next = 0, serving = 0;  // guarded by mu
    std::set<std::uint64_t> abandoned;     // guarded by mu
    std::chrono::milliseconds longest{0};  // guarded by mu
    const char* what = "none";             // guarded by mu
  };
  static State& state() {
    static State s;
    return s;
  }
  static int& depth() noexcept {
    thread_local int d = 0;
    return d;
  }
  bool held_ = false;

 public:
  //! Inside an operation's wait (bounded_wait.hpp, between two looks): when
  //! another thread waits for the lock, this thread hands it over and takes
  //! it back after the operations queued before it (their MPI calls then run
  //! between two of this wait's looks: a pipeline stage's send while its
  //! copies' gradient bucket is summed on a progress thread). The calls stay
  //! one thread at a time, and one communicator's operations stay in issue
  //! order (they run on one thread: progress.hpp). Nothing when this thread
  //! does not hold the lock or nobody waits. Bounded as taking it is: past
  //! the bound, CollectiveTimeout names the operation that kept it.
  static void let_others_in() {
    if (depth() == 0) return;
    State& s = state();
    std::unique_lock lk(s.mu);
    if (s.next == s.serving + 1) return;  // nobody else has asked
    const char* mine = s.what;
    s.what = "none";
    ++s.serving;
    while (s.abandoned.erase(s.serving)) ++s.serving;
    const std::uint64_t ticket = s.next++;
    s.cv.notify_all();
    const auto bound = 2 * s.longest + std::chrono::seconds(1);
    if (!s.cv.wait_for(lk, bound, [&] { return s.serving == ticket; })) {
      s.abandoned.insert(ticket);
      depth() = 0;  // not held any more: this thread's SerialMpi objects release nothing
      throw CollectiveTimeout(std::string("strata: ") + mine + " could not take MPI back: another strata MPI "
                              "operation (" + s.what + ") has held it for over " + std::to_string(bound.count()) +
                              " ms (one thread at a time calls MPI: MPI_THREAD_SERIALIZED)");
    }
    s.what = mine;
  }
};

//! How long MPI initialization may wait for the other ranks:
//! STRATA_MPI_INIT_TIMEOUT seconds (fractions allowed, > 0), else 120 s.
inline std::chrono::milliseconds init_timeout() {
  const char* env = std::getenv("STRATA_MPI_INIT_TIMEOUT");
  if (!env || !*env) return std::chrono::seconds(120);
  char* end = nullptr;
  const double s = std::strtod(env, &end);
  if (*end != '\0' || !std::isfinite(s) || s <= 0 || s > 604800)
    throw Error(std::string("strata: STRATA_MPI_INIT_TIMEOUT=\"") + env +
                "\" is not a number of seconds > 0 and at most 604800 (the deadline of MPI initialization)");
  return std::chrono::milliseconds(std::max<long long>(1, std::llround(s * 1000)));
}

//! This process's rank and the job's size as the launcher set them (no MPI
//! call: MPI is not initialized yet): "rank 1 of 2", or "this rank".
inline std::string launched_rank_words() {
  for (const auto& [rank, size] : {std::pair{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                   std::pair{"PMIX_RANK", "PMIX_SIZE"}, std::pair{"PMI_RANK", "PMI_SIZE"}})
    if (const char* r = std::getenv(rank)) {
      const char* n = std::getenv(size);
      return std::string("rank ") + r + (n ? std::string(" of ") + n : std::string());
    }
  return "this rank";
}

//! Runs `init` (MPI_Init_thread) under `deadline`: past it, a watchdog thread
//! prints one line naming this rank and _exit(1)s, since MPI offers no way to
//! leave a blocked MPI_Init (and the process cannot finalize what never
//! initialized).
template <class Init>
void init_with_deadline(std::chrono::milliseconds deadline, Init init) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&] {
    std::unique_lock lk(mu);
    if (cv.wait_for(lk, deadline, [&] { return done; })) return;
    std::fprintf(stderr,
                 "strata: %s: MPI initialization (MPI_Init_thread) did not return within %.3g s: it waits for "
                 "every rank of the job to start, and some rank has not (stopped, slow to start or gone); "
                 "exiting (STRATA_MPI_INIT_TIMEOUT sets this deadline in seconds)\n",
                 launched_rank_words().c_str(), static_cast<double>(deadline.count()) / 1000.0);
    std::fflush(stderr);
    ::_exit(1);
  });
  struct Disarm {  // on return and on a throw alike
    std::mutex& mu;
    std::condition_variable& cv;
    bool& done;
    std::thread& t;
    ~Disarm() {
      {
        std::lock_guard lk(mu);
        done = true;
      }
      cv.notify_one();
      t.join();
    }
  } disarm{mu, cv, done, watchdog};
  init();
}

class Runtime {
 public:
  Runtime() {
    int init = 0;
    MPI_Initialized(&init);
    if (!init) {
      int provided = 0;
      init_with_deadline(init_timeout(), [&] {
        check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
      });
      owner_ = true;
      if (provided < MPI_THREAD_SERIALIZED)
        throw Error("strata: this MPI library offers thread level " + std::to_string(provided) +
                    " but strata calls MPI from replica threads and needs MPI_THREAD_SERIALIZED");
    } else {
      int provided = 0;
      MPI_Query_thread(&provided);
      if (provided < MPI_THREAD_SERIALIZED)
        throw Error("strata: MPI was initialized with thread level " + std::to_string(provided) +
                    "; strata calls MPI from replica threads: initialize it with MPI_Init_thread and "
                    "MPI_THREAD_SERIALIZED (or let strata initialize it)");
    }
    // Nothing is left pending here: an MPI_Comm_idup of MPI_COMM_WORLD left in
    // flight until the exit (as this once did) shares the world's internal
    // non-blocking collectives with every later communicator creation, and
    // Open MPI 4.1 then sometimes never completed a later MPI_Comm_idup of the
    // world (a spurious CollectiveTimeout at 3 ranks). settle() meets the
    // other ranks with an MPI_Ibarrier on the world at exit instead.
  }
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  ~Runtime() {
    int fin = 0;
    MPI_Finalized(&fin);
    if (fin) return;
    if (owner_) {
      settle();
      MPI_Finalize();
    } else if (failed_.load()) {
      settle();  // the program finalizes MPI itself; still never hang there after a failure
    }
  }

  //! A collective or message failed (or timed out) in this process: the exit must not wait forever.
  void note_failure(std::chrono::milliseconds timeout) {
    std::lock_guard lk(mu_);
    failed_.store(true);
    exit_timeout_ = std::max(exit_timeout_, timeout);
  }
  [[nodiscard]] bool failed() const noexcept { return failed_.load(); }

 private:
  //! Every rank meets here before MPI_Finalize; after a failure, only for a
  //! bounded time, then MPI_Abort ends the job (a rank may be hung).
  //! The meeting is an MPI_Ibarrier on MPI_COMM_WORLD (strata itself never
  //! runs a collective on the world, only on its duplicates).
  void settle() {
    MPI_Request req = MPI_REQUEST_NULL;
    if (MPI_Ibarrier(MPI_COMM_WORLD, &req) != MPI_SUCCESS) return;
    const bool bounded = failed_.load();
    const auto deadline = std::chrono::steady_clock::now() + exit_timeout_;
    for (int i = 0;; ++i) {
      int done = 0;
      MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (done) return;
      if (bounded && std::chrono::steady_clock::now() > deadline) {
        int rank = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        std::fprintf(stderr,
                     "strata: rank %d: after a failed collective or message, not every rank reached the end of the program "
                     "within %lld ms; aborting the job\n",
                     rank, static_cast<long long>(exit_timeout_.count()));
        std::fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      if (i > 1000) std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  bool owner_ = false;
  std::atomic<bool> failed_{false};
  std::mutex mu_;
  std::chrono::milliseconds exit_timeout_{0};
};

//! The process's runtime, initializing MPI on first use.
inline Runtime& runtime() {
  static Runtime r;
  return r;
}

}  // namespace strata::detail::mpi
