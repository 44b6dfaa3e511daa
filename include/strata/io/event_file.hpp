#pragma once
//! TensorBoard event files: TFRecords (io/tfrecord.hpp) around `Event`
//! protocol buffers, the format TensorFlow's summary writers produce and
//! TensorBoard reads. Only the messages a scalar needs are encoded, with
//! TensorFlow's field numbers (tensorflow/core/util/event.proto and
//! framework/summary.proto):
//!   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//!   Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
//! The file is named events.out.tfevents.<seconds>.<host> (TensorBoard
//! finds event files by that name) and starts with the version record
//! "brain.Event:2"; each scalar is flushed as it is written.
//!   strata::io::EventFileWriter w{"logs/train"};
//!   w.scalar("epoch_loss", 0.31f, 0);

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>

#include <strata/io/tfrecord.hpp>

namespace strata::io {

namespace detail {
//! The protocol-buffer wire format, as much of it as an Event needs.
struct ProtoWriter {
  std::string out;
  void varint(std::uint64_t v) {
    while (v >= 0x80) {
      out.push_back(static_cast<char>((v & 0x7F) | 0x80));
      v >>= 7;
    }
    out.push_back(static_cast<char>(v));
  }
  void key(int field, int wire_type) { varint(static_cast<std::uint64_t>(field) << 3 | static_cast<unsigned>(wire_type)); }
  void int64_field(int field, std::int64_t v) {
    key(field, 0);
    varint(static_cast<std::uint64_t>(v));  // negative: ten bytes, as protobuf's int64
  }
  void double_field(int field, double v) {
    key(field, 1);
    std::uint64_t bits;
    std::memcpy(&bits, &v, 8);
    put_le(out, bits, 8);
  }
  void float_field(int field, float v) {
    key(field, 5);
    std::uint32_t bits;
    std::memcpy(&bits, &v, 4);
    put_le(out, bits, 4);
  }
  void bytes_field(int field, std::string_view v) {
    key(field, 2);
    varint(v.size());
    out.append(v);
  }
};

inline double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

inline std::string host_name() {
  char h[256] = {};
  if (::gethostname(h, sizeof h - 1) != 0 || !h[0]) return "localhost";
  return h;
}
}  // namespace detail

//! The Event carrying `tag`'s scalar `value` at `step`, encoded.
inline std::string scalar_event(std::string_view tag, float value, std::int64_t step, double wall_time) {
  detail::ProtoWriter v;
  v.bytes_field(1, tag);
  v.float_field(2, value);
  detail::ProtoWriter summary;
  summary.bytes_field(1, v.out);
  detail::ProtoWriter e;
  e.double_field(1, wall_time);
  e.int64_field(2, step);
  e.bytes_field(5, summary.out);
  return std::move(e.out);
}

//! The first Event of every file: the format's version.
inline std::string version_event(double wall_time) {
  detail::ProtoWriter e;
  e.double_field(1, wall_time);
  e.bytes_field(3, "brain.Event:2");
  return std::move(e.out);
}

//! One event file in `dir` (created if needed).
class EventFileWriter {
 public:
  explicit EventFileWriter(const std::filesystem::path& dir) : w_(fresh_name(dir)) {
    w_.write(version_event(detail::unix_seconds()));
    w_.flush();
  }
  //! Appends `tag`'s value at `step` and flushes it.
  void scalar(std::string_view tag, double value, std::int64_t step) {
    w_.write(scalar_event(tag, static_cast<float>(value), step, detail::unix_seconds()));
    w_.flush();
  }
  [[nodiscard]] const std::filesystem::path& path() const noexcept { return w_.path(); }

 private:
  //! A name no file in `dir` has: a second writer in the same second and
  //! process (a run resumed in-process, a second fit) starts a file of its
  //! own instead of replacing the first one's.
  static std::filesystem::path fresh_name(const std::filesystem::path& dir) {
    const std::string base = "events.out.tfevents." + std::to_string(static_cast<std::int64_t>(detail::unix_seconds())) +
                             "." + detail::host_name() + "." + std::to_string(::getpid());
    std::error_code ec;
    std::filesystem::path p = dir / (base + ".strata");
    for (int n = 2; std::filesystem::exists(p, ec); ++n) p = dir / (base + "." + std::to_string(n) + ".strata");
    return p;
  }
  TfRecordWriter w_;
};

}  // namespace strata::io
