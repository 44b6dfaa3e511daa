#pragma once
//! The run's timeline, recorded: spans (a name, a category, a begin and an
//! end, up to three arguments) on per-thread tracks, written by a
//! trace::Session (core/trace_session.hpp) as trace-event JSON for
//! ui.perfetto.dev and chrome://tracing. Off unless a Session records:
//! a span then costs one relaxed atomic load and nothing else.
//!   strata::trace::Span s{"all_reduce", strata::trace::Category::Collective, {{"bytes", n}, {"algorithm", "ring"}}};
//!   strata::trace::name_thread("replica 1");   // this thread's track
//!
//! Each thread records into its own ring of fixed size (one producer, the
//! session's flusher the one consumer, no lock): memory stays bounded; a
//! thread that records more events between two flushes than its ring holds
//! loses the excess, counted and written into the trace. Names and string
//! arguments are not copied: they must live as long as the process (string
//! literals, or trace::intern's).

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_set>
#include <vector>

namespace strata::trace {

//! What a span is; the breakdown (Session::totals) sums each category's own time.
enum class Category : std::uint8_t {
  Step,        //!< one training step on the calling thread
  Data,        //!< taking the next batch
  Forward,     //!< a layer's forward, or a pipeline stage's forward of a micro-batch
  Backward,    //!< a layer's backward, or a stage's backward of a micro-batch
  Loss,        //!< the loss and metrics
  Collective,  //!< an all-reduce, reduce-scatter, all-gather, broadcast, send or receive
  Update,      //!< the optimizer's update
  Wait,        //!< waiting on a peer, a micro-batch, a staleness bound (args: what for)
  Checkpoint,  //!< writing or reading a checkpoint
  Callback,    //!< fit's callbacks and progress line
  Other,
};
inline constexpr std::size_t kCategories = 11;

//! The category's name in the trace ("cat").
[[nodiscard]] constexpr const char* category_name(Category c) noexcept {
  constexpr std::array<const char*, kCategories> names{"step", "data",   "forward", "backward",   "loss", "collective",
                                                       "update", "wait", "checkpoint", "callback", "other"};
  return names[static_cast<std::size_t>(c)];
}

//! One argument of a span: a key and an integer or a (process-lived) string.
struct Arg {
  const char* key = nullptr;
  bool is_text = false;
  std::int64_t number = 0;
  const char* text = nullptr;
  constexpr Arg() = default;
  template <class I>
    requires std::is_integral_v<I>
  constexpr Arg(const char* k, I v) : key(k), number(static_cast<std::int64_t>(v)) {}
  constexpr Arg(const char* k, const char* t) : key(k), is_text(true), text(t) {}
};

//! A recorded span ('X': complete, begin and end) or instant ('i': end unused).
struct Event {
  std::int64_t begin_ns = 0;
  std::int64_t end_ns = 0;
  const char* name = nullptr;
  Category cat = Category::Other;
  char phase = 'X';
  std::uint8_t nargs = 0;
  std::array<Arg, 3> args{};
};

//! Nanoseconds on the process's steady clock.
[[nodiscard]] inline std::int64_t now_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

//! A process-lived copy of `s` (for names made at run time: layer names, peers).
[[nodiscard]] inline const char* intern(std::string_view s) {
  static std::mutex m;
  static std::unordered_set<std::string>* table = new std::unordered_set<std::string>;  // never freed: process-lived
  std::lock_guard lock(m);
  return table->emplace(s).first->c_str();
}

//! One thread's events between flushes: a single-producer, single-consumer
//! ring. The thread pushes; the session's flusher drains. Also each
//! category's own time (a span's time less its children's) and span count.
class Ring {
 public:
  Ring(std::size_t capacity, int tid, std::string name) : slots_(capacity), tid_(tid), name_(std::move(name)) {}

  void push(const Event& e) noexcept {
    const std::uint64_t h = head_.load(std::memory_order_relaxed);
    if (h - tail_.load(std::memory_order_acquire) >= slots_.size()) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    slots_[h % slots_.size()] = e;
    head_.store(h + 1, std::memory_order_release);
  }
  //! The flusher's side: fn(event) for each event pushed since the last drain.
  template <class Fn>
  void drain(Fn&& fn) {
    const std::uint64_t h = head_.load(std::memory_order_acquire);
    std::uint64_t t = tail_.load(std::memory_order_relaxed);
    for (; t < h; ++t) fn(slots_[t % slots_.size()]);
    tail_.store(t, std::memory_order_release);
  }
  void add_self(Category c, std::int64_t ns) noexcept {
    self_ns_[static_cast<std::size_t>(c)].fetch_add(ns, std::memory_order_relaxed);
    count_[static_cast<std::size_t>(c)].fetch_add(1, std::memory_order_relaxed);
  }
  [[nodiscard]] std::int64_t self_ns(Category c) const noexcept {
    return self_ns_[static_cast<std::size_t>(c)].load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::int64_t count(Category c) const noexcept {
    return count_[static_cast<std::size_t>(c)].load(std::memory_order_relaxed);
  }
  [[nodiscard]] std::uint64_t take_dropped() noexcept { return dropped_.exchange(0, std::memory_order_relaxed); }
  [[nodiscard]] int tid() const noexcept { return tid_; }
  [[nodiscard]] std::string name() const {
    std::lock_guard lock(name_mutex_);
    return name_;
  }
  void rename(std::string n) {
    std::lock_guard lock(name_mutex_);
    name_ = std::move(n);
    renamed_.store(true, std::memory_order_release);
  }
  //! Whether the track's name changed since the last call (the flusher writes it again).
  [[nodiscard]] bool take_renamed() noexcept { return renamed_.exchange(false, std::memory_order_acq_rel); }

 private:
  std::vector<Event> slots_;
  std::atomic<std::uint64_t> head_{0};
  std::atomic<std::uint64_t> tail_{0};
  std::atomic<std::uint64_t> dropped_{0};
  std::array<std::atomic<std::int64_t>, kCategories> self_ns_{};
  std::array<std::atomic<std::int64_t>, kCategories> count_{};
  int tid_;
  mutable std::mutex name_mutex_;
  std::string name_;
  std::atomic<bool> renamed_{true};
};

namespace detail {

//! The recording session's side the hot path sees: on or off, and where a
//! thread's ring comes from (a new one per thread per session).
struct Recorder {
  std::atomic<bool> on{false};
  std::atomic<std::uint64_t> generation{0};  // bumped by every session start
  std::mutex m;
  std::vector<std::shared_ptr<Ring>> rings;  // this session's, in track order
  std::size_t capacity = 1 << 15;
  int next_tid = 0;
};
inline Recorder& recorder() noexcept {
  static Recorder* r = new Recorder;  // never freed: threads may outlive static destruction
  return *r;
}

struct ThreadState {
  std::uint64_t generation = ~std::uint64_t{0};
  std::shared_ptr<Ring> ring;
  std::string name;         // set by name_thread; survives sessions
  struct Open* open = nullptr;  // the innermost open span on this thread
};
inline ThreadState& thread_state() noexcept {
  thread_local ThreadState t;
  return t;
}

//! This thread's ring in the current session (made on first use).
inline Ring* ring() {
  Recorder& rec = recorder();
  ThreadState& ts = thread_state();
  const std::uint64_t g = rec.generation.load(std::memory_order_acquire);
  if (ts.generation == g && ts.ring) return ts.ring.get();
  std::lock_guard lock(rec.m);
  const int tid = rec.next_tid++;
  ts.ring = std::make_shared<Ring>(rec.capacity, tid, ts.name.empty() ? "thread " + std::to_string(tid) : ts.name);
  ts.generation = g;
  rec.rings.push_back(ts.ring);
  return ts.ring.get();
}

//! An open span's link for the own-time bookkeeping: children add their time to it.
struct Open {
  Open* parent = nullptr;
  std::int64_t children_ns = 0;
  Event* event = nullptr;  // the span's, for annotate
};

}  // namespace detail

//! Whether a session records now (one relaxed load).
[[nodiscard]] inline bool enabled() noexcept { return detail::recorder().on.load(std::memory_order_relaxed); }

//! Names this thread's track ("caller", "replica 1", "stage 2"): kept for
//! the thread's life, across sessions.
inline void name_thread(std::string name) {
  detail::ThreadState& ts = detail::thread_state();
  ts.name = std::move(name);
  if (ts.ring && ts.generation == detail::recorder().generation.load(std::memory_order_acquire))
    ts.ring->rename(ts.name);
}
//! This thread's track name ("" if never named).
[[nodiscard]] inline const std::string& thread_name() noexcept { return detail::thread_state().name; }

//! Adds an argument to this thread's innermost open span (what is known
//! only inside: the algorithm an automatic choice took); ignored past three.
inline void annotate(Arg a) noexcept {
  if (!enabled()) return;
  detail::Open* o = detail::thread_state().open;
  if (o && o->event && o->event->nargs < o->event->args.size()) o->event->args[o->event->nargs++] = a;
}

//! Records an instant ('i') event on this thread's track.
inline void instant(const char* name, Category cat, std::initializer_list<Arg> args = {}) {
  if (!enabled()) return;
  Event e;
  e.begin_ns = e.end_ns = now_ns();
  e.name = name;
  e.cat = cat;
  e.phase = 'i';
  for (const Arg& a : args)
    if (e.nargs < e.args.size()) e.args[e.nargs++] = a;
  detail::ring()->push(e);
}

//! A span from its construction to its destruction (or end()), on this
//! thread's track. Nested spans nest in the trace; each category's own
//! time (less nested spans) is summed for the breakdown.
class Span {
 public:
  Span(const char* name, Category cat, std::initializer_list<Arg> args = {}) noexcept {
    if (!enabled()) return;
    active_ = true;
    e_.name = name;
    e_.cat = cat;
    for (const Arg& a : args)
      if (e_.nargs < e_.args.size()) e_.args[e_.nargs++] = a;
    detail::ThreadState& ts = detail::thread_state();
    open_.parent = ts.open;
    open_.event = &e_;
    ts.open = &open_;
    e_.begin_ns = now_ns();
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  ~Span() { end(); }

  //! Adds an argument known only later (for example what a wait got); ignored past three.
  void arg(Arg a) noexcept {
    if (active_ && e_.nargs < e_.args.size()) e_.args[e_.nargs++] = a;
  }
  //! Ends the span now (the destructor then does nothing).
  void end() noexcept {
    if (!active_) return;
    active_ = false;
    e_.end_ns = now_ns();
    detail::ThreadState& ts = detail::thread_state();
    ts.open = open_.parent;
    const std::int64_t dur = e_.end_ns - e_.begin_ns;
    if (open_.parent) open_.parent->children_ns += dur;
    if (!enabled()) return;  // the session ended while the span was open
    try {
      Ring* r = detail::ring();
      r->add_self(e_.cat, dur - open_.children_ns);
      r->push(e_);
    } catch (...) {  // no memory for a ring: the span is lost, the run is not
    }
  }

 private:
  bool active_ = false;
  Event e_;
  detail::Open open_;
};

}  // namespace strata::trace
