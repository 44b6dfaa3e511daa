// ReduceToOne has a single destination; Mirrored has one copy per replica.
// expect: ReduceToOne reduces onto a single central copy, but Mirrored placement
#include <strata/strata.hpp>
#ifdef STRATA_CONTROL
using S = strata::Strategy<strata::Synchronous, strata::CentralStorage, strata::ReduceToOne>;
#else
using S = strata::Strategy<strata::Synchronous, strata::Mirrored, strata::ReduceToOne>;
#endif
int main() { S s{strata::cpu_replicas(2)}; }
