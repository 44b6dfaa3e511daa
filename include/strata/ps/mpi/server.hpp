#pragma once
//! A parameter server's rank over MPI: it answers requests one at a time
//! until the chief ends training. Workers pull its shards and push gradients
//! to them (applied at once, or staged per worker at staleness 0); the chief
//! assigns the value at the start of a run, tells it to apply a completed
//! synchronous round or drop a failed worker's staged gradients, and reads
//! its shards at the end of a run; with them, the optimizer state of its
//! shards and their versions (sent at a run's start, read at its end:
//! checkpoints). The optimizer state lives here, in the ServerUpdate, and is
//! reached through the ServerState. Every wait is bounded by the link's timeout.
//!   detail::serve_as_server(link, layout, spec, store, update, state, sync, final_value);

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <strata/ps/cluster_spec.hpp>
#include <strata/ps/mpi/link.hpp>
#include <strata/ps/mpi/state_message.hpp>
#include <strata/ps/runtime.hpp>
#include <strata/ps/shard_store.hpp>

namespace strata::detail {

//! Serves this server's shards of `store` (a full-size store: only its own
//! shards are touched) until kEnd arrives; then holds the trained value the
//! chief sent in `final_value`. `state` reaches the optimizer state `update`
//! keeps (its slots over all variables; only this server's shards are read
//! and written).
inline void serve_as_server(PsLink& link, const ServerLayout& layout, const ClusterSpec& spec, ShardStore<float>& store,
                            const ServerUpdate& update, const ServerState& state, bool sync,
                            std::span<float> final_value) {
  const auto me = static_cast<std::size_t>(spec.server_index(link.rank()));
  const auto& mine = layout.of(me);
  const auto& shards = layout.shards();
  const std::vector<Range> ranges = server_ranges(layout, me);
  const std::size_t floats = state.slots * layout.count_of(me);
  for (;;) {
    auto st = link.probe(MPI_ANY_SOURCE, {kPull, kPush, kApply, kDrop, kAssign, kRead, kAssignState, kReadState, kEnd},
                         "requests");
    const int src = st.source;
    switch (st.tag) {
      case kPull: {
        (void)link.recv_all<float>(st);
        std::vector<float> out(layout.count_of(me));
        std::size_t at = 0;
        for (std::size_t i : mine) {
          store.pull(i, std::span<float>(out).subspan(at, shards[i].size()));
          at += shards[i].size();
        }
        link.send(std::move(out), src, kPullReply);
        break;
      }
      case kPush: {
        const auto g = link.recv_all<float>(st);
        if (g.size() != layout.count_of(me))
          throw ShapeError("ParameterServerStrategy: server rank " + std::to_string(link.rank()) + " got a push of " +
                           std::to_string(g.size()) + " elements from rank " + std::to_string(src) + ", it holds " +
                           std::to_string(layout.count_of(me)) + " (the same model on every rank?)");
        const int w = spec.worker_index(src);
        std::size_t at = 0;
        for (std::size_t i : mine) {
          const auto part = std::span<const float>(g).subspan(at, shards[i].size());
          if (sync) store.stage(i, w, part);
          else store.push(i, part, update);
          at += shards[i].size();
        }
        link.send_empty(src, kAck);
        break;
      }
      case kApply:
        (void)link.recv_all<float>(st);
        store.apply_staged(update);
        link.send_empty(src, kAck);
        break;
      case kDrop: {
        const auto w = link.recv_all<int>(st);
        if (!w.empty()) store.drop_staged(w[0]);
        link.send_empty(src, kAck);
        break;
      }
      case kAssign: {
        const auto v = link.recv_all<float>(st);
        store.assign(v);
        link.send_empty(src, kAck);
        break;
      }
      case kRead: {
        (void)link.recv_all<float>(st);
        auto part = layout.gather(me, store.unsynchronized_value().span());
        link.send(std::move(part), src, kReadReply);
        break;
      }
      case kAssignState: {
        const auto b = link.recv_all<char>(st);
        const auto part = unpack_state(b, mine.size(), floats,
                                       "the optimizer state rank " + std::to_string(src) + " sent server rank " +
                                           std::to_string(link.rank()));
        for (std::size_t k = 0; k < mine.size(); ++k) store.set_version(mine[k], part.versions[k]);
        if (floats) state.write(ranges, part.slots);
        link.send_empty(src, kAck);
        break;
      }
      case kReadState: {
        (void)link.recv_all<float>(st);
        ServerStatePart part{std::vector<std::uint64_t>(mine.size()), std::vector<float>(floats)};
        for (std::size_t k = 0; k < mine.size(); ++k) part.versions[k] = store.version(mine[k]);
        if (floats) state.read(ranges, part.slots);
        link.send(pack_state(part), src, kReadStateReply);
        break;
      }
      case kEnd: {
        const auto v = link.recv_all<float>(st);
        std::copy_n(v.data(), std::min(v.size(), final_value.size()), final_value.data());
        return;
      }
      default: break;
    }
  }
}

}  // namespace strata::detail
