#pragma once
//! The weights file format of save_weights / load_weights: a small binary
//! file, little-endian, all-or-nothing on load.
//!   "STRATAW1" | u32 count | count x { u32 name_len | name | u32 rank | rank x u64 dim | f32 data }

#include <bit>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::nn {

//! One named tensor of a weights file.
struct NamedTensor {
  std::string name;
  Tensor<float> value;
};

namespace detail {
static_assert(std::endian::native == std::endian::little, "strata weights files are written little-endian");
inline constexpr char weights_magic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'W', '1'};

template <class T>
void put(std::ofstream& f, T v) { f.write(reinterpret_cast<const char*>(&v), sizeof v); }

template <class T>
T get(std::ifstream& f, const std::filesystem::path& p) {
  T v{};
  if (!f.read(reinterpret_cast<char*>(&v), sizeof v))
    throw Error("load_weights: " + p.string() + " is truncated (ended inside a header)");
  return v;
}
}  // namespace detail

//! Writes the tensors to `path` (through a temporary file renamed into
//! place, so a crash never leaves a half-written file under the name).
inline void write_weights(const std::filesystem::path& path, const std::vector<NamedTensor>& ts) {
  const auto tmp = std::filesystem::path(path.string() + ".tmp");
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) throw Error("save_weights: cannot open " + tmp.string() + " for writing");
    f.write(detail::weights_magic, sizeof detail::weights_magic);
    detail::put<std::uint32_t>(f, static_cast<std::uint32_t>(ts.size()));
    for (const auto& t : ts) {
      detail::put<std::uint32_t>(f, static_cast<std::uint32_t>(t.name.size()));
      f.write(t.name.data(), static_cast<std::streamsize>(t.name.size()));
      detail::put<std::uint32_t>(f, static_cast<std::uint32_t>(t.value.shape().rank()));
      for (auto d : t.value.shape().dims()) detail::put<std::uint64_t>(f, d);
      f.write(reinterpret_cast<const char*>(t.value.data()), static_cast<std::streamsize>(t.value.bytes()));
    }
    if (!f.flush()) throw Error("save_weights: writing " + tmp.string() + " failed");
  }
  std::filesystem::rename(tmp, path);
}

//! Reads every tensor of a weights file; throws strata::Error naming the
//! file and what is wrong with it.
inline std::vector<NamedTensor> read_weights(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("load_weights: cannot open " + path.string());
  const auto file_size = std::filesystem::file_size(path);
  char magic[8];
  if (!f.read(magic, 8) || std::memcmp(magic, detail::weights_magic, 8) != 0)
    throw Error("load_weights: " + path.string() + " is not a strata weights file (bad magic)");
  const auto count = detail::get<std::uint32_t>(f, path);
  std::vector<NamedTensor> out;
  for (std::uint32_t i = 0; i < count; ++i) {
    const auto len = detail::get<std::uint32_t>(f, path);
    if (len > 4096) throw Error("load_weights: " + path.string() + " is corrupt (tensor name of " + std::to_string(len) + " bytes)");
    std::string name(len, '\0');
    if (!f.read(name.data(), len)) throw Error("load_weights: " + path.string() + " is truncated");
    const auto rank = detail::get<std::uint32_t>(f, path);
    if (rank > 8) throw Error("load_weights: " + path.string() + " is corrupt (tensor " + name + " of rank " + std::to_string(rank) + ")");
    std::vector<std::size_t> dims(rank);
    std::uint64_t elems = 1;
    for (auto& d : dims) {
      d = detail::get<std::uint64_t>(f, path);
      if (d && elems > file_size / d)
        throw Error("load_weights: " + path.string() + " is corrupt (tensor " + name + " larger than the file)");
      elems *= d;
    }
    if (elems * sizeof(float) > file_size)
      throw Error("load_weights: " + path.string() + " is corrupt (tensor " + name + " larger than the file)");
    Tensor<float> t{Shape(std::move(dims))};
    if (!f.read(reinterpret_cast<char*>(t.data()), static_cast<std::streamsize>(t.bytes())))
      throw Error("load_weights: " + path.string() + " is truncated (inside tensor " + name + ")");
    out.push_back({std::move(name), std::move(t)});
  }
  if (f.peek() != std::char_traits<char>::eof())
    throw Error("load_weights: " + path.string() + " has trailing bytes after its " + std::to_string(count) + " tensors");
  return out;
}

}  // namespace strata::nn
