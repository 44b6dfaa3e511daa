#pragma once
//! Whose checkpoint directory it is: a training run's identity, recorded
//! in the directory (`run.strata`, a strata file of kind "run": checksummed,
//! written atomically) and in every checkpoint the run writes (metadata
//! `run_id` and `run/<field>`). The fields are what must not change for a
//! resume to continue the same run, whatever the strategy: the model's
//! layout, the optimizer and its hyper-parameters, the seed, the global
//! batch and the batches per epoch. A BackupAndRestore resumes only its own
//! run's checkpoints, deletes only those, and refuses a directory recorded
//! for another run naming every field that differs.
//!   RunIdentity me{new_run_id(), fields};  write_run_record(dir / "run.strata", me);
//!   if (auto d = differences(*read_run_record(path), me.fields); !d.empty()) throw ...;

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <unistd.h>

#include <strata/core/error.hpp>
#include <strata/io/tensor_file.hpp>

namespace strata::nn {

//! A checkpoint directory this run may not use: it belongs to another run,
//! holds nothing this run can resume from, or is in use.
class CheckpointDirectoryError : public Error {
 public:
  using Error::Error;
};

//! A training run: a random id, and the fields that make it the same run.
struct RunIdentity {
  std::string id;
  std::vector<std::pair<std::string, std::string>> fields;
};

namespace detail {

inline constexpr std::string_view run_record_kind = "run";
inline constexpr std::string_view run_record_format = "strata-run/1";

//! A fresh run id: 16 hex digits from the random device, the clock and the pid.
inline std::string new_run_id() {
  std::random_device rd;
  std::uint64_t x = (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
  x ^= static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) * 0x9E3779B97F4A7C15ull;
  x ^= static_cast<std::uint64_t>(::getpid()) << 17;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(x));
  return buf;
}

//! The metadata entries that carry `r` (in a record or a checkpoint).
inline std::vector<std::pair<std::string, std::string>> run_meta(const RunIdentity& r) {
  std::vector<std::pair<std::string, std::string>> m{{"run_id", r.id}};
  for (const auto& [k, v] : r.fields) m.emplace_back("run/" + k, v);
  return m;
}

//! The run identity a file's metadata carries (nullopt: none, e.g. a
//! checkpoint written before strata recorded runs).
inline std::optional<RunIdentity> run_of(const io::TensorFile& f) {
  const std::string* id = f.find("run_id");
  if (!id) return std::nullopt;
  RunIdentity r{*id, {}};
  for (const auto& [k, v] : f.meta)
    if (k.starts_with("run/")) r.fields.emplace_back(k.substr(4), v);
  return r;
}

//! The run identity in the metadata of the strata file at `path` (its
//! header and metadata read alone); an Error when it cannot be read.
inline std::optional<RunIdentity> run_in_file(const std::filesystem::path& path) {
  return run_of(io::read_tensor_file(path, "BackupAndRestore", io::ReadPart::MetadataOnly));
}

//! The fields of `mine` whose value differs in `theirs` (or that it lacks),
//! as one phrase: "global batch: 8 there, 4 here; seed: 1 there, 2 here".
inline std::string differences(const RunIdentity& theirs, const std::vector<std::pair<std::string, std::string>>& mine) {
  std::string out;
  for (const auto& [k, v] : mine) {
    const std::string* t = nullptr;
    for (const auto& [tk, tv] : theirs.fields)
      if (tk == k) t = &tv;
    if (t && *t == v) continue;
    if (!out.empty()) out += "; ";
    out += k + ": " + (t ? *t : std::string("(not recorded)")) + " there, " + v + " here";
  }
  return out;
}

//! Writes the directory's run record atomically.
inline void write_run_record(const std::filesystem::path& path, const RunIdentity& r) {
  io::TensorFile f{.kind = std::string(run_record_kind), .meta = {{"format", std::string(run_record_format)}}, .tensors = {}};
  for (auto& m : run_meta(r)) f.meta.push_back(std::move(m));
  io::write_tensor_file(path, f, "BackupAndRestore");
}

//! The directory's run record (nullopt: there is none); an Error when a
//! file is there that is not a readable record.
inline std::optional<RunIdentity> read_run_record(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  io::TensorFile f = io::read_tensor_file(path, "BackupAndRestore: the run record", io::ReadPart::MetadataOnly);
  auto r = run_of(f);
  if (f.kind != run_record_kind || !r)
    throw Error("BackupAndRestore: " + path.string() + " is not a run record (kind " + f.kind + ")");
  return r;
}

}  // namespace detail
}  // namespace strata::nn
