#pragma once
//! The number formats a gradient may take on the wire (Compression), with
//! their names: what ExecutorOptions::compression chooses and what
//! gradient/compression.hpp implements.
//!   strata::Compression c = strata::Compression::BF16;   // ExecutorOptions::compression
//!   strata::to_string(c) == "bf16";
//!   strata::compression_named("fp16") == strata::Compression::FP16;

#include <optional>
#include <string_view>

namespace strata {

//! Gradient compression on the wire (issue 25, as DDP's fp16/bf16
//! communication hooks): each replica's gradient (plus the residual it kept
//! from the last step: error feedback) rounded to 16 bits, reduced in 16
//! bits (bytes on the wire halved), expanded to FP32 for the update, which
//! stays FP32 on FP32 master weights (gradient/compression.hpp).
enum class Compression {
  None,
  BF16,  //!< bfloat16: FP32's range, 8 bits of mantissa
  FP16,  //!< IEEE half: 11 bits of mantissa, range to 65504
};

//! "none", "bf16", "fp16" (the examples' --compression values).
[[nodiscard]] constexpr std::string_view to_string(Compression c) noexcept {
  switch (c) {
    case Compression::BF16: return "bf16";
    case Compression::FP16: return "fp16";
    case Compression::None: break;
  }
  return "none";
}
//! The format named "none", "bf16" or "fp16" (to_string's words: the
//! examples' and benches' --compression), else nullopt.
[[nodiscard]] constexpr std::optional<Compression> compression_named(std::string_view name) noexcept {
  for (Compression c : {Compression::None, Compression::BF16, Compression::FP16})
    if (to_string(c) == name) return c;
  return std::nullopt;
}

}  // namespace strata
