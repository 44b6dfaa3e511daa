// One replica has nothing to reduce.
// expect: OneDevice placement runs a single replica, so there is nothing to reduce
#include <strata/strata.hpp>
#ifdef STRATA_CONTROL
using S = strata::Strategy<strata::Synchronous, strata::OneDevice, strata::NoReduce>;
#else
using S = strata::Strategy<strata::Synchronous, strata::OneDevice, strata::Direct>;
#endif
int main() { S s{strata::cpu(0)}; }
