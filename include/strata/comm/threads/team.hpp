#pragma once
//! detail::Team: the shared state of p CPU replicas (threads) in one
//! process, under every ThreadCommunicator: per-replica counters that act as
//! barriers, the published buffers and call descriptions, the waiting
//! discipline (spin briefly, then block with a deadline) that makes every
//! collective complete or raise an error naming the missing replicas, the
//! mailbox of point-to-point messages (mailbox.hpp) under the same abort
//! and timeout rules, and each replica's progress queue (comm/progress.hpp:
//! its non-blocking collectives, in issue order). Never a silent hang; a
//! replica that gives up never returns while another still touches its
//! buffers (the abort first, Dekker's pattern): docs/collectives.md, "Errors".
//!   detail::Team team{p, opts};                       // shared by the p replicas
//!   auto seq = team.enter(r, desc, in, out);  ...;  team.leave(r, seq, desc);

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <strata/comm/progress.hpp>
#include <strata/comm/threads/call.hpp>
#include <strata/comm/threads/mailbox.hpp>
#include <strata/comm/threads/options.hpp>
#include <strata/core/error.hpp>
#include <strata/core/trace.hpp>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace strata::detail {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

//! One replica's published state, alone on its cache lines.
struct alignas(64) Slot {
  std::atomic<std::uint64_t> arrived{0};   // collectives entered
  std::atomic<std::uint64_t> left{0};      // collectives completed
  std::atomic<std::uint64_t> progress{0};  // ring steps completed
  std::atomic<bool> departed{false};       // returned from its function
  // The collective whose arrival this replica saw complete: from then until
  // `left` or `quit` reaches it, it reads (and writes) the others' buffers.
  std::atomic<std::uint64_t> committed{0};
  std::atomic<std::uint64_t> quit{0};  // a collective it gave up on after committing or arriving
  std::atomic<std::uint64_t> payload{0};  // bytes of element data it handed to collectives (never reset)
  // Written by the owner before `arrived` is released, read by the others
  // until they have left the same collective.
  CallDesc desc;
  const void* in = nullptr;
  void* out = nullptr;
};

class Team {
 public:
  Team(int p, CommOptions opts)
      : p_(p), opts_(opts), slots_(std::make_unique<Slot[]>(static_cast<std::size_t>(std::max(p, 1)))),
        mailbox_(std::max(p, 1)), progress_(std::make_unique<ProgressQueue[]>(static_cast<std::size_t>(std::max(p, 1)))) {
    if (p < 1) throw Error("strata: a team needs at least one replica, got " + std::to_string(p));
    for (int r = 0; r < p; ++r)
      progress(r).configure("replica " + std::to_string(r), opts_.timeout,
                            [this, r](const std::string& why) { abort(r, why); });
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    // With a core per replica, the awaited replica is running: spin on the
    // line. With more replicas than cores it may be waiting for our core:
    // yield it a few times, then block.
    oversubscribed_ = static_cast<unsigned>(p) > cores;
    spin_ = opts_.spin >= 0 ? opts_.spin : (oversubscribed_ ? 100 : 20000);
  }

  [[nodiscard]] int size() const noexcept { return p_; }
  [[nodiscard]] const CommOptions& options() const noexcept { return opts_; }
  Slot& slot(int r) noexcept { return slots_[static_cast<std::size_t>(r)]; }
  //! Replica `r`'s operations in issue order (its non-blocking ones run there).
  ProgressQueue& progress(int r) noexcept { return progress_[static_cast<std::size_t>(r)]; }

  //! Called while no replica runs: forget the previous run entirely.
  void reset() {
    for (int r = 0; r < p_; ++r) {
      Slot& s = slot(r);
      s.arrived.store(0);
      s.left.store(0);
      s.progress.store(0);
      s.departed.store(false);
      s.committed.store(0);
      s.quit.store(0);
    }
    mailbox_.reset();
    std::lock_guard lk(mu_);
    aborted_.store(false);
    abort_reason_.clear();
  }

  //! Replica `r` failed: every replica waiting in a collective is released
  //! with CollectiveAborted.
  void abort(int r, const std::string& why) {
    {
      std::lock_guard lk(mu_);
      if (!aborted_.load()) abort_reason_ = "replica " + std::to_string(r) + " failed: " + why;
      aborted_.store(true);
    }
    cv_.notify_all();
    mailbox_.wake_all();
  }
  [[nodiscard]] bool aborted() const noexcept { return aborted_.load(); }
  //! The flag itself, for a waiter outside the team (an MPI leader) to watch.
  [[nodiscard]] const std::atomic<bool>& aborted_flag() const noexcept { return aborted_; }
  //! "replica 2 failed: <its error>", once aborted.
  [[nodiscard]] std::string abort_reason() {
    std::lock_guard lk(mu_);
    return abort_reason_;
  }
  [[nodiscard]] bool departed(int r) const noexcept { return slots_[static_cast<std::size_t>(r)].departed.load(); }

  //! Replica `r` returned from its function: a collective it never called
  //! can no longer complete, and waiters say so at once. What it left
  //! queued runs first (bounded: each operation is, and a failed replica's
  //! aborted the team), so that departed means done.
  void depart(int r) {
    progress(r).drain();
    slot(r).departed.store(true);
    notify();
    mailbox_.wake_all();  // a receiver waiting on `r` can stop waiting
  }

  //! Point-to-point: buffers `b` for `dst` (or copies it straight into the
  //! receive `dst` waits in); returns without waiting for `dst`.
  void send(int me, int dst, int tag, const P2pBuffer& b) { mailbox_.send(me, dst, tag, b); }
  //! Receives the next message from `src` with `tag` into `b`, or raises
  //! CollectiveMismatch / CollectiveTimeout / CollectiveAborted.
  void recv(int me, int src, int tag, const P2pBuffer& b) {
    mailbox_.recv(me, src, tag, b, *this, opts_.timeout, spin_, [this] {
      if (oversubscribed_) std::this_thread::yield();
      else cpu_relax();
    });
  }

  //! Enters collective call number (arrived + 1): publishes the call and its
  //! buffers, waits until every replica has entered it and checks that they
  //! agree. Returns the sequence number.
  std::uint64_t enter(int me, const CallDesc& d, const void* in, void* out) {
    Slot& s = slot(me);
    const std::uint64_t seq = s.arrived.load(std::memory_order_relaxed) + 1;
    s.desc = d;
    s.in = in;
    s.out = out;
    s.arrived.store(seq);
    notify();
    wait(me, seq, d, "enter", [&](int r) { return slot(r).arrived.load() >= seq; });
    s.committed.store(seq);  // from here on this replica touches the others' buffers...
    if (aborted_.load()) {   // ...unless one gave up meanwhile (it saw us, or we see it)
      const std::string why = abort_reason();
      give_up(me, seq);
      throw CollectiveAborted("strata: replica " + std::to_string(me) + " abandoned collective #" +
                              std::to_string(seq) + " " + d.str() + " because " + why);
    }
    {  // also with one replica: a root must still name a replica
      std::vector<const CallDesc*> all(static_cast<std::size_t>(p_));
      for (int r = 0; r < p_; ++r) all[static_cast<std::size_t>(r)] = &slot(r).desc;
      if (auto why = check_agreement(all); !why.empty()) {
        std::string msg = "strata: collective #" + std::to_string(seq) + ": " + why + ":";
        for (int r = 0; r < p_; ++r) msg += "\n  replica " + std::to_string(r) + " called " + slot(r).desc.str();
        // Every replica sees the same disagreement: leave together so that no
        // description is overwritten while another replica still reads it.
        leave(me, seq, d);
        throw CollectiveMismatch(msg);
      }
    }
    return seq;
  }

  //! Leaves collective `seq`: waits until every replica is done with the
  //! buffers of the others, so that none returns while its memory is read.
  void leave(int me, std::uint64_t seq, const CallDesc& d) {
    slot(me).left.store(seq);
    notify();
    wait(me, seq, d, "finish", [&](int r) { return slot(r).left.load() >= seq; });
  }

  //! Ring steps: publish that `me` completed `value` steps...
  void publish_progress(int me, std::uint64_t value) {
    slot(me).progress.store(value);
    notify();
  }
  //! ...and wait until peers `a` and `b` have completed at least `value`.
  void wait_progress(int me, int a, int b, std::uint64_t value, std::uint64_t seq, const CallDesc& d) {
    wait(me, seq, d, "step", [&](int r) { return (r != a && r != b) || slot(r).progress.load() >= value; });
  }

 private:
  void notify() {
    if (sleepers_.load() != 0) {
      std::lock_guard lk(mu_);
      cv_.notify_all();
    }
  }

  bool all_ready(auto& ready) {
    for (int r = 0; r < p_; ++r)
      if (!ready(r)) return false;
    return true;
  }

  template <class Ready>
  void wait(int me, std::uint64_t seq, const CallDesc& d, const char* phase, Ready ready) {
    for (int i = 0; i < spin_; ++i) {
      if (all_ready(ready)) return;
      if (aborted_.load(std::memory_order_relaxed)) break;
      if (oversubscribed_) std::this_thread::yield();
      else cpu_relax();
    }
    if (all_ready(ready)) return;
    trace::Span waiting{"wait for replicas", trace::Category::Wait, {{"for", phase}, {"call", seq}}};
    const auto deadline = std::chrono::steady_clock::now() + opts_.timeout;
    sleepers_.fetch_add(1);
    std::unique_lock lk(mu_);
    struct Guard {
      std::atomic<int>& n;
      ~Guard() { n.fetch_sub(1); }
    } guard{sleepers_};
    for (;;) {
      if (all_ready(ready)) return;
      if (aborted_.load()) {
        const std::string msg = "strata: replica " + std::to_string(me) + " abandoned collective #" +
                                std::to_string(seq) + " " + d.str() + " because " + abort_reason_;
        lk.unlock();
        give_up(me, seq);
        throw CollectiveAborted(msg);
      }
      std::string departed;
      for (int r = 0; r < p_; ++r)
        if (!ready(r) && slot(r).departed.load()) departed += (departed.empty() ? "" : ", ") + std::to_string(r);
      const auto now = std::chrono::steady_clock::now();
      if (!departed.empty() || now >= deadline) {
        const std::string msg =
            "strata: collective #" + std::to_string(seq) + " " + d.str() + " on replica " + std::to_string(me) +
            (!departed.empty() ? " can never complete: replica(s) " + departed +
                                     " returned from their function without calling it"
                               : " timed out after " + std::to_string(opts_.timeout.count()) +
                                     " ms waiting for the other replicas to " + phase) +
            progress_report(ready);
        lk.unlock();
        abort(me, msg);  // the others stop waiting for us, and stop touching our buffers
        give_up(me, seq);
        throw CollectiveTimeout(msg);
      }
      cv_.wait_for(lk, std::min<std::chrono::steady_clock::duration>(deadline - now, std::chrono::milliseconds(50)));
    }
  }

  //! Replica `me` gives up on collective `seq` (the team is aborted by
  //! now): it stops touching the others' buffers, then waits until no other
  //! replica that committed to `seq` still touches its own. They are copying
  //! or reducing (bounded work), or at a wait that sees the abort and gives
  //! up too, so this ends in their compute time; a bound far above it (ten
  //! deadlines, at least 5 minutes) ends the process with a message rather
  //! than return while memory this replica's caller frees is in use.
  void give_up(int me, std::uint64_t seq) {
    slot(me).quit.store(seq);
    notify();
    const auto touching = [&](int r) {
      const Slot& o = slot(r);
      return r != me && o.committed.load() >= seq && o.left.load() < seq && o.quit.load() < seq;
    };
    const auto limit = std::max<std::chrono::steady_clock::duration>(10 * opts_.timeout, std::chrono::minutes(5));
    const auto deadline = std::chrono::steady_clock::now() + limit;
    for (int r = 0; r < p_; ++r)
      for (int i = 0; touching(r); ++i) {
        if (std::chrono::steady_clock::now() >= deadline) {
          std::fprintf(stderr,
                       "strata: replica %d gave up on collective #%llu, but replica %d still uses its buffers "
                       "after %lld s; ending the process rather than free memory in use\n",
                       me, static_cast<unsigned long long>(seq), r,
                       static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(limit).count()));
          std::fflush(stderr);
          std::abort();
        }
        if (i < 64) std::this_thread::yield();
        else std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
  }

  //! "; missing: replica 1 (completed 4 collectives, entered 4)".
  template <class Ready>
  std::string progress_report(Ready& ready) {
    std::string s = "; missing:";
    for (int r = 0; r < p_; ++r)
      if (!ready(r))
        s += " replica " + std::to_string(r) + " (completed " + std::to_string(slot(r).left.load()) +
             " collectives, entered " + std::to_string(slot(r).arrived.load()) + ")";
    return s;
  }

  int p_;
  CommOptions opts_;
  int spin_;
  bool oversubscribed_;
  std::unique_ptr<Slot[]> slots_;
  Mailbox mailbox_;
  std::atomic<bool> aborted_{false};
  std::atomic<int> sleepers_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::string abort_reason_;  // guarded by mu_
  // Last: its threads end (after running what is queued) before the slots go.
  std::unique_ptr<ProgressQueue[]> progress_;
};

}  // namespace strata::detail
