#pragma once
//! A model's checkpoint: its tensors and metadata built from a LayerProgram,
//! and checked against one when loading (the format: nn/checkpoints/checkpoint_format.hpp).

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/io/tensor_file.hpp>
#include <strata/nn/checkpoints/checkpoint_format.hpp>
#include <strata/nn/program/model_program.hpp>

namespace strata::nn::detail {

//! A checkpoint file of model `m`: `weights` (get_weights), the optimizer's
//! `slots`, position `pos` (its step the model's).
inline io::TensorFile make_checkpoint(const LayerProgram& m, std::vector<io::NamedTensor> weights,
                                      std::vector<Tensor<float>> slots, const TrainingPosition& pos,
                                      const std::vector<std::uint64_t>& update_counters, std::string_view strategy,
                                      int replicas) {
  io::TensorFile f{.kind = "checkpoint", .meta = {}, .tensors = {}};
  f.meta = {{"format", std::string(checkpoint_format)},
            {"step", std::to_string(pos.step)},
            {"epoch", std::to_string(pos.epoch)},
            {"batch", std::to_string(pos.batch)},
            {"data_counters", join_counters(pos.data_counters)},
            {"seed", std::to_string(m.seed)},
            {"optimizer", m.optimizer->name()},
            {"optimizer_slots", std::to_string(slots.size())},
            {"num_params", std::to_string(m.total)},
            {"update_counters", join_counters(update_counters)},
            {"strategy", std::string(strategy)},
            {"replicas", std::to_string(replicas)}};
  for (auto& w : weights) f.tensors.push_back({"weights/" + w.name, std::move(w.value)});
  for (std::size_t k = 0; k < slots.size(); ++k) f.tensors.push_back({"optimizer/" + std::to_string(k), std::move(slots[k])});
  return f;
}

//! What a checkpoint gives a model back.
struct CheckpointParts {
  std::vector<io::NamedTensor> weights;
  std::vector<Tensor<float>> slots;
  std::vector<std::uint64_t> update_counters;  //!< a parameter server's shard versions (else empty)
};

//! The weights, optimizer slots and update counters of checkpoint `f`,
//! checked against model `m` (its optimizer, seed and parameter count).
inline CheckpointParts checkpoint_parts(const LayerProgram& m, io::TensorFile& f, const std::string& where) {
  const auto n = parse_u64(require_meta(f, "num_params", where), where, "num_params");
  if (n != m.total)
    throw ShapeError(where + " holds " + std::to_string(n) + " parameters; this model has " + std::to_string(m.total));
  const std::string& opt = require_meta(f, "optimizer", where);
  if (opt != m.optimizer->name())
    throw Error(where + " was trained with optimizer " + opt + "; this model is compiled with " + m.optimizer->name());
  const auto seed = parse_u64(require_meta(f, "seed", where), where, "seed");
  if (seed != m.seed)
    throw Error(where + " was trained with seed " + std::to_string(seed) + "; this model is compiled with seed " +
                std::to_string(m.seed) + " (dropout masks would differ: compile with the same seed)");
  const auto slots = parse_u64(require_meta(f, "optimizer_slots", where), where, "optimizer_slots");
  if (slots != m.optimizer->slot_count())
    throw Error(where + " holds " + std::to_string(slots) + " optimizer slots; " + m.optimizer->name() + " keeps " +
                std::to_string(m.optimizer->slot_count()));
  CheckpointParts out;
  if (const std::string* c = f.find("update_counters")) out.update_counters = parse_counters(*c, where, "update_counters");
  for (auto& t : f.tensors) {
    if (t.name.starts_with("weights/")) out.weights.push_back({t.name.substr(8), std::move(t.value)});
  }
  for (std::uint64_t k = 0; k < slots; ++k) {
    const io::NamedTensor* t = f.tensor("optimizer/" + std::to_string(k));
    if (!t) throw Error(where + " is not a complete checkpoint: optimizer slot " + std::to_string(k) + " is missing");
    if (t->value.size() != m.total)
      throw ShapeError(where + ": optimizer slot " + std::to_string(k) + " holds " + std::to_string(t->value.size()) +
                       " elements for " + std::to_string(m.total) + " parameters");
    out.slots.push_back(t->value);
  }
  return out;
}

}  // namespace strata::nn::detail
