// What tests/trace/check_trace.py (a reader that is not strata's: Python's
// json module, and the nesting rule a trace viewer needs) finds in a trace
// file: tracks by name, span counts and orders. Shared by the in-process
// and the MPI trace tests.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

namespace strata_test {

struct TraceReport {
  std::map<std::string, std::pair<int, int>> tracks;  // thread name -> (pid, tid); "pid:name" keys too
  std::map<std::string, std::string> processes;        // pid -> name
  std::vector<std::string> lines;
  std::string all;

  //! (pid, tid) of the track named `name` (in process `pid` when >= 0).
  [[nodiscard]] std::pair<int, int> track(const std::string& name, int pid = -1) const {
    const std::string key = pid >= 0 ? std::to_string(pid) + ":" + name : name;
    const auto it = tracks.find(key);
    const std::string missing = "no track named '" + key + "' in:\n" + all;
    REQUIRE_MESSAGE(it != tracks.end(), missing);
    return it->second;
  }
  //! What follows `p` on the first line that starts with it ("" if none).
  [[nodiscard]] std::string after(const std::string& p) const {
    for (const auto& l : lines)
      if (l.starts_with(p)) return l.substr(p.size());
    return "";
  }
  [[nodiscard]] std::string prefix(const char* kind, std::pair<int, int> t) const {
    return std::string(kind) + " " + std::to_string(t.first) + " " + std::to_string(t.second) + " ";
  }
  //! Complete events of category `cat` named `name` on track `t` (spaces in names as '_').
  [[nodiscard]] long count(std::pair<int, int> t, const std::string& cat, const std::string& name) const {
    const std::string n = after(prefix("count", t) + cat + " " + name + " ");
    return n.empty() ? 0 : std::stol(n);
  }
  //! Names of category `cat` on track `t`, by start time, comma-separated.
  [[nodiscard]] std::string order(std::pair<int, int> t, const std::string& cat) const {
    return after(prefix("order", t) + cat + " ");
  }
  //! Forward and backward names on track `t`, by start time.
  [[nodiscard]] std::string flow(std::pair<int, int> t) const { return after(prefix("flow", t)); }
  //! The arguments of the first event named `name` on track `t` ("k=v,k=v").
  [[nodiscard]] std::string args(std::pair<int, int> t, const std::string& name) const { return after(prefix("args", t) + name + " "); }
  struct Timed {
    double ts = 0, dur = 0;
  };
  //! The collective spans named `name` on track `t`, by start time.
  [[nodiscard]] std::vector<Timed> spans(std::pair<int, int> t, const std::string& name) const {
    const std::string p = prefix("span", t) + name + " ";
    std::vector<Timed> out;
    for (const auto& l : lines)
      if (l.starts_with(p)) {
        std::istringstream f(l.substr(p.size()));
        Timed x;
        f >> x.ts >> x.dur;
        out.push_back(x);
      }
    return out;
  }
  //! Events the rings lost, over all tracks.
  [[nodiscard]] long lost() const {
    long n = 0;
    for (const auto& l : lines)
      if (l.starts_with("lost ")) n += std::stol(l.substr(l.rfind(' ') + 1));
    return n;
  }
};

//! Runs the outside reader on `path` (it must accept the file: exit 0).
inline TraceReport read_trace(const std::string& path, bool truncated_ok = false) {
  const char* reader = std::getenv("STRATA_TRACE_CHECK");
  REQUIRE_MESSAGE(reader, "STRATA_TRACE_CHECK (python3 tests/trace/check_trace.py) is not set: run under meson");
  const std::string cmd = std::string(reader) + " '" + path + "'" + (truncated_ok ? " --truncated-ok" : "") + " 2>&1";
  std::FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p);
  TraceReport r;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.all.append(buf, n);
  const int status = ::pclose(p);
  INFO(r.all);
  REQUIRE(status == 0);
  std::istringstream in(r.all);
  for (std::string l; std::getline(in, l);) {
    std::istringstream f(l);
    std::string kind;
    f >> kind;
    if (kind == "track") {
      int pid = 0, tid = 0;
      f >> pid >> tid;
      std::string name;
      std::getline(f >> std::ws, name);
      r.tracks[name] = {pid, tid};
      r.tracks[std::to_string(pid) + ":" + name] = {pid, tid};
    } else if (kind == "process") {
      std::string pid, name;
      f >> pid;
      std::getline(f >> std::ws, name);
      r.processes[pid] = name;
    }
    r.lines.push_back(l);
  }
  return r;
}

}  // namespace strata_test
