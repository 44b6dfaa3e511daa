// ParameterServerStrategy is opt-in: strata.hpp stays lean, and the sentence says what to include.
// expect: ParameterServerStrategy is an opt-in header
#include <strata/strata.hpp>
#ifdef STRATA_CONTROL
#include <strata/strategy/parameter_server.hpp>
#endif
using S = strata::Strategy<strata::Asynchronous, strata::ParameterServer, strata::PushPull>;
int main() { S s{{.workers = 1}}; }
