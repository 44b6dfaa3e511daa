#pragma once
//! BasicDeviceCommunicator<R>: one device replica's collectives and
//! send/recv with the other replicas of its BasicDeviceTeam<R> (virtual GPUs
//! on one device, GPUs with peer access, or stand-in GPUs), over DEVICE
//! memory, enqueued on the replica's stream: a call returns once the
//! replicas agreed and its work is queued, never waiting for the device.
//! strata::DeviceCommunicator is CUDA's (cuda/comm/communicator.hpp); the
//! host stand-in's (comm/device/host_runtime.hpp) runs the same logic in CI.
//! Models strata::AsyncCommunicator under the communicator contract;
//! all_reduce is bitwise the host's reduction in replica order. How each
//! call moves data, send/recv's message buffers (comm/device/message_buffers.hpp)
//! and the Work: docs/collectives.md, "On GPUs".
//!   auto comm = team.communicator(r, stream);
//!   comm.all_reduce(std::span<float>(grad, n), strata::Mean);   // grad: device memory of the replica's GPU
//!   strata::Work w = comm.all_reduce_async(std::span<float>(grad, n), strata::Sum);  ...;  w.wait();

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include <strata/comm/communicator.hpp>
#include <strata/comm/device/team.hpp>
#include <strata/comm/reduce_op.hpp>
#include <strata/core/concepts.hpp>
#include <strata/core/partition.hpp>

namespace strata {

//! One device replica's handle on its team's collectives. Not thread-safe
//! (one per replica thread); the team outlives it.
template <class R>
class BasicDeviceCommunicator {
 public:
  using Stream = typename R::Stream;

  BasicDeviceCommunicator(BasicDeviceTeam<R>& team, int rank, Stream stream)
      : team_(&team), rank_(rank), stream_(stream),
        device_(rank >= 0 && rank < team.size() ? team.devices()[static_cast<std::size_t>(rank)] : -1) {
    if (device_ < 0)
      throw Error("DeviceCommunicator: replica " + std::to_string(rank) + " is not in the team (it has " +
                  std::to_string(team.size()) + ")");
    if (const int sd = R::device_of(stream); sd >= 0 && sd != device_)
      throw Error("DeviceCommunicator: replica " + std::to_string(rank) + " runs on GPU " + std::to_string(device_) +
                  " but its stream belongs to GPU " + std::to_string(sd));
  }

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return team_->size(); }
  [[nodiscard]] int device() const noexcept { return device_; }
  [[nodiscard]] Stream stream() const noexcept { return stream_; }

  //! Every replica's host thread waits until all have arrived, and every
  //! replica's stream waits (on the device) for the work the others queued before it.
  void barrier() {
    const detail::CallDesc d{};
    collective(d, nullptr, nullptr, [](std::uint64_t) {});
  }

  //! In-place all-reduce of device memory: afterwards every replica's `data`
  //! holds the reduction of all replicas' `data`, bitwise identical on each.
  //!   comm.all_reduce(std::span<float>(grad, n), strata::Sum);
  template <WireElement T, ReduceOperation Op>
  void all_reduce(std::span<T> data, Op) {
    detail::check_op<Op, T>();
    all_reduce_impl<Op, T>(data.data(), data.data(), data.size(), data.size());
  }

  //! Out-of-place all-reduce: `out` (as many elements as `in`) receives the result.
  template <WireElement T, ReduceOperation Op>
  void all_reduce(std::span<const std::type_identity_t<T>> in, std::span<T> out, Op) {
    detail::check_op<Op, T>();
    all_reduce_impl<Op, T>(in.data(), out.data(), in.size(), out.size());
  }

  //! Copies `root`'s `data` into every replica's `data`.
  template <WireElement T>
  void broadcast(std::span<T> data, int root) {
    const std::size_t n = data.size();
    check_buffer(data.data(), n * sizeof(T), "broadcast", "buffer");
    const detail::CallDesc d{.kind = detail::CallKind::broadcast, .dtype = dtype_name<T>(), .in_count = n,
                             .out_count = n, .root = root, .has_op = false, .algorithm = "device_direct"};
    collective(d, data.data(), data.data(), [&](std::uint64_t) {
      if (rank_ == root || n == 0) return;
      wait_for(team_->ready(root));
      R::copy(data.data(), slot(root).in, n * sizeof(T), stream_, "broadcast");
    });
  }

  //! Reduces every replica's `in` (n elements each) and leaves shard r
  //! (strata::shard_range(n, size(), r) elements) in replica r's `out`.
  template <WireElement T, ReduceOperation Op>
  void reduce_scatter(std::span<const std::type_identity_t<T>> in, std::span<T> out, Op) {
    detail::check_op<Op, T>();
    check_buffer(in.data(), in.size_bytes(), "reduce_scatter", "input");
    check_buffer(out.data(), out.size_bytes(), "reduce_scatter", "output");
    const detail::CallDesc d{.kind = detail::CallKind::reduce_scatter, .op = Op::kind, .dtype = dtype_name<T>(),
                             .in_count = in.size(), .out_count = out.size(), .has_op = true,
                             .algorithm = "device_direct"};
    collective(d, in.data(), out.data(), [&](std::uint64_t) {
      const Range mine = shard_range(in.size(), static_cast<std::size_t>(size()), static_cast<std::size_t>(rank_));
      reduce(Op::kind, mine, out.data(), /*all_outputs=*/false);
    });
  }

  //! Concatenates every replica's `in` in replica order into every
  //! replica's `out` (inputs may differ in size; `out` holds their sum).
  template <WireElement T>
  void all_gather(std::span<const std::type_identity_t<T>> in, std::span<T> out) {
    check_buffer(in.data(), in.size_bytes(), "all_gather", "input");
    check_buffer(out.data(), out.size_bytes(), "all_gather", "output");
    const detail::CallDesc d{.kind = detail::CallKind::all_gather, .dtype = dtype_name<T>(), .in_count = in.size(),
                             .out_count = out.size(), .has_op = false, .algorithm = "device_direct"};
    collective(d, in.data(), out.data(), [&](std::uint64_t) {
      std::size_t at = 0;
      for (int s = 0; s < size(); ++s) {
        const std::size_t n = slot(s).desc.in_count;
        if (n) {
          if (s != rank_) wait_for(team_->ready(s));
          R::copy(out.data() + at, slot(s).in, n * sizeof(T), stream_, "all_gather");
        }
        at += n;
      }
    });
  }

  //! The non-blocking forms (see the top of this header): the blocking
  //! call, then a Work over the GPU's completion of it.
  //!   auto w = comm.reduce_scatter_async(grad, shard, strata::Sum);  w.wait();
  template <WireElement T, ReduceOperation Op>
  Work all_reduce_async(std::span<T> data, Op op) {
    all_reduce(data, op);
    return work("all_reduce_async", data.size());
  }
  template <WireElement T, ReduceOperation Op>
  Work all_reduce_async(std::span<const std::type_identity_t<T>> in, std::span<T> out, Op op) {
    all_reduce<T>(in, out, op);
    return work("all_reduce_async", in.size());
  }
  template <WireElement T>
  Work broadcast_async(std::span<T> data, int root) {
    broadcast(data, root);
    return work("broadcast_async", data.size());
  }
  template <WireElement T, ReduceOperation Op>
  Work reduce_scatter_async(std::span<const std::type_identity_t<T>> in, std::span<T> out, Op op) {
    reduce_scatter<T>(in, out, op);
    return work("reduce_scatter_async", in.size());
  }
  template <WireElement T>
  Work all_gather_async(std::span<const std::type_identity_t<T>> in, std::span<T> out) {
    all_gather<T>(in, out);
    return work("all_gather_async", out.size());
  }
  Work barrier_async() {
    barrier();
    return work("barrier_async", 0);
  }

  //! Sends `data` (device memory) to replica `peer` with `tag`: copies it
  //! into a pool buffer on this replica's stream and returns (the receiver
  //! copies it out when it receives). Sizes and types are checked by the
  //! receiver, which raises CollectiveMismatch naming both.
  //!   comm.send(std::span<const float>(act, n), comm.rank() + 1, /*tag=*/0);
  template <Element T>
  void send(std::span<const T> data, int peer, int tag) {
    check_peer("send", peer);
    check_buffer(data.data(), data.size_bytes(), "send", "buffer");
    typename R::Guard g{device_};
    Handoff h{.dtype = dtype_name<T>(), .count = data.size()};
    detail::MessageChannel<R>& channel = team_->channel(rank_, peer);
    if (!data.empty()) {
      h.buffer = channel.take(data.size_bytes());
      try {
        h.buffer->released.wait(stream_);  // the receiver of its previous message copied it out
        R::copy(h.buffer->data, data.data(), data.size_bytes(), stream_, "send");
        h.buffer->copied.record(stream_);
      } catch (...) {
        channel.give_back(h.buffer);
        throw;
      }
    }
    team_->host_team().send(rank_, peer, tag, handoff_buffer(&h, nullptr));
  }
  template <Element T>
  void send(std::span<T> data, int peer, int tag) {
    send(std::span<const T>(data), peer, tag);
  }

  //! Receives the next message from replica `peer` with `tag` into `data`
  //! (device memory), on this replica's stream.
  template <Element T>
  void recv(std::span<T> data, int peer, int tag) {
    check_peer("recv", peer);
    check_buffer(data.data(), data.size_bytes(), "recv", "buffer");
    Handoff h{};
    team_->host_team().recv(rank_, peer, tag, handoff_buffer(nullptr, &h));
    typename R::Guard g{device_};
    const bool match = h.dtype == dtype_name<T>() && h.count == data.size();
    if (h.buffer) {
      h.buffer->copied.wait(stream_);
      if (match)
        R::copy(data.data(), h.buffer->data, data.size_bytes(), stream_, "recv");
      h.buffer->released.record(stream_);  // the sender's next copy into it waits for this
      team_->channel(peer, rank_).give_back(h.buffer);
    }
    if (!match)
      throw CollectiveMismatch("strata: recv on replica " + std::to_string(rank_) + " from replica " +
                               std::to_string(peer) + " with tag " + std::to_string(tag) + " expected " +
                               std::string(dtype_name<T>()) + ", " + std::to_string(data.size()) +
                               " elements but replica " + std::to_string(peer) + " sent " + std::string(h.dtype) +
                               ", " + std::to_string(h.count) +
                               " elements (the message is dropped; sender and receiver must agree on size and type)");
  }

 private:
  //! What a send hands its receiver through the host mailbox: always taken
  //! by the receive (the mailbox matches every handoff), which checks the
  //! type and count itself, so a mismatched message's buffer is freed too.
  struct Handoff {
    std::string_view dtype;  // dtype_name<T>(): static storage
    std::size_t count = 0;
    detail::MessageBuffer<R>* buffer = nullptr;  // the pair's channel's, holding the data
  };
  static detail::P2pBuffer handoff_buffer(const Handoff* in, Handoff* out) {
    return {.dtype = "device handoff", .count = 1, .bytes = sizeof(Handoff), .in = in, .out = out};
  }

  detail::Slot& slot(int r) { return team_->host_team().slot(r); }

  //! A Work over the GPU's completion of what was just enqueued. The device
  //! team's work never waits for a peer on the GPU (the others' events are
  //! recorded before a call returns): only the deadline ends it, aborting the team.
  Work work(const char* call, std::size_t n) {
    return R::completion(device_, stream_, std::string(call) + " (" + std::to_string(n) + " elements)",
                         "strata: DeviceCommunicator replica " + std::to_string(rank_), team_->options().timeout,
                         [team = team_, r = rank_](const std::string& why) { team->abort(r, why); });
  }

  void check_peer(const char* what, int peer) const {
    if (peer < 0 || peer >= size() || peer == rank_)
      throw Error(std::string("DeviceCommunicator::") + what + " on replica " + std::to_string(rank_) +
                  ": peer " + std::to_string(peer) + " is not another replica of the team (it has " +
                  std::to_string(size()) + ")");
  }

  //! A collective's buffers are device memory of this replica's GPU (or,
  //! for a team over several GPUs, memory this GPU reaches): host memory or
  //! another GPU's memory is an Error naming the call, not a crash.
  void check_buffer(const void* p, std::size_t bytes, const char* call, const char* what) const {
    if (bytes == 0) return;
    R::check_memory(p, device_,
                    std::string("DeviceCommunicator::") + call + " on replica " + std::to_string(rank_) + " (GPU " +
                        std::to_string(device_) + "): the " + what);
  }

  template <ReduceOperation Op, WireElement T>
  void all_reduce_impl(const T* in, T* out, std::size_t n_in, std::size_t n_out) {
    check_buffer(in, n_in * sizeof(T), "all_reduce", "input");
    if (out != in) check_buffer(out, n_out * sizeof(T), "all_reduce", "output");
    const detail::CallDesc d{.kind = detail::CallKind::all_reduce, .op = Op::kind, .dtype = dtype_name<T>(),
                             .in_count = n_in, .out_count = n_out, .has_op = true, .algorithm = "device_direct"};
    collective(d, in, out, [&](std::uint64_t) {
      // Shards on 128-byte boundaries: 16-byte vector accesses in every shard.
      const Range mine = detail::aligned_range(n_in, static_cast<std::size_t>(size()),
                                               static_cast<std::size_t>(rank_), 128 / sizeof(T));
      reduce<T>(Op::kind, mine, nullptr, /*all_outputs=*/true);
    });
  }

  //! The reduce kernel over elements `r` of every replica's input, written
  //! to the same elements of every replica's output (all_outputs) or from
  //! the start of `own_out` (reduce_scatter's shard).
  template <WireElement T>
  void reduce(detail::OpKind op, Range r, T* own_out, bool all_outputs) {
    const int p = size();
    detail::ReplicaBuffers<T> b{};
    b.p = p;
    b.nout = all_outputs ? p : 1;
    for (int s = 0; s < p; ++s) {
      b.in[s] = static_cast<const T*>(slot(s).in) + r.begin;
      if (all_outputs) b.out[s] = static_cast<T*>(slot(s).out) + r.begin;
    }
    if (!all_outputs) b.out[0] = own_out;
    if (r.size() == 0) return;
    for (int s = 0; s < p; ++s)
      if (s != rank_) wait_for(team_->ready(s));
    R::reduce(stream_, op, b, r.size(), static_cast<std::size_t>(p));
  }

  void wait_for(const typename R::Event& e) { e.wait(stream_); }

  //! The frame of every collective: mark this replica's buffers ready, agree
  //! on the call (host), queue `work` (which waits on the device for the
  //! buffers it reads), mark it done, wait on the host until every replica
  //! queued its part, then make this stream wait until every replica's part
  //! is done (so that none writes its buffers while another still reads
  //! them). A failure between agreement and the end aborts the team, so the
  //! others stop waiting at once.
  template <class Work>
  void collective(const detail::CallDesc& d, const void* in, void* out, Work work) {
    typename R::Guard g{device_};
    detail::Team& t = team_->host_team();
    team_->ready(rank_).record(stream_);
    const std::uint64_t seq = t.enter(rank_, d, in, out);
    try {
      if (d.kind == detail::CallKind::barrier) {
        for (int s = 0; s < size(); ++s)
          if (s != rank_) wait_for(team_->ready(s));
      } else {
        work(seq);
      }
      team_->done(rank_).record(stream_);
    } catch (const std::exception& e) {
      team_->abort(rank_, e.what());
      settle(e);  // others' kernels may still touch our buffers: let them end first
      throw;
    }
    try {
      t.leave(rank_, seq, d);
    } catch (const std::exception& e) {
      settle(e);
      throw;
    }
    if (d.kind != detail::CallKind::barrier)
      for (int s = 0; s < size(); ++s)
        if (s != rank_) wait_for(team_->done(s));
  }

  //! After `failure` inside a collective: the team's queued work ends
  //! (BasicDeviceTeam::quiesce, bounded by the team's timeout), or, past the
  //! deadline, CollectiveTimeout naming `failure` and what is still pending
  //! (the caller rethrows `failure` otherwise).
  void settle(const std::exception& failure) {
    const std::string pending = team_->quiesce();
    if (!pending.empty())
      throw CollectiveTimeout(std::string(failure.what()) + "; after it, the team's GPU work did not end: " + pending);
  }

  BasicDeviceTeam<R>* team_;
  int rank_;
  Stream stream_;
  int device_;
};

}  // namespace strata
