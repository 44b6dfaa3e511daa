// A user of strata from outside: two replicas all-reduce and agree.
#include <cstdio>
#include <strata/strata.hpp>
#include <vector>

int main() {
  strata::MirroredStrategy s{strata::cpu_replicas(2)};
  auto v = s.run([](auto& ctx) {
    std::vector<float> g{1.f + static_cast<float>(ctx.replica_id_in_sync_group())};
    ctx.all_reduce(g, strata::Sum);
    return g[0];
  });
  if (v[0] != 3.f || v[1] != 3.f) {
    std::printf("consumer: wrong all-reduce result %g %g\n", static_cast<double>(v[0]), static_cast<double>(v[1]));
    return 1;
  }
  std::printf("consumer: strata %s ok\n", STRATA_VERSION);
  return 0;
}
