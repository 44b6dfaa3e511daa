// A pipeline's stages hold disjoint variables: nothing to all-reduce across them.
// expect: Pipeline placement holds each layer's variables once
#include <strata/strata.hpp>
#ifdef STRATA_CONTROL
using S = strata::Strategy<strata::Synchronous, strata::Pipeline, strata::NoReduce>;
#else
using S = strata::Strategy<strata::Synchronous, strata::Pipeline, strata::Ring>;
#endif
int main() { S s{strata::cpu_replicas(2)}; }
