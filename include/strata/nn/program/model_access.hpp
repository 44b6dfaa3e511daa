#pragma once
//! What a callback sees of the model fit trains (Keras' `callback.model`):
//! fit hands one to every callback before training (Callback::set_model).
//! Its collectives (from_chief, any_worker) are called by every worker
//! together: fit runs each callback on every worker, with the same logs.
//!   void on_epoch_end(int, const Logs&) override { if (model().is_chief()) model().save_weights("w.weights"); }

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <strata/io/tensor_file.hpp>

namespace strata::nn {

class ModelAccess {
 public:
  virtual ~ModelAccess() = default;
  //! Whether this process is the chief (the one that prints and writes files).
  [[nodiscard]] virtual bool is_chief() const = 0;
  //! Whether reading the model's state is collective (ZeRO 2 and 3 across
  //! workers: Sequential::state_reads_collective): then every worker calls
  //! save_checkpoint (and, at stage 3, get_weights and save_weights), the
  //! chief alone writing.
  [[nodiscard]] virtual bool state_reads_collective() const { return false; }
  //! The parameters, named "<layer>/<param>" (Sequential::get_weights).
  [[nodiscard]] virtual std::vector<io::NamedTensor> get_weights() const = 0;
  //! Sets every copy of the parameters (Sequential::set_weights).
  virtual void set_weights(const std::vector<io::NamedTensor>& ws) = 0;
  //! Writes the weights (Sequential::save_weights); the chief calls it.
  virtual void save_weights(const std::filesystem::path& path) const = 0;
  //! Writes a checkpoint: weights, optimizer state, step (Sequential::save_checkpoint); the chief calls it.
  virtual void save_checkpoint(const std::filesystem::path& path) = 0;
  //! Optimizer steps taken so far.
  [[nodiscard]] virtual std::int64_t iterations() const = 0;
  //! The learning rate the next step uses.
  [[nodiscard]] virtual float learning_rate() const = 0;
  //! Sets the learning rate of every copy of the optimizer from the next
  //! step on; an Error where a copy is out of reach (parameter servers in
  //! other processes) or the optimizer has no rate to set.
  virtual void set_learning_rate(float rate) = 0;
  //! Collective: the chief's `v` on every worker.
  [[nodiscard]] virtual std::vector<double> from_chief(std::vector<double> v) = 0;
  //! Collective: whether `mine` is true on any worker.
  [[nodiscard]] virtual bool any_worker(bool mine) = 0;
  //! Prints `line` (and a newline) where fit prints its progress, on the
  //! chief, unless fit is silent: how a callback says what it did
  //! ("Epoch 6: early stopping").
  virtual void say(const std::string& /*line*/) {}
};

}  // namespace strata::nn
