#pragma once
//! The checkpoint format's metadata side (no model code: the fuzz target
//! and tools read it alone); nn/checkpoints/checkpoint.hpp builds and checks a model's.
//! Checkpoints: everything a training run needs to go on exactly where it
//! stopped, in one strata file (io/tensor_file.hpp, kind "checkpoint"):
//!   tensors  "weights/<layer>/<param>" (the logical value: one copy, unsharded)
//!            "optimizer/<k>"            (slot k of the optimizer's state over all parameters, flat)
//!   metadata format, step (optimizer steps taken: keys dropout masks and Adam's bias
//!            correction), epoch and batch (where in fit), data_counters (the dataset's
//!            shuffle pass counters when that epoch opened), seed, optimizer, num_params,
//!            and, for people, strategy and replicas
//! Nothing in it depends on the strategy that wrote it: a checkpoint written
//! under MirroredStrategy with 4 replicas loads under OneDevice, two
//! workers, or a parameter server with 3 shards (Sequential::load_checkpoint).

#include <charconv>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/io/tensor_file.hpp>

namespace strata::nn {

inline constexpr std::string_view checkpoint_format = "strata-checkpoint/1";

//! Where a training run stands.
struct TrainingPosition {
  std::int64_t step = 0;     //!< optimizer steps taken
  int epoch = 0;             //!< the epoch to run next or in progress (0-based)
  std::size_t batch = 0;     //!< batches of that epoch already trained
  std::vector<std::uint64_t> data_counters;  //!< the dataset's pass counters when that epoch opened
};

//! fit stopped on SIGTERM or SIGINT after saving a checkpoint; running the
//! same program again resumes from it. The examples exit with status 75
//! (EX_TEMPFAIL: "try again") on it.
class Preempted : public Error {
 public:
  Preempted(int signal, std::string checkpoint)
      : Error("fit: stopped by signal " + std::to_string(signal) + " after saving checkpoint " + checkpoint +
              "; run again to resume"),
        signal_(signal),
        checkpoint_(std::move(checkpoint)) {}
  [[nodiscard]] int signal() const noexcept { return signal_; }
  [[nodiscard]] const std::string& checkpoint() const noexcept { return checkpoint_; }

 private:
  int signal_;
  std::string checkpoint_;
};

namespace detail {

inline std::string join_counters(const std::vector<std::uint64_t>& c) {
  std::string s;
  for (auto v : c) {
    if (!s.empty()) s += ',';
    s += std::to_string(v);
  }
  return s;
}

//! A whole-string, range-checked unsigned number of metadata `key`.
inline std::uint64_t parse_u64(std::string_view v, const std::string& where, std::string_view key) {
  std::uint64_t x = 0;
  const auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (v.empty() || ec != std::errc{} || p != v.data() + v.size())
    throw Error(where + " is corrupt: metadata " + std::string(key) + " = \"" + std::string(v) + "\" is not a number");
  return x;
}

inline const std::string& require_meta(const io::TensorFile& f, std::string_view key, const std::string& where) {
  const std::string* v = f.find(key);
  if (!v) throw Error(where + " is not a complete checkpoint: it has no " + std::string(key));
  return *v;
}

//! A comma-separated list of unsigned numbers (metadata `key`; "" is none).
inline std::vector<std::uint64_t> parse_counters(const std::string& c, const std::string& where, std::string_view key) {
  std::vector<std::uint64_t> out;
  for (std::size_t at = 0; at < c.size();) {
    const auto comma = c.find(',', at);
    const auto end = comma == std::string::npos ? c.size() : comma;
    out.push_back(parse_u64(std::string_view(c).substr(at, end - at), where, key));
    at = end + (comma == std::string::npos ? 0 : 1);
    if (comma != std::string::npos && at == c.size())
      throw Error(where + " is corrupt: metadata " + std::string(key) + " ends with a comma");
  }
  return out;
}

//! The position stored in checkpoint `f` (read from `where`).
inline TrainingPosition position_of(const io::TensorFile& f, const std::string& where) {
  if (f.kind != "checkpoint") throw Error(where + " is a strata " + f.kind + " file, not a checkpoint");
  if (require_meta(f, "format", where) != checkpoint_format)
    throw Error(where + " has checkpoint format " + require_meta(f, "format", where) + "; this strata reads " +
                std::string(checkpoint_format));
  TrainingPosition p;
  const auto step = parse_u64(require_meta(f, "step", where), where, "step");
  const auto epoch = parse_u64(require_meta(f, "epoch", where), where, "epoch");
  if (step > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
      epoch > static_cast<std::uint64_t>(std::numeric_limits<int>::max()))
    throw Error(where + " is corrupt: step or epoch out of range");
  p.step = static_cast<std::int64_t>(step);
  p.epoch = static_cast<int>(epoch);
  p.batch = parse_u64(require_meta(f, "batch", where), where, "batch");
  p.data_counters = parse_counters(require_meta(f, "data_counters", where), where, "data_counters");
  return p;
}

}  // namespace detail
}  // namespace strata::nn
