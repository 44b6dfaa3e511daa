// A user of strata/nn from outside: a Dense layer learns y = 2x under a
// mirrored strategy, through the installed (or subproject) headers.
#include <cstdio>
#include <strata/data/dataset.hpp>
#include <strata/nn.hpp>
#include <strata/strata.hpp>

int main() {
  namespace nn = strata::nn;
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  auto model = s.scope([] { return nn::Sequential{nn::Input{{1}}, nn::Dense{1}}; });
  model.compile(nn::SGD{0.1}, nn::MeanSquaredError{});
  strata::Tensor<float> x{{8, 1}, {0, 1, 2, 3, 4, 5, 6, 7}}, y{{8, 1}, {0, 2, 4, 6, 8, 10, 12, 14}};
  for (auto& v : x) v /= 8;
  for (auto& v : y) v /= 8;
  model.fit(s.distribute(strata::data::from_tensor_slices(x, y).batch(4)), {.epochs = 200, .verbose = nn::Verbosity::Silent});
  const double k = model.get_weights()[0].value[0];
  if (k < 1.9 || k > 2.1) {
    std::printf("consumer_nn: learned slope %g, expected 2\n", k);
    return 1;
  }
  std::printf("consumer_nn: strata/nn ok (slope %.3f)\n", k);
  return 0;
}
