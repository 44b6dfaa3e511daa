#pragma once
//! TensorBoard: a fit callback writing the scalars TensorBoard plots, as
//! Keras' TensorBoard callback does, into TensorFlow's event files
//! (io/event_file.hpp): `<log_dir>/train` gets epoch_loss, epoch_<metric>,
//! the rates and the learning rate after each epoch and, every `update_freq`
//! batches, batch_<name>; `<log_dir>/validation` the val_* values. Given
//! `batch_size`, also samples per second. Only the chief writes; each
//! scalar is flushed as written; under --trace each epoch also gets
//! epoch_<category>_ms_per_step. Every scalar: docs/training.md, "Keras callbacks".
//!   strata::nn::TensorBoard tb{"logs/run1", {.update_freq = 100, .batch_size = 128}};  // fit says who is the chief
//!   model.fit(train, {.epochs = 5, .callbacks = {&tb}}, test);
//!   // tensorboard --logdir logs

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/core/trace_session.hpp>
#include <strata/io/event_file.hpp>
#include <strata/nn/callbacks/callbacks.hpp>
#include <strata/nn/callbacks/monitor.hpp>

namespace strata::nn {

struct TensorBoardOptions {
  //! Also write the running batch values every this many batches (0: epochs only).
  std::int64_t update_freq = 0;
  //! The global batch size, for samples per second (0: unknown, not written).
  std::int64_t batch_size = 0;
};

class TensorBoard : public Callback {
 public:
  //! Whether this process writes comes from fit's model (Callback::model) when training begins.
  explicit TensorBoard(std::filesystem::path log_dir, TensorBoardOptions opts = {})
      : dir_(std::move(log_dir)), opts_(opts) {
    check();
  }
  //! `model`: the model fit trains (it says whether this process is the chief).
  template <class Model>
  TensorBoard(const Model& model, std::filesystem::path log_dir, TensorBoardOptions opts = {})
      : TensorBoard(model.is_chief(), std::move(log_dir), opts) {}
  //! `chief`: whether this process writes.
  TensorBoard(bool chief, std::filesystem::path log_dir, TensorBoardOptions opts = {})
      : chief_(chief), dir_(std::move(log_dir)), opts_(opts) {
    check();
  }

  [[nodiscard]] const std::filesystem::path& log_dir() const noexcept { return dir_; }
  //! The event files written so far (empty on a process that is not the chief).
  [[nodiscard]] std::filesystem::path train_file() const { return train_ ? train_->path() : std::filesystem::path{}; }
  [[nodiscard]] std::filesystem::path validation_file() const {
    return validation_ ? validation_->path() : std::filesystem::path{};
  }

  [[nodiscard]] std::string state_id() const override { return "TensorBoard(" + dir_.string() + ")"; }
  //! The files open at the first scalar (a resume refused before its first step leaves no new file).
  void on_train_begin() override {
    writes_ = chief_ ? *chief_ : model().is_chief();
  }
  void on_epoch_begin(int /*epoch*/) override {
    epoch_start_ = window_start_ = Clock::now();
    epoch_batches_ = window_batches_ = 0;
    if (writes_ && trace::enabled()) traced_at_start_ = trace::recorded_totals();
  }
  //! The global batch count the batch scalars are written at: a resumed run
  //! goes on from the checkpoint's (one that kept none of this callback: the
  //! optimizer steps taken), so its curves continue those of the run stopped.
  [[nodiscard]] CallbackState save_state() const override { return {{"global_batch", std::to_string(global_batch_)}}; }
  void load_state(const CallbackState& s) override {
    const auto* g = detail::find_state(s, "global_batch");
    global_batch_ = g ? std::stoll(*g) : model().iterations();
  }
  void on_batch_end(int /*batch*/, const Logs& logs) override {
    const auto n = static_cast<std::int64_t>(batches_ended());  // several with steps_per_execution
    epoch_batches_ += n;
    window_batches_ += n;
    global_batch_ += n;
    epoch_end_ = Clock::now();  // the epoch's steps end at its last batch's end
    // a write when a multiple of update_freq was reached by these batches
    if (!writes_ || !opts_.update_freq || global_batch_ / opts_.update_freq == (global_batch_ - n) / opts_.update_freq)
      return;
    for (const auto& [name, value] : logs.items()) train().scalar("batch_" + name, value, global_batch_);
    if (opts_.batch_size) {  // over the batches since the last write (or the epoch's start)
      const double seconds = std::chrono::duration<double>(epoch_end_ - window_start_).count();
      if (seconds > 0)
        train().scalar("batch_samples_per_second",
                       static_cast<double>(window_batches_ * opts_.batch_size) / seconds, global_batch_);
    }
    window_start_ = Clock::now();
    window_batches_ = 0;
  }
  void on_epoch_end(int epoch, const Logs& logs) override {
    if (!writes_) return;
    for (const auto& [name, value] : logs.items()) {
      if (name.starts_with("val_")) {
        if (!validation_) validation_ = std::make_unique<io::EventFileWriter>(dir_ / "validation");
        validation_->scalar("epoch_" + name.substr(4), value, epoch);
      } else {
        train().scalar("epoch_" + name, value, epoch);
      }
    }
    // the training steps' time: from the epoch's start to its last batch's end (not the validation after)
    const double seconds = std::chrono::duration<double>(epoch_end_ - epoch_start_).count();
    if (epoch_batches_ && seconds > 0) {
      train().scalar("epoch_steps_per_second", static_cast<double>(epoch_batches_) / seconds, epoch);
      if (opts_.batch_size)
        train().scalar("epoch_samples_per_second", static_cast<double>(epoch_batches_ * opts_.batch_size) / seconds,
                       epoch);
    }
    if (traced_at_start_ && trace::enabled() && epoch_batches_) write_step_times(epoch);
    traced_at_start_.reset();
    if (has_model_) {
      try {  // the rate the next step uses (a schedule's, or one set at run time)
        train().scalar("epoch_learning_rate", model().learning_rate(), epoch);
      } catch (const Error&) {  // an optimizer that exposes no learning rate: nothing to plot
      }
    }
  }
  void set_model(ModelAccess* m) override {
    Callback::set_model(m);
    has_model_ = m != nullptr;
  }

 private:
  //! Each shown category's own time in this epoch (totals now less at its
  //! start), per step, averaged over the threads that had any.
  void write_step_times(int epoch) {
    using trace::Category;
    const auto now = trace::recorded_totals();
    for (const Category c : {Category::Data, Category::Forward, Category::Backward, Category::Collective,
                             Category::Wait, Category::Update}) {
      const auto k = static_cast<std::size_t>(c);
      double ns = 0;
      int threads = 0;
      for (const auto& t : now) {
        std::int64_t before_ns = 0, before_count = 0;
        for (const auto& b : *traced_at_start_)
          if (b.tid == t.tid) before_ns = b.self_ns[k], before_count = b.count[k];
        if (t.count[k] == before_count) continue;  // no span of it on this thread this epoch
        ns += static_cast<double>(t.self_ns[k] - before_ns);
        ++threads;
      }
      if (threads)
        train().scalar(std::string("epoch_") + trace::category_name(c) + "_ms_per_step",
                       ns / threads / 1e6 / static_cast<double>(epoch_batches_), epoch);
    }
  }
  io::EventFileWriter& train() {
    if (!train_) train_ = std::make_unique<io::EventFileWriter>(dir_ / "train");
    return *train_;
  }
  void check() const {
    if (dir_.empty()) throw Error("TensorBoard: the log directory is empty");
    if (opts_.update_freq < 0) throw Error("TensorBoard: update_freq must be 0 (epochs only) or a batch count");
    if (opts_.batch_size < 0) throw Error("TensorBoard: batch_size must be 0 (unknown) or the global batch size");
  }
  using Clock = std::chrono::steady_clock;
  std::optional<bool> chief_;  // given, else fit's model says
  std::filesystem::path dir_;
  TensorBoardOptions opts_;
  std::unique_ptr<io::EventFileWriter> train_, validation_;
  Clock::time_point epoch_start_ = Clock::now(), epoch_end_ = epoch_start_, window_start_ = epoch_start_;
  std::int64_t epoch_batches_ = 0, window_batches_ = 0;
  std::int64_t global_batch_ = 0;
  bool has_model_ = false;
  bool writes_ = false;  // this process writes (the chief)
  std::optional<std::vector<trace::TrackTotals>> traced_at_start_;  // the trace's totals when the epoch began
};

}  // namespace strata::nn
