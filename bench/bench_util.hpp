#pragma once
// Shared helpers of the benchmarks: sizes, units, argument parsing, and the
// measured memory bandwidth that bounds an in-process all-reduce.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace bench {

//! This process's peak resident memory (VmHWM), MiB; 0 where /proc does not say.
inline double peak_rss_mib() {
  FILE* f = std::fopen("/proc/self/status", "r");
  if (!f) return 0;
  double kib = 0;
  for (char line[256]; std::fgets(line, sizeof line, f);)
    if (std::sscanf(line, "VmHWM: %lf kB", &kib) == 1) break;
  std::fclose(f);
  return kib / 1024.0;
}

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

//! "64K", "1M", "64M" -> bytes.
inline std::size_t parse_size(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  switch (end && *end ? *end : ' ') {
    case 'K': case 'k': v *= 1024; break;
    case 'M': case 'm': v *= 1024 * 1024; break;
    case 'G': case 'g': v *= 1024.0 * 1024 * 1024; break;
    default: break;
  }
  return static_cast<std::size_t>(v);
}

//! "ring,direct" -> {"ring", "direct"}.
inline std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> v;
  for (std::size_t pos = 0; pos <= s.size();) {
    auto comma = s.find(',', pos);
    if (comma == std::string::npos) comma = s.size();
    v.push_back(s.substr(pos, comma - pos));
    pos = comma + 1;
  }
  return v;
}

inline std::vector<int> parse_ints(const std::string& s) {
  std::vector<int> v;
  for (const auto& x : split_commas(s)) v.push_back(std::atoi(x.c_str()));
  return v;
}

//! Timed calls per row: about 2 GB of buffer traffic, at least 5, at most 20000.
inline int iterations_for(std::size_t bytes, int ranks) {
  return static_cast<int>(std::clamp<double>(2e9 / static_cast<double>(bytes * static_cast<std::size_t>(ranks)), 5, 20000));
}

//! The time (s) for `threads` threads to read and write `threads` buffers of
//! `bytes` once each (a[i] += 1): exactly the traffic of an ideal all-reduce
//! of `bytes` per replica, from whichever level of the memory hierarchy
//! holds that working set. Three access patterns, the fastest counts: each
//! thread streams its own buffer; each thread streams its slice of every
//! buffer; each thread takes its slice of every buffer in 4 KiB blocks, reads
//! the block of every buffer, then writes it back to every buffer with
//! memcpy (the direct algorithm's pattern and store width, without its
//! arithmetic or synchronization). Wall time over
//! enough passes, best of 5.
inline double rw_pass_time(int threads, std::size_t bytes) {
  const auto p = static_cast<std::size_t>(threads);
  const std::size_t n = std::max<std::size_t>(1, bytes / sizeof(float));
  const int passes = static_cast<int>(std::clamp<double>(256e6 / static_cast<double>(bytes * p), 2, 100000));
  std::vector<std::vector<float>> bufs(p, std::vector<float>(n, 1.f));
  auto bump = [](float* a, std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) a[i] += 1.f;
    asm volatile("" ::"r"(a) : "memory");
  };
  auto blocked = [&](std::size_t b, std::size_t e) {
    constexpr std::size_t block = 1024;
    alignas(64) float acc[block];
    for (std::size_t k = b; k < e; k += block) {
      const std::size_t m = std::min(block, e - k);
      // memcpy: the C library's widest loads and stores, as the collectives' copies use.
      for (std::size_t s = 0; s < p; ++s) std::memcpy(acc, bufs[s].data() + k, m * sizeof(float));
      for (std::size_t s = 0; s < p; ++s) std::memcpy(bufs[s].data() + k, acc, m * sizeof(float));
    }
    asm volatile("" ::"r"(acc) : "memory");
  };
  auto work = [&](std::size_t t, int pattern) {
    if (pattern == 0) return bump(bufs[t].data(), 0, n);
    const std::size_t b = n * t / p, e = n * (t + 1) / p;
    if (pattern == 2) return blocked(b, e);
    for (std::size_t s = 0; s < p; ++s) bump(bufs[s].data(), b, e);
  };
  double best = 1e30;
  for (int sliced : {0, 1, 2})
    for (int rep = 0; rep < 5; ++rep) {
      std::atomic<int> ready{0};
      std::atomic<bool> go{false};
      std::vector<std::thread> ts;
      for (std::size_t t = 0; t < p; ++t)
        ts.emplace_back([&, t] {
          work(t, sliced);  // warm
          ready.fetch_add(1);
          while (!go.load()) std::this_thread::yield();
          for (int k = 0; k < passes; ++k) work(t, sliced);
        });
      while (ready.load() < threads) std::this_thread::yield();
      const double t0 = now_s();
      go.store(true);
      for (auto& t : ts) t.join();
      best = std::min(best, (now_s() - t0) / passes);
    }
  return best;
}

}  // namespace bench
