// A new placement needs an executor before any model can train under it.
// expect: this placement policy has no executor
#include <strata/strata.hpp>
struct Striped {  // opts in as a placement policy, but nobody wrote its executor
  using placement_policy = Striped;
  static constexpr strata::PlacementKind kind = strata::PlacementKind::Mirrored;
  static constexpr std::string_view name = "striped";
};
#ifdef STRATA_CONTROL
using S = strata::Strategy<strata::Synchronous, strata::Mirrored, strata::Direct>;
#else
using S = strata::Strategy<strata::Synchronous, Striped, strata::Direct>;
#endif
int main() { S s{strata::cpu_replicas(2)}; }
