// A type that did not opt in is not a policy (no duck typing).
// expect: SyncPolicy
#include <strata/strata.hpp>
struct LooksSynchronous { static constexpr const char* name = "sync"; };
#ifdef STRATA_CONTROL
using S = strata::Strategy<strata::Synchronous, strata::Mirrored, strata::Direct>;
#else
using S = strata::Strategy<LooksSynchronous, strata::Mirrored, strata::Direct>;
#endif
int main() { S s{strata::cpu_replicas(2)}; }
