// Parameter-server placement goes with Asynchronous workers (staleness 0 for synchronous rounds).
// expect: ParameterServer placement is trained by workers pushing gradients as they go
#include <strata/strata.hpp>
#include <strata/strategy/parameter_server.hpp>
#ifdef STRATA_CONTROL
using S = strata::Strategy<strata::Asynchronous, strata::ParameterServer, strata::PushPull>;
int main() { S s{{.workers = 1, .staleness = 0}}; }
#else
using S = strata::Strategy<strata::Synchronous, strata::ParameterServer, strata::PushPull>;
int main() { S s{strata::cpu_replicas(2)}; }
#endif
