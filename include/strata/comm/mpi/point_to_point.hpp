#pragma once
//! Point-to-point messages over MPI, bounded like the collectives. A message
//! is a 16-byte header (element count, dtype) followed by its data: in the
//! header's own message when both fit in 4 KiB (one eager message), else as
//! a second message the receiver posts for once it has read the header and
//! checked it against its buffer. So a receiver never takes data of a size or
//! type it did not expect: it raises CollectiveMismatch naming both sides.
//! Messages of one (source, destination, tag) arrive in the order they were
//! sent (MPI's non-overtaking rule; the header and data tags are derived from
//! the user's tag above the collectives' tags, so they never meet).
//!   detail::mpi::send_message(exchange, data, n, /*peer=*/1, /*tag=*/7);
//!   detail::mpi::recv_message(exchange, data, n, /*peer=*/0, /*tag=*/7);
//! No reduction: the bytes arrive as sent.
//! Headerless messages (the end of this header) are for a protocol that
//! frames its own, as the parameter servers' does: one MPI message each,
//! started without waiting, waited for through the one bounded wait
//! (bounded_wait.hpp), from several threads at once.

#include <algorithm>
#include <array>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <strata/comm/mpi/bounded_wait.hpp>
#include <strata/comm/mpi/contract.hpp>
#include <strata/comm/mpi/exchange.hpp>
#include <strata/comm/mpi/handles.hpp>
#include <strata/comm/mpi/mpi.hpp>
#include <strata/comm/mpi/notices.hpp>
#include <strata/comm/mpi/runtime.hpp>

namespace strata::detail::mpi {

//! What travels ahead of a point-to-point message's data.
struct MessageHeader {
  std::uint64_t count = 0;
  std::uint8_t dtype = 0;
  std::uint8_t fused = 0;  // the data follows in this same message
  std::uint8_t pad[6] = {};
};
static_assert(sizeof(MessageHeader) == 16);

inline int header_tag(int tag) noexcept { return p2p_tag_base + 2 * tag; }
inline int data_tag(int tag) noexcept { return p2p_tag_base + 2 * tag + 1; }

//! The largest tag a user may give: two MPI tags per user tag above the
//! collectives' own, under the MPI library's MPI_TAG_UB (at least 32767).
inline int max_user_tag(MPI_Comm comm) {
  int* ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(comm, MPI_TAG_UB, &ub, &flag);
  const int tag_ub = flag && ub ? *ub : 32767;
  return (tag_ub - p2p_tag_base - 1) / 2;
}

//! Throws strata::Error unless `peer` is another rank of `ex` and `tag` is usable.
inline void check_endpoint(const Exchange& ex, const char* call, int peer, int tag) {
  const std::string where = std::string("strata: ") + call + "(peer " + std::to_string(peer) + ", tag " +
                            std::to_string(tag) + ") on rank " + std::to_string(ex.rank()) + ": ";
  if (peer < 0 || peer >= ex.size())
    throw Error(where + "peer is not a rank of this communicator (ranks 0.." + std::to_string(ex.size() - 1) + ")");
  if (peer == ex.rank()) throw Error(where + "a rank cannot send to or receive from itself; copy the data instead");
  if (tag < 0) throw Error(where + "tags must be 0 or more");
  if (const int top = max_user_tag(ex.comm()); tag > top)
    throw Error(where + "tags must be at most " + std::to_string(top) + " (this MPI library's MPI_TAG_UB, halved)");
}

//! Checks a send's endpoint, starts its deadline and returns its header.
template <WireElement T>
MessageHeader begin_send(Exchange& ex, std::size_t n, int peer, int tag) {
  check_endpoint(ex, "send", peer, tag);
  ex.begin_message(Activity{.kind = Activity::send, .peer = peer, .tag = tag, .count = n, .dtype = dtype_name<T>()});
  MessageHeader h{.count = n, .dtype = dtype_code<T>()};
  h.fused = sizeof(h) + n * sizeof(T) <= Exchange::fused_max ? 1 : 0;
  return h;
}
//! Starts sending `box` (the header, with the data when fused) and, when
//! not fused, the `n` elements at `data` after it, into `sends`.
template <WireElement T>
void post_message(Exchange& ex, const MessageHeader& h, const std::byte* box, const T* data, std::size_t n, int peer,
                  int tag, Pending& sends) {
  sends.reqs.assign(h.fused ? 1 : 2, MPI_REQUEST_NULL);
  const std::size_t box_bytes = sizeof(h) + (h.fused ? n * sizeof(T) : 0);
  check(MPI_Isend(box, static_cast<int>(box_bytes), MPI_BYTE, peer, header_tag(tag), ex.comm(), &sends.reqs[0]),
        "MPI_Isend");
  if (!h.fused)
    check(MPI_Isend(data, as_count(n, "send"), datatype<T>(), peer, data_tag(tag), ex.comm(), &sends.reqs[1]),
          "MPI_Isend");
}
//! "rank 1 did not take the message (no recv(from rank 0, tag 7) matched it)".
inline std::string not_taken(const Exchange& ex, int peer, int tag) {
  return "rank " + std::to_string(peer) + " did not take the message (no recv(from rank " + std::to_string(ex.rank()) +
         ", tag " + std::to_string(tag) + ") matched it)";
}

//! Sends `n` elements at `data` to `peer` under `tag`; returns once the
//! message has left this rank (at once up to 4 KiB, else when the peer's
//! recv takes it), or raises CollectiveTimeout after the timeout naming the
//! peer and the tag (the communicator is then unusable: the message may be
//! half delivered).
template <WireElement T>
void send_message(Exchange& ex, const T* data, std::size_t n, int peer, int tag) {
  const MessageHeader h = begin_send<T>(ex, n, peer, tag);
  std::array<std::byte, Exchange::fused_max> box;  // on the stack: a blocking send allocates nothing
  std::memcpy(box.data(), &h, sizeof(h));
  if (h.fused && n) std::memcpy(box.data() + sizeof(h), data, n * sizeof(T));
  Pending sends;
  post_message(ex, h, box.data(), data, n, peer, tag, sends);
  ex.wait_until([&] { return sends.test_all(); }, [&] { return not_taken(ex, peer, tag); });
}

//! A send in flight (send_message_async): a copy of the message, and its requests.
struct AsyncSend {
  std::vector<std::byte> box;  //!< the header, and the data when fused
  std::vector<std::byte> data;  //!< the data when not fused
  Pending sends;
  int peer = -1, tag = -1;
  std::size_t count = 0;
  std::string_view dtype{};
};

//! Starts sending a copy of `n` elements at `data` to `peer` under `tag`
//! and returns at once: the caller may reuse `data`. finish_sends waits for
//! it. Messages of one (peer, tag) still arrive in the order sent.
template <WireElement T>
AsyncSend send_message_async(Exchange& ex, const T* data, std::size_t n, int peer, int tag) {
  const MessageHeader h = begin_send<T>(ex, n, peer, tag);
  const std::size_t bytes = n * sizeof(T);
  AsyncSend a;
  a.peer = peer, a.tag = tag, a.count = n, a.dtype = dtype_name<T>();
  a.box.resize(sizeof(h) + (h.fused ? bytes : 0));
  std::memcpy(a.box.data(), &h, sizeof(h));
  if (h.fused && bytes) std::memcpy(a.box.data() + sizeof(h), data, bytes);
  if (!h.fused) a.data.assign(reinterpret_cast<const std::byte*>(data), reinterpret_cast<const std::byte*>(data) + bytes);
  post_message(ex, h, a.box.data(), reinterpret_cast<const T*>(a.data.data()), n, peer, tag, a.sends);
  return a;
}

//! Waits until every send of `pending` has left this rank, under the
//! deadline (CollectiveTimeout naming the first peer that took nothing);
//! empties `pending`.
inline void finish_sends(Exchange& ex, std::vector<AsyncSend>& pending) {
  std::size_t next = 0;
  while (next < pending.size()) {
    const AsyncSend& a = pending[next];
    ex.begin_message(Activity{.kind = Activity::send, .peer = a.peer, .tag = a.tag, .count = a.count, .dtype = a.dtype});
    ex.wait_until([&] { return pending[next].sends.test_all(); }, [&] { return not_taken(ex, a.peer, a.tag); });
    ++next;
  }
  pending.clear();
}

//! Receives into `n` elements at `data` the next message `peer` sent under
//! `tag`. Raises CollectiveMismatch when that message's count or dtype
//! differs (its data is taken and dropped: the communicator stays usable),
//! CollectiveTimeout when none arrives within the timeout (nothing was taken:
//! the communicator stays usable, and a message sent later goes to the next
//! recv of that peer and tag).
template <WireElement T>
void recv_message(Exchange& ex, T* data, std::size_t n, int peer, int tag) {
  check_endpoint(ex, "recv", peer, tag);
  ex.begin_message(Activity{.kind = Activity::recv, .peer = peer, .tag = tag, .count = n, .dtype = dtype_name<T>()});
  const std::string_view mine = dtype_name<T>();
  MPI_Message msg = MPI_MESSAGE_NULL;
  MPI_Status st;
  ex.wait_until([&] {
    int flag = 0;
    MPI_Improbe(peer, header_tag(tag), ex.comm(), &flag, &msg, &st);
    return flag != 0;
  }, [&] {
    return "rank " + std::to_string(peer) + " sent no message with tag " + std::to_string(tag) +
           " (no send(to rank " + std::to_string(ex.rank()) + ", tag " + std::to_string(tag) + ") matched this recv)";
  }, /*poison_on_timeout=*/false);
  int got = 0;
  MPI_Get_count(&st, MPI_BYTE, &got);
  std::array<std::byte, Exchange::fused_max> box;
  if (got < static_cast<int>(sizeof(MessageHeader)) || got > static_cast<int>(box.size())) {
    MPI_Mrecv(nullptr, 0, MPI_BYTE, &msg, MPI_STATUS_IGNORE);  // MPI truncates: the message is consumed
    ex.poison("a malformed message arrived");
    throw CollectiveError("strata: recv(from rank " + std::to_string(peer) + ", tag " + std::to_string(tag) +
                          ") on rank " + std::to_string(ex.rank()) + ": a malformed message header arrived (" +
                          std::to_string(got) + " bytes)");
  }
  check(MPI_Mrecv(box.data(), got, MPI_BYTE, &msg, MPI_STATUS_IGNORE), "MPI_Mrecv");
  MessageHeader h;
  std::memcpy(&h, box.data(), sizeof(h));
  const std::size_t bytes = n * sizeof(T);
  if (h.count != n || h.dtype != dtype_code<T>()) {
    if (!h.fused) {  // take and drop its data, so the next message of this tag is not mistaken for it
      std::vector<std::byte> sink;
      ex.wait_until([&] {
        int flag = 0, c = 0;
        MPI_Message dm;
        MPI_Status ds;
        MPI_Improbe(peer, data_tag(tag), ex.comm(), &flag, &dm, &ds);
        if (!flag) return false;
        MPI_Get_count(&ds, MPI_BYTE, &c);
        sink.resize(static_cast<std::size_t>(c));
        MPI_Mrecv(sink.data(), c, MPI_BYTE, &dm, MPI_STATUS_IGNORE);
        return true;
      }, [&] { return "rank " + std::to_string(peer) + " sent the header of a mismatched message but not its data"; });
    }
    throw CollectiveMismatch("strata: recv(from rank " + std::to_string(peer) + ", tag " + std::to_string(tag) +
                             ") on rank " + std::to_string(ex.rank()) + ": rank " + std::to_string(peer) + " sent " +
                             std::to_string(h.count) + " " + std::string(dtype_name_of(h.dtype)) +
                             " but this recv expects " + std::to_string(n) + " " + std::string(mine) +
                             " (a matching send and recv must agree on element count and type)");
  }
  if (h.fused) {
    if (bytes) std::memcpy(data, box.data() + sizeof(h), bytes);
    return;
  }
  Pending recvs;
  recvs.reqs.assign(1, MPI_REQUEST_NULL);
  check(MPI_Irecv(data, as_count(n, "recv"), datatype<T>(), peer, data_tag(tag), ex.comm(), &recvs.reqs[0]),
        "MPI_Irecv");
  ex.wait_until([&] { return recvs.test_all(); },
                [&] { return "rank " + std::to_string(peer) + " sent the header of its message but not its data"; });
}

//! The element types of headerless messages: strata's, and bytes (char).
template <class T>
concept Framed = WireElement<T> || std::same_as<T, char>;
template <Framed T>
MPI_Datatype framed_type() noexcept {
  if constexpr (std::same_as<T, char>) return MPI_BYTE;
  else return datatype<T>();
}

//! Headerless messages in flight: their requests, each one's peer, and the
//! buffers MPI reads or writes for them (on the heap). Destroyed with
//! requests still pending (a wait that timed out, a start that failed), it
//! gives them up with its buffers, kept for the life of the process (a late
//! peer's message lands there), as the collectives' are (activity.hpp).
struct Requests {
  std::vector<MPI_Request> reqs;
  std::vector<int> peers;
  std::vector<std::shared_ptr<const void>> keep;

  Requests() = default;
  Requests(Requests&& o) noexcept
      : reqs(std::exchange(o.reqs, {})), peers(std::exchange(o.peers, {})), keep(std::exchange(o.keep, {})) {}
  Requests& operator=(Requests&&) = delete;
  Requests(const Requests&) = delete;
  ~Requests() {
    if (std::all_of(reqs.begin(), reqs.end(), [](MPI_Request r) { return r == MPI_REQUEST_NULL; })) return;
    static auto* graveyard = new std::vector<Requests>;  // never destroyed: MPI may still use it at exit
    static auto* mu = new std::mutex;
    const std::lock_guard lk(*mu);
    graveyard->push_back(std::move(*this));
  }
};

//! A message probe_tagged found (matched: no other probe or receive can
//! take it), to be received whole with recv_probed.
struct Probed {
  int source = -1, tag = -1;  //!< its sender, and its tag as the protocol names it
  MPI_Status status{};
  MPI_Message handle = MPI_MESSAGE_NULL;
};

//! Starts sending `n` elements at `data` (alive until the wait) to `peer`
//! under `tag`, into `r`. The caller holds the MPI lock.
template <Framed T>
void post_send(MPI_Comm comm, Requests& r, const T* data, std::size_t n, int peer, int tag) {
  r.peers.push_back(peer);
  r.reqs.push_back(MPI_REQUEST_NULL);
  check(MPI_Isend(data, as_count(n, "a message"), framed_type<T>(), peer, data_tag(tag), comm, &r.reqs.back()),
        "MPI_Isend");
}
//! Starts receiving `peer`'s next message under `tag` into `n` elements at `data`.
template <Framed T>
void post_recv(MPI_Comm comm, Requests& r, T* data, std::size_t n, int peer, int tag) {
  r.peers.push_back(peer);
  r.reqs.push_back(MPI_REQUEST_NULL);
  check(MPI_Irecv(data, as_count(n, "a message"), framed_type<T>(), peer, data_tag(tag), comm, &r.reqs.back()),
        "MPI_Irecv");
}

//! A message from `source` (MPI_ANY_SOURCE: any rank) with one of `tags`,
//! if one has arrived: matched into `m`. The caller holds the MPI lock.
inline bool poll_tagged(MPI_Comm comm, int source, std::span<const int> tags, Probed& m) {
  for (const int tag : tags) {
    int flag = 0;
    check(MPI_Improbe(source, data_tag(tag), comm, &flag, &m.handle, &m.status), "MPI_Improbe");
    if (flag) {
      m.source = m.status.MPI_SOURCE;
      m.tag = tag;
      return true;
    }
  }
  return false;
}

//! The peers of `r`'s requests not complete, each once, in order (each
//! request tested once more: one complete now is freed, as after a wait).
inline std::vector<int> pending_peers(Requests& r, std::chrono::milliseconds timeout) {
  std::vector<int> who;
  const SerialMpi lock("a headerless message", timeout);
  for (std::size_t i = 0; i < r.reqs.size(); ++i) {
    int flag = 1;
    if (r.reqs[i] != MPI_REQUEST_NULL) MPI_Test(&r.reqs[i], &flag, MPI_STATUS_IGNORE);
    if (!flag && i < r.peers.size()) who.push_back(r.peers[i]);
  }
  std::sort(who.begin(), who.end());
  who.erase(std::unique(who.begin(), who.end()), who.end());
  return who;
}

//! Waits for every request of `r` within `timeout` (poll_until; the MPI
//! lock taken for each look, so other threads' messages go on meanwhile).
//! Past it: CollectiveTimeout(timed_out(the peers not complete)); the
//! requests not complete are given up with `r`'s buffers when `r` goes.
template <class Describe>
void await_requests(Requests& r, std::chrono::milliseconds timeout, Describe timed_out) {
  const auto done = [&] {
    const SerialMpi lock("a headerless message", timeout);
    int flag = 0;
    check(MPI_Testall(static_cast<int>(r.reqs.size()), r.reqs.data(), &flag, MPI_STATUSES_IGNORE), "MPI_Testall");
    return flag != 0;
  };
  if (poll_until(std::chrono::steady_clock::now() + timeout, Pace::patient, done, [] {})) return;
  const std::string what = timed_out(pending_peers(r, timeout));
  failure_seen(timeout);  // the job's exit must not wait for these peers forever; nothing live is freed
  throw CollectiveTimeout(what);
}

//! Waits within `timeout` for a message from `source` with one of `tags`
//! (poll_tagged); past it, CollectiveTimeout(timed_out({})).
template <class Describe>
Probed probe_tagged(MPI_Comm comm, int source, std::span<const int> tags, std::chrono::milliseconds timeout,
                    Describe timed_out) {
  Probed m;
  const auto found = [&] {
    const SerialMpi lock("a headerless message", timeout);
    return poll_tagged(comm, source, tags, m);
  };
  if (poll_until(std::chrono::steady_clock::now() + timeout, Pace::patient, found, [] {})) return m;
  const std::string what = timed_out(std::vector<int>{});
  failure_seen(timeout);
  throw CollectiveTimeout(what);
}

//! Receives the message `m` announced, whole, within `timeout` (a large
//! message's data may still have to come from its sender).
template <Framed T, class Describe>
std::vector<T> recv_probed(Probed& m, std::chrono::milliseconds timeout, Describe timed_out) {
  auto v = std::make_shared<std::vector<T>>();
  Requests r;
  {
    const SerialMpi lock("a headerless message", timeout);
    int n = 0;
    check(MPI_Get_count(&m.status, framed_type<T>(), &n), "MPI_Get_count");
    if (n < 0) {
      std::string unit = "bytes";
      if constexpr (!std::same_as<T, char>) unit = dtype_name<T>();
      throw CollectiveError("strata: rank " + std::to_string(m.source) + " sent a message of tag " +
                            std::to_string(m.tag) + " that is no whole number of " + unit);
    }
    v->resize(static_cast<std::size_t>(n));
    r.keep.push_back(v);  // MPI may still write it if the wait times out
    r.peers.push_back(m.source);
    r.reqs.push_back(MPI_REQUEST_NULL);
    check(MPI_Imrecv(v->data(), n, framed_type<T>(), &m.handle, &r.reqs.back()), "MPI_Imrecv");
  }
  await_requests(r, timeout, timed_out);
  return std::move(*v);
}

}  // namespace strata::detail::mpi
