#pragma once
//! The IDX format of the MNIST files: a 4-byte magic (two zero bytes, a type
//! code, the rank), one big-endian u32 per dimension, then the elements,
//! row-major and big-endian.
//!   auto a = strata::data::read_idx("train-images-idx3-ubyte");   // dims {60000, 28, 28}
//!   strata::Tensor<float> x = strata::data::idx_to_float(a, 1.0f / 255);

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/tensor/shape.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::data {

//! The IDX type codes.
//!   strata::data::write_idx(path, strata::data::IdxType::u8, {2, 2}, bytes);
//!   if (a.type_code == strata::data::IdxType::f32) ...
struct IdxType {
  static constexpr std::uint8_t u8 = 0x08;
  static constexpr std::uint8_t i8 = 0x09;
  static constexpr std::uint8_t i16 = 0x0B;
  static constexpr std::uint8_t i32 = 0x0C;
  static constexpr std::uint8_t f32 = 0x0D;
  static constexpr std::uint8_t f64 = 0x0E;
};

//! The contents of an IDX file: the type code, the extents, and the element
//! bytes exactly as stored (big-endian for multi-byte types).
//!   auto a = strata::data::read_idx(path);
//!   std::size_t n = a.dims[0];
struct IdxArray {
  std::uint8_t type_code = 0;
  std::vector<std::size_t> dims;
  std::vector<unsigned char> data;
};

namespace detail {

//! Bytes per element of an IDX type, 0 for an unknown code.
constexpr std::size_t idx_element_size(std::uint8_t code) noexcept {
  switch (code) {
    case IdxType::u8:
    case IdxType::i8: return 1;
    case IdxType::i16: return 2;
    case IdxType::i32:
    case IdxType::f32: return 4;
    case IdxType::f64: return 8;
    default: return 0;
  }
}

inline std::string hex_byte(unsigned v) {
  static constexpr char digits[] = "0123456789ABCDEF";
  return std::string("0x") + digits[(v >> 4) & 0xF] + digits[v & 0xF];
}

inline std::string idx_type_name(std::uint8_t code) {
  switch (code) {
    case IdxType::u8: return "u8 (0x08)";
    case IdxType::i8: return "i8 (0x09)";
    case IdxType::i16: return "i16 (0x0B)";
    case IdxType::i32: return "i32 (0x0C)";
    case IdxType::f32: return "f32 (0x0D)";
    case IdxType::f64: return "f64 (0x0E)";
    default: return "unknown type " + hex_byte(code);
  }
}

inline constexpr const char* idx_known_types =
    "0x08 (u8), 0x09 (i8), 0x0B (i16), 0x0C (i32), 0x0D (f32) or 0x0E (f64)";
inline constexpr std::size_t idx_max_rank = 4;

inline std::string dims_str(const std::vector<std::size_t>& dims) { return Shape(dims).str(); }

//! Sets `out` to the bytes the elements of `dims` take; false on overflow
//! (a corrupt header must not wrap around to a small, plausible size).
inline bool idx_data_bytes(const std::vector<std::size_t>& dims, std::size_t esize, std::size_t& out) noexcept {
  std::size_t n = esize;
  for (auto d : dims) {
    if (d != 0 && n > std::numeric_limits<std::size_t>::max() / d) return false;
    n *= d;
  }
  out = n;
  return true;
}

struct FileCloser {
  void operator()(std::FILE* f) const noexcept { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

inline std::uint64_t load_be(const unsigned char* p, std::size_t n) noexcept {
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

//! Checks that the bytes match the dims (an IdxArray may be built by hand).
inline void check_idx_array(const IdxArray& a, const char* fn) {
  const std::size_t esize = idx_element_size(a.type_code);
  if (esize == 0)
    throw Error(std::string(fn) + ": unknown IDX type code " + hex_byte(a.type_code) + "; expected " +
                idx_known_types);
  std::size_t bytes = 0;
  if (!idx_data_bytes(a.dims, esize, bytes))
    throw ShapeError(std::string(fn) + ": dims " + dims_str(a.dims) + " hold more bytes than fit in memory");
  if (a.data.size() != bytes)
    throw ShapeError(std::string(fn) + ": dims " + dims_str(a.dims) + " of " + idx_type_name(a.type_code) +
                     " need " + std::to_string(bytes) + " bytes but the array holds " +
                     std::to_string(a.data.size()));
}

//! Element i of a checked array as a double (exact: every IDX type fits).
inline double idx_value(const IdxArray& a, std::size_t i) noexcept {
  const unsigned char* p = a.data.data();
  switch (a.type_code) {
    case IdxType::u8: return p[i];
    case IdxType::i8: return static_cast<std::int8_t>(p[i]);
    case IdxType::i16: return static_cast<std::int16_t>(static_cast<std::uint16_t>(load_be(p + 2 * i, 2)));
    case IdxType::i32: return static_cast<std::int32_t>(static_cast<std::uint32_t>(load_be(p + 4 * i, 4)));
    case IdxType::f32: return std::bit_cast<float>(static_cast<std::uint32_t>(load_be(p + 4 * i, 4)));
    default: return std::bit_cast<double>(load_be(p + 8 * i, 8));
  }
}

}  // namespace detail

namespace detail {

//! The longest IDX header: the magic and idx_max_rank extents.
inline constexpr std::size_t idx_max_header = 4 + 4 * idx_max_rank;

//! Parses and checks the header of an IDX source of `size` bytes whose first
//! min(size, idx_max_header) bytes are `head`: the magic, a known type code,
//! a rank of 1 to 4, extents whose product fits in memory and matches the
//! bytes that follow exactly. Fills a.type_code and a.dims; returns the
//! header's length. Throws strata::Error starting with `where`.
inline std::size_t parse_idx_header(std::span<const unsigned char> head, std::uintmax_t size, const std::string& where,
                                    IdxArray& a) {
  if (size < 4 || head.size() < 4)
    throw Error(where + ": is " + std::to_string(size) +
                " bytes, too short for an IDX file (its magic number alone is 4 bytes)");
  if (head[0] != 0 || head[1] != 0)
    throw Error(where + ": not an IDX file: it starts with bytes " + hex_byte(head[0]) + " " + hex_byte(head[1]) +
                ", expected 0x00 0x00" +
                (head[0] == 0x1F && head[1] == 0x8B ? " (0x1F 0x8B starts a gzip file: gunzip it first)" : ""));
  a.type_code = head[2];
  const std::size_t esize = idx_element_size(a.type_code);
  if (esize == 0)
    throw Error(where + ": unknown IDX type code " + hex_byte(a.type_code) + "; expected " + idx_known_types);
  const std::size_t rank = head[3];
  if (rank < 1 || rank > idx_max_rank)
    throw Error(where + ": IDX rank " + std::to_string(rank) + " is not supported; expected 1 to " +
                std::to_string(idx_max_rank) + " dimensions");
  const std::size_t header = 4 + 4 * rank;
  if (size < header || head.size() < header)
    throw Error(where + ": is " + std::to_string(size) + " bytes, shorter than its own header (" +
                std::to_string(header) + " bytes for rank " + std::to_string(rank) + ")");
  a.dims.clear();
  for (std::size_t d = 0; d < rank; ++d) a.dims.push_back(static_cast<std::size_t>(load_be(head.data() + 4 + 4 * d, 4)));

  std::size_t bytes = 0;
  if (!idx_data_bytes(a.dims, esize, bytes))
    throw Error(where + ": its header declares dims " + dims_str(a.dims) + " of " + idx_type_name(a.type_code) +
                ", more bytes than fit in memory (corrupt header?)");
  const std::uintmax_t present = size - header;
  if (present != bytes)
    throw Error(where + ": its header promises dims " + dims_str(a.dims) + " of " + idx_type_name(a.type_code) +
                " = " + std::to_string(bytes) + " data bytes, but " + std::to_string(present) + " bytes follow the " +
                std::to_string(header) + "-byte header (" +
                (present < bytes ? "truncated: " + std::to_string(bytes - present) + " bytes missing"
                                 : std::to_string(present - bytes) + " trailing bytes") +
                ")");
  return header;
}

}  // namespace detail

//! Reads and validates an IDX file: a regular file (not a directory, device
//! or pipe), the magic, a known type code, a rank of 1 to 4, and a size of
//! exactly header + elements. Throws strata::Error naming the file and what
//! is wrong (never std::filesystem::filesystem_error).
//!   strata::data::IdxArray a = strata::data::read_idx(dir / "train-labels-idx1-ubyte");
//!   // a.type_code == IdxType::u8, a.dims == {60000}
inline IdxArray read_idx(const std::filesystem::path& path) {
  const std::string where = "read_idx: " + path.string();
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (std::filesystem::is_directory(st)) throw Error(where + ": is a directory, not an IDX file");
  if (std::filesystem::exists(st) && !std::filesystem::is_regular_file(st))
    throw Error(where + ": is not a regular file (a device, pipe or socket), so not an IDX file");
  errno = 0;
  detail::File f(std::fopen(path.c_str(), "rb"));
  if (!f) throw Error(where + ": cannot open: " + std::strerror(errno));
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) throw Error(where + ": cannot read its size: " + ec.message());

  unsigned char head[detail::idx_max_header] = {};
  const std::size_t want = static_cast<std::size_t>(std::min<std::uintmax_t>(size, sizeof head));
  errno = 0;
  const std::size_t got = std::fread(head, 1, want, f.get());
  if (got != want && std::ferror(f.get()))
    throw Error(where + ": cannot read: " + (errno ? std::strerror(errno) : "a read error"));
  IdxArray a;
  // a file that shrank since its size was read is caught as a short header or short data
  const std::size_t header = detail::parse_idx_header({head, got}, size, where, a);
  const std::size_t bytes = static_cast<std::size_t>(size - header);
  a.data.resize(bytes);
  errno = 0;
  if (std::fseek(f.get(), static_cast<long>(header), SEEK_SET) != 0 ||
      (bytes && std::fread(a.data.data(), 1, bytes, f.get()) != bytes))
    throw Error(where + ": read failed after the header: " +
                (std::ferror(f.get()) ? std::string(errno ? std::strerror(errno) : "a read error")
                                      : "the file shrank while being read"));
  return a;
}

//! Parses an IDX file already in memory, with the checks of read_idx;
//! `name` says where the bytes came from in its errors.
//!   std::vector<unsigned char> raw = download();
//!   strata::data::IdxArray a = strata::data::read_idx_bytes(raw, "t10k-labels-idx1-ubyte (download)");
inline IdxArray read_idx_bytes(std::span<const unsigned char> bytes, std::string_view name = "(bytes in memory)") {
  const std::string where = "read_idx: " + std::string(name);
  IdxArray a;
  const std::size_t header =
      detail::parse_idx_header(bytes.first(std::min(bytes.size(), detail::idx_max_header)), bytes.size(), where, a);
  a.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(header), bytes.end());
  return a;
}

//! Writes an IDX file (for tests and tools): `bytes` are the elements exactly
//! as stored, big-endian for multi-byte types, and must match the dims.
//!   std::vector<unsigned char> px(2 * 28 * 28);
//!   strata::data::write_idx(dir / "x-idx3-ubyte", strata::data::IdxType::u8, {2, 28, 28}, px);
inline void write_idx(const std::filesystem::path& path, std::uint8_t type_code, const std::vector<std::size_t>& dims,
                      std::span<const unsigned char> bytes) {
  const std::string where = "write_idx: " + path.string();
  const std::size_t esize = detail::idx_element_size(type_code);
  if (esize == 0)
    throw Error(where + ": unknown IDX type code " + detail::hex_byte(type_code) + "; expected " +
                detail::idx_known_types);
  if (dims.empty() || dims.size() > detail::idx_max_rank)
    throw Error(where + ": IDX rank " + std::to_string(dims.size()) + " is not supported; expected 1 to " +
                std::to_string(detail::idx_max_rank) + " dimensions");
  for (auto d : dims)
    if (d > 0xFFFFFFFFu)
      throw Error(where + ": extent " + std::to_string(d) + " of dims " + detail::dims_str(dims) +
                  " does not fit the format's 32-bit extents");
  std::size_t need = 0;
  if (!detail::idx_data_bytes(dims, esize, need) || need != bytes.size())
    throw Error(where + ": dims " + detail::dims_str(dims) + " of " + detail::idx_type_name(type_code) + " need " +
                std::to_string(need) + " bytes but " + std::to_string(bytes.size()) + " were given");

  std::vector<unsigned char> header{0, 0, type_code, static_cast<unsigned char>(dims.size())};
  for (auto d : dims)
    for (int shift = 24; shift >= 0; shift -= 8) header.push_back(static_cast<unsigned char>(d >> shift));
  errno = 0;
  detail::File f(std::fopen(path.c_str(), "wb"));
  if (!f) throw Error(where + ": cannot create: " + std::strerror(errno));
  if (std::fwrite(header.data(), 1, header.size(), f.get()) != header.size() ||
      (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f.get()) != bytes.size()) ||
      std::fflush(f.get()) != 0)
    throw Error(where + ": write failed: " + std::strerror(errno));
  if (std::fclose(f.release()) != 0) throw Error(where + ": write failed on close: " + std::strerror(errno));
}

//! The elements of any IDX type as floats of shape dims, each multiplied by
//! `scale` (1/255 maps MNIST pixels to [0, 1]).
//!   auto a = strata::data::read_idx(path);
//!   strata::Tensor<float> x = strata::data::idx_to_float(a, 1.0f / 255);
inline Tensor<float> idx_to_float(const IdxArray& a, float scale) {
  detail::check_idx_array(a, "idx_to_float");
  Tensor<float> out{Shape(a.dims)};
  float* o = out.data();
  const std::size_t n = out.size();
  if (a.type_code == IdxType::u8) {
    // A table: one load per pixel instead of a conversion and a multiply.
    float lut[256];
    for (int v = 0; v < 256; ++v) lut[v] = static_cast<float>(v) * scale;
    const unsigned char* p = a.data.data();
    for (std::size_t i = 0; i < n; ++i) o[i] = lut[p[i]];
  } else if (a.type_code == IdxType::f64) {
    for (std::size_t i = 0; i < n; ++i) o[i] = static_cast<float>(detail::idx_value(a, i) * static_cast<double>(scale));
  } else {
    for (std::size_t i = 0; i < n; ++i) o[i] = static_cast<float>(detail::idx_value(a, i)) * scale;
  }
  return out;
}

//! The elements of an integer IDX type (u8, i8, i16, i32) as int32 of shape
//! dims. Floating-point types throw: use idx_to_float.
//!   auto a = strata::data::read_idx(dir / "train-labels-idx1-ubyte");
//!   strata::Tensor<std::int32_t> y = strata::data::idx_to_int32(a);
inline Tensor<std::int32_t> idx_to_int32(const IdxArray& a) {
  detail::check_idx_array(a, "idx_to_int32");
  if (a.type_code == IdxType::f32 || a.type_code == IdxType::f64)
    throw Error("idx_to_int32: the array holds " + detail::idx_type_name(a.type_code) +
                " floating-point values, not integers; use idx_to_float");
  Tensor<std::int32_t> out{Shape(a.dims)};
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::int32_t>(detail::idx_value(a, i));
  return out;
}

}  // namespace strata::data
