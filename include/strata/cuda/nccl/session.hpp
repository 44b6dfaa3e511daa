#pragma once
//! The machinery under every call of an NcclCommunicator (private to
//! strata/comm/nccl): the checks before a call (an earlier failure, another
//! rank's, an asynchronous NCCL error, the buffers' memory), the host
//! contract, the enqueueing of NCCL calls on the stream with the wait for a
//! non-blocking call to be enqueued, the completion event, and what a
//! failure does: tell the other ranks, abort the NCCL communicator. Every
//! host wait behind the rank's NCCL work is bounded: its Watch is registered
//! on the stream, so Stream::synchronize and the staging copies' waits
//! (cuda/stream.hpp, cuda/staging.hpp) poll it as synchronize() and the
//! Works of the non-blocking calls do.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <strata/comm/work.hpp>
#include <strata/cuda/comm/event_work.hpp>
#include <strata/cuda/nccl/contract.hpp>
#include <strata/cuda/nccl/error.hpp>
#include <strata/cuda/nccl/rank.hpp>
#include <strata/comm/threads/call.hpp>
#include <strata/comm/threads/options.hpp>
#include <strata/cuda/stream.hpp>

namespace strata::detail::nccl {

//! What every host wait behind one rank's NCCL work polls: asynchronous
//! NCCL errors, the other ranks' failures, the deadline; and what a failure
//! does (tell the other ranks, abort the NCCL communicator). On the heap,
//! shared by the session and its Works (so it stays put while the
//! communicator moves), and registered on the stream while it lives.
class Watch final : public cuda::detail::HostWaitWatch {
 public:
  Watch(Rank* rank, Contract* contract, cudaStream_t stream, CommOptions opts)
      : rank_(rank), contract_(contract), stream_(stream), opts_(opts) {
    cuda::detail::watch_stream(stream_, this);
  }
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;
  ~Watch() override { cuda::detail::unwatch_stream(stream_, this); }

  //! "strata: NcclCommunicator rank 1 of 2 (GPU 1)", the start of every message.
  [[nodiscard]] std::string who() const {
    return "strata: NcclCommunicator rank " + std::to_string(rank_->rank()) + " of " +
           std::to_string(rank_->size()) + " (GPU " + std::to_string(rank_->device()) + ")";
  }
  [[nodiscard]] std::chrono::milliseconds timeout() const noexcept override { return opts_.timeout; }

  //! Between polls: an asynchronous NCCL error or another rank's failure
  //! ends the wait (the communicator is aborted). Once aborted, its kernels
  //! end, so the wait only runs out its deadline.
  void check(const std::string& what) override {
    if (rank_->comm() == nullptr) return;
    check_async(what);
    if (std::string why = contract_->failed_elsewhere(); !why.empty())
      raise(CollectiveAborted(who() + ": " + what + " abandoned " + last + " because " + why));
  }
  [[noreturn]] void expire(const std::string& what) override {
    raise(CollectiveTimeout(who() + ": " + what + " timed out after " + std::to_string(opts_.timeout.count()) +
                            " ms waiting for " + last +
                            " to complete on the GPU (a peer that never joined it on its GPU, a send or recv "
                            "whose peer never came, or earlier work on the stream that does not end); the NCCL "
                            "communicator is aborted"));
  }

  void check_async(const std::string& call) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(rank_->comm(), &state);
    if (r != ncclSuccess)
      raise(strata::nccl::error(r, "ncclCommGetAsyncError", rank_->rank(), rank_->device(), call));
    if (state != ncclSuccess && state != ncclInProgress)
      raise(strata::nccl::error(state, "(asynchronous, reported by ncclCommGetAsyncError)", rank_->rank(),
                                rank_->device(), call + (last.empty() ? "" : " after " + last)));
  }

  //! This rank failed: tell the others, then abort the NCCL communicator.
  void fail(const std::string& why) noexcept {
    if (!rank_->failure().empty() && rank_->comm() == nullptr) return;
    contract_->fail(why);
    rank_->abort(why);
  }
  template <class E>
  [[noreturn]] void raise(const E& e) {
    fail(e.what());
    throw e;
  }

  //! The last operation enqueued, for messages: "collective #3 all_reduce(...)".
  std::string last;

 private:
  Rank* rank_;
  Contract* contract_;
  cudaStream_t stream_;
  CommOptions opts_;
};

//! One NcclCommunicator's state: its rank (owned by a world communicator,
//! else by the team), its contract, stream, options and last operation.
class Session {
 public:
  Session(Rank* rank, std::unique_ptr<Rank> owned, std::unique_ptr<Contract> contract, cudaStream_t stream,
          CommOptions opts)
      : owned_(std::move(owned)), rank_(rank), contract_(std::move(contract)), stream_(stream), opts_(opts),
        done_(make_event(rank->device())), stash_(static_cast<std::size_t>(rank->size())) {
    check_stream(stream, rank->device());
    w_ = std::make_shared<Watch>(rank_, contract_.get(), stream_, opts_);
  }

  [[nodiscard]] const Rank& rank() const noexcept { return *rank_; }
  [[nodiscard]] ncclComm_t comm() const noexcept { return rank_->comm(); }
  [[nodiscard]] cudaStream_t stream() const noexcept { return stream_; }
  [[nodiscard]] const CommOptions& options() const noexcept { return opts_; }

  //! "strata: NcclCommunicator rank 1 of 2 (GPU 1)", the start of every message.
  [[nodiscard]] std::string who() const { return w_->who(); }
  static std::string collective(std::uint64_t seq, const CallDesc& d) {
    return "collective #" + std::to_string(seq) + " " + d.str();
  }
  static std::string message(const char* kind, int peer, int tag, std::size_t n, std::string_view dtype) {
    return std::string(kind) + " rank " + std::to_string(peer) + ", tag " + std::to_string(tag) + ", " +
           std::to_string(n) + " " + std::string(dtype) + ")";
  }

  //! Throws at once when the communicator cannot be used: its own earlier
  //! failure, another rank's, or an asynchronous NCCL error.
  void begin(const char* call) {
    if (!rank_->failure().empty())
      throw CollectiveAborted(who() + ": " + call + ": this communicator was aborted by an earlier failure: " +
                              rank_->failure() + " (make a new one to continue)");
    if (std::string why = contract_->failed_elsewhere(); !why.empty())
      raise(CollectiveAborted(who() + ": " + call + " abandoned because " + why));
    w_->check_async(call);
  }

  //! Error unless `bytes` at `p` are memory of this rank's GPU.
  void check_memory(const void* p, std::size_t bytes, const char* what) const {
    check_device_memory(p, bytes, rank_->device(), who(), what);
  }

  //! Error unless `peer` is another rank and `tag` >= 0.
  void check_peer(const char* call, int peer, int tag) const {
    const int me = rank_->rank(), p = rank_->size();
    if (peer == me || peer < 0 || peer >= p)
      throw Error(who() + ": " + call + " with peer " + std::to_string(peer) +
                  (peer == me ? " (this rank itself)" : " (not a rank)") + "; name another rank, 0 .. " +
                  std::to_string(p - 1));
    if (tag < 0) throw Error(who() + ": " + call + " with tag " + std::to_string(tag) + ": tags are >= 0");
  }

  //! The host contract; any failure but a disagreement (after which nothing
  //! was enqueued anywhere) makes the communicator unusable.
  std::uint64_t agree(const CallDesc& d, std::vector<std::size_t>* counts) {
    try {
      return contract_->agree(d, counts);
    } catch (const CollectiveMismatch&) {
      throw;
    } catch (const std::exception& e) {
      fail(e.what());
      throw;
    }
  }

  //! Announces a message to `peer` (the receiver checks it before NCCL moves it).
  void post(int peer, const Header& h) {
    try {
      contract_->post(peer, h);
    } catch (const std::exception& e) {
      fail(e.what());
      throw;
    }
  }

  //! The next header `peer` sent to this rank (one a recv with another tag
  //! left first). No header within the timeout: CollectiveTimeout naming
  //! `what`, and the communicator stays usable (nothing was enqueued).
  Header take(int peer, const std::string& what) {
    if (auto& s = stash_[static_cast<std::size_t>(peer)]; s) {
      const Header h = *s;
      s.reset();
      return h;
    }
    try {
      return contract_->take(peer);
    } catch (const CollectiveTimeout& e) {
      throw CollectiveTimeout(who() + ": " + what + " timed out after " + std::to_string(opts_.timeout.count()) +
                              " ms: rank " + std::to_string(peer) + " announced no message to this rank (" +
                              e.what() + ")");
    } catch (const std::exception& e) {
      fail(e.what());
      throw;
    }
  }
  //! Keeps `h` for the next recv from `peer`.
  void keep(int peer, const Header& h) { stash_[static_cast<std::size_t>(peer)] = h; }

  //! Takes a message of the wrong size or type into scratch memory, so that
  //! the sender's ncclSend is matched and later messages stay in step.
  void drain(const Header& h, int peer, const std::string& what) {
    const auto code = static_cast<std::size_t>(h.dtype & 3);
    const auto count = static_cast<std::size_t>(h.count);
    void* scratch = nullptr;
    enqueue(what + " (dropping the mismatched message)", "ncclRecv", [&] {
      cuda::check(cudaMallocAsync(&scratch, count * dtype_sizes[code], stream_), "cudaMallocAsync");
      return ncclRecv(scratch, count, dtype_types[code], peer, comm(), stream_);
    }, [&] { cuda::check(cudaFreeAsync(scratch, stream_), "cudaFreeAsync"); });
  }

  //! ncclGroupStart, `body` (its first failing status, else ncclSuccess),
  //! ncclGroupEnd: always closed, so that the thread's group depth is right.
  template <class Body>
  static ncclResult_t grouped(Body body) {
    const ncclResult_t start = ncclGroupStart();
    if (start != ncclSuccess) return start;
    const ncclResult_t inner = body();
    const ncclResult_t end = ncclGroupEnd();
    return inner != ncclSuccess && inner != ncclInProgress ? inner : end;
  }

  //! Runs `launch` (NCCL calls on the stream, returning NCCL's status),
  //! waits under the deadline until NCCL has enqueued them (a non-blocking
  //! call may go on in the background, and nothing else may touch the stream
  //! until it is done), runs `after` (stream work that must follow) and
  //! records the completion event. Any failure aborts the communicator.
  template <class Launch, class After>
  void enqueue(std::string what, const char* call, Launch launch, After after) {
    const auto deadline = Clock::now() + opts_.timeout;
    const int me = rank_->rank(), device = rank_->device();
    try {
      cuda::DeviceGuard guard{device};
      strata::nccl::started(launch(), call, me, device, what);
      const ncclResult_t state = poll_state(comm(), deadline);
      if (state == ncclInProgress)
        throw CollectiveTimeout(who() + ": NCCL did not finish enqueuing " + what + " (" + call + ") within " +
                                std::to_string(opts_.timeout.count()) + " ms");
      strata::nccl::check(state, call, me, device, what);
      after();
      done_.record(stream_);
    } catch (const std::exception& e) {
      fail(e.what());
      throw;
    }
    pending_ = true;
    ++enqueued_;
    w_->last = std::move(what);
  }
  template <class Launch>
  void enqueue(std::string what, const char* call, Launch launch) {
    enqueue(std::move(what), call, launch, [] {});
  }

  //! Waits for the last enqueued operation's event, polling NCCL's
  //! asynchronous errors and the other ranks' failures, under the timeout
  //! (the one bounded wait of cuda/stream.hpp, with this rank's Watch).
  void synchronize() {
    begin("synchronize");
    if (!pending_) return;
    poll(done_.get(), "synchronize");
    pending_ = false;
  }

  //! How many operations were enqueued so far (a non-blocking call compares
  //! before and after: nothing enqueued, as for 0 elements, is a completed Work).
  [[nodiscard]] std::uint64_t enqueued() const noexcept { return enqueued_; }

  //! The Work of the non-blocking form of `call`: an event recorded now,
  //! after the operation enqueued since `before` (none: a completed Work).
  Work work(const char* call, std::uint64_t before) {
    if (enqueued_ == before) return Work{};
    return Work(std::make_unique<cuda::detail::EventWork>(rank_->device(), stream_,
                                                          std::string(call) + " of " + w_->last, w_));
  }

 private:
  static cuda::Event make_event(int device) {
    cuda::DeviceGuard g{device};
    return cuda::Event{};
  }

  //! Error unless `stream` belongs to GPU `device` (where CUDA can tell).
  static void check_stream([[maybe_unused]] cudaStream_t stream, [[maybe_unused]] int device) {
#if CUDART_VERSION >= 12080
    if (stream == nullptr) return;  // the legacy default stream: the current device's
    int d = -1;
    if (const cudaError_t e = cudaStreamGetDevice(stream, &d); e != cudaSuccess) {
      cuda::detail::ignore(e);
      return;
    }
    if (d != device)
      throw Error("strata: NcclCommunicator on GPU " + std::to_string(device) + ": its stream belongs to GPU " +
                  std::to_string(d) + "; give each rank a stream of its own GPU (strata::cuda::Stream{device})");
#endif
  }

  //! Polls `event` under the timeout with this rank's Watch; a CUDA error
  //! aborts the communicator too.
  void poll(cudaEvent_t event, const char* what) {
    try {
      cuda::detail::poll_until_done([&] { return cudaEventQuery(event); }, {w_.get()}, what, "cudaEventQuery");
    } catch (const CudaError& e) {
      fail(e.what());
      throw;
    }
  }

  void fail(const std::string& why) noexcept { w_->fail(why); }
  template <class E>
  [[noreturn]] void raise(const E& e) {
    w_->raise(e);
  }

  std::unique_ptr<Rank> owned_;  // a world communicator's own rank (a team's ranks are the team's)
  Rank* rank_;
  std::unique_ptr<Contract> contract_;
  cudaStream_t stream_;
  CommOptions opts_;
  cuda::Event done_;      // recorded after the last operation enqueued
  bool pending_ = false;  // done_ not yet seen complete
  std::uint64_t enqueued_ = 0;
  std::shared_ptr<Watch> w_;  // never null but in a moved-from session
  std::vector<std::optional<Header>> stash_;  // per peer: a header a recv with another tag took
};

}  // namespace strata::detail::nccl
