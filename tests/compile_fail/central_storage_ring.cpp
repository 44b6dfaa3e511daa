// Central storage reduces onto the host copy, not around a ring.
// expect: CentralStorage placement keeps one host copy of each variable, so gradients are reduced onto it: use strata::ReduceToOne
#include <strata/strata.hpp>
#ifdef STRATA_CONTROL
using S = strata::Strategy<strata::Synchronous, strata::CentralStorage, strata::ReduceToOne>;
#else
using S = strata::Strategy<strata::Synchronous, strata::CentralStorage, strata::Ring>;
#endif
int main() { S s{strata::cpu_replicas(2)}; }
