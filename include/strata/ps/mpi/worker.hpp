#pragma once
//! A worker's rank over MPI: it takes steps from the chief until the chief
//! ends training, runs each (the program's step function, which pulls the
//! parameters from every server and pushes its gradient to every server, all
//! servers in parallel), and answers with the step's output or with what it
//! threw, so the chief's Coordinator can reschedule the step elsewhere. A
//! server that does not answer within the timeout is not the step's fault:
//! the CollectiveTimeout leaves the loop (the chief then names this worker).
//!   detail::pull_from_servers(link, layout, spec, params);
//!   detail::serve_as_worker(link, spec, step, before_step, final_value);

#include <algorithm>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <strata/ps/cluster_spec.hpp>
#include <strata/ps/mpi/link.hpp>
#include <strata/ps/mpi/step_message.hpp>
#include <strata/ps/runtime.hpp>

namespace strata::detail {

//! Reads every server's shards into `params` (all variables, end to end).
inline void pull_from_servers(PsLink& link, const ServerLayout& layout, const ClusterSpec& spec,
                              std::span<float> params) {
  // on the heap: a wait that times out leaves them to MPI (PsLink::wait_all)
  auto kept = std::make_shared<std::vector<std::vector<float>>>(layout.servers());
  auto& bufs = *kept;
  PsLink::Requests reqs;
  reqs.keep.push_back(kept);
  for (std::size_t s = 0; s < bufs.size(); ++s) {
    bufs[s].resize(layout.count_of(s));
    link.irecv(reqs, bufs[s].data(), bufs[s].size(), spec.servers[s], kPullReply);
  }
  for (std::size_t s = 0; s < bufs.size(); ++s) link.isend_empty(reqs, spec.servers[s], kPull);
  link.wait_all(reqs, "a pull from the servers");
  for (std::size_t s = 0; s < bufs.size(); ++s) layout.scatter(s, bufs[s], params);
}

//! Sends each server its shards of `grad` and waits for every acknowledgement.
inline void push_to_servers(PsLink& link, const ServerLayout& layout, const ClusterSpec& spec,
                            std::span<const float> grad) {
  // on the heap: a wait that times out leaves them to MPI (PsLink::wait_all)
  auto kept = std::make_shared<std::vector<std::vector<float>>>(layout.servers());
  auto& bufs = *kept;
  auto acks = std::make_shared<std::vector<float>>(bufs.size());
  PsLink::Requests reqs;
  reqs.keep = {kept, acks};
  for (std::size_t s = 0; s < bufs.size(); ++s) link.irecv(reqs, &(*acks)[s], 0, spec.servers[s], kAck);
  for (std::size_t s = 0; s < bufs.size(); ++s) {
    bufs[s] = layout.gather(s, grad);
    link.isend(reqs, bufs[s].data(), bufs[s].size(), spec.servers[s], kPush);
  }
  link.wait_all(reqs, "a push to the servers");
}

//! Runs the chief's steps with `step` (after `before_step`, if set) until
//! kEnd arrives; then holds the trained value the chief sent in `final_value`.
inline void serve_as_worker(PsLink& link, const ClusterSpec& spec,
                            const std::function<StepOutput(int, const StepInput&)>& step,
                            const std::function<void(const WorkerContext&)>& before_step,
                            std::span<float> final_value) {
  const int w = spec.worker_index(link.rank());
  for (;;) {
    auto st = link.probe(spec.chief, {kStep, kEnd}, "the chief's next step");
    if (st.tag == kEnd) {
      const auto v = link.recv_all<float>(st);
      std::copy_n(v.data(), std::min(v.size(), final_value.size()), final_value.data());
      return;
    }
    const auto [ctx, in] = recv_step(link, st, w, spec.chief);
    try {
      if (!step) throw Error("ParameterServerStrategy: this worker has no step function (fit on every rank)");
      if (before_step) before_step(ctx);
      const StepOutput out = step(w, in);
      send_result(link, spec.chief, ctx.step(), out);
    } catch (const CollectiveTimeout&) {
      throw;  // a server did not answer: not a failure of this step alone
    } catch (const std::exception& e) {
      send_failure(link, spec.chief, ctx.step(), e.what());
    }
  }
}

}  // namespace strata::detail
