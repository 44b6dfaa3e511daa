#pragma once
//! MpiParameterServers: the parameter server over MPI, ranks being the
//! chief, servers and workers of a ClusterSpec. The chief runs the training
//! loop and the same Coordinator as in one process, one Coordinator worker
//! per worker rank (ps/mpi/chief.hpp); workers pull, compute and push
//! (ps/mpi/worker.hpp); servers apply the gradients and hold the optimizer
//! state (ps/mpi/server.hpp). Between runs the chief holds the truth
//! (values, optimizer state, shard versions), which checkpoints save. Every
//! wait is bounded (CollectiveTimeout naming who did not answer); a dead
//! worker process ends the job (no ULFM). docs/strategies/parameter_server.md.
//!   strata::MpiParameterServers rt{strata::ClusterSpec::from_counts(1, world_size), {.staleness = 1}};
//!   strata::ParameterServerStrategy s{rt};   // then the same model code as in one process

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <strata/comm/mpi/fingerprint.hpp>
#include <strata/comm/mpi/mpi.hpp>
#include <strata/ps/cluster_spec.hpp>
#include <strata/ps/mpi/chief.hpp>
#include <strata/ps/mpi/link.hpp>
#include <strata/ps/mpi/server.hpp>
#include <strata/ps/mpi/worker.hpp>
#include <strata/ps/runtime.hpp>
#include <strata/ps/shard_store.hpp>

namespace strata {

//! ParameterServerRuntime over the ranks of MPI_COMM_WORLD (see the file comment).
class MpiParameterServers final : public ParameterServerRuntime, public detail::RunAgreement {
 public:
  //! This process's part in `spec` (of MPI_COMM_WORLD). `o.workers` and
  //! `o.servers` are taken from the spec. A spec wrong in itself (a rank
  //! with no role or two) is refused at once, before any collective (a rank
  //! that threw after one could abandon a peer still in it: making the link
  //! is one). Collective:
  //! then every rank agrees on the cluster (its roles and options,
  //! cluster_fields()), before anything could wait on a rank that sees
  //! another cluster; a rank that differs raises RunMismatch on every rank,
  //! naming it and the field.
  MpiParameterServers(ClusterSpec spec, ParameterServerOptions o)
      : spec_(valid_for_world(std::move(spec))), o_(std::move(o)), link_(MPI_COMM_WORLD, o_.timeout) {
    detail::mpi::agree_on_run(link_, cluster_fields(), "cluster");
    o_.workers = static_cast<int>(spec_.workers.size());
    o_.servers = static_cast<int>(spec_.servers.size());
    const auto r = spec_.role_of(link_.rank());
    role_ = r == ClusterSpec::Role::Chief ? Role::Chief : r == ClusterSpec::Role::Server ? Role::Server : Role::Worker;
    link_.set_role_name(role_ == Role::Chief ? "chief" : role_ == Role::Server ? "server" : "worker");
    {
      std::vector<std::string> roles(static_cast<std::size_t>(link_.size()));
      const auto name = [&](int rank, std::string what) {
        if (rank >= 0 && static_cast<std::size_t>(rank) < roles.size())
          roles[static_cast<std::size_t>(rank)] = std::move(what);
      };
      name(spec_.chief, "chief");
      for (std::size_t i = 0; i < spec_.servers.size(); ++i) name(spec_.servers[i], "server " + std::to_string(i));
      for (std::size_t i = 0; i < spec_.workers.size(); ++i) name(spec_.workers[i], "worker " + std::to_string(i));
      link_.set_role_names(std::move(roles));
    }
    if (role_ == Role::Chief)
      chief_ = std::make_unique<detail::MpiChief>(link_, spec_, o_, layout_, value_, state_, versions_);
  }
  MpiParameterServers(const MpiParameterServers&) = delete;
  MpiParameterServers& operator=(const MpiParameterServers&) = delete;
  ~MpiParameterServers() override { chief_.reset(); }  // its threads stop before the rest goes

  [[nodiscard]] Role role() const noexcept override { return role_; }
  [[nodiscard]] int num_workers() const noexcept override { return o_.workers; }
  [[nodiscard]] int num_servers() const noexcept override { return o_.servers; }
  [[nodiscard]] std::optional<std::uint64_t> staleness() const noexcept override { return o_.staleness; }
  [[nodiscard]] const ClusterSpec& cluster() const noexcept { return spec_; }
  [[nodiscard]] int rank() const noexcept { return link_.rank(); }
  //! The most steps a step started ahead of the slowest live worker (on the chief; 0 elsewhere).
  [[nodiscard]] std::uint64_t max_observed_gap() const {
    return chief_ ? chief_->coordinator().clock().max_observed_gap() : 0;
  }

  void create_variables(const std::vector<Shape>& shapes, const Tensor<float>& init, ServerUpdate update) override {
    Tensor<float> flat = detail::flat_value(shapes, init);
    auto shards = detail::shard_layout(shapes, o_.partitioner, o_.servers);
    layout_ = detail::ServerLayout(shards, o_.servers);
    value_ = flat;
    update_ = std::move(update);
    state_ = {};
    versions_.assign(layout_.shards().size(), 0);
    if (role_ == Role::Server) store_ = std::make_unique<ShardStore<float>>(std::move(flat), std::move(shards), o_.servers);
  }

  void pull(int, std::span<float> params) override {
    check_size(params.size(), "pull");
    detail::pull_from_servers(link_, layout_, spec_, params);
  }
  void push(int, std::span<const float> grad) override {
    check_size(grad.size(), "push");
    detail::push_to_servers(link_, layout_, spec_, grad);
  }
  void read(std::span<float> out) override {
    check_size(out.size(), "read");
    std::copy(value_.begin(), value_.end(), out.begin());
  }
  void assign(std::span<const float> in) override {
    check_size(in.size(), "assign");
    std::copy(in.begin(), in.end(), value_.begin());  // reaches the servers when training starts
  }

  //! The chief's copy of the shard versions (updates applied to each shard)
  //! as of the last run's end or the last set_shard_versions; empty elsewhere.
  [[nodiscard]] std::vector<std::uint64_t> shard_versions() const override {
    return role_ == Role::Chief ? versions_ : std::vector<std::uint64_t>{};
  }
  //! Sets the chief's copy; the servers get it when the next run starts.
  void set_shard_versions(std::span<const std::uint64_t> v) override {
    if (v.size() != versions_.size())
      throw Error("ParameterServerStrategy: " + std::to_string(v.size()) + " shard versions for " +
                  std::to_string(versions_.size()) + " shards");
    versions_.assign(v.begin(), v.end());
  }
  [[nodiscard]] bool state_on_chief() const noexcept override { return true; }
  void set_server_state(ServerState state) override { state_ = std::move(state); }

  void set_step(std::function<StepOutput(int, const StepInput&)> fn) override { step_ = std::move(fn); }

  RemoteValue<StepOutput> schedule(StepInput in) override {
    if (!chief_) throw Error("ParameterServerStrategy::schedule: only the chief schedules steps");
    return chief_->schedule(std::move(in));
  }
  void join() override {
    if (chief_) chief_->join();
  }

  void serve(std::span<float> final_value) override {
    if (role_ == Role::Chief) return;
    if (role_ == Role::Worker) return detail::serve_as_worker(link_, spec_, step_, o_.before_step, final_value);
    if (!store_) throw Error("ParameterServerStrategy: a server has no variables; build the model on every rank");
    detail::serve_as_server(link_, layout_, spec_, *store_, update_, state_, o_.staleness == std::uint64_t{0},
                            final_value);
  }
  void end_training(std::span<const float> final_value) override {
    if (chief_) chief_->end_training(final_value);
  }

  //! Every rank agrees on the run's `fields` (fit's fingerprint): RunMismatch
  //! on every rank if one differs, CollectiveTimeout if one never arrives.
  void agree_on_run(const std::vector<RunField>& fields) override {
    detail::mpi::agree_on_run(link_, fields, "fingerprint");
  }

  //! What every rank's cluster must match: roles and the options that change the protocol.
  [[nodiscard]] std::vector<RunField> cluster_fields() const {
    const auto list = [](const std::vector<int>& v) {
      std::string s;
      for (int r : v) {  // appended piece by piece: GCC 12 -O3 warns falsely (-Wrestrict) on "," + string
        if (!s.empty()) s += ',';
        s += std::to_string(r);
      }
      std::string out = std::to_string(v.size());
      out += " (ranks ";
      out += s;
      out += ')';
      return out;
    };
    return {{"world size", std::to_string(link_.size())},
            {"chief", std::to_string(spec_.chief)},
            {"servers", list(spec_.servers)},
            {"workers", list(spec_.workers)},
            {"staleness", o_.staleness ? std::to_string(*o_.staleness) : std::string("none (asynchronous)")},
            {"timeout", std::to_string(o_.timeout.count()) + " ms"},
            {"max_attempts", std::to_string(o_.max_attempts)},
            {"partitioner", o_.partitioner ? "custom" : "default"}};
  }

  [[nodiscard]] std::vector<WorkerFailure> failures() const override {
    return chief_ ? chief_->coordinator().failures() : std::vector<WorkerFailure>{};
  }
  [[nodiscard]] std::vector<std::uint64_t> pushes_per_server() const override { return counts(0); }
  [[nodiscard]] std::vector<std::uint64_t> pulls_per_server() const override { return counts(1); }

 private:
  void check_size(std::size_t got, const char* what) const {
    if (got != value_.size())
      throw ShapeError(std::string("ParameterServerStrategy::") + what + ": the variables hold " +
                       std::to_string(value_.size()) + " elements (created on every rank?), the buffer " +
                       std::to_string(got));
  }
  //! What this process's server counted (pushes: 0, pulls: 1); 0 for the others.
  [[nodiscard]] std::vector<std::uint64_t> counts(int which) const {
    std::vector<std::uint64_t> v;
    for (int s = 0; s < o_.servers; ++s)
      v.push_back(store_ && spec_.server_index(link_.rank()) == s ? (which ? store_->pulls(s) : store_->pushes(s)) : 0);
    return v;
  }

  //! `spec`, checked against MPI_COMM_WORLD's size before the link is made
  //! (making it is collective too).
  static ClusterSpec valid_for_world(ClusterSpec spec) {
    int world = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    spec.validate(world);
    return spec;
  }

  ClusterSpec spec_;
  ParameterServerOptions o_;
  detail::PsLink link_;
  Role role_ = Role::Chief;
  detail::ServerLayout layout_;
  Tensor<float> value_;  // the chief's copy between runs (every rank's layout)
  ServerUpdate update_;
  ServerState state_;                    // the optimizer state's hook (on the chief: its copy between runs)
  std::vector<std::uint64_t> versions_;  // the chief's copy of each shard's version between runs
  std::unique_ptr<ShardStore<float>> store_;  // on a server: its shards (of a full-size vector)
  std::function<StepOutput(int, const StepInput&)> step_;
  std::unique_ptr<detail::MpiChief> chief_;  // the chief's scheduling; its threads use the members above
};

}  // namespace strata
