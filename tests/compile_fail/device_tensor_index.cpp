// A device tensor's elements are not addressable from the host: indexing a
// Tensor<float, CudaSpace> must not compile (its operator[] requires
// Space::host_accessible); read elements through strata::to_host instead.
// expect: host_accessible
#include <strata/cuda/space.hpp>

int main() {
  strata::Tensor<float, strata::CudaSpace> t;
#ifdef STRATA_CONTROL
  return static_cast<int>(t.size());
#else
  return static_cast<int>(t[0]);
#endif
}
