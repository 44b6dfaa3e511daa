#pragma once
//! Point-to-point messages between the replicas (threads) of one team: one
//! inbox per destination replica, holding the messages sent to it in send
//! order and the receive it is waiting in, if any.
//!
//! Why this shape: a send must never wait for its receiver (a ring of
//! sends followed by receives would otherwise deadlock), so a send whose
//! receiver is not yet waiting copies into a buffer of the inbox (buffers are
//! recycled, so steady traffic allocates nothing). When the receiver already
//! waits (the common case for a pipeline's next stage), the sender copies
//! straight into the receiver's memory: one copy. Copies run outside the lock;
//! the message's place in the order is fixed before the copy starts.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/core/trace.hpp>

namespace strata::detail {

//! What one side of a point-to-point transfer offers: its element type, its
//! element count and its memory.
struct P2pBuffer {
  std::string_view dtype;
  std::size_t count = 0;
  std::size_t bytes = 0;
  const void* in = nullptr;  // send
  void* out = nullptr;       // recv
};

class Mailbox {
 public:
  explicit Mailbox(int p) : p_(p), inboxes_(std::make_unique<Inbox[]>(static_cast<std::size_t>(p))) {
    for (int d = 0; d < p; ++d) {
      inbox(d).queues.resize(static_cast<std::size_t>(p));
      inbox(d).sent_from.assign(static_cast<std::size_t>(p), 0);
    }
  }

  //! Called while no replica runs: drop what the previous run left unreceived
  //! (its buffers are kept for reuse) and its counters.
  void reset() {
    for (int d = 0; d < p_; ++d) {
      Inbox& box = inbox(d);
      std::lock_guard lk(box.mu);
      for (auto& q : box.queues) {
        for (auto& m : q) box.spare.push_back(std::move(m.buf));
        q.clear();
      }
      box.posted = Posted{};
      box.sent_from.assign(static_cast<std::size_t>(p_), 0);
    }
  }

  //! Wakes every waiting receiver, to look again at the team's state (an
  //! abort, a replica that returned).
  void wake_all() {
    for (int d = 0; d < p_; ++d) {
      Inbox& box = inbox(d);
      std::lock_guard lk(box.mu);
      box.cv.notify_all();
    }
  }

  //! Delivers `b` from `src` to `dst` with `tag`; never waits for `dst`.
  void send(int src, int dst, int tag, const P2pBuffer& b) {
    Inbox& box = inbox(dst);
    std::unique_lock lk(box.mu);
    ++box.sent_from[static_cast<std::size_t>(src)];
    Posted& w = box.posted;
    if (w.active && !w.claimed && w.src == src && w.tag == tag) {
      // The receiver waits for exactly this message (it found nothing queued
      // with this tag when it posted, so nothing is overtaken).
      w.claimed = true;
      w.sent = b;
      if (b.dtype == w.want.dtype && b.count == w.want.count) {
        void* to = w.want.out;
        lk.unlock();
        if (b.bytes) std::memcpy(to, b.in, b.bytes);
        lk.lock();
      }
      w.done = true;
      box.version.fetch_add(1, std::memory_order_relaxed);
      box.cv.notify_all();
      return;
    }
    // Buffered: reserve the message's place in the order, copy unlocked.
    const std::uint64_t id = ++box.next_id;
    auto& q = box.queues[static_cast<std::size_t>(src)];
    q.push_back(Message{.id = id, .tag = tag, .sent = b, .buf = take_spare(box, b.bytes), .ready = false});
    std::byte* to = q.back().buf.data.get();
    lk.unlock();
    if (b.bytes) std::memcpy(to, b.in, b.bytes);
    lk.lock();
    for (auto& m : q)
      if (m.id == id) m.ready = true;
    box.version.fetch_add(1, std::memory_order_relaxed);
    box.cv.notify_all();
  }

  //! Receives into `b` the next message from `src` to `dst` with `tag`.
  //! `team` answers aborted(), abort_reason() and departed(r); the receiver
  //! polls `spin` times (calling `relax`) before it blocks.
  template <class Team, class Relax>
  void recv(int dst, int src, int tag, const P2pBuffer& b, Team& team, std::chrono::milliseconds timeout, int spin,
            Relax relax) {
    Inbox& box = inbox(dst);
    auto& q = box.queues[static_cast<std::size_t>(src)];
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::optional<trace::Span> waiting;  // from the first time the message is not there
    std::unique_lock lk(box.mu);
    for (int spins = 0;; ++spins) {
      Posted& w = box.posted;
      if (w.active && w.done) {
        const P2pBuffer sent = w.sent;
        w = Posted{};
        check_match(dst, src, tag, b, sent);
        return;
      }
      if (!w.active) {
        auto it = std::find_if(q.begin(), q.end(), [&](const Message& m) { return m.tag == tag; });
        if (it != q.end() && it->ready) {
          Message m = std::move(*it);
          q.erase(it);  // keeps the order of the others; moves only small records
          if (m.sent.dtype == b.dtype && m.sent.count == b.count) {
            lk.unlock();
            if (b.bytes) std::memcpy(b.out, m.buf.data.get(), b.bytes);
            lk.lock();
          }
          box.spare.push_back(std::move(m.buf));
          check_match(dst, src, tag, b, m.sent);
          return;
        }
        if (it == q.end()) w = Posted{.active = true, .claimed = false, .done = false, .src = src, .tag = tag, .want = b, .sent = {}};
        // else: the matching message is being copied in; it is ours shortly.
      }
      if (w.active && w.claimed) {  // a sender is copying into our memory: never leave before it is done
        box.cv.wait(lk);
        continue;
      }
      const bool copying = !w.active;  // a matching message is being filled
      if (!copying) {
        if (team.aborted()) {
          w = Posted{};
          throw CollectiveAborted("strata: replica " + std::to_string(dst) + " abandoned recv from replica " +
                                  std::to_string(src) + " with tag " + std::to_string(tag) + " (" + describe(b) +
                                  ") because " + team.abort_reason());
        }
        if (team.departed(src)) {
          w = Posted{};
          throw CollectiveTimeout("strata: recv on replica " + std::to_string(dst) + " from replica " +
                                  std::to_string(src) + " with tag " + std::to_string(tag) + " (" + describe(b) +
                                  ") can never complete: replica " + std::to_string(src) +
                                  " returned from its function without sending it" + pending(box, src));
        }
        if (std::chrono::steady_clock::now() >= deadline) {
          w = Posted{};
          throw CollectiveTimeout("strata: recv on replica " + std::to_string(dst) + " from replica " +
                                  std::to_string(src) + " with tag " + std::to_string(tag) + " (" + describe(b) +
                                  ") timed out after " + std::to_string(timeout.count()) + " ms: replica " +
                                  std::to_string(src) + " sent no message with this tag" + pending(box, src));
        }
      }
      if (!waiting && trace::enabled())
        waiting.emplace("wait for message", trace::Category::Wait,
                        std::initializer_list<trace::Arg>{{"from", src}, {"tag", tag}});
      if (spins < spin) {  // the sender is likely about to come: poll (without the lock) before sleeping
        const std::uint64_t seen = box.version.load(std::memory_order_relaxed);
        lk.unlock();
        for (; spins < spin && box.version.load(std::memory_order_relaxed) == seen; ++spins) relax();
        lk.lock();
        continue;
      }
      box.cv.wait_for(lk, std::min<std::chrono::steady_clock::duration>(
                              std::max<std::chrono::steady_clock::duration>(deadline - std::chrono::steady_clock::now(),
                                                                            std::chrono::milliseconds(1)),
                              std::chrono::milliseconds(50)));
    }
  }

 private:
  //! A buffer that keeps its capacity across messages; never zero-filled.
  struct Bytes {
    std::unique_ptr<std::byte[]> data;
    std::size_t capacity = 0;
  };
  struct Message {
    std::uint64_t id = 0;
    int tag = 0;
    P2pBuffer sent;
    Bytes buf;
    bool ready = false;  // the sender finished copying in
  };
  //! The receive the destination waits in (at most one: a replica is one thread).
  struct Posted {
    bool active = false;
    bool claimed = false;  // a sender is copying into `want.out`
    bool done = false;     // delivered (or found mismatched: see `sent`)
    int src = -1;
    int tag = 0;
    P2pBuffer want;
    P2pBuffer sent;
  };
  struct alignas(64) Inbox {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<std::vector<Message>> queues;  // by source, in send order
    std::vector<Bytes> spare;                  // recycled message buffers
    std::vector<std::uint64_t> sent_from;      // messages sent this run, by source
    Posted posted;
    std::uint64_t next_id = 0;
    std::atomic<std::uint64_t> version{0};  // bumped on every delivery, for a polling receiver
  };

  Inbox& inbox(int r) noexcept { return inboxes_[static_cast<std::size_t>(r)]; }

  //! The smallest spare buffer that holds `bytes`, else the largest grown to it.
  static Bytes take_spare(Inbox& box, std::size_t bytes) {
    auto best = box.spare.end();
    for (auto it = box.spare.begin(); it != box.spare.end(); ++it)
      if (it->capacity >= bytes && (best == box.spare.end() || it->capacity < best->capacity)) best = it;
    if (best == box.spare.end() && !box.spare.empty())
      best = std::max_element(box.spare.begin(), box.spare.end(),
                              [](const Bytes& a, const Bytes& c) { return a.capacity < c.capacity; });
    Bytes out;
    if (best != box.spare.end()) {
      out = std::move(*best);
      *best = std::move(box.spare.back());
      box.spare.pop_back();
    }
    if (out.capacity < bytes) {
      out.data.reset(new std::byte[bytes]);  // default-initialized: the copy fills it
      out.capacity = bytes;
    }
    return out;
  }

  static std::string describe(const P2pBuffer& b) {
    return std::string(b.dtype) + ", " + std::to_string(b.count) + " elements";
  }

  static void check_match(int dst, int src, int tag, const P2pBuffer& want, const P2pBuffer& sent) {
    if (sent.dtype == want.dtype && sent.count == want.count) return;
    throw CollectiveMismatch("strata: recv on replica " + std::to_string(dst) + " from replica " +
                             std::to_string(src) + " with tag " + std::to_string(tag) + " expected " +
                             describe(want) + " but replica " + std::to_string(src) + " sent " + describe(sent) +
                             " (the message is dropped; sender and receiver must agree on size and type)");
  }

  //! "; replica 0 sent 3 message(s) to replica 1 this run, unreceived: tags 5, 6".
  std::string pending(const Inbox& box, int src) const {
    const auto& q = box.queues[static_cast<std::size_t>(src)];
    std::string s = "; replica " + std::to_string(src) + " sent " +
                    std::to_string(box.sent_from[static_cast<std::size_t>(src)]) + " message(s) to this replica this run";
    if (!q.empty()) {
      s += ", unreceived: tag(s)";
      for (std::size_t i = 0; i < q.size(); ++i) s += (i ? ", " : " ") + std::to_string(q[i].tag);
    }
    return s;
  }

  int p_;
  std::unique_ptr<Inbox[]> inboxes_;
};

}  // namespace strata::detail
