#pragma once
// Two data-parallel copies of a pipeline's stages on the ranks, as the
// copies' bucket tests train them (tests/mpi/pipeline_test.cpp on CPU
// stages, tests/mpi/pipeline_gpu_test.cpp on GPU stages): 2 epochs of Adam,
// batches of 25 of 201 rows (the last, of one row, leaves copy 1 an empty
// share), 3 micro-batches, the copies' sum by buckets of `bytes` (0: flat)
// in `c`; the weights after it, and the summary's words in `*summary`.
#include <cstddef>
#include <string>
#include <vector>

#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/strategy/multi_worker_pipeline.hpp>

#include "support/blobs.hpp"

namespace strata_test {

template <class S, class Make>
std::vector<float> fit_two_copies(S& s, Make&& make, std::vector<strata::Range> stages, strata::Schedule k,
                                  std::size_t bytes, strata::Compression c, std::string* summary = nullptr) {
  namespace nn = strata::nn;
  s.pipeline_options() = {.stages = std::move(stages), .micro_batches = 3, .schedule = k, .data_parallel = 2};
  s.executor_options().bucket_bytes = bytes;
  s.executor_options().compression = c;
  const auto data = blobs(201, 11);
  auto model = s.scope(make);
  model.compile(nn::Adam{0.01}, nn::SparseCategoricalCrossentropy{{.from_logits = true}}, {nn::Accuracy{}},
                {.seed = 5});
  model.fit(s.distribute(strata::data::from_tensor_slices(data.x, data.y).batch(25)),
            {.epochs = 2, .verbose = nn::Verbosity::Silent});
  if (summary) *summary = model.gradient_reduction();
  return flat_weights(model);
}

}  // namespace strata_test
