// What the checkpoint tests share: a temporary directory, reading and
// writing a file's bytes, and a callback that "kills" a run mid-fit.
#pragma once

#include <doctest/doctest.h>

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>
#include <vector>

#include <strata/nn/callbacks.hpp>

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

}  // namespace strata_test
