// Tensor parallelism (parallel/tensor/tensor_parallel_executor.hpp, issue 26): a
// small GPT block and an MLP split over T replicas of MirroredStrategy give
// the one-replica result within float rounding (T = 2, 4; D x T), repeat
// bitwise, save logical checkpoints that continue at another T, predict and
// evaluate as one replica does, and refuse what cannot be split with a sentence;
// the copies' sum compressed to 16 bits (half the bytes), and ZeRO 1 over the
// logical parameters (the unsharded bits, logical checkpoints; compressed too) (issue 25).
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/io/tensor_file.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>

#include "device/host_as_gpu.hpp"
#include "parallel/tensor/tiny_gpt.hpp"

namespace tensor_parallel_test {

namespace nn = strata::nn;
using strata::Tensor;

using strata_test::flat;
using strata_test::max_diff;
using strata_test::Tokens;
nn::Model gpt(std::size_t heads = 4) { return strata_test::tiny_gpt(heads); }

// MirroredStrategy s{cpu_replicas(R)} with tensor_parallel = T.
#define TP_STRATEGY(s, R, T)                          \
  strata::MirroredStrategy s{strata::cpu_replicas(R)}; \
  s.executor_options().tensor_parallel = static_cast<std::size_t>(T)

struct Run {
  std::vector<float> weights;
  std::vector<double> losses;
  std::string choice;
};

// `epochs` of AdamW (decay, global-norm clipping) on the tokens, batches of 12
// (not divisible by 5 or 8); `sgd`: one step of plain SGD (max_steps 1).
Run train_on(std::vector<strata::Device> devices, std::size_t T, int epochs = 2, bool sgd = false,
             strata::Compression c = strata::Compression::None) {
  const Tokens d;
  strata::MirroredStrategy s{std::move(devices)};
  s.executor_options().tensor_parallel = T;
  s.executor_options().compression = c;
  auto model = s.scope([] { return gpt(); });
  if (sgd)
    model.compile(nn::SGD{0.5}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}}, {.seed = 3});
  else
    model.compile(nn::AdamW{1e-2f, {.weight_decay = 0.1f, .global_clipnorm = 1.f}},
                  nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}}, {.seed = 3});
  const auto h = model.fit(s.distribute(strata::data::from_tensor_slices(d.x, d.y).batch(12)),
                           {.epochs = epochs, .verbose = nn::Verbosity::Silent, .steps_per_epoch = sgd ? 1u : 0u});
  return {flat(model.get_weights()), h.at("loss"), model.gradient_reduction()};
}
Run train(int replicas, std::size_t T, int epochs = 2, bool sgd = false,
          strata::Compression c = strata::Compression::None) {
  return train_on(strata::cpu_replicas(replicas), T, epochs, sgd, c);
}

// Adam normalizes each step, so rounding differences of the gradient show in
// the weights at about lr x 1e-2 after a few steps; one SGD step shows them at 1e-7.
TEST_CASE("tensor parallel: T = 2 and 4 train as one replica does, within float rounding, and repeat bitwise") {
  const Run one = train(1, 1);
  const Run first = train(1, 1, 1, true);
  for (std::size_t T : {2u, 4u}) {
    INFO("T = ", T);
    CHECK(max_diff(train(static_cast<int>(T), T, 1, true).weights, first.weights) < 1e-6f);
    const Run tp = train(static_cast<int>(T), T);
    CHECK(tp.choice.find("1 attention layer split by heads, 1 Dense pair split column then row") != std::string::npos);
    CHECK(max_diff(tp.weights, one.weights) < 2e-4f);
    REQUIRE(tp.losses.size() == one.losses.size());
    for (std::size_t e = 0; e < one.losses.size(); ++e) CHECK(tp.losses[e] == doctest::Approx(one.losses[e]).epsilon(1e-5));
    CHECK(tp.weights != one.weights);  // the split products add in another order: not bitwise (said in the docs)
    CHECK(train(static_cast<int>(T), T).weights == tp.weights);  // but run to run, bitwise
  }
}

TEST_CASE("tensor parallel: D x T (2 copies of T = 2, 3 copies of T = 2) as one replica on the whole batch") {
  const Run one = train(1, 1);
  for (int replicas : {4, 6}) {
    INFO(replicas, " replicas");
    const Run dt = train(replicas, 2);
    CHECK(dt.choice.find(std::to_string(replicas / 2) + " data-parallel copies") != std::string::npos);
    CHECK(max_diff(dt.weights, one.weights) < 2e-4f);
    CHECK(max_diff(train(replicas, 2, 1, true).weights, train(1, 1, 1, true).weights) < 1e-6f);
    CHECK(dt.losses.back() == doctest::Approx(one.losses.back()).epsilon(1e-5));
  }
}

TEST_CASE("tensor parallel: an MLP's Dense pair splits (a Sequential), and a pair T does not divide stays whole") {
  Tensor<float> x{{30, 6}}, y{{30, 1}};
  for (std::size_t i = 0; i < 30; ++i) {
    for (std::size_t j = 0; j < 6; ++j) x[i * 6 + j] = std::sin(static_cast<float>(i * 6 + j));
    y[i] = static_cast<float>(i % 3);
  }
  auto run = [&](int replicas, std::size_t T, std::size_t units) {
    TP_STRATEGY(s, replicas, T);
    auto model = s.scope([&] {
      return nn::Sequential{nn::Input{{6}}, nn::Dense{units, {.activation = nn::Activation::ReLU, .l2 = 1e-3f}},
                            nn::Dense{3}};
    });
    model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 1});
    model.fit(s.distribute(strata::data::from_tensor_slices(x, y).batch(10)), {.epochs = 3, .verbose = nn::Verbosity::Silent});
    const auto logs = model.evaluate(s.distribute(strata::data::from_tensor_slices(x, y).batch(7)), {.verbose = nn::Verbosity::Silent});
    return std::pair{Run{flat(model.get_weights()), {logs.at("loss")}, model.gradient_reduction()},
                     model.predict(x, 7)};
  };
  const auto [one, p1] = run(1, 1, 8);
  const auto [tp, p2] = run(2, 2, 8);
  CHECK(tp.choice.find("1 Dense pair split column then row") != std::string::npos);
  CHECK(max_diff(tp.weights, one.weights) < 1e-5f);
  CHECK(tp.losses[0] == doctest::Approx(one.losses[0]).epsilon(1e-5));  // the loss (with L2) counted once per copy
  CHECK(max_diff(std::vector<float>(p1.begin(), p1.end()), std::vector<float>(p2.begin(), p2.end())) < 1e-5f);
  // 9 units over 2 replicas: the pair stays whole on both (the same steps as one replica: bitwise)
  const auto [odd1, q1] = run(1, 1, 9);
  const auto [odd2, q2] = run(2, 2, 9);
  CHECK(odd2.choice.find("no layer splits") != std::string::npos);
  CHECK(odd2.weights == odd1.weights);
}

TEST_CASE("tensor parallel: the members' layouts cover every parameter, split ones once, replicated ones on each") {
  nn::detail::LayerProgram p;
  p.layers.push_back(std::make_unique<nn::Embedding>(13, 16));
  p.layers.push_back(std::make_unique<nn::MultiHeadAttention>(nn::AttentionOptions{.heads = 4, .causal = true}));
  p.layers.push_back(std::make_unique<nn::Dense>(64, nn::DenseOptions{.activation = nn::Activation::GELU}));
  p.layers.push_back(std::make_unique<nn::Dense>(16));
  p.layers.push_back(std::make_unique<nn::Dense>(13));
  p.build(strata::Shape{8});
  const std::size_t n = p.num_params();
  for (int T : {1, 2, 4}) {
    INFO("T = ", T);
    const auto roles = p.tensor_plan(T);
    CHECK(roles[0] == strata::TensorRole::Replicated);
    CHECK(roles[1] == (T > 1 ? strata::TensorRole::Heads : strata::TensorRole::Replicated));
    CHECK(roles[2] == (T > 1 ? strata::TensorRole::Column : strata::TensorRole::Replicated));
    CHECK(roles[3] == (T > 1 ? strata::TensorRole::Row : strata::TensorRole::Replicated));
    CHECK(roles[4] == strata::TensorRole::Replicated);
    std::vector<int> held(n, 0), split(n, 0);
    std::size_t total = 0;
    for (int t = 0; t < T; ++t) {
      const auto segs = p.tensor_layout(t, T);
      total += strata::segments_size(segs);
      for (const auto& sg : segs)
        for (std::size_t i = sg.offset; i < sg.offset + sg.length; ++i) ++held[i], split[i] += sg.replicated ? 0 : 1;
    }
    for (std::size_t i = 0; i < n; ++i) {
      CHECK_MESSAGE((held[i] == (split[i] ? 1 : T)), "element ", i);
      if (held[i] != (split[i] ? 1 : T)) break;
    }
    if (T == 4) CHECK(total < 2 * n);  // a member holds about 1/4 of the split layers
  }
}

TEST_CASE("tensor parallel: weights set at any T read back exactly (value() joins what assign() split)") {
  for (int T : {1, 2, 4}) {
    TP_STRATEGY(s, T, static_cast<std::size_t>(T));
    auto model = s.scope([] { return gpt(); });
    model.compile(nn::Adam{1e-3}, nn::SparseCategoricalCrossentropy{{.from_logits = true}});
    model.build(strata::Shape{8});
    auto ws = model.get_weights();
    float v = 0;
    for (auto& w : ws)
      for (float& e : w.value) e = (v += 1.f);
    model.set_weights(ws);
    CHECK(flat(model.get_weights()) == flat(ws));
  }
}

TEST_CASE("tensor parallel: a checkpoint written at T = 2 continues at T = 1 and T = 4 (logical: weights and Adam state)") {
  const Tokens d;
  const auto dir = std::filesystem::temp_directory_path() / "strata_tensor_parallel_test";
  std::filesystem::create_directories(dir);
  const auto path = dir / "t2.ckpt";
  auto data = strata::data::from_tensor_slices(d.x, d.y).batch(12);
  auto continued = [&](int replicas, std::size_t T, bool load) {
    TP_STRATEGY(s, replicas, T);
    auto model = s.scope([] { return gpt(); });
    model.compile(nn::Adam{1e-2}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 3});
    if (!load) {
      model.fit(s.distribute(data), {.epochs = 1, .verbose = nn::Verbosity::Silent});
      model.save_checkpoint(path);
    } else {
      model.build(strata::Shape{8});
      model.load_checkpoint(path);
      CHECK(model.iterations() == 4);
    }
    model.fit(s.distribute(data), {.epochs = 1, .verbose = nn::Verbosity::Silent});
    return flat(model.get_weights());
  };
  const auto at2 = continued(2, 2, false);
  const auto at1 = continued(1, 1, true);
  const auto at4 = continued(4, 4, true);
  CHECK(max_diff(at1, at2) < 2e-4f);
  CHECK(max_diff(at4, at2) < 2e-4f);
  std::filesystem::remove_all(dir);
}

TEST_CASE("tensor parallel: what cannot be split is refused with a sentence") {
  auto refused = [](int replicas, std::size_t T, std::size_t heads, const std::string& words) {
    TP_STRATEGY(s, replicas, T);
    const std::string what = strata_test::build_error(s, heads);
    CHECK_MESSAGE(what.find(words) != std::string::npos, what);
  };
  refused(3, 3, 4, "'multi_head_attention' (MultiHeadAttention) has 4 heads: they cannot be split evenly over 3");
  refused(4, 4, 2, "has 2 heads, fewer than the 4 tensor-parallel replicas");
  refused(3, 2, 4, "tensor_parallel = 2 does not divide the 3 replicas");
  {
    strata::CentralStorageStrategy s{strata::cpu_replicas(2)};
    s.executor_options().tensor_parallel = 2;
    CHECK_THROWS_WITH_AS(s.scope([] { return gpt(); }), doctest::Contains("leave tensor_parallel at 1"), strata::Error);
  }
}

// The host's compute standing in for a device's, its memory said to be a
// GPU's: every buffer goes the way a GPU replica's does (the group's sums and
// the copies' sum staged through host memory, the finiteness count on the
// device), here on host memory.
struct DeviceLikeCompute : strata::kernels::HostCompute {
  [[nodiscard]] strata::kernels::Where where() const noexcept override { return strata::kernels::Where::Cuda; }
};

// GPU replicas run the executor's GPU path (their own computes and buffers,
// gradients staged for the sums): on the host's compute they give the CPU
// replicas' bits, at T = 2 and D x T = 2 x 2.
TEST_CASE("tensor parallel on GPU replicas (the host's compute standing in) gives the CPU replicas' bits") {
  for (int replicas : {2, 4}) {
    INFO(replicas, " replicas");
    const Run cpu = train(replicas, 2);
    std::vector<int> ids;
    for (int i = 0; i < replicas; ++i) ids.push_back(i);
    {
      strata_test::HostAsGpu host;
      const Run gpu = train_on(strata::gpus(ids), 2);
      CHECK(gpu.weights == cpu.weights);
      CHECK(gpu.losses == cpu.losses);
    }
    {
      strata_test::HostAsGpu host;
      strata::detail::gpu_backend().make = [](int, strata::MatmulPrecision) -> std::unique_ptr<strata::kernels::Compute> {
        return std::make_unique<DeviceLikeCompute>();
      };
      const Run staged = train_on(strata::gpus(ids), 2);
      CHECK(staged.weights == cpu.weights);
      CHECK(staged.losses == cpu.losses);
    }
    {  // compressed: the GPU replicas' gradients are summed on the host, in 16 bits, as the CPU replicas' are
      const Run cpu16 = train(replicas, 2, 2, false, strata::Compression::BF16);
      strata_test::HostAsGpu host;
      strata::detail::gpu_backend().make = [](int, strata::MatmulPrecision) -> std::unique_ptr<strata::kernels::Compute> {
        return std::make_unique<DeviceLikeCompute>();
      };
      const Run staged = train_on(strata::gpus(ids), 2, 2, false, strata::Compression::BF16);
      CHECK(staged.weights == cpu16.weights);
      CHECK(staged.losses == cpu16.losses);
      CHECK(staged.weights != cpu.weights);
    }
  }
}

// Compression (ExecutorOptions::compression) under tensor parallelism: each
// member's gradient goes to the copies' sum in 16 bits with error feedback.
TEST_CASE("tensor parallel with compression: the copies' sum in bf16 and fp16, near FP32's, the same bits run to run") {
  using strata::Compression;
  for (int replicas : {2, 4, 6}) {  // one copy (rounded, nothing sent), two, three
    INFO(replicas, " replicas");
    const Run fp32 = train(replicas, 2);
    for (Compression c : {Compression::BF16, Compression::FP16}) {
      INFO(strata::to_string(c));
      const Run tp = train(replicas, 2, 2, false, c);
      CHECK_MESSAGE(tp.choice.find("each member's gradient rounded to " + std::string(strata::to_string(c)) +
                                   " for the copies' sum") != std::string::npos, tp.choice);
      CHECK(tp.weights != fp32.weights);  // rounded: not FP32's bits
      CHECK(max_diff(tp.weights, fp32.weights) < 2e-2f);
      CHECK(tp.losses.back() == doctest::Approx(fp32.losses.back()).epsilon(1e-3));
      CHECK(train(replicas, 2, 2, false, c).weights == tp.weights);  // deterministic: copy order, one rounding
    }
  }
}

// The bytes a replica hands to its sends and collectives (payload_bytes): the
// layer sums' messages are the same compressed or not; the copies' sum of a
// member's gradient is half. Member t of the MLP 6-8-3 split over T = 2 holds
// 6 x 4 + 4 (its columns of the first Dense) + 4 x 3 (its rows of the second)
// + 3 (the second's bias, replicated) = 43 floats.
TEST_CASE("tensor parallel with compression: the copies' sum of each member's gradient puts half the bytes on the wire") {
  Tensor<float> x{{30, 6}}, y{{30, 1}};
  for (std::size_t i = 0; i < 30; ++i) {
    for (std::size_t j = 0; j < 6; ++j) x[i * 6 + j] = std::cos(static_cast<float>(i * 6 + j));
    y[i] = static_cast<float>(i % 3);
  }
  auto bytes = [&](int replicas, strata::Compression c) {
    TP_STRATEGY(s, replicas, 2);
    s.executor_options().compression = c;
    auto model = s.scope([] {
      return nn::Sequential{nn::Input{{6}}, nn::Dense{8, {.activation = nn::Activation::ReLU}}, nn::Dense{3}};
    });
    model.compile(nn::SGD{0.1}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 1});
    const auto at = [&] { return s.run([](auto& ctx) { return ctx.communicator().payload_bytes(); }); };
    const auto before = at();
    model.fit(s.distribute(strata::data::from_tensor_slices(x, y).batch(10)), {.epochs = 1, .verbose = nn::Verbosity::Silent});
    const auto after = at();
    std::vector<std::uint64_t> sent;
    for (std::size_t r = 0; r < after.size(); ++r) sent.push_back(after[r] - before[r]);
    return sent;
  };
  for (int replicas : {4, 6}) {
    INFO(replicas, " replicas");
    const std::uint64_t peers = static_cast<std::uint64_t>(replicas / 2 - 1), steps = 3, member = 43;
    const auto fp32 = bytes(replicas, strata::Compression::None);
    for (strata::Compression c : {strata::Compression::BF16, strata::Compression::FP16}) {
      const auto half = bytes(replicas, c);
      REQUIRE(half.size() == fp32.size());
      for (std::size_t r = 0; r < fp32.size(); ++r) CHECK(fp32[r] - half[r] == steps * peers * member * 2);
    }
  }
}

// ZeRO 1 under tensor parallelism (ShardedUpdate::On): the optimizer state
// sharded over every replica, each owning a slice of the logical parameters.
struct Sharded {
  std::vector<float> weights;
  std::vector<std::vector<float>> state;  // the optimizer's slots, logical (as a checkpoint holds them)
  std::string choice;
};
// `epochs` of AdamW (decay; clipping by the global norm when `clip`) on the tokens, batches of 12; the state
// read from a checkpoint written after; `load`: a checkpoint to start from.
Sharded run_sharded(std::vector<strata::Device> devices, std::size_t T, strata::ShardedUpdate mode, bool clip,
                    int epochs = 2, const std::filesystem::path& load = {},
                    strata::Compression c = strata::Compression::None) {
  const Tokens d;
  strata::MirroredStrategy s{std::move(devices)};
  s.executor_options().tensor_parallel = T;
  s.executor_options().sharded_update = mode;
  s.executor_options().compression = c;
  auto model = s.scope([] { return gpt(); });
  model.compile(nn::AdamW{1e-2f, {.weight_decay = 0.1f, .global_clipnorm = clip ? 1.f : 0.f}},
                nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 3});
  if (!load.empty()) {
    model.build(strata::Shape{8});
    model.load_checkpoint(load);
  }
  model.fit(s.distribute(strata::data::from_tensor_slices(d.x, d.y).batch(12)),
            {.epochs = epochs, .verbose = nn::Verbosity::Silent});
  const auto path = std::filesystem::temp_directory_path() / "strata_tp_sharded_state.ckpt";
  model.save_checkpoint(path);
  Sharded out{flat(model.get_weights()), {}, model.gradient_reduction()};
  for (const auto& e : strata::io::read_tensor_file(path, "test").tensors)
    if (e.name.rfind("optimizer/", 0) == 0) out.state.emplace_back(e.value.data(), e.value.data() + e.value.size());
  std::filesystem::remove(path);
  return out;
}

TEST_CASE("tensor parallel with ZeRO 1: the unsharded update's weights and optimizer state bit for bit") {
  using strata::ShardedUpdate;
  for (const auto& shape : {std::pair{2, std::size_t{2}}, std::pair{4, std::size_t{2}}, std::pair{6, std::size_t{2}},
                            std::pair{4, std::size_t{4}}}) {
    const int replicas = shape.first;
    const std::size_t T = shape.second;
    INFO(replicas, " replicas, T = ", T);
    const Sharded off = run_sharded(strata::cpu_replicas(replicas), T, ShardedUpdate::Off, false);
    const Sharded on = run_sharded(strata::cpu_replicas(replicas), T, ShardedUpdate::On, false);
    CHECK_MESSAGE(on.choice.find("the update sharded (ZeRO 1) over the " + std::to_string(replicas) + " replicas") !=
                      std::string::npos, on.choice);
    CHECK(off.choice.find("ZeRO 1") == std::string::npos);
    CHECK(on.weights == off.weights);  // the same sums, the same element-wise updates
    REQUIRE(on.state.size() == 2);     // AdamW's moments, joined from every replica's slice
    CHECK(on.state == off.state);
    // clipping: the squared norm summed over the slices instead of the members' parts, within rounding
    const Sharded clip_off = run_sharded(strata::cpu_replicas(replicas), T, ShardedUpdate::Off, true);
    const Sharded clip_on = run_sharded(strata::cpu_replicas(replicas), T, ShardedUpdate::On, true);
    CHECK(max_diff(clip_on.weights, clip_off.weights) < 1e-5f);
  }
}

// Compressed, each member's part of the logical gradient (zeros elsewhere, which round to themselves) goes
// to the reduce-scatter in 16 bits: each element's nonzero terms added in FP32 in copy order and rounded
// once, as the copies' peer sum does, so the compressed unsharded update's bits.
TEST_CASE("tensor parallel with ZeRO 1 and compression: the compressed unsharded update's bits") {
  using strata::ShardedUpdate;
  for (const auto& shape : {std::pair{2, std::size_t{2}}, std::pair{4, std::size_t{2}}, std::pair{6, std::size_t{2}},
                            std::pair{4, std::size_t{4}}}) {
    for (strata::Compression c : {strata::Compression::BF16, strata::Compression::FP16}) {
      const int replicas = shape.first;
      const std::size_t T = shape.second;
      INFO(replicas, " replicas, T = ", T, ", ", strata::to_string(c));
      const Sharded off = run_sharded(strata::cpu_replicas(replicas), T, ShardedUpdate::Off, false, 2, {}, c);
      const Sharded on = run_sharded(strata::cpu_replicas(replicas), T, ShardedUpdate::On, false, 2, {}, c);
      CHECK_MESSAGE(on.choice.find("rounded to " + std::string(strata::to_string(c)) + " for the reduce-scatter") !=
                        std::string::npos, on.choice);
      CHECK(on.weights == off.weights);
      CHECK(on.state == off.state);
      if (c == strata::Compression::BF16 && replicas == 4 && T == 2)  // rounded: not FP32's bits
        CHECK(on.weights != run_sharded(strata::cpu_replicas(replicas), T, ShardedUpdate::On, false).weights);
    }
  }
}

TEST_CASE("tensor parallel with ZeRO 1: checkpoints move between sharded and unsharded runs, and to another T") {
  using strata::ShardedUpdate;
  const auto dir = std::filesystem::temp_directory_path() / "strata_tp_zero1";
  std::filesystem::create_directories(dir);
  auto epoch_then_save = [&](ShardedUpdate mode, const std::string& name) {
    const Tokens d;
    TP_STRATEGY(s, 4, 2);
    s.executor_options().sharded_update = mode;
    auto model = s.scope([] { return gpt(); });
    model.compile(nn::AdamW{1e-2f, {.weight_decay = 0.1f}}, nn::SparseCategoricalCrossentropy{{.from_logits = true}},
                  {}, {.seed = 3});
    model.fit(s.distribute(strata::data::from_tensor_slices(d.x, d.y).batch(12)), {.epochs = 1, .verbose = nn::Verbosity::Silent});
    model.save_checkpoint(dir / name);
  };
  epoch_then_save(ShardedUpdate::On, "on.ckpt");
  epoch_then_save(ShardedUpdate::Off, "off.ckpt");
  const Sharded straight = run_sharded(strata::cpu_replicas(4), 2, ShardedUpdate::On, false, 2);
  // the second epoch from either file, sharded or not: the uninterrupted run's bits
  for (const char* file : {"on.ckpt", "off.ckpt"})
    for (ShardedUpdate mode : {ShardedUpdate::On, ShardedUpdate::Off}) {
      INFO(file, " continued ", mode == ShardedUpdate::On ? "sharded" : "unsharded");
      const Sharded next = run_sharded(strata::cpu_replicas(4), 2, mode, false, 1, dir / file);
      CHECK(next.weights == straight.weights);
      CHECK(next.state == straight.state);
    }
  // at T = 4 (other members' layouts, other slices): one replica's rounding away
  const Sharded t4 = run_sharded(strata::cpu_replicas(4), 4, ShardedUpdate::On, false, 1, dir / "on.ckpt");
  CHECK(max_diff(t4.weights, straight.weights) < 2e-4f);
  std::filesystem::remove_all(dir);
}

TEST_CASE("tensor parallel with ZeRO 1 on GPU replicas (the host's compute standing in): the CPU replicas' bits") {
  const Sharded cpu = run_sharded(strata::cpu_replicas(4), 2, strata::ShardedUpdate::On, true);
  strata_test::HostAsGpu host;
  strata::detail::gpu_backend().make = [](int, strata::MatmulPrecision) -> std::unique_ptr<strata::kernels::Compute> {
    return std::make_unique<DeviceLikeCompute>();
  };
  const Sharded gpu = run_sharded(strata::gpus({0, 1, 2, 3}), 2, strata::ShardedUpdate::On, true);
  CHECK(gpu.weights == cpu.weights);
  CHECK(gpu.state == cpu.state);
}

// Gradient buckets apply where the copies' sum crosses workers (tests/mpi/tensor_parallel_test.cpp); in one
// process the copies' sum stays after backward, and the summary says so.
TEST_CASE("tensor parallel in one process with bucket_bytes: the copies' sum after backward, said, the same bits") {
  const Tokens d;
  auto run = [&](std::size_t bytes) {
    TP_STRATEGY(s, 4, 2);
    s.executor_options().bucket_bytes = bytes;
    auto model = s.scope([] { return gpt(); });
    model.compile(nn::Adam{1e-2f}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {}, {.seed = 3});
    model.fit(s.distribute(strata::data::from_tensor_slices(d.x, d.y).batch(12)),
              {.epochs = 1, .verbose = nn::Verbosity::Silent});
    return std::pair{flat(model.get_weights()), model.gradient_reduction()};
  };
  const auto bucketed = run(1 << 20);  // (no structured binding: clang cannot capture one in doctest's lambdas)
  const std::string& said = bucketed.second;
  CHECK_MESSAGE(said.find("the copies' sum after backward, not by buckets (they apply where the copies' sum "
                          "crosses workers)") != std::string::npos, said);
  CHECK(bucketed.first == run(0).first);
}

TEST_CASE("tensor parallel: ZeRO 2 and 3 are refused with a sentence, compressed or not") {
  auto refused = [](strata::ShardedUpdate mode, strata::Compression c, const std::string& words) {
    TP_STRATEGY(s, 4, 2);
    s.executor_options().sharded_update = mode;
    s.executor_options().compression = c;
    CHECK_THROWS_WITH_AS(s.scope([] { return gpt(); }), doctest::Contains(words.c_str()), strata::Error);
  };
  refused(strata::ShardedUpdate::Gradients, strata::Compression::None, "does not combine with sharded_update Gradients");
  refused(strata::ShardedUpdate::Parameters, strata::Compression::None, "(ZeRO 2 and 3)");
  refused(strata::ShardedUpdate::Gradients, strata::Compression::BF16, "(ZeRO 2 and 3)");
}

// A member that does not come to its group's sum is named by the others within
// the deadline; one that fails releases them at once with its message (no hang).
TEST_CASE("tensor parallel: a stalled member is named within the deadline, a failed one releases the others") {
  using namespace std::chrono_literals;
  auto run = [](int replicas, std::chrono::milliseconds timeout, auto&& hook) {
    strata::MirroredStrategy s{strata::cpu_replicas(replicas), strata::CommOptions{.timeout = timeout}};
    s.executor_options().tensor_parallel = 2;
    return strata_test::steps_until_error(s, hook);
  };
  for (int replicas : {2, 4}) {  // one copy; two copies (the copies' sum too)
    INFO(replicas, " replicas");
    const std::string stalled = run(replicas, 1000ms, [](strata::ReplicaGradient& g) {
                                  if (g.replica == 1) std::this_thread::sleep_for(3000ms);
                                }).first;
    CHECK_MESSAGE(stalled.find("timed out after 1000 ms") != std::string::npos, stalled);
    CHECK_MESSAGE(stalled.find("replica 1") != std::string::npos, stalled);
    // (no structured binding: clang 14 cannot capture one in doctest's message lambda)
    const auto failed = run(replicas, 8000ms, [](strata::ReplicaGradient& g) {
      if (g.replica == 1) throw std::runtime_error("member 1 gave up");
    });
    CHECK_MESSAGE(failed.first.find("member 1 gave up") != std::string::npos, failed.first);
    CHECK(failed.second < 6000ms);  // at once, not after the deadline (8 s)
  }
}

}  // namespace tensor_parallel_test
