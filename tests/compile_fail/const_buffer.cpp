// An in-place all-reduce needs a writable buffer.
// expect: (MutableBuffer|constraints not satisfied|no matching)
#include <strata/strata.hpp>
#include <vector>
int main() {
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  s.run([](auto& ctx) {
#ifdef STRATA_CONTROL
    std::vector<float> v(4);
#else
    const std::vector<float> v(4);
#endif
    ctx.all_reduce(v, strata::Sum);
  });
}
