#pragma once
//! CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of
//! iSCSI, ext4 and LevelDB: what strata's files (weights, checkpoints) carry
//! per tensor. SSE4.2's crc32 instruction where the CPU has it (checked once
//! at run time), else slicing-by-8 tables; both give the same value.
//!   std::uint32_t c = strata::crc32c(bytes);           // whole buffer
//!   c = strata::crc32c_extend(c, more);                 // streaming

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define STRATA_CRC32C_SSE42 1
#else
#define STRATA_CRC32C_SSE42 0
#endif

namespace strata {
namespace detail {

inline constexpr std::uint32_t crc32c_poly = 0x82F63B78u;

constexpr std::array<std::array<std::uint32_t, 256>, 8> make_crc32c_tables() {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1u) ? crc32c_poly : 0u);
    t[0][i] = c;
  }
  for (std::uint32_t i = 0; i < 256; ++i)
    for (std::size_t s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFFu];
  return t;
}
inline constexpr auto crc32c_tables = make_crc32c_tables();

//! The raw (not pre/post-inverted) register update, table-driven.
inline std::uint32_t crc32c_tables_update(std::uint32_t c, const unsigned char* p, std::size_t n) noexcept {
  const auto& t = crc32c_tables;
  while (n >= 8) {
    std::uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;  // little-endian (strata's files are; static_assert where written)
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^ t[3][hi & 0xFF] ^
        t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n--) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFF];
  return c;
}

#if STRATA_CRC32C_SSE42
__attribute__((target("sse4.2"))) inline std::uint32_t crc32c_sse42_update(std::uint32_t c, const unsigned char* p,
                                                                            std::size_t n) noexcept {
  std::uint64_t c64 = c;
  while (n >= 8) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
    p += 8;
    n -= 8;
  }
  c = static_cast<std::uint32_t>(c64);
  while (n--) c = _mm_crc32_u8(c, *p++);
  return c;
}
inline bool crc32c_has_sse42() noexcept {
  static const bool yes = __builtin_cpu_supports("sse4.2");
  return yes;
}
#endif

}  // namespace detail

//! The CRC-32C of `crc`'s data followed by `bytes` (crc32c_extend(0, x) == crc32c(x)).
inline std::uint32_t crc32c_extend(std::uint32_t crc, std::span<const std::byte> bytes) noexcept {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  std::uint32_t c = ~crc;
#if STRATA_CRC32C_SSE42
  if (detail::crc32c_has_sse42()) return ~detail::crc32c_sse42_update(c, p, bytes.size());
#endif
  return ~detail::crc32c_tables_update(c, p, bytes.size());
}

//! The CRC-32C of `bytes` (of "123456789": 0xE3069283).
inline std::uint32_t crc32c(std::span<const std::byte> bytes) noexcept { return crc32c_extend(0, bytes); }

}  // namespace strata
