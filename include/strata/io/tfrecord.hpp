#pragma once
//! TFRecord files: the framing TensorFlow and TensorBoard read (event
//! files, datasets). Each record is
//!   uint64 length | uint32 masked CRC-32C of the length's 8 bytes |
//!   length bytes of payload | uint32 masked CRC-32C of the payload,
//! little-endian, the CRC masked as ((crc >> 15) | (crc << 17)) + 0xa282ead8.
//! The writer appends whole records and flushes them to the file, so a run
//! that dies leaves every record written before it readable; the reader
//! checks both checksums and names the record and byte offset that fails.
//!   strata::io::TfRecordWriter w{"run/events.out.tfevents.1.host"};
//!   w.write(payload);  w.flush();
//!   for (const std::string& r : strata::io::read_tfrecords(path)) ...

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <strata/core/crc32c.hpp>
#include <strata/core/error.hpp>

namespace strata::io {

//! TFRecord's masked CRC-32C of `bytes`.
inline std::uint32_t tfrecord_masked_crc(std::string_view bytes) noexcept {
  const std::uint32_t c = crc32c(std::as_bytes(std::span(bytes.data(), bytes.size())));
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

namespace detail {
inline void put_le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
}
inline std::uint64_t get_le(const char* p, int bytes) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
}  // namespace detail

//! Appends TFRecords to a file (created, or truncated, when opened).
class TfRecordWriter {
 public:
  explicit TfRecordWriter(std::filesystem::path path) : path_(std::move(path)) {
    if (path_.has_parent_path()) {
      std::error_code ec;
      std::filesystem::create_directories(path_.parent_path(), ec);
      if (ec) throw Error("TfRecordWriter: cannot create " + path_.parent_path().string() + ": " + ec.message());
    }
    f_ = std::fopen(path_.c_str(), "wb");
    if (!f_) throw Error("TfRecordWriter: cannot open " + path_.string() + ": " + std::strerror(errno));
  }
  TfRecordWriter(const TfRecordWriter&) = delete;
  TfRecordWriter& operator=(const TfRecordWriter&) = delete;
  ~TfRecordWriter() {
    if (f_) std::fclose(f_);
  }

  //! Appends one record (not yet flushed to the file).
  void write(std::string_view payload) {
    std::string head;
    detail::put_le(head, payload.size(), 8);
    const std::uint32_t head_crc = tfrecord_masked_crc(head);
    detail::put_le(head, head_crc, 4);
    std::string tail;
    detail::put_le(tail, tfrecord_masked_crc(payload), 4);
    if (std::fwrite(head.data(), 1, head.size(), f_) != head.size() ||
        std::fwrite(payload.data(), 1, payload.size(), f_) != payload.size() ||
        std::fwrite(tail.data(), 1, tail.size(), f_) != tail.size())
      throw Error("TfRecordWriter: cannot write to " + path_.string() + ": " + std::strerror(errno));
  }
  //! Hands what was written to the operating system (a crash of the
  //! process after this loses none of it).
  void flush() {
    if (std::fflush(f_) != 0)
      throw Error("TfRecordWriter: cannot write to " + path_.string() + ": " + std::strerror(errno));
  }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
  std::FILE* f_ = nullptr;
};

//! Every record of a TFRecord file, checked; a truncated or corrupt record
//! raises an Error naming it and its offset.
inline std::vector<std::string> read_tfrecords(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("read_tfrecords: cannot open " + path.string());
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  std::size_t at = 0;
  const auto fail = [&](const std::string& what) {
    return Error("read_tfrecords: " + path.string() + ": record " + std::to_string(out.size()) + " at byte " +
                 std::to_string(at) + ": " + what);
  };
  while (at < bytes.size()) {
    if (bytes.size() - at < 12) throw fail("truncated header");
    const std::uint64_t n = detail::get_le(bytes.data() + at, 8);
    if (detail::get_le(bytes.data() + at + 8, 4) != tfrecord_masked_crc(std::string_view(bytes.data() + at, 8)))
      throw fail("the length's checksum does not match");
    if (n > bytes.size() - at - 12 || bytes.size() - at - 12 - n < 4) throw fail("truncated payload");
    const std::string_view payload(bytes.data() + at + 12, n);
    if (detail::get_le(bytes.data() + at + 12 + n, 4) != tfrecord_masked_crc(payload))
      throw fail("the payload's checksum does not match");
    out.emplace_back(payload);
    at += 16 + n;
  }
  return out;
}

}  // namespace strata::io
