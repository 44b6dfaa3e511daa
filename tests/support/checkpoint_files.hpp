// What the checkpoint tests share: a temporary directory, reading and
// writing a file's bytes, a directory's every file and its bytes, and
// callbacks that "kill" a run mid-fit.
#pragma once

#include <doctest/doctest.h>

#include <stdlib.h>

#include <csignal>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <system_error>
#include <vector>

#include <strata/nn/callbacks/callbacks.hpp>

namespace strata_test {

//! A fresh directory under /tmp, removed with everything in it.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    char tmpl[] = "/tmp/strata_ckpt_XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
};

inline std::vector<char> slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}
inline void spit(const std::filesystem::path& p, const std::vector<char>& b) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(b.data(), static_cast<std::streamsize>(b.size()));
}

//! What Crash throws: no strata error, so that no other failure passes for it.
struct Crashed {};
//! A callback that "kills" the run (throws) after `at` batches in all.
struct Crash final : strata::nn::Callback {
  int at, seen = 0;
  explicit Crash(int a) : at(a) {}
  void on_batch_end(int, const strata::nn::Logs&) override {
    if (++seen == at) throw Crashed{};
  }
};

//! Stops a run when the model has taken `at` steps: as a SIGKILL would, as
//! far as fit can tell (a throw between steps, before the step's
//! checkpoint: nothing saved), or with a real SIGTERM (`term`: fit
//! finishes the step, saves, and throws nn::Preempted).
struct StopAtStep final : strata::nn::Callback {
  std::int64_t at;
  bool term;
  StopAtStep(std::int64_t a, bool t) : at(a), term(t) {}
  void on_batch_end(int, const strata::nn::Logs&) override {
    if (model().iterations() != at) return;
    if (term) std::raise(SIGTERM);
    else throw Crashed{};
  }
};

//! Every file under `dir` (recursively, by path relative to it) and its
//! bytes: what a refused run must leave as it found.
inline std::map<std::string, std::vector<char>> tree(const std::filesystem::path& dir) {
  std::map<std::string, std::vector<char>> out;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir))
    out[std::filesystem::relative(e.path(), dir).string()] = e.is_regular_file() ? slurp(e.path()) : std::vector<char>{};
  return out;
}

}  // namespace strata_test
