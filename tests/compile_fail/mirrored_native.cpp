// Native is a pass-through to a backend library; replicas in one process have none.
// expect: replicas in one process have none
#include <strata/strata.hpp>
#ifdef STRATA_CONTROL
using S = strata::Strategy<strata::Synchronous, strata::Mirrored, strata::AutoReduce>;
#else
using S = strata::Strategy<strata::Synchronous, strata::Mirrored, strata::Native>;
#endif
int main() { S s{strata::cpu_replicas(2)}; }
