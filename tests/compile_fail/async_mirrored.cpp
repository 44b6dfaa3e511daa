// Asynchronous training needs variables on parameter servers, not mirrored copies.
// expect: asynchronous training applies each worker's gradients as they arrive, which needs the variables on parameter servers
#include <strata/strata.hpp>
#include <strata/strategy/parameter_server.hpp>
#ifdef STRATA_CONTROL
using S = strata::Strategy<strata::Asynchronous, strata::ParameterServer, strata::PushPull>;
int main() { S s{{.workers = 1}}; }
#else
using S = strata::Strategy<strata::Asynchronous, strata::Mirrored, strata::Ring>;
int main() { S s{strata::cpu_replicas(2)}; }
#endif
