#pragma once
//! The run's timeline across MPI ranks (core/trace_session.hpp): one
//! trace file for the whole job, written by the chief (rank 0), with one
//! process per rank (pid = rank, "worker r") on the chief's clock.
//!   strata::trace::MpiSession trace{strata::MpiCommunicator::world(), {.path = "run.json"}};  // every rank
//!   ... train ...;  trace.finish();   // collective: the chief merges every rank's part
//!
//! Clocks: before recording, each rank measures the offset of its steady
//! clock from the chief's by ping-pong over the communicator (the round
//! trip with the shortest time of several, its midpoint taken as the
//! chief's reading: accurate to half that round trip, which each rank's
//! process metadata records as clock_uncertainty_ns), so ranks on other
//! hosts line up. While the run goes on, the chief writes `path` and every
//! other rank `path.rank<r>` (each complete JSON after every flush: a job
//! that dies leaves every rank's part readable); finish() sends the parts
//! to the chief, which appends them to `path` and removes them.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <strata/comm/mpi/communicator.hpp>
#include <strata/core/error.hpp>
#include <strata/core/trace_session.hpp>

namespace strata::trace {

class MpiSession {
 public:
  //! Collective over `comm` (kept by reference: it must outlive the session).
  MpiSession(MpiCommunicator& comm, Options o) : comm_(comm), path_(o.path) {
    const std::int64_t offset = clock_offset();
    std::int64_t origin[1] = {now_ns()};
    comm_.broadcast(std::span<std::int64_t>(origin), 0);  // the chief's start is 0 on every rank
    o.clock_shift_ns = offset - origin[0];
    o.pid = comm_.rank();
    if (o.process_name.empty()) o.process_name = "worker " + std::to_string(comm_.rank());
    if (!o.path.empty() && comm_.rank() != 0) o.path = part_path(comm_.rank());
    session_.emplace(std::move(o));
    instant("clock aligned to worker 0", Category::Other,
            {{"offset_ns", offset}, {"uncertainty_ns", uncertainty_ns_}});
  }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
  //! Finishes this rank's part; merges only in finish() (a collective a
  //! destructor unwinding an exception must not wait in).
  ~MpiSession() = default;

  //! Collective: every rank writes the rest of its part, the chief gathers
  //! the parts into the trace file (in rank order) and removes them.
  void finish() {
    if (finished_) return;
    finished_ = true;
    session_->finish();
    if (path_.empty()) return;
    const int me = comm_.rank(), n = comm_.size();
    if (me != 0) {
      const std::string part = read_events(part_path(me));
      std::filesystem::remove(part_path(me));
      send_text(part);
      return;
    }
    std::string all;
    for (int r = 1; r < n; ++r) {
      const std::string part = recv_text(r);
      if (!part.empty()) all += ",\n" + part;
    }
    append(all);
  }

  //! This rank's recording (totals, flush).
  [[nodiscard]] Session& local() noexcept { return *session_; }
  //! Half the shortest round trip of the clock alignment (0 on the chief).
  [[nodiscard]] std::int64_t clock_uncertainty_ns() const noexcept { return uncertainty_ns_; }
  [[nodiscard]] std::string part_path(int rank) const { return path_ + ".rank" + std::to_string(rank); }

 private:
  //! This rank's clock's offset from the chief's (chief's reading minus ours).
  std::int64_t clock_offset() {
    constexpr int rounds = 8;
    const int me = comm_.rank();
    std::int64_t best_offset = 0, best_rtt = -1;
    for (int r = 1; r < comm_.size(); ++r) {
      for (int k = 0; k < rounds; ++k) {
        std::int64_t t[1] = {0};
        if (me == 0) {
          comm_.recv(std::span<std::int64_t>(t), r, kTag);
          t[0] = now_ns();
          comm_.send(std::span<const std::int64_t>(t), r, kTag);
        } else if (me == r) {
          const std::int64_t t0 = now_ns();
          t[0] = t0;
          comm_.send(std::span<const std::int64_t>(t), 0, kTag);
          comm_.recv(std::span<std::int64_t>(t), 0, kTag);
          const std::int64_t t2 = now_ns(), rtt = t2 - t0;
          if (best_rtt < 0 || rtt < best_rtt) {
            best_rtt = rtt;
            best_offset = t[0] - (t0 + t2) / 2;
          }
        }
      }
    }
    uncertainty_ns_ = best_rtt < 0 ? 0 : best_rtt / 2;
    return best_offset;
  }

  //! The events of a part file: what lies between its "[" and its closing "]".
  static std::string read_events(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::string s{std::istreambuf_iterator<char>(in), {}};
    const auto open = s.find('['), close = s.rfind(']');
    if (open == std::string::npos || close == std::string::npos || close < open) return "";
    s = s.substr(open + 1, close - open - 1);
    const auto b = s.find_first_not_of(" \n"), e = s.find_last_not_of(" \n");
    return b == std::string::npos ? "" : s.substr(b, e - b + 1);
  }

  // Text as int64 words: a length, then the bytes padded to whole words.
  void send_text(const std::string& s) {
    std::int64_t len[1] = {static_cast<std::int64_t>(s.size())};
    comm_.send(std::span<const std::int64_t>(len), 0, kTag);
    std::vector<std::int64_t> words((s.size() + 7) / 8, 0);
    std::memcpy(words.data(), s.data(), s.size());
    comm_.send(std::span<const std::int64_t>(words), 0, kTag);
  }
  std::string recv_text(int from) {
    std::int64_t len[1] = {0};
    comm_.recv(std::span<std::int64_t>(len), from, kTag);
    std::vector<std::int64_t> words((static_cast<std::size_t>(len[0]) + 7) / 8);
    comm_.recv(std::span<std::int64_t>(words), from, kTag);
    return std::string(reinterpret_cast<const char*>(words.data()), static_cast<std::size_t>(len[0]));
  }

  //! Appends `events` (",\n{...},\n{...}") before the chief's file's closing bracket.
  void append(const std::string& events) {
    if (events.empty()) return;
    std::FILE* f = std::fopen(path_.c_str(), "r+b");
    if (!f) throw Error("trace::MpiSession: cannot reopen the trace file '" + path_ + "' to merge the ranks' parts");
    std::fseek(f, 0, SEEK_END);
    long end = std::ftell(f);
    // back over "\n]\n" (and any whitespace) to just after the last event
    int c = 0;
    while (end > 0) {
      std::fseek(f, end - 1, SEEK_SET);
      c = std::fgetc(f);
      if (c != '\n' && c != ' ' && c != ']') break;
      --end;
    }
    std::fseek(f, end, SEEK_SET);
    std::fwrite(events.data(), 1, events.size(), f);
    std::fputs("\n]\n", f);
    const bool bad = std::ferror(f) != 0;
    std::fclose(f);
    if (bad) throw Error("trace::MpiSession: merging the ranks' parts into '" + path_ + "' failed (disk full?)");
  }

  static constexpr int kTag = 0x7ace;
  MpiCommunicator& comm_;
  std::string path_;
  std::int64_t uncertainty_ns_ = 0;
  std::optional<Session> session_;
  bool finished_ = false;
};

}  // namespace strata::trace
