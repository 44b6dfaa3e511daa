#pragma once
//! WorkerCommunicator: what the strategies across processes (workers) call
//! on the communicator that joins them, so that they are templates over it
//! and MPI is one model (comm/mpi/communicator.hpp; the MPI names,
//! MultiWorkerMirroredStrategy and MultiWorkerPipelineStrategy, are made in
//! strategy/mpi.hpp). A second transport is a new model plus its aliases.
//! Beyond AsyncCommunicator: Comm::Options and Comm::world(options),
//! split(color, key), send_async / finish_sends, set_interrupt(flag),
//! abort(why) and agreed_failure(), for float, double, std::int64_t, bf16
//! and fp16; what each must do: docs/collectives.md, "Between workers".
//!   template <strata::WorkerCommunicator Comm> class BasicMultiWorkerMirroredStrategy;  // MPI: comm/mpi/

#include <atomic>
#include <chrono>
#include <concepts>
#include <cstdint>
#include <span>
#include <string>

#include <strata/comm/communicator.hpp>
#include <strata/comm/reduce_op.hpp>
#include <strata/comm/threads/options.hpp>

namespace strata {

template <class C>
concept WorkerCommunicator =
    AsyncCommunicator<C> && std::movable<C> &&
    requires(C& c, const C& cc, const typename C::Options& o, std::span<double> d, std::span<std::int64_t> i,
             std::span<const std::int64_t> ci, std::span<const float> cf, const std::atomic<bool>* flag,
             const std::string& why) {
      { C::world(o) } -> std::same_as<C>;
      { cc.options() } -> std::convertible_to<const typename C::Options&>;
      { cc.options().timeout } -> std::convertible_to<std::chrono::milliseconds>;
      { c.split(0, 0) } -> std::same_as<C>;
      c.all_reduce(d, Sum);
      c.all_gather(ci, i);
      c.send_async(cf, 0, 0);
      c.finish_sends();
      c.set_interrupt(flag);
      c.abort(why);
      c.agreed_failure();
    };

//! Options of a strategy across workers joined by a `Comm`: across workers and within one.
template <WorkerCommunicator Comm>
struct BasicMultiWorkerOptions {
  typename Comm::Options across{};
  //! Among a worker's replicas. A replica waiting for its leader's
  //! exchange across workers waits up to this timeout plus across.timeout.
  CommOptions local{};
  [[nodiscard]] const typename Comm::Options& across_options() const noexcept { return across; }
};

//! The options BasicMultiWorkerMirroredStrategy<Comm> (strategy/) takes: BasicMultiWorkerOptions<Comm>,
//! unless a transport names its own beside its communicator (MPI's
//! MultiWorkerOptions, comm/mpi/communicator.hpp), with `local` and across_options().
template <class Comm>
struct multi_worker_options {
  using type = BasicMultiWorkerOptions<Comm>;
};

}  // namespace strata
