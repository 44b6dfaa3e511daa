// Gradient compression on the wire (issue 25): bf16 and fp16 round to
// nearest even (ties, NaN, infinity, fp16 overflow and subnormals against
// bit patterns worked out by hand); collectives sum them in FP32, rounded
// once, with half the bytes of float; the residual (error feedback) keeps the
// sum of the sent gradients within one rounding step of the true sum, which
// rounding alone does not; Mirrored training in bf16 (flat and bucketed)
// reaches the FP32 run's loss, bitwise the same run to run; ZeRO 1
// reduce-scatters in 16 bits (the compressed all-reduce's weights and
// moments bit for bit, half its reduce-scatter's bytes); a pipeline's
// data-parallel copies sum in 16 bits (compressed Mirrored's bits, checked
// after the sum); what cannot compress is refused at place time.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <unistd.h>

#include <strata/core/half.hpp>
#include <strata/strata.hpp>
#include <strata/gradient/compression.hpp>

#include "support/blobs.hpp"
#include "device/host_as_gpu.hpp"

namespace compression_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

namespace nn = strata::nn;
using strata::bf16;
using strata::fp16;

namespace {

float bits_f(std::uint32_t u) { return std::bit_cast<float>(u); }
std::uint16_t b16(float f) { return bf16(f).bits; }
std::uint16_t h16(float f) { return fp16(f).bits; }

//! Round to nearest even written another way (in double, std::nearbyint): the
//! 16-bit pattern of `f` with `mant` stored mantissa bits, exponents from
//! `emin` (subnormals below) to `emax` (infinity above), `bias` the exponent's.
std::uint16_t reference(float f, int mant, int emin, int emax, int bias, std::uint16_t quiet) {
  const auto u = std::bit_cast<std::uint32_t>(f);
  const auto sign = static_cast<std::uint16_t>(u & 0x80000000u ? 0x8000u : 0u);
  const std::uint16_t inf = static_cast<std::uint16_t>(((1u << (15 - mant)) - 1u) << mant);
  if (std::isnan(f)) return static_cast<std::uint16_t>(sign | inf | quiet | ((u & 0x7fffffu) >> (23 - mant)));
  const double a = std::fabs(static_cast<double>(f));
  if (a == 0) return sign;
  if (std::isinf(a)) return sign | inf;
  int e = std::max(std::ilogb(a), emin);
  double m = std::nearbyint(std::ldexp(a, mant - e));  // the current rounding mode: to nearest even
  const double one = std::ldexp(1.0, mant);
  if (m >= 2 * one) m = one, ++e;
  if (e > emax) return sign | inf;
  const auto bits = m < one ? static_cast<std::uint32_t>(m)
                            : (static_cast<std::uint32_t>(e + bias) << mant) + static_cast<std::uint32_t>(m - one);
  return static_cast<std::uint16_t>(sign | bits);
}

//! A reduction over one replica: what the compression sends comes back as it is.
struct Alone {
  template <class T>
  void all_reduce(std::span<T>, strata::SumOp) {}
  template <class T>
  strata::Work reduce_scatter_async(std::span<const T> in, std::span<T> out, strata::SumOp) {
    std::copy(in.begin(), in.end(), out.begin());
    return {};
  }
};

struct Run {
  std::vector<float> weights;
  double loss = 0;
};

//! blobs_mlp under Mirrored with `p` replicas, `c` compression and buckets of `bytes` (0: flat).
Run train(int p, strata::Compression c, std::size_t bytes = 0, int epochs = 4,
          strata::ShardedUpdate sharded = strata::ShardedUpdate::Auto) {
  strata::MirroredStrategy s{strata::cpu_replicas(p)};
  s.executor_options().compression = c;
  s.executor_options().bucket_bytes = bytes;
  s.executor_options().sharded_update = sharded;
  nn::History h;
  auto model = strata_test::fit_blobs(s, strata_test::blobs(160, 11), 32, epochs, &h);
  return {strata_test::flat_weights(model), h.at("loss").back()};
}

//! Bytes each of `p` replicas handed to collectives during one epoch of
//! blobs_mlp in batches of 32 (160 rows: 5 steps), finiteness check off (no
//! other collective).
std::vector<std::uint64_t> bytes_per_replica(strata::Compression c, std::size_t bucket_bytes, int p = 2,
                                             strata::ShardedUpdate sharded = strata::ShardedUpdate::Auto) {
  strata::MirroredStrategy s{strata::cpu_replicas(p)};
  s.executor_options().compression = c;
  s.executor_options().bucket_bytes = bucket_bytes;
  s.executor_options().sharded_update = sharded;
  const auto data = strata_test::blobs(160, 11);
  auto model = s.scope(strata_test::blobs_mlp);
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 7});
  const auto at = [&] { return s.run([](auto& ctx) { return ctx.communicator().payload_bytes(); }); };
  const auto before = at();
  model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(32)),
            {.epochs = 1, .verbose = nn::Verbosity::Silent, .check_finite = false});
  const auto after = at();
  std::vector<std::uint64_t> out;
  for (std::size_t r = 0; r < after.size(); ++r) out.push_back(after[r] - before[r]);
  return out;
}
//! The same at 2 replicas, unsharded: both send alike.
std::uint64_t bytes_of_an_epoch(strata::Compression c, std::size_t bucket_bytes) {
  const auto b = bytes_per_replica(c, bucket_bytes);
  CHECK(b[1] == b[0]);
  return b[0];
}

//! The weights and Adam's moments (from a checkpoint) after 2 epochs of
//! blobs_mlp under Mirrored with `p` replicas (CPUs, or virtual GPUs), `c`
//! and `sharded`, clipping by the global norm at `clip` (0: none), buckets
//! of `bucket` bytes (0: flat).
struct Trained {
  std::vector<float> weights;
  std::vector<std::vector<float>> moments;
};
Trained train_state(int p, strata::Compression c, strata::ShardedUpdate sharded, float clip = 0, bool gpus = false,
                    std::size_t bucket = 0) {
  strata::MirroredStrategy s{gpus ? strata::virtual_gpus(0, p) : strata::cpu_replicas(p)};
  s.executor_options().compression = c;
  s.executor_options().sharded_update = sharded;
  s.executor_options().bucket_bytes = bucket;
  const auto data = strata_test::blobs(160, 11);
  auto model = s.scope(strata_test::blobs_mlp);
  model.compile(nn::Adam{0.01, {.global_clipnorm = clip}}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 7});
  model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(32)),
            {.epochs = 2, .verbose = nn::Verbosity::Silent});
  Trained t{strata_test::flat_weights(model), {}};
  const auto path = std::filesystem::temp_directory_path() /
                    ("strata_compression_" + std::to_string(::getpid()) + "_" + std::to_string(p) + ".ckpt");
  model.save_checkpoint(path);
  for (const auto& e : strata::io::read_tensor_file(path, "test").tensors)
    if (e.name.rfind("optimizer/", 0) == 0) t.moments.emplace_back(e.value.data(), e.value.data() + e.value.size());
  std::filesystem::remove(path);
  return t;
}

}  // namespace

TEST_CASE("bf16 rounds to nearest even, keeps NaN a NaN and reaches infinity by rounding") {
  CHECK(b16(1.f) == 0x3f80);
  CHECK(b16(-2.f) == 0xc000);
  CHECK(b16(-0.f) == 0x8000);
  CHECK(b16(bits_f(0x3f808000)) == 0x3f80);  // 1 + 2^-8: the tie goes to the even 1
  CHECK(b16(bits_f(0x3f818000)) == 0x3f82);  // 1 + 3 * 2^-8: the tie goes up, to even
  CHECK(b16(bits_f(0x3f808001)) == 0x3f81);  // just above the tie: up
  CHECK(b16(bits_f(0x3f80ffff)) == 0x3f81);
  CHECK(b16(3.14159265f) == 0x4049);
  CHECK(static_cast<float>(bf16::from_bits(0x4049)) == 3.140625f);
  CHECK(b16(std::numeric_limits<float>::infinity()) == 0x7f80);
  CHECK(b16(-std::numeric_limits<float>::infinity()) == 0xff80);
  CHECK(b16(std::numeric_limits<float>::max()) == 0x7f80);  // above the largest bf16 by more than half a step
  CHECK(b16(bits_f(0x7f7f7fff)) == 0x7f7f);                  // below the tie: the largest finite bf16
  CHECK(b16(bits_f(0x7fc00000)) == 0x7fc0);                  // quiet NaN
  CHECK(b16(bits_f(0xffc00000)) == 0xffc0);                  // its sign kept
  CHECK(b16(bits_f(0x7f800001)) == 0x7fc0);                  // a NaN whose payload is below the 16 bits: still NaN
  CHECK(std::isnan(static_cast<float>(bf16(std::nanf("")))));
  CHECK(b16(bits_f(0x00010000)) == 0x0001);  // float subnormals: the same rule
  CHECK(b16(bits_f(0x00008000)) == 0x0000);
  CHECK(b16(bits_f(0x00018000)) == 0x0002);
  for (std::uint32_t b = 0; b < 0x10000; ++b) {  // every non-NaN bf16 survives the trip through float
    const bf16 h = bf16::from_bits(static_cast<std::uint16_t>(b));
    if (std::isnan(static_cast<float>(h))) continue;
    REQUIRE(bf16(static_cast<float>(h)).bits == b);
  }
}

TEST_CASE("fp16 rounds to nearest even, overflows to infinity and keeps subnormals") {
  CHECK(h16(1.f) == 0x3c00);
  CHECK(h16(-2.f) == 0xc000);
  CHECK(h16(-0.f) == 0x8000);
  CHECK(h16(bits_f(0x3f801000)) == 0x3c00);  // 1 + 2^-11: the tie goes to the even 1
  CHECK(h16(bits_f(0x3f803000)) == 0x3c02);  // 1 + 3 * 2^-11: up, to even
  CHECK(h16(bits_f(0x3f801001)) == 0x3c01);
  CHECK(h16(65504.f) == 0x7bff);             // the largest half
  CHECK(h16(65519.99f) == 0x7bff);           // below the tie with 65536
  CHECK(h16(65520.f) == 0x7c00);             // the tie rounds to even: infinity
  CHECK(h16(1e6f) == 0x7c00);
  CHECK(h16(-1e6f) == 0xfc00);
  CHECK(h16(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK(h16(bits_f(0x7fc00000)) == 0x7e00);  // quiet NaN
  CHECK(h16(bits_f(0x7f800001)) == 0x7e00);  // payload below the kept bits: still NaN
  CHECK(std::isnan(static_cast<float>(fp16::from_bits(0x7e00))));
  CHECK(std::isinf(static_cast<float>(fp16::from_bits(0xfc00))));
  CHECK(h16(std::ldexp(1.f, -14)) == 0x0400);          // the smallest normal
  CHECK(h16(std::ldexp(1023.5f, -24)) == 0x0400);      // the largest subnormal's tie: up, to even
  CHECK(h16(std::ldexp(1023.f, -24)) == 0x03ff);       // the largest subnormal
  CHECK(h16(std::ldexp(1.f, -24)) == 0x0001);          // the smallest subnormal
  CHECK(h16(std::ldexp(1.f, -25)) == 0x0000);          // its half: the tie goes to the even 0
  CHECK(h16(std::ldexp(1.5f, -25)) == 0x0001);
  CHECK(h16(std::ldexp(3.f, -25)) == 0x0002);          // 1.5 units: the tie goes up, to even
  CHECK(h16(-std::ldexp(1.f, -26)) == 0x8000);         // underflow keeps the sign
  CHECK(static_cast<float>(fp16::from_bits(0x0001)) == std::ldexp(1.f, -24));
  CHECK(static_cast<float>(fp16::from_bits(0x3555)) == 0.333251953125f);
  for (std::uint32_t b = 0; b < 0x10000; ++b) {  // every non-NaN half survives the trip through float
    const fp16 h = fp16::from_bits(static_cast<std::uint16_t>(b));
    if (std::isnan(static_cast<float>(h))) continue;
    REQUIRE(fp16(static_cast<float>(h)).bits == b);
  }
}

TEST_CASE("bf16 and fp16 agree with rounding done another way, over a million floats and their ties") {
  std::size_t checked = 0, bad = 0;
  std::uint32_t first = 0;
  for (std::uint64_t v = 0; v < (std::uint64_t{1} << 32); v += 4093) {
    const auto u = static_cast<std::uint32_t>(v);
    for (std::uint32_t w : {u, (u & ~0xffffu) | 0x8000u, (u & ~0x1fffu) | 0x1000u, (u & ~0x1fffu) | 0x0fffu}) {
      const float f = bits_f(w);
      ++checked;
      if (b16(f) == reference(f, 7, -126, 127, 127, 0x40) && h16(f) == reference(f, 10, -14, 15, 15, 0x200)) continue;
      if (!bad++) first = w;
    }
  }
  INFO("first float that differs: 0x", std::hex, first);
  CHECK(checked > 4000000);
  CHECK(bad == 0);
}

TEST_CASE("collectives sum 16-bit elements in FP32, rounded once, with half the bytes") {
  strata::MirroredStrategy s{strata::cpu_replicas(3)};
  // 1 + 2^-8 + 2^-8: in FP32 1 + 2^-7, a bf16; rounding each partial sum would stay at 1
  const auto got = s.run([](auto& ctx) {
    const int r = ctx.replica_id_in_sync_group();
    auto& comm = ctx.communicator();
    std::vector<bf16> v(100, bf16(r == 0 ? 1.f : 1.f / 256));
    std::vector<fp16> h(100, fp16(r == 0 ? 30000.f : 20000.f));  // 70000: over the largest half
    std::vector<float> f(100, 1.f);
    const auto b0 = comm.payload_bytes();
    comm.all_reduce(f, strata::Sum, strata::Direct{});
    const auto b1 = comm.payload_bytes();
    comm.all_reduce(v, strata::Sum, strata::Direct{});
    const auto b2 = comm.payload_bytes();
    comm.all_reduce(h, strata::Sum, strata::Direct{});
    std::vector<bf16> ring(5000, bf16(0.1f * static_cast<float>(r + 1)));
    comm.all_reduce(ring, strata::Sum, strata::Ring{});
    const bool same = ring.front().bits == ring.back().bits;
    return std::vector<double>{static_cast<float>(v[0]), static_cast<float>(v[99]), static_cast<float>(h[0]),
                               static_cast<double>(b1 - b0), static_cast<double>(b2 - b1),
                               static_cast<float>(ring[0]), same ? 1.0 : 0.0};
  });
  for (int r = 0; r < 3; ++r) {
    CAPTURE(r);
    const auto& g = got[static_cast<std::size_t>(r)];
    CHECK(g[0] == 1.0078125);
    CHECK(g[1] == 1.0078125);
    CHECK(std::isinf(g[2]));         // fp16 overflow: infinity, for the finiteness check
    CHECK(g[3] == 400);              // 100 float32
    CHECK(g[4] == 200);              // 100 bfloat16: half
    CHECK(g[5] == doctest::Approx(0.6).epsilon(0.01));
    CHECK(g[5] == got[0][5]);        // the ring's bits are every replica's
    CHECK(g[6] == 1.0);
  }
}

TEST_CASE("error feedback: the sent gradients add up to the true ones within one rounding step") {
  // 1 + 2^-9 is no bf16: rounding alone sends 1 every step, losing 2^-9 each time
  const std::size_t n = 4, steps = 1000;
  const std::vector<float> g{1.f + 1.f / 512, -3.f - 1.f / 1024, 1e-3f, 100.f + 1.f / 8};
  strata::detail::GradientCompression c;
  c.place(strata::Compression::BF16, n);
  Alone alone;
  std::vector<double> sent(n, 0.0), rounded(n, 0.0), truth(n, 0.0);
  for (std::size_t t = 0; t < steps; ++t) {
    std::vector<float> x = g;
    c.all_reduce(alone, std::span<float>(x));
    c.commit();
    for (std::size_t i = 0; i < n; ++i) {
      sent[i] += x[i];
      rounded[i] += static_cast<float>(bf16(g[i]));
      truth[i] += g[i];
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    CAPTURE(i);
    const double step = std::ldexp(1.0, std::ilogb(g[i]) - 7);  // one bf16 step at |g[i]|
    CHECK(std::abs(sent[i] - truth[i]) <= step);                // what is left over is the last residual
    CHECK(std::abs(sent[i] - truth[i]) == doctest::Approx(std::abs(c.residual()[i])).epsilon(1e-6));
  }
  CHECK(std::abs(rounded[0] - truth[0]) > 1.9);   // 1000 * 2^-9 lost without the residual
  CHECK(std::abs(rounded[1] - truth[1]) > 0.9);

  SUBCASE("a step not committed (skipped) leaves the residual as it was") {
    const std::vector<float> before(c.residual().begin(), c.residual().end());
    std::vector<float> x = g, y = g;
    c.all_reduce(alone, std::span<float>(x));  // skipped: no commit
    c.all_reduce(alone, std::span<float>(y));
    CHECK(x == y);
    CHECK(std::vector<float>(c.residual().begin(), c.residual().end()) == before);
    c.reset();
    for (float r : c.residual()) CHECK(r == 0.f);
  }
  SUBCASE("fp16: an overflow sends infinity and leaves no residual behind") {
    strata::detail::GradientCompression h;
    h.place(strata::Compression::FP16, 2);
    std::vector<float> x{1e5f, 1.f / 3};
    h.all_reduce(alone, std::span<float>(x));
    h.commit();
    CHECK(std::isinf(x[0]));
    CHECK(x[1] == 0.333251953125f);
    CHECK(h.residual()[0] == 0.f);
    CHECK(h.residual()[1] == doctest::Approx(1.f / 3 - 0.333251953125f));
  }
}

TEST_CASE("Mirrored training in bf16 and fp16 reaches the FP32 loss, the same bits run to run, flat or bucketed") {
  const Run fp32 = train(2, strata::Compression::None);
  const Run bf = train(2, strata::Compression::BF16);
  CHECK(bf.loss == doctest::Approx(fp32.loss).epsilon(0.05));
  CHECK(bf.weights != fp32.weights);                                 // the rounding did something
  CHECK(train(2, strata::Compression::BF16).weights == bf.weights);  // deterministic
  // buckets (1 byte: one a variable; 128: several): each element rounded and summed as in the flat run
  CHECK(train(2, strata::Compression::BF16, 1).weights == bf.weights);
  CHECK(train(2, strata::Compression::BF16, 128).weights == bf.weights);
  const Run fp = train(2, strata::Compression::FP16, 128);
  CHECK(fp.loss == doctest::Approx(fp32.loss).epsilon(0.05));
  CHECK(train(2, strata::Compression::FP16).weights == fp.weights);
  // at 3 replicas Auto shards (ZeRO 1, its reduce-scatter in 16 bits): it trains
  CHECK(train(3, strata::Compression::BF16).loss == doctest::Approx(fp32.loss).epsilon(0.1));
  // None is the default: the FP32 bits (tests/nn/fit/pinned_test.cpp pins them)
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  CHECK(strata_test::flat_weights(strata_test::fit_blobs(s, strata_test::blobs(160, 11), 32, 4)) == fp32.weights);
}

TEST_CASE("bf16 halves the bytes a training step's gradient puts on the wire") {
  const std::size_t params = 6 * 16 + 16 + 16 * 8 + 8 + 8 * 3 + 3;  // blobs_mlp
  const std::uint64_t fp32 = bytes_of_an_epoch(strata::Compression::None, 0);
  CHECK(fp32 == 5 * params * 4);  // 5 steps, the whole gradient in float: nothing else reduced
  CHECK(bytes_of_an_epoch(strata::Compression::BF16, 0) == fp32 / 2);
  CHECK(bytes_of_an_epoch(strata::Compression::FP16, 0) == fp32 / 2);
  CHECK(bytes_of_an_epoch(strata::Compression::BF16, 128) == fp32 / 2);  // bucketed
}

TEST_CASE("compressed ZeRO 1: the reduce-scatter in 16 bits gives the compressed all-reduce's weights and moments") {
  // the direct reduction sums each element in replica order and rounds once, in the reduce-scatter as in the
  // all-reduce; the residual is each replica's whole gradient's either way (that the update is sharded: the
  // bytes below)
  for (int p : {2, 3, 5}) {  // 5: more replicas than cores
    for (strata::Compression c : {strata::Compression::BF16, strata::Compression::FP16}) {
      if (c == strata::Compression::FP16 && p != 3) continue;  // (the time of the sanitizer builds)
      CAPTURE(p);
      CAPTURE(to_string(c));
      const Trained flat = train_state(p, c, strata::ShardedUpdate::Off);
      const Trained sharded = train_state(p, c, strata::ShardedUpdate::On);
      REQUIRE(flat.moments.size() == 2);
      CHECK(sharded.weights == flat.weights);
      CHECK(sharded.moments == flat.moments);
      if (p == 2 && c == strata::Compression::BF16)  // not FP32's bits: the rounding did something
        CHECK(sharded.weights != train_state(p, strata::Compression::None, strata::ShardedUpdate::On).weights);
    }
  }
  // Auto at 3 replicas shards under compression too: the same bits
  CHECK(train_state(3, strata::Compression::BF16, strata::ShardedUpdate::Auto).weights ==
        train_state(3, strata::Compression::BF16, strata::ShardedUpdate::Off).weights);
  // clipping by the global norm: each replica scales its slice, the unsharded run the whole gradient
  const Trained clipped = train_state(3, strata::Compression::BF16, strata::ShardedUpdate::On, 0.05f);
  CHECK(clipped.weights == train_state(3, strata::Compression::BF16, strata::ShardedUpdate::Off, 0.05f).weights);
  CHECK(clipped.weights != train_state(3, strata::Compression::BF16, strata::ShardedUpdate::On).weights);
}

TEST_CASE("compressed ZeRO 1 halves the reduce-scatter's bytes; the values' all-gather stays FP32") {
  const std::size_t params = 6 * 16 + 16 + 16 * 8 + 8 + 8 * 3 + 3;  // blobs_mlp
  for (int p : {2, 3}) {
    CAPTURE(p);
    const auto fp32 = bytes_per_replica(strata::Compression::None, 0, p, strata::ShardedUpdate::On);
    const auto bf = bytes_per_replica(strata::Compression::BF16, 0, p, strata::ShardedUpdate::On);
    REQUIRE(bf.size() == static_cast<std::size_t>(p));
    for (std::size_t r = 0; r < bf.size(); ++r) {
      CAPTURE(r);
      const std::size_t slice = strata::shard_range(params, static_cast<std::size_t>(p), r).size();
      CHECK(fp32[r] == 5 * (params * 4 + slice * 4));  // 5 steps: the whole gradient in, its slice of values out
      CHECK(bf[r] == 5 * (params * 2 + slice * 4));
    }
  }
  // buckets do not apply to the sharded update (its reduce-scatter is cut by replica): the same bytes
  CHECK(bytes_per_replica(strata::Compression::BF16, 128, 3, strata::ShardedUpdate::On) ==
        bytes_per_replica(strata::Compression::BF16, 0, 3, strata::ShardedUpdate::On));
}

// ZeRO 2 and 3 round each layer's gradient with the replica's residual at the layer's place as backward
// ends it and reduce-scatter it in 16 bits: per element the rounding and the sum of ZeRO 1's whole-vector
// reduce-scatter, so (no step skipped) the same weights and moments.
TEST_CASE("compressed ZeRO 2 and 3: each layer reduce-scattered in 16 bits gives compressed ZeRO 1's bits") {
  for (int p : {2, 3}) {
    for (strata::Compression c : {strata::Compression::BF16, strata::Compression::FP16}) {
      if (c == strata::Compression::FP16 && p != 3) continue;  // (the time of the sanitizer builds)
      CAPTURE(p);
      CAPTURE(to_string(c));
      const Trained one = train_state(p, c, strata::ShardedUpdate::On);
      REQUIRE(one.moments.size() == 2);
      for (strata::ShardedUpdate stage : {strata::ShardedUpdate::Gradients, strata::ShardedUpdate::Parameters}) {
        const Trained got = train_state(p, c, stage);
        CHECK(got.weights == one.weights);
        CHECK(got.moments == one.moments);
      }
    }
  }
  // not FP32's bits: the rounding did something; clipping by the global norm alike
  CHECK(train_state(2, strata::Compression::BF16, strata::ShardedUpdate::Parameters).weights !=
        train_state(2, strata::Compression::None, strata::ShardedUpdate::Parameters).weights);
  CHECK(train_state(3, strata::Compression::BF16, strata::ShardedUpdate::Gradients, 0.05f).weights ==
        train_state(3, strata::Compression::BF16, strata::ShardedUpdate::On, 0.05f).weights);
}

TEST_CASE("compressed ZeRO 2 and 3 halve the gradient's bytes; the values' gathers stay FP32; the summary says so") {
  const std::size_t params = 6 * 16 + 16 + 16 * 8 + 8 + 8 * 3 + 3;  // blobs_mlp
  for (strata::ShardedUpdate stage : {strata::ShardedUpdate::Gradients, strata::ShardedUpdate::Parameters}) {
    const auto fp32 = bytes_per_replica(strata::Compression::None, 0, 3, stage);
    const auto bf = bytes_per_replica(strata::Compression::BF16, 0, 3, stage);
    REQUIRE(bf.size() == 3);
    for (std::size_t r = 0; r < 3; ++r) {
      CAPTURE(r);
      CHECK(fp32[r] - bf[r] == 5 * params * 2);  // 5 steps: every layer's gradient in 2 bytes instead of 4
    }
    strata::MirroredStrategy s{strata::cpu_replicas(2)};
    s.executor_options().compression = strata::Compression::FP16;
    s.executor_options().sharded_update = stage;
    auto model = strata_test::fit_blobs(s, strata_test::blobs(64, 3), 32, 1);
    CHECK(model.gradient_reduction().find("; the reduce-scatters in fp16 (error feedback: each replica keeps a "
                                          "residual of the whole gradient)") != std::string::npos);
  }
}

TEST_CASE("ZeRO 2 and 3's compression: the residual carries the rounding; an overflow leaves none; reset zeroes it") {
  Alone alone;  // one replica: the reduce-scatter hands each unit's 16-bit values back as they are
  strata::detail::ShardedCompression c;
  c.place(strata::Compression::BF16, 4, 4, 4);  // units [0, 1) and [1, 4): a window pair of 4 floats
  strata::detail::GradientCompression whole;
  whole.place(strata::Compression::BF16, 4);
  const std::vector<float> g{1.f + 1.f / 512, -3.f - 1.f / 1024, 1e-3f, 100.f + 1.f / 8};
  std::vector<float> out(4);
  for (int step = 0; step < 5; ++step) {
    // backward order: the last unit first, in window 0, then the first in window 1
    c.scatter(alone, 1, 0, std::span<const float>(g).subspan(1), std::span<float>(out).subspan(1), 1).wait();
    c.scatter(alone, 0, 1, std::span<const float>(g).first(1), std::span<float>(out).first(1), 0).wait();
    std::vector<float> want = g;
    whole.all_reduce(alone, std::span<float>(want));
    whole.commit();
    CHECK(out == want);  // GradientCompression's values, step after step
    CHECK(std::vector<float>(c.residual().begin(), c.residual().end()) ==
          std::vector<float>(whole.residual().begin(), whole.residual().end()));
  }
  CHECK(c.residual()[0] != 0.f);
  c.reset();
  for (float r : c.residual()) CHECK(r == 0.f);
  strata::detail::ShardedCompression h;
  h.place(strata::Compression::FP16, 2, 2, 2);
  const std::vector<float> big{1e5f, 1.f / 3};
  h.scatter(alone, 0, 0, std::span<const float>(big), std::span<float>(out).first(2), 0).wait();
  CHECK(std::isinf(out[0]));
  CHECK(h.residual()[0] == 0.f);
  CHECK(h.residual()[1] == doctest::Approx(1.f / 3 - 0.333251953125f));
}

// An fp16 overflow in one step at ZeRO 2 and 3: the step is skipped on every replica (the weights and the
// iteration as they were), the residual restarts at zero, and training goes on finite.
TEST_CASE("compressed ZeRO 2 and 3 skip a step whose 16-bit sum overflows, and go on") {
  auto data = strata_test::blobs(128, 5);
  for (std::size_t i = 32 * 6; i < 33 * 6; ++i) data.x[i] = 1e9f;  // batch 1's first row: its gradient overflows fp16
  for (strata::ShardedUpdate stage : {strata::ShardedUpdate::Gradients, strata::ShardedUpdate::Parameters}) {
    strata::MirroredStrategy s{strata::cpu_replicas(2)};
    s.executor_options().compression = strata::Compression::FP16;
    s.executor_options().sharded_update = stage;
    auto model = s.scope([] {  // linear: the big row's gradient reaches the weights (a tanh would flatten it)
      return nn::Sequential{nn::Input{{6}}, nn::Dense{8}, nn::Dense{3}};
    });
    model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 7});
    model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(32)),
              {.epochs = 1, .verbose = nn::Verbosity::Silent});
    CHECK(model.iterations() == 3);  // 4 batches, one skipped
    for (float v : strata_test::flat_weights(model)) REQUIRE(std::isfinite(v));
  }
}

//! blobs_mlp under a pipeline of `stages` stages and `copies` data-parallel copies, `micro` micro-batches.
Run pipeline(int stages, int copies, strata::Compression c, std::size_t micro = 1, std::string* said = nullptr) {
  strata::PipelineStrategy s{strata::cpu_replicas(stages * copies)};
  s.pipeline_options().micro_batches = micro;
  s.pipeline_options().data_parallel = static_cast<std::size_t>(copies);
  s.executor_options().compression = c;
  nn::History h;
  auto model = strata_test::fit_blobs(s, strata_test::blobs(160, 11), 32, 4, &h);
  if (said) *said = model.gradient_reduction();
  return {strata_test::flat_weights(model), h.at("loss").back()};
}

// A pipeline's data-parallel copies (PipelineOptions::data_parallel) sum each stage's gradient in 16 bits:
// each copy rounds its own with its residual, the copies' values are added in FP32 in copy order and
// rounded once (across ranks: MPI's 16-bit all-reduce), and the finiteness is checked after the sum.
TEST_CASE("a pipeline's copies sum their gradients in 16 bits, as compressed mirrored replicas do") {
  for (strata::Compression c : {strata::Compression::BF16, strata::Compression::FP16}) {
    CAPTURE(to_string(c));
    // one stage, one micro-batch: each copy is a mirrored replica (bitwise in FP32: tests/parallel/pipeline/pipeline_test.cpp)
    std::string said;
    CHECK(pipeline(1, 2, c, 1, &said).weights == train(2, c).weights);
    CHECK(said == "each copy's gradient rounded to " + std::string(to_string(c)) + " for the copies' sum (error feedback)");
    CHECK(pipeline(1, 1, c).weights == train(1, c).weights);  // one copy: rounded as it would travel
  }
  // two stages of two copies, 3 micro-batches: near FP32, not its bits, the same bits run to run
  const Run fp32 = pipeline(2, 2, strata::Compression::None, 3);
  const Run bf = pipeline(2, 2, strata::Compression::BF16, 3);
  CHECK(bf.weights != fp32.weights);
  CHECK(bf.loss == doctest::Approx(fp32.loss).epsilon(0.05));
  CHECK(pipeline(2, 2, strata::Compression::BF16, 3).weights == bf.weights);
}

// Each copy's fp16 value is finite, their sum is not: the check after the sum skips the step everywhere
// (the weights as they were), where a check of each copy's gradient alone would let infinity in.
TEST_CASE("a pipeline's compressed copies' sum that overflows fp16 skips the step; one that does not applies") {
  const auto data = strata_test::blobs(32, 3);
  auto after_one_step = [&](float each) {
    strata::PipelineStrategy s{strata::cpu_replicas(2)};
    s.pipeline_options().data_parallel = 2;
    s.executor_options().compression = strata::Compression::FP16;
    auto model = s.scope(strata_test::blobs_mlp);
    model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 7});
    model.build(strata::Shape{6});
    const auto before = strata_test::flat_weights(model);
    for (const auto& b : s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(32))) {
      model.train_step(b, [&](strata::ReplicaGradient& g) { g.values[0] = each; });
      break;
    }
    const auto w = strata_test::flat_weights(model);
    for (float v : w) REQUIRE(std::isfinite(v));
    return std::pair{before, w};
  };
  const auto [before, skipped] = after_one_step(40000.f);  // 2 x 40000 > 65504: infinity in fp16
  CHECK(skipped == before);
  const auto [before2, applied] = after_one_step(20000.f);  // 40000: finite
  CHECK(applied != before2);
  CHECK(applied[0] == doctest::Approx(before2[0] - 0.1f * 40000.f).epsilon(1e-3));
}

TEST_CASE("a custom loop's hook sees the FP32 gradient; the step then compresses it as fit's does") {
  const auto data = strata_test::blobs(160, 11);
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  s.executor_options().compression = strata::Compression::BF16;
  s.executor_options().bucket_bytes = 128;  // fit buckets; a hook's step is flat: the same sums
  const auto fitted = strata_test::flat_weights(strata_test::fit_blobs(s, data, 32, 1));
  auto model = s.scope(strata_test::blobs_mlp);
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}}, {.seed = 7});
  std::atomic<bool> wider{false};  // a value no bf16 holds: the hook runs before the rounding
  for (const auto& b : s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(32)))
    model.train_step(b, [&](strata::ReplicaGradient& g) {
      for (float v : g.values)
        if (static_cast<float>(bf16(v)) != v) wider = true;
    });
  CHECK(wider.load());
  CHECK(strata_test::flat_weights(model) == fitted);
}

// GPU replicas round on their compute (Compute::round_to_wire: the host's body, here the host's compute
// standing in for a GPU's) and sum in 16 bits through their device collectives (WireCall: the device team's
// reduce on the stand-in's host runtime here; the device team's kernel and NCCL on a GPU: tests/gpu/): the CPU replicas'
// compressed weights and Adam moments bit for bit, flat, bucketed and at ZeRO 1, 2 and 3.
namespace {
std::atomic<int> rounded{0}, expanded{0};
struct WireCounting : strata::kernels::HostCompute {
  void round_to_wire(strata::WireFormat f, const float* g, const float* res, float* next, void* out,
                     std::size_t n) override {
    ++rounded;
    HostCompute::round_to_wire(f, g, res, next, out, n);
  }
  void expand_wire(strata::WireFormat f, const void* w, float* g, std::size_t n) override {
    ++expanded;
    HostCompute::expand_wire(f, w, g, n);
  }
};
}  // namespace

TEST_CASE("GPU replicas compress as CPU replicas do: the same bits flat, bucketed and at ZeRO 1, 2 and 3") {
  using strata::ShardedUpdate;
  strata_test::HostAsGpu host;
  strata::detail::gpu_backend().make = [](int, strata::MatmulPrecision) -> std::unique_ptr<strata::kernels::Compute> {
    return std::make_unique<WireCounting>();
  };
  for (int p : {2, 3}) {
    for (strata::Compression c : {strata::Compression::BF16, strata::Compression::FP16}) {
      if (c == strata::Compression::FP16 && p != 3) continue;  // (the time of the sanitizer builds)
      CAPTURE(p);
      CAPTURE(to_string(c));
      for (ShardedUpdate stage : {ShardedUpdate::Off, ShardedUpdate::On, ShardedUpdate::Gradients,
                                  ShardedUpdate::Parameters}) {
        CAPTURE(static_cast<int>(stage));
        const Trained want = train_state(p, c, stage);
        rounded = expanded = 0;
        const Trained got = train_state(p, c, stage, 0, /*gpus=*/true);
        CHECK(got.weights == want.weights);
        CHECK(got.moments == want.moments);
        CHECK(rounded.load() > 0);  // the GPUs' computes rounded and expanded, not the host behind their back
        CHECK(expanded.load() > 0);
      }
      const Trained flat = train_state(p, c, ShardedUpdate::Off);
      for (std::size_t bucket : {std::size_t{1}, std::size_t{128}}) {  // every layer its own bucket; a few
        CAPTURE(bucket);
        CHECK(train_state(p, c, ShardedUpdate::Off, 0, true, bucket).weights == flat.weights);
      }
    }
  }
  // the rounding did something on GPUs too; clipping by the global norm alike
  CHECK(train_state(2, strata::Compression::BF16, ShardedUpdate::Off, 0, true).weights !=
        train_state(2, strata::Compression::None, ShardedUpdate::Off, 0, true).weights);
  CHECK(train_state(3, strata::Compression::BF16, ShardedUpdate::On, 0.05f, true).weights ==
        train_state(3, strata::Compression::BF16, ShardedUpdate::On, 0.05f).weights);
}

TEST_CASE("GPU replicas' compressed runs say so in the summary") {
  strata_test::HostAsGpu host;
  strata::MirroredStrategy s{strata::virtual_gpus(0, 2)};
  s.executor_options().compression = strata::Compression::BF16;
  auto model = strata_test::fit_blobs(s, strata_test::blobs(64, 3), 32, 1);
  CHECK(model.gradient_reduction().find("; the gradient sent in bf16 (rounded on each GPU with error feedback") !=
        std::string::npos);
}

TEST_CASE("the formats' names read back (the examples' and benches' --compression)") {
  for (strata::Compression c : {strata::Compression::None, strata::Compression::BF16, strata::Compression::FP16})
    CHECK(strata::compression_named(to_string(c)) == c);
  CHECK_FALSE(strata::compression_named("fp8").has_value());
  CHECK_FALSE(strata::compression_named("BF16").has_value());
  CHECK_FALSE(strata::compression_named("").has_value());
}

TEST_CASE("compression is refused where it cannot apply, saying why and what to use instead") {
  const auto fails = [](auto& s) {
    s.executor_options().compression = strata::Compression::BF16;
    const auto data = strata_test::blobs(32, 1);
    auto model = s.scope(strata_test::blobs_mlp);
    model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
    model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(16)),
              {.epochs = 1, .verbose = nn::Verbosity::Silent});
  };
  SUBCASE("central variables (on the host, or on a GPU)") {
    strata_test::HostAsGpu host;
    strata::CentralStorageStrategy s{strata::virtual_gpus(0, 2)};
    s.executor_options().central_variables = strata::CentralVariables::Gpu;
    CHECK_THROWS_WITH_AS(fails(s),
                         doctest::Contains("ExecutorOptions::compression: the gradient is sent in 16 bits by the "
                                           "mirrored strategies' all-reduce (MirroredStrategy, "
                                           "MultiWorkerMirroredStrategy) and a pipeline's copies' sum; this strategy "
                                           "does not reduce it that way"),
                         strata::Error);
    strata::CentralStorageStrategy cpu{strata::cpu_replicas(2)};
    CHECK_THROWS_AS(fails(cpu), strata::Error);
  }
}

}  // namespace compression_test
