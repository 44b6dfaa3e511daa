#pragma once
//! What model code needs from a parameter-server strategy, whatever carries
//! it (threads in one process, or MPI ranks): variables placed on the
//! servers with their optimizer, workers pulling and pushing them, and a
//! coordinator handing training steps to workers. strata/nn's Sequential
//! trains through this interface, so the same model code runs on both.
//!   rt.create_variables(shapes, init, update);        // every process
//!   rt.set_step([&](int w, const strata::StepInput& in) { return train(w, in); });
//!   auto out = rt.schedule({x, y, step});  rt.join();  // the chief

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include <strata/ps/coordinator.hpp>
#include <strata/ps/partitioner.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata {

//! A training step's input, as the chief hands it to a worker: one batch.
struct StepInput {
  Tensor<float> x, y;
  std::int64_t iteration = 0;  //!< the step's number (keys dropout)
};

//! What a worker reports back from a step.
struct StepOutput {
  double loss = 0;               //!< sum of the batch's per-example losses
  std::vector<double> metrics;   //!< each metric's sum over the batch
  std::size_t rows = 0;
};

//! The servers' update of a shard: w -= f(g), with `offset` the shard's
//! first element among all (for per-element optimizer state) and `step`
//! the updates the shard has had before.
using ServerUpdate = std::function<void(std::span<float> w, std::span<const float> g, std::size_t offset,
                                        std::uint64_t step)>;

//! The servers' access to their optimizer's state (the slots of the
//! ServerUpdate's optimizer), for checkpoints across processes: `read`
//! copies the elements `ranges` (among all variables) of each of the
//! `slots` slots into `out`, the ranges end to end, slot after slot; `write`
//! sets them from `in`, laid out the same. Made on every rank with the
//! ServerUpdate; on the chief it holds the state between training runs.
//!   rt.set_server_state({.slots = 2, .read = read_slices, .write = write_slices});
struct ServerState {
  std::size_t slots = 0;
  std::function<void(std::span<const Range> ranges, std::span<float> out)> read;
  std::function<void(std::span<const Range> ranges, std::span<const float> in)> write;
};

//! How a variable is split into shards: shards for (shape, element bytes).
using PartitionerFn = std::function<std::size_t(const Shape&, std::size_t)>;

//! The options of ParameterServerStrategy, in one process or over MPI.
struct ParameterServerOptions {
  int workers = 2;  //!< worker threads (in one process; over MPI the worker ranks)
  int servers = 1;  //!< parameter servers (in one process; over MPI the server ranks)
  //! Steps a worker may run ahead of the slowest live one: 0 synchronous
  //! rounds (the round's gradients averaged, applied once), k bounded, none
  //! fully asynchronous.
  std::optional<std::uint64_t> staleness = std::nullopt;
  //! Shards per variable; default: shards of at least 256 KiB, at most one per server.
  PartitionerFn partitioner = {};
  //! Bound on every wait (staleness, a worker's reply, a server's).
  std::chrono::milliseconds timeout{60000};
  //! Attempts per step before it fails for good (0: one per worker).
  int max_attempts = 0;
  //! Called for each worker failure (default: a line on stderr).
  std::function<void(const WorkerFailure&)> on_failure = {};
  //! Called on the worker before each step: instrumentation, fault
  //! injection (throw to fail the worker), or an artificial straggler.
  std::function<void(const WorkerContext&)> before_step = {};
};

class ParameterServerRuntime {
 public:
  enum class Role { Chief, Worker, Server };
  virtual ~ParameterServerRuntime() = default;

  [[nodiscard]] virtual Role role() const noexcept = 0;
  [[nodiscard]] virtual int num_workers() const noexcept = 0;
  [[nodiscard]] virtual int num_servers() const noexcept = 0;
  [[nodiscard]] virtual std::optional<std::uint64_t> staleness() const noexcept = 0;
  //! Whether the servers (and so the optimizer state) live in this process.
  [[nodiscard]] virtual bool servers_in_process() const noexcept { return false; }
  //! Each shard's version (updates applied: the optimizer's step there),
  //! where the servers are in this process; and setting them (checkpoints).
  [[nodiscard]] virtual std::vector<std::uint64_t> shard_versions() const { return {}; }
  virtual void set_shard_versions(std::span<const std::uint64_t> /*v*/) {
    throw Error("ParameterServerStrategy: the servers' versions live on other processes");
  }
  //! Whether the chief keeps a copy of the servers' optimizer state (in the
  //! ServerState's updater) and of their shard versions between training
  //! runs: across processes, gathered from the servers at each run's end and
  //! sent back at the next run's start, so checkpoints read and set it there.
  [[nodiscard]] virtual bool state_on_chief() const noexcept { return false; }
  //! The hook to the optimizer state the servers update (see ServerState);
  //! set after create_variables, on every rank. In one process: unused.
  virtual void set_server_state(ServerState /*state*/) {}

  //! Places variables of `shapes` (laid end to end in `init`) on the
  //! servers, sharded by the partitioner, updated by `update`; replaces any
  //! placed before. Collective over MPI (every rank, same shapes).
  virtual void create_variables(const std::vector<Shape>& shapes, const Tensor<float>& init, ServerUpdate update) = 0;
  //! The owner of the ServerUpdate (and of the step function) is going:
  //! nothing may call them any more. In one process a worker that ends an
  //! empty step after a run that failed can still complete a synchronous
  //! round, whose application calls the update; this waits for one under
  //! way and stops the rest (create_variables sets them up again).
  virtual void forget_update() {}
  //! Worker `w` reads every shard into `params` (all variables, end to end).
  virtual void pull(int w, std::span<float> params) = 0;
  //! Worker `w` sends its gradient of every variable (end to end).
  virtual void push(int w, std::span<const float> grad) = 0;
  //! The chief reads / sets the current value of every variable.
  virtual void read(std::span<float> out) = 0;
  virtual void assign(std::span<const float> in) = 0;

  //! The function a worker runs for a scheduled StepInput.
  virtual void set_step(std::function<StepOutput(int w, const StepInput&)> fn) = 0;
  //! The chief: hands `in` to a worker; the step's result comes back in the RemoteValue.
  virtual RemoteValue<StepOutput> schedule(StepInput in) = 0;
  //! The chief: waits for every scheduled step (errors as Coordinator::join).
  virtual void join() = 0;
  //! Workers and servers (over MPI) serve the chief until it ends the
  //! training run, and receive the trained value into `final_value`; the
  //! chief ends it, sending `final_value`. In one process: nothing to do.
  virtual void serve(std::span<float> /*final_value*/) {}
  virtual void end_training(std::span<const float> /*final_value*/) {}
  //! Failures seen so far (on the chief).
  [[nodiscard]] virtual std::vector<WorkerFailure> failures() const = 0;
  //! Pushes and pulls served by each server so far (on the chief in one process).
  [[nodiscard]] virtual std::vector<std::uint64_t> pushes_per_server() const = 0;
  [[nodiscard]] virtual std::vector<std::uint64_t> pulls_per_server() const = 0;
};

namespace detail {
//! `init` as one flat vector, checked to hold exactly the variables of `shapes`.
inline Tensor<float> flat_value(const std::vector<Shape>& shapes, const Tensor<float>& init) {
  std::size_t n = 0;
  for (const auto& s : shapes) n += s.elements();
  if (n != init.size())
    throw ShapeError("ParameterServerStrategy: variables of " + std::to_string(n) + " elements, initial value of " +
                     std::to_string(init.size()));
  Tensor<float> flat{Shape{n}};
  std::copy_n(init.data(), n, flat.data());
  return flat;
}

//! The shards of variables of `shapes` laid end to end, by `partition`
//! (default: MinSizePartitioner{256 KiB, servers}).
inline std::vector<Range> shard_layout(const std::vector<Shape>& shapes, const PartitionerFn& partition, int servers) {
  std::vector<Range> out;
  std::size_t base = 0;
  for (const Shape& s : shapes) {
    const std::size_t n =
        partition ? partition(s, sizeof(float))
                  : MinSizePartitioner{.max_shards = static_cast<std::size_t>(servers)}(s, sizeof(float));
    const std::size_t rows = rows_of(s);
    const std::size_t shards = std::max<std::size_t>(1, rows ? std::min(n, rows) : 1);
    const std::size_t row = rows ? s.elements() / rows : 0;
    for (const Range& r : partition_rows(s, shards)) out.push_back({base + r.begin * row, base + r.end * row});
    base += s.elements();
  }
  return out;
}
}  // namespace detail

}  // namespace strata
