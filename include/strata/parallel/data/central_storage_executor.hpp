#pragma once
//! The executor of CentralStorage placement: one host copy of the
//! variables, read by every replica; gradients are reduced onto one central
//! gradient and each replica applies the update to its slice of the central
//! copy (with its slice of the one optimizer state).
//! On GPU replicas (as TensorFlow's): the variables and the update stay on
//! the host; each replica computes on its GPU, with the central value
//! uploaded at the start of each step and its gradient downloaded for the
//! host's reduction, so the arithmetic of the update is the CPU one.
//!   strata::CentralStorageStrategy s{strata::cpu_replicas(4)};
//!   strata::CentralStorageStrategy g{strata::virtual_gpus(0, 2)};   // compute on GPU 0, variables on the host
//!   auto model = s.scope([] { return strata::nn::Sequential{...}; });   // trains through this executor

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <strata/kernels/buffer.hpp>
#include <strata/policy/placement.hpp>
#include <strata/device/device_compute.hpp>
#include <strata/kernels/host/memory.hpp>
#include <strata/parallel/data/mirrored_executor.hpp>
#include <strata/execution/executor_options.hpp>
#include <strata/execution/sync_executor.hpp>

namespace strata::detail {

template <class S>
class CentralStorageExecutor final : public SyncExecutor<S, CentralStorageExecutor<S>> {
  using Base = SyncExecutor<S, CentralStorageExecutor<S>>;
  friend Base;

 public:
  using Base::Base;
  // The replicas' programs hold memory of the GPU computes: they go first.
  ~CentralStorageExecutor() override { this->reps_.clear(); }

  [[nodiscard]] const Tensor<float>& value() const override { return var_->value(); }
  void assign(const Tensor<float>& v) override { var_->assign(v); }
  void reset_optimizer() override {
    if (var_ && this->program_.compiled()) updater_ = this->program_.make_updater(this->program_.num_params());
  }
  std::vector<Tensor<float>> optimizer_state() override { return updater_ ? updater_->state() : std::vector<Tensor<float>>{}; }
  void set_optimizer_state(std::span<const Tensor<float>> slots) override {
    if (!updater_) throw Error("set_optimizer_state: the model is not compiled and placed yet");
    updater_->set_state(slots);
  }
  [[nodiscard]] std::string collectives_choice() const override {
    if (devs_.empty()) return {};
    return std::to_string(devs_.size()) + (devs_.size() == 1 ? " GPU replica" : " GPU replicas") +
           " with central variables: each gradient is downloaded and summed on the host, where the variables and "
           "the update live; the value is uploaded to every replica each step";
  }

 private:
  using OnDevice = DeviceReplicaBuffers;  // a GPU replica's compute, value and gradient

  void place_values(const Tensor<float>& init, std::size_t local) {
    this->reps_.clear();  // bound to the computes and buffers below
    var_.emplace(init, static_cast<int>(local));
    grads_.assign(local, Tensor<float>{Shape{init.size()}});
    counts_.resize(local);
    const auto& devices = this->s_.devices();
    if (!devices.front().is_gpu()) return devs_.clear();
    if (devs_.size() != local) {
      devs_.clear();
      devs_.resize(local);
      for (std::size_t r = 0; r < local; ++r) devs_[r].c = make_compute(devices[r], this->s_.executor_options().matmul);
    }
    for (OnDevice& d : devs_) {
      d.value.resize(*d.c, Shape{init.size()});
      d.grad.resize(*d.c, Shape{init.size()});
    }
  }
  std::unique_ptr<ReplicaProgram> make_replica(std::size_t r) {
    if (devs_.empty()) return this->program_.make_replica(var_->value().span(), grads_[r].span());
    const std::size_t n = this->program_.num_params();
    return this->program_.make_replica_on(*devs_[r].c, {devs_[r].value.data(), n}, {devs_[r].grad.data(), n});
  }
  //! A GPU replica computes with the central value of this step.
  void before_step(std::size_t r) {
    if (devs_.empty()) return;
    devs_[r].c->bind_thread();  // this pool thread issues replica r's calls: its GPU current
    if (var_->value().size() == 0) return;
    devs_[r].c->upload(devs_[r].value.data(), var_->value().data(), var_->value().bytes());
  }

  //! fn(replica r's gradient on the host): a GPU's is copied there and back.
  template <class F>
  void with_host_gradient(std::size_t r, F&& fn) {
    if (devs_.empty() || !grads_[r].size()) return fn(grads_[r].span());
    with_host_copy(*devs_[r].c, devs_[r].grad.data(), grads_[r].size(), grads_[r], fn);
  }

  template <class Ctx>
  void apply(Ctx& ctx, std::size_t r, std::int64_t it) {
    if (!devs_.empty() && grads_[r].size())  // the GPU's gradient, for the host's reduction
      devs_[r].c->download(grads_[r].data(), devs_[r].grad.data(), grads_[r].bytes());
    var_->apply_gradient(ctx, grads_[r], [&](std::span<float> w, std::span<const float> g, std::size_t off) {
      // g: this replica's slice of the sum
      if (!this->finite_gradient(ctx, r, kernels::host_memory(), counts_[r], g)) return;
      // clipping: the norm over every replica's slice; each scales its slice of the variable's own
      // (non-const) sum buffer, which g views
      this->clip_gradient(ctx, nullptr, counts_[r], g, {const_cast<float*>(g.data()), g.size()},
                          updater_->global_clipnorm());
      updater_->apply(w, g, off, it);
    });
  }

  std::optional<CentralVariable<float>> var_;
  std::unique_ptr<Updater> updater_;
  std::vector<OnDevice> devs_;  // GPU replicas: one per local replica; empty on CPUs
  std::vector<Tensor<float>> grads_;              // per local replica, on the host: its gradient (a GPU's, downloaded)
  std::vector<kernels::Buffer<double>> counts_;  // per local replica: its finiteness count, in host memory
};

}  // namespace strata::detail
