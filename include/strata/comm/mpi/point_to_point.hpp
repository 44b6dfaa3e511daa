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

#include <array>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <strata/comm/mpi/contract.hpp>
#include <strata/comm/mpi/exchange.hpp>
#include <strata/comm/mpi/handles.hpp>
#include <strata/comm/mpi/mpi.hpp>

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

//! Sends `n` elements at `data` to `peer` under `tag`; returns once the
//! message has left this rank (at once up to 4 KiB, else when the peer's
//! recv takes it), or raises CollectiveTimeout after the timeout naming the
//! peer and the tag (the communicator is then unusable: the message may be
//! half delivered).
template <Element T>
void send_message(Exchange& ex, const T* data, std::size_t n, int peer, int tag) {
  check_endpoint(ex, "send", peer, tag);
  ex.begin_message(Activity{.kind = Activity::send, .peer = peer, .tag = tag, .count = n, .dtype = dtype_name<T>()});
  const std::size_t bytes = n * sizeof(T);
  MessageHeader h{.count = n, .dtype = dtype_code<T>()};
  h.fused = sizeof(h) + bytes <= Exchange::fused_max ? 1 : 0;
  std::array<std::byte, Exchange::fused_max> box;
  std::memcpy(box.data(), &h, sizeof(h));
  if (h.fused && bytes) std::memcpy(box.data() + sizeof(h), data, bytes);
  Pending sends;
  sends.reqs.assign(h.fused ? 1 : 2, MPI_REQUEST_NULL);
  check(MPI_Isend(box.data(), static_cast<int>(sizeof(h) + (h.fused ? bytes : 0)), MPI_BYTE, peer, header_tag(tag),
                  ex.comm(), &sends.reqs[0]),
        "MPI_Isend");
  if (!h.fused)
    check(MPI_Isend(data, as_count(n, "send"), datatype<T>(), peer, data_tag(tag), ex.comm(), &sends.reqs[1]),
          "MPI_Isend");
  ex.wait_until([&] { return sends.test_all(); }, [&] {
    return "rank " + std::to_string(peer) + " did not take the message (no recv(from rank " +
           std::to_string(ex.rank()) + ", tag " + std::to_string(tag) + ") matched it)";
  });
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
template <Element T>
AsyncSend send_message_async(Exchange& ex, const T* data, std::size_t n, int peer, int tag) {
  check_endpoint(ex, "send", peer, tag);
  ex.begin_message(Activity{.kind = Activity::send, .peer = peer, .tag = tag, .count = n, .dtype = dtype_name<T>()});
  const std::size_t bytes = n * sizeof(T);
  MessageHeader h{.count = n, .dtype = dtype_code<T>()};
  h.fused = sizeof(h) + bytes <= Exchange::fused_max ? 1 : 0;
  AsyncSend a;
  a.peer = peer, a.tag = tag, a.count = n, a.dtype = dtype_name<T>();
  a.box.resize(sizeof(h) + (h.fused ? bytes : 0));
  std::memcpy(a.box.data(), &h, sizeof(h));
  if (h.fused && bytes) std::memcpy(a.box.data() + sizeof(h), data, bytes);
  if (!h.fused) a.data.assign(reinterpret_cast<const std::byte*>(data), reinterpret_cast<const std::byte*>(data) + bytes);
  a.sends.reqs.assign(h.fused ? 1 : 2, MPI_REQUEST_NULL);
  check(MPI_Isend(a.box.data(), static_cast<int>(a.box.size()), MPI_BYTE, peer, header_tag(tag), ex.comm(),
                  &a.sends.reqs[0]),
        "MPI_Isend");
  if (!h.fused)
    check(MPI_Isend(a.data.data(), as_count(n, "send"), datatype<T>(), peer, data_tag(tag), ex.comm(),
                    &a.sends.reqs[1]),
          "MPI_Isend");
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
    ex.wait_until([&] { return pending[next].sends.test_all(); }, [&] {
      return "rank " + std::to_string(a.peer) + " did not take the message (no recv(from rank " +
             std::to_string(ex.rank()) + ", tag " + std::to_string(a.tag) + ") matched it)";
    });
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
template <Element T>
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
                             std::to_string(h.count) + " " + std::string(dtype_names[h.dtype & 3]) +
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

}  // namespace strata::detail::mpi
