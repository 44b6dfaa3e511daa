#pragma once
// Helpers of the GPU tests: device buffers of a CudaCompute filled from and
// read back into std::vector, seeded random data, and element comparisons
// that name the first element that differs.

#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <strata/cuda/compute.hpp>
#include <strata/kernels/host/compute.hpp>

namespace gpu_test {

//! The reference every GPU op is compared with, and the GPU's compute (device 0, one per test program).
inline strata::kernels::HostCompute& host() { return strata::kernels::host_compute(); }
inline strata::cuda::CudaCompute& gpu() {
  static strata::cuda::CudaCompute c{0};
  return c;
}

//! n elements of T on `c`'s device, uploaded from a vector; freed with the object.
template <class T>
class Dev {
 public:
  Dev(strata::cuda::CudaCompute& c, const std::vector<T>& v) : c_(c), n_(v.size()) {
    p_ = static_cast<T*>(c.allocate(n_ * sizeof(T)));
    c.upload(p_, v.data(), n_ * sizeof(T));
  }
  Dev(strata::cuda::CudaCompute& c, std::size_t n, T value = T{}) : Dev(c, std::vector<T>(n, value)) {}
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  ~Dev() {
    c_.synchronize();
    c_.deallocate(p_, n_ * sizeof(T));
  }
  T* get() const { return p_; }
  operator T*() const { return p_; }
  std::vector<T> read() const {
    std::vector<T> v(n_);
    c_.download(v.data(), p_, n_ * sizeof(T));
    return v;
  }
  void write(const std::vector<T>& v) { c_.upload(p_, v.data(), n_ * sizeof(T)); }

 private:
  strata::cuda::CudaCompute& c_;
  std::size_t n_;
  T* p_ = nullptr;
};

inline std::vector<float> random_floats(std::size_t n, unsigned seed, float lo = -2.f, float hi = 2.f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

//! Every element within atol + rtol * |want| (NaN only matches NaN).
inline void check_close(const std::vector<float>& got, const std::vector<float>& want, double rtol, double atol,
                        const char* what) {
  REQUIRE_MESSAGE(got.size() == want.size(), what);
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    const bool ok = (std::isnan(g) && std::isnan(w)) || std::abs(g - w) <= atol + rtol * std::abs(w);
    if (!ok) {
      FAIL_CHECK(what << ": element " << i << " is " << g << ", expected " << w);
      return;
    }
  }
}

//! Bitwise equal elements.
template <class T>
void check_bitwise(const std::vector<T>& got, const std::vector<T>& want, const char* what) {
  REQUIRE_MESSAGE(got.size() == want.size(), what);
  for (std::size_t i = 0; i < got.size(); ++i)
    if (std::memcmp(&got[i], &want[i], sizeof(T)) != 0) {
      FAIL_CHECK(what << ": element " << i << " is " << got[i] << ", expected bitwise " << want[i]);
      return;
    }
}

inline bool close(double got, double want, double rtol, double atol = 0) {
  return std::abs(got - want) <= atol + rtol * std::abs(want);
}

}  // namespace gpu_test
