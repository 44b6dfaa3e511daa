// MirroredStrategy on GPU replicas: virtual GPUs on GPU 0 (the executor of
// parallel/data/mirrored_executor.hpp, gradients summed by the device
// team's reduce kernel) take the step one GPU takes on the same global
// batch, within FP32 reduction-order tolerance (the replicas' matrix
// products split the rows differently), repeat bitwise, and skip a NaN step
// on every replica; their gradient buckets give the flat sum's bits, and
// ZeRO 2 and 3 by buckets the per-layer run's.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>
#include <vector>

#include <strata/cuda.hpp>
#if STRATA_HAS_NCCL
#include <strata/nccl.hpp>  // one replica per distinct GPU: NCCL
#endif
#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>

#include "support/blobs.hpp"
#include "gpu_util.hpp"
#include "skip.hpp"

namespace mirrored_gpu_test {  // each file in its own namespace: the unity group joins them (tests/gpu/meson.build)

namespace nn = strata::nn;

namespace {

struct Run {
  std::vector<float> w;
  double loss = 0, accuracy = 0;
  std::int64_t iterations = 0;
};

template <class S>
Run train(S& s, const strata_test::Blobs& data, int epochs) {
  auto model = s.scope([] {
    return nn::Sequential{nn::Input{{6}}, nn::Dense{32, {.activation = nn::Activation::Tanh, .l2 = 1e-3f}},
                          nn::Dense{16}, nn::ReLU{}, nn::Dense{3}};
  });
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
                {.seed = 3});
  model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(64)),
            {.epochs = epochs, .verbose = nn::Verbosity::Silent});
  Run r;
  r.w = strata_test::flat_weights(model);
  r.iterations = model.iterations();
  const auto e = model.evaluate(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(100)));
  r.loss = e.at("loss");
  r.accuracy = e.at("accuracy");
  return r;
}

}  // namespace

TEST_CASE("MirroredStrategy on 2 and 4 virtual GPUs takes one GPU's steps (FP32 tolerance) and repeats bitwise") {
  const auto data = strata_test::blobs(1003, 5);  // 16 batches of 64, the last one partial: uneven splits
  strata::OneDeviceStrategy one{strata::gpu(0)};
  const Run want = train(one, data, 2);
  CHECK(want.accuracy > 0.9);
  for (int p : {2, 4}) {
    CAPTURE(p);
    strata::MirroredStrategy s{strata::virtual_gpus(0, p)};
    const Run got = train(s, data, 2);
    CHECK(got.iterations == want.iterations);
    gpu_test::check_close(got.w, want.w, 1e-3, 2e-4, "weights against one GPU");
    CHECK(gpu_test::close(got.loss, want.loss, 1e-3));
    CHECK(got.accuracy == doctest::Approx(want.accuracy).epsilon(0.01));
    const Run again = train(s, data, 2);
    gpu_test::check_bitwise(again.w, got.w, "a second run on the same replicas");
    // the sharded update (Auto from 3 replicas) and ZeRO 2 and 3 (each layer gathered and reduce-scattered on
    // the replicas' side streams) sum alike: the same bits at every stage
    for (auto mode : {strata::ShardedUpdate::Off, strata::ShardedUpdate::On, strata::ShardedUpdate::Gradients,
                      strata::ShardedUpdate::Parameters}) {
      strata::MirroredStrategy m{strata::virtual_gpus(0, p)};
      m.executor_options().sharded_update = mode;
      gpu_test::check_bitwise(train(m, data, 2).w, got.w, "the update sharded or not, ZeRO 0 to 3");
    }
  }
}

TEST_CASE("gradient buckets on virtual GPUs (a side stream each) give the flat sum's bits") {
  // the direct kernel sums each element once in replica order whatever the cut: bitwise the flat run
  const auto data = strata_test::blobs(1003, 5);
  for (int p : {2, 4}) {
    CAPTURE(p);
    strata::MirroredStrategy flat{strata::virtual_gpus(0, p)};
    flat.executor_options().sharded_update = strata::ShardedUpdate::Off;
    const Run want = train(flat, data, 2);
    for (std::size_t bytes : {std::size_t{1}, std::size_t{256}, std::size_t{1} << 20}) {
      CAPTURE(bytes);
      strata::MirroredStrategy s{strata::virtual_gpus(0, p)};
      s.executor_options().sharded_update = strata::ShardedUpdate::Off;
      s.executor_options().bucket_bytes = bytes;
      const Run got = train(s, data, 2);
      CHECK(got.iterations == want.iterations);
      gpu_test::check_bitwise(got.w, want.w, "bucketed against flat on the same virtual GPUs");
    }
  }
}

// One replica per GPU: NCCL (or the direct kernel) on side streams.
TEST_CASE("bucketed against flat with one replica per GPU (two GPUs)") {
  STRATA_GPU_SKIP_UNLESS(strata::cuda::device_count() >= 2,
                         "bucketed against flat on gpus({0, 1}) needs 2 GPUs; this machine has " +
                             std::to_string(strata::cuda::device_count()));
  const auto data = strata_test::blobs(1003, 5);
  strata::MirroredStrategy flat{strata::gpus({0, 1})};
  const Run want = train(flat, data, 2);
  strata::MirroredStrategy s{strata::gpus({0, 1})};
  s.executor_options().bucket_bytes = 256;
  const Run got = train(s, data, 2);
  CHECK(got.iterations == want.iterations);
  gpu_test::check_close(got.w, want.w, 1e-5, 1e-6, "bucketed against flat on two GPUs (NCCL's order may differ)");
}

// ZeRO 2 and 3 by buckets on GPU replicas (stop 45): each layer's gradient packed into its bucket's buffer
// (m.copy on the replica's stream), a bucket reduce-scattered by the device collectives on padded equal blocks
// (NCCL's contract exactly), stage 2's updated slices and stage 3's values gathered by the same buckets; the
// direct kernel sums each element in replica order whatever the cut: the per-layer run's bits.
TEST_CASE("ZeRO 2 and 3 by buckets on virtual GPUs give the per-layer run's bits") {
  const auto data = strata_test::blobs(1003, 5);
  for (int p : {2, 4}) {
    CAPTURE(p);
    for (strata::ShardedUpdate stage : {strata::ShardedUpdate::Gradients, strata::ShardedUpdate::Parameters}) {
      CAPTURE(static_cast<int>(stage));
      strata::MirroredStrategy layers{strata::virtual_gpus(0, p)};
      layers.executor_options().sharded_update = stage;
      const Run want = train(layers, data, 2);
      for (std::size_t bytes : {std::size_t{1}, std::size_t{256}, std::size_t{1} << 20}) {
        CAPTURE(bytes);
        strata::MirroredStrategy s{strata::virtual_gpus(0, p)};
        s.executor_options().sharded_update = stage;
        s.executor_options().bucket_bytes = bytes;
        const Run got = train(s, data, 2);
        CHECK(got.iterations == want.iterations);
        gpu_test::check_bitwise(got.w, want.w, "ZeRO by buckets against per layer on the same virtual GPUs");
      }
    }
  }
}

// Compression on GPU replicas: each rounds its gradient with its residual on its GPU (round_to_wire: the
// host's body), the device team sums the 16-bit values in FP32 once in replica order (flat, bucketed, and the
// ZeRO stages' reduce-scatters alike), so every cut gives one set of bits; near FP32's loss, not its bits.
TEST_CASE("compression on virtual GPUs: flat, bucketed and ZeRO 1, 2, 3 give one set of bits, near FP32's loss") {
  const auto data = strata_test::blobs(1003, 5);
  const auto run = [&](int p, strata::Compression c, strata::ShardedUpdate stage, std::size_t bytes) {
    strata::MirroredStrategy s{strata::virtual_gpus(0, p)};
    s.executor_options().compression = c;
    s.executor_options().sharded_update = stage;
    s.executor_options().bucket_bytes = bytes;
    return train(s, data, 2);
  };
  for (int p : {2, 4}) {
    CAPTURE(p);
    const Run fp32 = run(p, strata::Compression::None, strata::ShardedUpdate::Off, 0);
    for (strata::Compression c : {strata::Compression::BF16, strata::Compression::FP16}) {
      CAPTURE(static_cast<int>(c));
      const Run want = run(p, c, strata::ShardedUpdate::Off, 0);
      CHECK(want.w != fp32.w);
      CHECK(gpu_test::close(want.loss, fp32.loss, 0.05));
      gpu_test::check_bitwise(run(p, c, strata::ShardedUpdate::Off, 256).w, want.w, "bucketed, compressed");
      for (strata::ShardedUpdate stage :
           {strata::ShardedUpdate::On, strata::ShardedUpdate::Gradients, strata::ShardedUpdate::Parameters}) {
        CAPTURE(static_cast<int>(stage));
        gpu_test::check_bitwise(run(p, c, stage, 0).w, want.w, "a ZeRO stage, compressed");
      }
    }
  }
}

// One replica per GPU: NCCL's bf16 sum (its own order).
TEST_CASE("compression with one replica per GPU stays near FP32's loss (two GPUs)") {
  STRATA_GPU_SKIP_UNLESS(strata::cuda::device_count() >= 2,
                         "bf16 compression on gpus({0, 1}) needs 2 GPUs; this machine has " +
                             std::to_string(strata::cuda::device_count()));
  const auto data = strata_test::blobs(1003, 5);
  strata::MirroredStrategy fp32{strata::virtual_gpus(0, 2)};
  const Run want = train(fp32, data, 2);
  strata::MirroredStrategy s{strata::gpus({0, 1})};
  s.executor_options().compression = strata::Compression::BF16;
  s.executor_options().bucket_bytes = 256;
  const Run got = train(s, data, 2);
  CHECK(gpu_test::close(got.loss, want.loss, 0.05));
}

TEST_CASE("MirroredStrategy on virtual GPUs skips a step whose summed gradient holds a NaN, on every replica") {
  auto data = strata_test::blobs(256, 8);
  data.x[(64 + 63) * 6 + 1] = std::numeric_limits<float>::quiet_NaN();  // batch 1, the last replica's rows
  strata::MirroredStrategy s{strata::virtual_gpus(0, 4)};
  const Run got = train(s, data, 1);
  CHECK(got.iterations == 3);  // 4 batches, one skipped
  for (float v : got.w) REQUIRE(std::isfinite(v));
}

TEST_CASE("CentralStorageStrategy with compute on 2 virtual GPUs (variables and update on the host) takes one GPU's steps") {
  const auto data = strata_test::blobs(1003, 5);
  strata::OneDeviceStrategy one{strata::gpu(0)};
  const Run want = train(one, data, 2);
  strata::CentralStorageStrategy s{strata::virtual_gpus(0, 2)};
  const Run got = train(s, data, 2);
  CHECK(got.iterations == want.iterations);
  gpu_test::check_close(got.w, want.w, 1e-3, 2e-4, "weights against one GPU");
  CHECK(got.accuracy == doctest::Approx(want.accuracy).epsilon(0.01));
}

TEST_CASE("CentralStorageStrategy with the variables on the GPU (CentralVariables::Gpu) takes one GPU's steps") {
  const auto data = strata_test::blobs(1003, 5);
  strata::OneDeviceStrategy one{strata::gpu(0)};
  const Run want = train(one, data, 2);
  for (int p : {2, 3}) {
    CAPTURE(p);
    strata::CentralStorageStrategy s{strata::virtual_gpus(0, p)};
    s.executor_options().central_variables = strata::CentralVariables::Gpu;
    const Run got = train(s, data, 2);
    CHECK(got.iterations == want.iterations);
    gpu_test::check_close(got.w, want.w, 1e-3, 2e-4, "weights against one GPU");
    CHECK(got.accuracy == doctest::Approx(want.accuracy).epsilon(0.01));
    // the same bits as Mirrored on the same replicas: one update broadcast, or the same update everywhere
    strata::MirroredStrategy m{strata::virtual_gpus(0, p)};
    gpu_test::check_bitwise(got.w, train(m, data, 2).w, "Mirrored on the same virtual GPUs");
  }
}

TEST_CASE("MirroredStrategy with one replica per GPU (NCCL where built) takes one GPU's steps (two GPUs)") {
  STRATA_GPU_SKIP_UNLESS(strata::cuda::device_count() >= 2,
                         "replicas on distinct GPUs need 2 GPUs; this machine has " +
                             std::to_string(strata::cuda::device_count()) + " (virtual GPUs are tested above)");
  const auto data = strata_test::blobs(1003, 5);
  strata::OneDeviceStrategy one{strata::gpu(0)};
  const Run want = train(one, data, 2);
  strata::MirroredStrategy s{strata::gpus({0, 1})};
  const Run got = train(s, data, 2);
  CHECK(got.iterations == want.iterations);
  gpu_test::check_close(got.w, want.w, 1e-3, 2e-4, "weights against one GPU");
}

}  // namespace mirrored_gpu_test
