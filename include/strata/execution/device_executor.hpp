#pragma once
//! The executor of one replica on a device with its own memory (a GPU):
//! the variables, their gradient, the optimizer state and every activation
//! live in the device's memory, behind its Compute (kernels/compute.hpp);
//! the host sends each batch's rows and reads back a step's loss and
//! metric sums (a few doubles) with the gradient's non-finite count, so
//! checking adds no synchronization. Calls are stream-ordered: a step's
//! kernels are queued while the host prepares the next batch. Clipping runs
//! on the device; a custom loop's gradient hook sees the gradient copied to
//! the host and back. Deterministic for a fixed device and shapes up to the
//! order of the loss and metric sums (atomic on a GPU; not in the weights).
//!   strata::OneDeviceStrategy s{strata::gpu(0)};   // its executor is this one

#include <algorithm>
#include <exception>
#include <memory>
#include <optional>
#include <span>

#include <strata/core/error.hpp>
#include <strata/kernels/buffer.hpp>
#include <strata/kernels/memory.hpp>
#include <strata/kernels/recording_compute.hpp>
#include <strata/execution/captured_steps.hpp>
#include <strata/execution/executor.hpp>
#include <strata/execution/executor_options.hpp>
#include <strata/execution/program.hpp>

namespace strata::detail {

//! fn(the n floats at `device`, in memory `m`, as a host span): copied into
//! `host` (kept between calls) and what fn leaves there copied back. A
//! custom loop's gradient hook on a device's gradient.
template <class F>
void with_host_copy(kernels::Memory& m, float* device, std::size_t n, Tensor<float>& host, F&& fn) {
  if (host.size() != n) host = Tensor<float>{Shape{n}};
  if (n) m.download(host.data(), device, host.bytes());
  fn(host.span());
  if (n) m.upload(device, host.data(), host.bytes());
}

class DeviceExecutor final : public Executor {
 public:
  DeviceExecutor(ModelProgram& program, std::unique_ptr<kernels::Compute> compute, const ExecutorOptions& o = {})
      : program_(program), owned_(std::move(compute)), c_(owned_.get()) {
    capture(o);
  }
  //! On a compute the caller keeps alive (e.g. kernels::host_compute()).
  DeviceExecutor(ModelProgram& program, kernels::Compute& compute, const ExecutorOptions& o = {})
      : program_(program), c_(&compute) {
    capture(o);
  }

  [[nodiscard]] kernels::Compute& compute() noexcept { return *c_; }
  [[nodiscard]] bool placed() const noexcept override { return rep_ != nullptr; }

  void place(const Tensor<float>& init) override {
    const std::size_t n = program_.num_params();
    if (init.size() != n)
      throw ShapeError("DeviceExecutor::place: " + std::to_string(init.size()) + " initial values for " +
                       std::to_string(n) + " parameters");
    if (captured_) captured_->forget();
    rep_.reset();
    value_.resize(*c_, Shape{n});
    grad_.resize(*c_, Shape{n});
    c_->upload(value_.data(), init.data(), init.bytes());
    c_->fill(grad_.data(), 0.f, n);
    rep_ = program_.make_replica_on(*c_, {value_.data(), n}, {grad_.data(), n});
    host_.reset();
    reset_optimizer();
  }

  void reset_optimizer() override {
    if (captured_) captured_->forget();
    updater_.reset();
    if (rep_ && program_.compiled()) updater_ = program_.make_updater_on(*c_, program_.num_params());
  }
  std::vector<Tensor<float>> optimizer_state() override { return updater_ ? updater_->state() : std::vector<Tensor<float>>{}; }
  void set_optimizer_state(std::span<const Tensor<float>> slots) override {
    if (!updater_) throw Error("set_optimizer_state: the model is not compiled and placed yet");
    updater_->set_state(slots);
  }

  //! The variables, read back from the device (cached until they change).
  [[nodiscard]] const Tensor<float>& value() const override {
    if (!host_) {
      host_.emplace(Shape{program_.num_params()});
      if (host_->size()) c_->download(host_->data(), value_.data(), host_->bytes());
    }
    return *host_;
  }

  void assign(const Tensor<float>& v) override {
    if (v.size() != value_.size())
      throw ShapeError("DeviceExecutor::assign: " + std::to_string(v.size()) + " values for " +
                       std::to_string(value_.size()) + " parameters");
    c_->upload(value_.data(), v.data(), v.bytes());
    host_.reset();
  }

  PassTotals run_pass(Pass& pass) override {
    // The pass runs on the caller's thread: the device current for its calls
    // (gpu(i), i > 0), and the caller's current device back afterwards.
    struct Bound {
      kernels::Compute& c;
      int previous;
      ~Bound() { c.unbind_thread(previous); }
    } bound{*c_, c_->bind_thread()};
    pass.runs_gradient_hook = !captured_;  // between the backward and the update
    if (captured_ && pass.phase == Phase::Train)
      return captured_->train(pass, program_.num_metrics(), [&] {
        if (!updater_) throw Error("Sequential: compile the model first (optimizer and loss)");
        host_.reset();
        return CapturedSteps::Parts{*rep_, *updater_, value_.data(), grad_.data(), program_.num_params()};
      });
    return detail::run_batches(pass, program_.num_metrics(), [&](const Batch& b, std::size_t index, PassTotals& t) {
      if (const std::size_t rows = b.x->shape()[0]) step(b, pass, rows, t, index);
    });
  }

 private:
  //! Captured training steps (ExecutorOptions::capture_steps): on a space
  //! that cannot capture (the host's), through a RecordingCompute around it.
  void capture(const ExecutorOptions& o) {
    if (!o.capture_steps) return;
    if (!c_->captures_steps()) {
      recorder_ = std::make_unique<kernels::RecordingCompute>(*c_);
      c_ = recorder_.get();
    }
    captured_ = std::make_unique<CapturedSteps>(*c_, o.read_every);
  }

  void step(const Batch& b, Pass& pass, std::size_t rows, PassTotals& t, std::size_t index) {
    const std::int64_t it = *pass.iteration;
    const float scale = 1.f / static_cast<float>(rows);
    rep_->step(b, Range{0, rows}, StepInfo{pass.phase, 0, 1, static_cast<std::uint64_t>(it), scale}, result_);
    if (pass.phase != Phase::Predict) t.add(result_.loss, result_.rows, result_.metrics);
    t.samples += rows;
    if (pass.phase == Phase::Train) {
      if (!updater_) throw Error("Sequential: compile the model first (optimizer and loss)");
      const std::size_t n = program_.num_params();
      if (pass.gradient_hook) {  // a custom loop's look at the gradient, on the host
        with_host_copy(*c_, grad_.data(), n, host_grad_, [&](std::span<float> v) {
          ReplicaGradient g{v, 0, n, 0, 1, rows, rows, it};
          try {
            pass.gradient_hook(g);
          } catch (const std::exception& e) {  // named as a CPU replica's hook failure is (ReplicaError)
            throw ReplicaError(0, 1, std::current_exception(), e.what());
          }
        });
        result_.nonfinite.reset();  // counted before the hook: count what it left
      }
      if (pass.finite) {
        const double bad = nonfinite_gradient(n);
        if (bad > 0) return pass.skip_step(index, it, bad);  // nothing changes, the iteration included
        pass.applied_step();
      }
      if (const float clip = updater_->global_clipnorm(); clip > 0.f) {  // on the device: no read-back
        norm_.resize(*c_, Shape{1});
        c_->square_sum(grad_.data(), n, norm_.data());
        c_->clip_by_norm(grad_.data(), n, clip, norm_.data());
      }
      updater_->apply({value_.data(), n}, {grad_.data(), n}, 0, it);
      host_.reset();
      ++*pass.iteration;
    }
  }

  //! The NaN and infinite values of the step's gradient: on a device the
  //! replica counted them with its sums (ReplicaResult::nonfinite); on the
  //! host they are counted here; a program that does not count them on a
  //! device costs one more read-back.
  double nonfinite_gradient(std::size_t n) {
    if (result_.nonfinite) return *result_.nonfinite;
    double bad = 0;
    if (c_->where() == kernels::Where::Host) {
      c_->count_nonfinite(grad_.data(), n, &bad);
      return bad;
    }
    bad_.resize(*c_, Shape{1});
    c_->upload(bad_.data(), &bad, sizeof bad);
    c_->count_nonfinite(grad_.data(), n, bad_.data());
    c_->download(&bad, bad_.data(), sizeof bad);
    return bad;
  }

  ModelProgram& program_;
  std::unique_ptr<kernels::Compute> owned_;
  kernels::Compute* c_;
  std::unique_ptr<kernels::RecordingCompute> recorder_;  // the host's capture, around c_
  kernels::Buffer<float> value_, grad_;
  kernels::Buffer<double> bad_;  // the count, for a program that does not report it
  kernels::Buffer<double> norm_;  // the gradient's squared norm, when clipping by it
  std::unique_ptr<ReplicaProgram> rep_;
  std::unique_ptr<Updater> updater_;
  ReplicaResult result_;
  mutable std::optional<Tensor<float>> host_;
  Tensor<float> host_grad_;  // the gradient a custom loop's hook sees
  std::unique_ptr<CapturedSteps> captured_;  // declared last: freed first, while c_'s memory lives
};

}  // namespace strata::detail
