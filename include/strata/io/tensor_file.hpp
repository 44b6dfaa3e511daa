#pragma once
//! strata's one file container (weights files and checkpoints): named float
//! tensors and string metadata, self-describing, checksummed, written
//! atomically (temporary file, fsync, rename), read trusting nothing (every
//! failure a strata::Error naming the file and tensor). Little-endian:
//!   header   "STRATAF1" | u32 version (1) | u32 kind_len | kind | u64 manifest_bytes
//!            | u32 manifest_crc32c | u32 header_crc32c (of everything before it)
//!   manifest u32 meta_count | meta_count x {u32 len | key | u32 len | value}
//!            | u32 tensor_count | tensor_count x {u32 len | name | u32 dtype (1: f32) | u32 rank
//!            | rank x u64 dim | u64 bytes | u32 crc32c}
//!   data     each tensor's bytes, in manifest order, back to back; the file ends there
//! What the reader checks, and the atomic write: docs/fault-tolerance.md ("The file format").
//!   strata::io::TensorFile f{.kind = "checkpoint"};
//!   f.meta.emplace_back("step", "120");  f.tensors.push_back({"dense/kernel", t});
//!   strata::io::write_tensor_file(path, f);  auto g = strata::io::read_tensor_file(path, "load_checkpoint");

#include <atomic>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

#include <strata/core/crc32c.hpp>
#include <strata/core/error.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::io {

static_assert(std::endian::native == std::endian::little, "strata files are written little-endian");

//! One named tensor of a file.
struct NamedTensor {
  std::string name;
  Tensor<float> value;
};

//! What a file holds: its kind ("weights", "checkpoint"), string metadata, tensors.
struct TensorFile {
  std::string kind;
  std::vector<std::pair<std::string, std::string>> meta;
  std::vector<NamedTensor> tensors;

  //! The metadata value of `key`, if present.
  [[nodiscard]] const std::string* find(std::string_view key) const {
    for (const auto& [k, v] : meta)
      if (k == key) return &v;
    return nullptr;
  }
  //! The tensor named `name`, if present.
  [[nodiscard]] const NamedTensor* tensor(std::string_view name) const {
    for (const auto& t : tensors)
      if (t.name == name) return &t;
    return nullptr;
  }
};

inline constexpr char tensor_file_magic[8] = {'S', 'T', 'R', 'A', 'T', 'A', 'F', '1'};
inline constexpr std::uint32_t tensor_file_version = 1;
inline constexpr std::uint32_t dtype_f32 = 1;

namespace detail {

//! Appends little-endian values and strings to a byte vector.
class ByteWriter {
 public:
  template <class T>
  void put(T v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof v);
  }
  void put_string(std::string_view s) {
    put(static_cast<std::uint32_t>(s.size()));
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    bytes.insert(bytes.end(), p, p + s.size());
  }
  std::vector<std::byte> bytes;
};

//! Reads little-endian values from bytes already in memory; running past
//! the end is an Error naming the file and what was being read.
class ByteReader {
 public:
  ByteReader(std::span<const std::byte> b, std::string where) : b_(b), where_(std::move(where)) {}
  template <class T>
  T get(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, b_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::string get_string(const char* what, std::size_t max_len) {
    const auto n = get<std::uint32_t>(what);
    if (n > max_len) throw Error(where_ + " is corrupt: " + what + " of " + std::to_string(n) + " bytes");
    need(n, what);
    std::string s(reinterpret_cast<const char*>(b_.data() + at_), n);
    at_ += n;
    return s;
  }
  [[nodiscard]] std::size_t left() const noexcept { return b_.size() - at_; }

 private:
  void need(std::size_t n, const char* what) const {
    if (b_.size() - at_ < n) throw Error(where_ + " is corrupt: the manifest ends inside " + what);
  }
  std::span<const std::byte> b_;
  std::string where_;
  std::size_t at_ = 0;
};

inline std::span<const std::byte> bytes_of(const Tensor<float>& t) {
  return {reinterpret_cast<const std::byte*>(t.data()), t.bytes()};
}

//! Writes all of `b` to `fd` (retrying short writes and EINTR).
inline void write_all(int fd, std::span<const std::byte> b, const std::string& what) {
  while (!b.empty()) {
    const ssize_t n = ::write(fd, b.data(), b.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(what + ": write failed: " + std::strerror(errno));
    b = b.subspan(static_cast<std::size_t>(n));
  }
}

//! A file descriptor closed on scope exit.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

inline std::uint64_t temp_counter() {
  static std::atomic<std::uint64_t> n{0};
  return n.fetch_add(1);
}

}  // namespace detail

//! The temporary name a write to `path` goes through (removed on failure;
//! a killed writer may leave one, which readers never look at).
inline std::filesystem::path temp_path_for(const std::filesystem::path& path) {
  return path.string() + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(detail::temp_counter());
}

//! Writes `f` to `path` atomically (temporary file, fsync, rename, fsync of
//! the directory). `who` starts error messages ("save_weights", ...).
inline void write_tensor_file(const std::filesystem::path& path, const TensorFile& f,
                              const std::string& who = "write_tensor_file") {
  detail::ByteWriter m;
  m.put(static_cast<std::uint32_t>(f.meta.size()));
  for (const auto& [k, v] : f.meta) {
    m.put_string(k);
    m.put_string(v);
  }
  m.put(static_cast<std::uint32_t>(f.tensors.size()));
  for (const auto& t : f.tensors) {
    m.put_string(t.name);
    m.put(dtype_f32);
    m.put(static_cast<std::uint32_t>(t.value.shape().rank()));
    for (auto d : t.value.shape().dims()) m.put(static_cast<std::uint64_t>(d));
    m.put(static_cast<std::uint64_t>(t.value.bytes()));
    m.put(crc32c(detail::bytes_of(t.value)));
  }
  detail::ByteWriter h;
  for (char c : tensor_file_magic) h.put(c);
  h.put(tensor_file_version);
  h.put_string(f.kind);
  h.put(static_cast<std::uint64_t>(m.bytes.size()));
  h.put(crc32c(m.bytes));
  h.put(crc32c(h.bytes));

  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error(who + ": " + path.string() + " is a directory, not a file");
  const auto tmp = temp_path_for(path);
  const std::string what = who + ": " + tmp.string();
  try {
    {
      detail::Fd fd{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
      if (fd.fd < 0) throw Error(who + ": cannot create " + tmp.string() + ": " + std::strerror(errno));
      detail::write_all(fd.fd, h.bytes, what);
      detail::write_all(fd.fd, m.bytes, what);
      for (const auto& t : f.tensors) detail::write_all(fd.fd, detail::bytes_of(t.value), what);
      if (::fsync(fd.fd) != 0) throw Error(what + ": fsync failed: " + std::strerror(errno));
    }
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw Error(who + ": cannot rename " + tmp.string() + " to " + path.string() + ": " + std::strerror(errno));
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  // The rename is durable once the directory is.
  const auto dir = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  detail::Fd d{::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC)};
  if (d.fd >= 0) ::fsync(d.fd);
}

//! Whether `path` starts with the container's magic (a cheap test, no checks).
inline bool is_tensor_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[8];
  return in.read(magic, 8) && std::memcmp(magic, tensor_file_magic, 8) == 0;
}

//! What read_tensor_file reads: the whole file, or its kind and metadata
//! only (the header and manifest verified; the tensors neither read nor
//! checked: a cheap look at whose file it is).
enum class ReadPart { Everything, MetadataOnly };

//! Reads and verifies a whole file (or, with ReadPart::MetadataOnly, its
//! header and metadata); `who` starts error messages.
inline TensorFile read_tensor_file(const std::filesystem::path& path, const std::string& who = "read_tensor_file",
                                   ReadPart part = ReadPart::Everything) {
  const std::string where = who + ": " + path.string();
  std::error_code ec;
  const auto st = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(st)) throw Error(where + " does not exist");
  if (std::filesystem::is_directory(st)) throw Error(where + " is a directory, not a file");
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) throw Error(where + " cannot be read: " + ec.message());
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(where + " cannot be opened");

  auto read_exact = [&](void* dst, std::size_t n, const std::string& what) {
    if (!in.read(static_cast<char*>(dst), static_cast<std::streamsize>(n)))
      throw Error(where + " is truncated (it ends inside " + what + ")");
  };
  char magic[8];
  if (size < 8 || (read_exact(magic, 8, "the header"), std::memcmp(magic, tensor_file_magic, 8) != 0))
    throw Error(where + " is not a strata file (bad magic)");
  detail::ByteWriter h;  // the header as read, for its checksum
  for (char c : magic) h.put(c);
  auto get = [&]<class T>(T& v, const char* what) {
    read_exact(&v, sizeof v, what);
    h.put(v);
  };
  std::uint32_t version = 0, kind_len = 0;
  get(version, "the header");
  if (version != tensor_file_version)
    throw Error(where + " has format version " + std::to_string(version) + "; this strata reads version " +
                std::to_string(tensor_file_version));
  get(kind_len, "the header");
  if (kind_len > 64) throw Error(where + " is corrupt: a file kind of " + std::to_string(kind_len) + " bytes");
  TensorFile f;
  f.kind.resize(kind_len);
  read_exact(f.kind.data(), kind_len, "the header");
  for (char c : f.kind) h.put(c);
  std::uint64_t manifest_bytes = 0;
  std::uint32_t manifest_crc = 0, header_crc = 0;
  get(manifest_bytes, "the header");
  get(manifest_crc, "the header");
  read_exact(&header_crc, 4, "the header");
  if (header_crc != crc32c(h.bytes)) throw Error(where + " is corrupt: its header's checksum does not match");
  const std::uint64_t header_bytes = h.bytes.size() + 4;
  if (manifest_bytes > size - header_bytes)
    throw Error(where + " is truncated: its manifest of " + std::to_string(manifest_bytes) + " bytes runs past the end");
  std::vector<std::byte> mb(manifest_bytes);
  read_exact(mb.data(), mb.size(), "the manifest");
  if (crc32c(mb) != manifest_crc) throw Error(where + " is corrupt: its manifest's checksum does not match");

  struct Entry {
    std::string name;
    Shape shape;
    std::uint64_t bytes;
    std::uint32_t crc;
  };
  detail::ByteReader r(mb, where);
  const auto meta_count = r.get<std::uint32_t>("the metadata count");
  if (meta_count > r.left() / 8) throw Error(where + " is corrupt: " + std::to_string(meta_count) + " metadata entries");
  for (std::uint32_t i = 0; i < meta_count; ++i) {
    auto k = r.get_string("a metadata key", 4096);
    auto v = r.get_string("a metadata value", std::size_t{1} << 24);
    f.meta.emplace_back(std::move(k), std::move(v));
  }
  if (part == ReadPart::MetadataOnly) return f;
  const auto count = r.get<std::uint32_t>("the tensor count");
  if (count > r.left() / 24) throw Error(where + " is corrupt: " + std::to_string(count) + " tensors");
  std::vector<Entry> entries;
  std::uint64_t data_bytes = 0;
  for (std::uint32_t i = 0; i < count; ++i) {
    Entry e;
    e.name = r.get_string("a tensor name", 4096);
    const auto dtype = r.get<std::uint32_t>("a dtype");
    if (dtype != dtype_f32)
      throw Error(where + ": tensor " + e.name + " has dtype code " + std::to_string(dtype) + " (only 1, f32, is known)");
    const auto rank = r.get<std::uint32_t>("a rank");
    if (rank > 8) throw Error(where + " is corrupt: tensor " + e.name + " of rank " + std::to_string(rank));
    std::vector<std::size_t> dims(rank);
    std::uint64_t elems = 1;
    for (auto& d : dims) {
      d = r.get<std::uint64_t>("a dimension");
      if (d != 0 && elems > size / d) throw Error(where + " is corrupt: tensor " + e.name + " is larger than the file");
      elems *= d;
    }
    e.bytes = r.get<std::uint64_t>("a tensor size");
    e.crc = r.get<std::uint32_t>("a checksum");
    if (e.bytes != elems * sizeof(float))
      throw Error(where + " is corrupt: tensor " + e.name + " has " + std::to_string(e.bytes) + " bytes for " +
                  std::to_string(elems) + " f32 elements");
    e.shape = Shape(std::move(dims));
    data_bytes += e.bytes;
    if (data_bytes > size) throw Error(where + " is corrupt: its tensors are larger than the file");
    entries.push_back(std::move(e));
  }
  if (r.left() != 0) throw Error(where + " is corrupt: " + std::to_string(r.left()) + " stray bytes in its manifest");
  const std::uint64_t expected = header_bytes + manifest_bytes + data_bytes;
  if (size < expected)
    throw Error(where + " is truncated: " + std::to_string(size) + " bytes, its manifest describes " +
                std::to_string(expected));
  if (size > expected)
    throw Error(where + " has " + std::to_string(size - expected) + " trailing bytes after its tensors");
  for (auto& e : entries) {
    Tensor<float> t{e.shape};
    read_exact(t.data(), t.bytes(), "tensor " + e.name);
    if (crc32c(detail::bytes_of(t)) != e.crc)
      throw Error(where + " is corrupt: tensor " + e.name + "'s checksum does not match its data");
    for (std::size_t i = 0; i < t.size(); ++i)
      if (!std::isfinite(t.data()[i]))
        throw Error(where + ": tensor " + e.name + " holds a non-finite value (" + std::to_string(t.data()[i]) +
                    ") at element " + std::to_string(i));
    f.tensors.push_back({std::move(e.name), std::move(t)});
  }
  return f;
}

}  // namespace strata::io
