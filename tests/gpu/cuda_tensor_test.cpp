// Tensor<T, CudaSpace>: host -> device -> host round trips (small, empty,
// larger than a staging chunk, integer elements), deep device copies,
// zero-initialization, typed out-of-memory errors, and devices that do not
// exist as errors rather than crashes.

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include <strata/cuda/device.hpp>
#include <strata/cuda/stream.hpp>
#include <strata/cuda/space.hpp>

#include "gpu_util.hpp"

namespace cuda_tensor_gpu_test {  // each file in its own namespace: the unity group joins them (tests/gpu/meson.build)

using strata::CudaSpace;
using strata::Shape;
using strata::Tensor;

TEST_CASE("host -> device -> host round trips are exact") {
  const Tensor<float> h{{2, 3}, {1.f, -2.5f, 3.25f, 0.f, -0.f, 1e-38f}};
  const Tensor<float, CudaSpace> d = strata::to_device(h);
  CHECK(d.shape() == h.shape());
  CHECK(d.data() != nullptr);
  CHECK(strata::to_host(d) == h);

  // 3 staging chunks of 8 MiB, values that differ everywhere
  const std::size_t n = (std::size_t{17} << 20) / sizeof(float) + 3;
  Tensor<float> big{Shape{n}};
  const auto values = gpu_test::random_floats(n, 1);
  std::copy(values.begin(), values.end(), big.begin());
  CHECK(strata::to_host(strata::to_device(big)) == big);

  const Tensor<std::int64_t> ints{{3}, {-1, 1LL << 40, 7}};
  CHECK(strata::to_host(strata::to_device(ints)) == ints);
}

TEST_CASE("device tensors: zero-initialized, empty, deep copies") {
  const Tensor<float, CudaSpace> z{Shape{4, 5}};
  CHECK(strata::to_host(z) == Tensor<float>(Shape{4, 5}, 0.f));

  const Tensor<float, CudaSpace> empty{Shape{0, 3}};
  CHECK(empty.data() == nullptr);
  CHECK(empty.empty());
  const Tensor<float, CudaSpace> empty_copy = empty;
  CHECK(strata::to_host(empty_copy).shape() == Shape{0, 3});

  const Tensor<float> h{{3}, {1.f, 2.f, 3.f}};
  Tensor<float, CudaSpace> a = strata::to_device(h);
  const Tensor<float, CudaSpace> b = a;  // device-to-device, not a host memcpy of device memory
  CHECK(b.data() != a.data());
  CudaSpace::upload(a.data(), Tensor<float>{{3}, {9.f, 9.f, 9.f}}.data(), 3 * sizeof(float));
  CHECK(strata::to_host(b) == h);  // deep: unchanged by a's new values
  Tensor<float, CudaSpace> c{Shape{3}};
  c.copy_from(b);
  CHECK(strata::to_host(c) == h);
  CHECK_THROWS_AS(c.copy_from(Tensor<float, CudaSpace>{Shape{4}}), strata::ShapeError);
  Tensor<float, CudaSpace> moved = std::move(a);
  CHECK(a.data() == nullptr);
  CHECK(strata::to_host(moved) == Tensor<float>({3}, {9.f, 9.f, 9.f}));
}

TEST_CASE("a device tensor that does not fit is a CudaOutOfMemory naming the request") {
  const std::size_t elements = std::size_t{1} << 48;  // 1 PiB of floats
  try {
    Tensor<float, CudaSpace> t{Shape{elements}};
    FAIL("a 1 PiB device tensor was allocated");
  } catch (const strata::CudaOutOfMemory& e) {
    CHECK(e.bytes() == elements * sizeof(float));
    CHECK(e.device() == 0);
    const std::string what = e.what();
    CHECK(what.find(std::to_string(elements * sizeof(float)) + " bytes on device 0") != std::string::npos);
    CHECK(what.find("CudaSpace::allocate") != std::string::npos);
  }
  CHECK(strata::to_host(strata::to_device(Tensor<float>{{1}, {5.f}}))[0] == 5.f);  // nothing left broken
}

TEST_CASE("devices that do not exist are errors naming the device") {
  const int n = strata::cuda::device_count();
  REQUIRE(n > 0);
  CHECK_FALSE(strata::cuda::device_name(0).empty());
  CHECK_THROWS_WITH_AS(strata::cuda::DeviceGuard{n}, doctest::Contains(("no CUDA device " + std::to_string(n)).c_str()),
                       strata::CudaError);
  CHECK_THROWS_AS(strata::cuda::Stream{n}, strata::CudaError);
  CHECK_THROWS_AS(strata::cuda::device_name(n), strata::CudaError);
  CHECK_THROWS_AS(strata::cuda::Stream{-1}, strata::CudaError);
  // the current device is unchanged by the failures
  int current = -1;
  REQUIRE(cudaGetDevice(&current) == cudaSuccess);
  CHECK(current == 0);
}

TEST_CASE("a host pointer handed to a device tensor operation is an error, not a crash") {
  std::vector<float> host(4, 1.f);
  CHECK_THROWS_AS(CudaSpace::upload(host.data(), host.data(), 16), strata::Error);
  CHECK_THROWS_AS(CudaSpace::copy(host.data(), host.data(), 16), strata::Error);
}

}  // namespace cuda_tensor_gpu_test
