// Mirrored copies need an all-reduce to stay identical.
// expect: Mirrored placement keeps a copy of each variable per replica and needs an all-reduce
#include <strata/strata.hpp>
#ifdef STRATA_CONTROL
using S = strata::Strategy<strata::Synchronous, strata::Mirrored, strata::Ring>;
#else
using S = strata::Strategy<strata::Synchronous, strata::Mirrored, strata::NoReduce>;
#endif
int main() { S s{strata::cpu_replicas(2)}; }
