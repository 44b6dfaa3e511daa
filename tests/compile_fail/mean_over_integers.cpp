// MEAN over integers would silently truncate.
// expect: MEAN over integer elements is ambiguous
#include <strata/strata.hpp>
#include <vector>
int main() {
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  s.run([](auto& ctx) {
#ifdef STRATA_CONTROL
    std::vector<float> v(4);
#else
    std::vector<int> v(4);
#endif
    ctx.all_reduce(v, strata::Mean);
  });
}
