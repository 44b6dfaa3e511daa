#pragma once
//! The weights files of save_weights / load_weights: strata files
//! (io/tensor_file.hpp) of kind "weights", one tensor per parameter,
//! checksummed, all-or-nothing on load. Files of the first format
//! ("STRATAW1": u32 count | count x {u32 name_len | name | u32 rank | rank x
//! u64 dim | f32 data}, no checksums) still load. load_weights also takes a
//! checkpoint (its weights). Under several workers the chief alone writes
//! a model's files (write_on_chief), so ranks never race on one path.

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/io/tensor_file.hpp>
#include <strata/strategy/any_strategy.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::nn {

using io::NamedTensor;

namespace detail {
inline constexpr char weights_magic_v1[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'W', '1'};

template <class T>
T get(std::ifstream& f, const std::filesystem::path& p) {
  T v{};
  if (!f.read(reinterpret_cast<char*>(&v), sizeof v))
    throw Error("load_weights: " + p.string() + " is truncated (ended inside a header)");
  return v;
}

//! A file of the first format ("STRATAW1", before checksums): read with
//! the size checks it always had, and a finiteness check.
inline std::vector<NamedTensor> read_weights_v1(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("load_weights: cannot open " + path.string());
  std::error_code ec;
  const auto file_size = std::filesystem::file_size(path, ec);
  if (ec) throw Error("load_weights: " + path.string() + " cannot be read: " + ec.message());
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, weights_magic_v1, 8) != 0)
    throw Error("load_weights: " + path.string() + " is not a strata weights file (bad magic)");
  const auto count = get<std::uint32_t>(f, path);
  std::vector<NamedTensor> out;
  for (std::uint32_t i = 0; i < count; ++i) {
    const auto len = get<std::uint32_t>(f, path);
    if (len > 4096) throw Error("load_weights: " + path.string() + " is corrupt (tensor name of " + std::to_string(len) + " bytes)");
    std::string name(len, '\0');
    if (!f.read(name.data(), len)) throw Error("load_weights: " + path.string() + " is truncated");
    const auto rank = get<std::uint32_t>(f, path);
    if (rank > 8) throw Error("load_weights: " + path.string() + " is corrupt (tensor " + name + " of rank " + std::to_string(rank) + ")");
    std::vector<std::size_t> dims(rank);
    std::uint64_t elems = 1;
    for (auto& d : dims) {
      d = get<std::uint64_t>(f, path);
      if (d && elems > file_size / d)
        throw Error("load_weights: " + path.string() + " is corrupt (tensor " + name + " larger than the file)");
      elems *= d;
    }
    if (elems * sizeof(float) > file_size)
      throw Error("load_weights: " + path.string() + " is corrupt (tensor " + name + " larger than the file)");
    Tensor<float> t{Shape(std::move(dims))};
    if (!f.read(reinterpret_cast<char*>(t.data()), static_cast<std::streamsize>(t.bytes())))
      throw Error("load_weights: " + path.string() + " is truncated (inside tensor " + name + ")");
    for (std::size_t k = 0; k < t.size(); ++k)
      if (!std::isfinite(t.data()[k]))
        throw Error("load_weights: " + path.string() + ": tensor " + name + " holds a non-finite value at element " +
                    std::to_string(k));
    out.push_back({std::move(name), std::move(t)});
  }
  if (f.peek() != std::char_traits<char>::eof())
    throw Error("load_weights: " + path.string() + " has trailing bytes after its " + std::to_string(count) + " tensors");
  return out;
}
}  // namespace detail

namespace detail {
//! How a file that every worker of a program may ask for (save_weights,
//! save_checkpoint, called on each worker or on the chief alone) is written:
//! by the chief alone, TensorFlow's rule, so that two ranks never race on
//! one path; on the other workers `write` does not run. With `all_ok`
//! (collective: every worker calls write_on_chief, e.g. with workers_agree)
//! every worker returns once the chief's write ended, and the others throw
//! too if it failed; without it the others return at once (not collective:
//! chief-only callers such as BackupAndRestore stay valid).
//!   detail::write_on_chief(model.is_chief(), "save_weights", path, [&] { write_weights(path, ws); });
//!   detail::write_on_chief(model.is_chief(), "save_weights", path, write, detail::workers_agree(strategy));
template <class Write>
void write_on_chief(bool is_chief, std::string_view who, const std::filesystem::path& path, Write&& write,
                    const std::function<bool(bool)>& all_ok = {}) {
  if (!is_chief) {
    if (all_ok && !all_ok(true))
      throw Error(std::string(who) + ": " + path.string() + ": worker 0 (the chief), which writes it for every "
                  "worker, failed to write it (its own error says why)");
    return;
  }
  if (!all_ok) return (void)std::forward<Write>(write)();
  try {
    std::forward<Write>(write)();
  } catch (...) {
    try {
      (void)all_ok(false);  // the others learn of it; this worker's own error is the one it raises
    } catch (...) {
    }
    throw;
  }
  (void)all_ok(true);
}

//! Whether every worker of `s` says ok: collective across the workers of a
//! synchronous multi-worker strategy (every worker calls it), `ok` itself
//! with one worker.
inline std::function<bool(bool)> workers_agree(AnyStrategy& s) {
  return [&s](bool ok) {
    if (s.num_workers() <= 1) return ok;
    const double mine = ok ? 0.0 : 1.0;
    double bad = 0.0;
    s.run([&](AnyReplicaContext& ctx) {
      const bool lead = ctx.local_replica_id() == 0;
      double v = lead ? mine : 0.0;
      ctx.all_reduce(std::span<double>(&v, 1), Sum);
      if (lead) bad = v;
    });
    return bad == 0.0;
  };
}
}  // namespace detail

//! Writes the tensors to `path` as a "weights" strata file (io/tensor_file.hpp:
//! checksummed, written atomically).
inline void write_weights(const std::filesystem::path& path, const std::vector<NamedTensor>& ts) {
  io::TensorFile f{.kind = "weights", .meta = {}, .tensors = ts};
  io::write_tensor_file(path, f, "save_weights");
}

//! Reads every tensor of a weights file (or a checkpoint's weights);
//! throws strata::Error naming the file and what is wrong with it.
inline std::vector<NamedTensor> read_weights(const std::filesystem::path& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error("load_weights: " + path.string() + " is a directory, not a weights file");
  if (!std::filesystem::exists(path, ec)) throw Error("load_weights: " + path.string() + " does not exist");
  if (!io::is_tensor_file(path)) return detail::read_weights_v1(path);
  io::TensorFile f = io::read_tensor_file(path, "load_weights");
  if (f.kind == "checkpoint") {  // a checkpoint's weights: its tensors named "weights/..."
    std::vector<NamedTensor> out;
    for (auto& t : f.tensors)
      if (t.name.starts_with("weights/")) out.push_back({t.name.substr(8), std::move(t.value)});
    return out;
  }
  if (f.kind != "weights") throw Error("load_weights: " + path.string() + " is a strata " + f.kind + " file, not weights");
  return std::move(f.tensors);
}

}  // namespace strata::nn
