#pragma once
//! What travels between the chief and a worker rank for one step: the step
//! (a header, then the batch's x and y), and its answer (the StepOutput, or
//! the message of the exception the step threw). Written once here so the
//! two ends cannot disagree.
//!   detail::send_step(link, worker_rank, ctx, in);          // the chief
//!   auto [ctx, in] = detail::recv_step(link, st, w, chief);  // the worker

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <strata/ps/mpi/link.hpp>
#include <strata/ps/runtime.hpp>

namespace strata::detail {

//! Sends step `ctx` (its id, clock and attempt) with batch `in` to rank `dst`.
//! `in` is shared: a wait that times out leaves it to MPI, which may still read it.
inline void send_step(PsLink& link, int dst, const WorkerContext& ctx, const std::shared_ptr<const StepInput>& step) {
  const StepInput& in = *step;
  // header: step id, iteration, worker clock, attempt, x rank, x dims..., y rank, y dims...
  std::vector<std::int64_t> h{static_cast<std::int64_t>(ctx.step()), in.iteration,
                              static_cast<std::int64_t>(ctx.clock()), ctx.attempt()};
  for (const Tensor<float>* x : {&in.x, &in.y}) {
    h.push_back(static_cast<std::int64_t>(x->shape().rank()));
    for (auto d : x->shape().dims()) h.push_back(static_cast<std::int64_t>(d));
  }
  // on the heap: a wait that times out leaves them to MPI
  auto kept = std::make_shared<std::vector<std::int64_t>>(std::move(h));
  PsLink::Requests r;
  r.keep = {kept, step};
  link.isend(r, kept->data(), kept->size(), dst, kStep);
  link.isend(r, in.x.data(), in.x.size(), dst, kStepX);
  link.isend(r, in.y.data(), in.y.size(), dst, kStepY);
  link.wait_all(r, "worker rank " + std::to_string(dst) + " to take step " + std::to_string(ctx.step()), false);
}

//! Receives the step whose header `st` announced from rank `chief`, for worker `w`.
inline std::pair<WorkerContext, StepInput> recv_step(PsLink& link, PsLink::Message& st, int w, int chief) {
  const auto h = link.recv_all<std::int64_t>(st);
  std::size_t at = 4;
  const auto shape = [&] {
    const auto r = static_cast<std::size_t>(h.at(at++));
    std::vector<std::size_t> d;
    for (std::size_t k = 0; k < r; ++k) d.push_back(static_cast<std::size_t>(h.at(at++)));
    return Shape(d);
  };
  StepInput in;
  in.iteration = h.at(1);
  const Shape xs = shape(), ys = shape();
  // on the heap: a wait that times out leaves them to MPI
  auto x = std::make_shared<Tensor<float>>(xs), y = std::make_shared<Tensor<float>>(ys);
  PsLink::Requests r;
  r.keep = {x, y};
  link.irecv(r, x->data(), x->size(), chief, kStepX);
  link.irecv(r, y->data(), y->size(), chief, kStepY);
  link.wait_all(r, "a step's batch from the chief", false);
  in.x = std::move(*x);
  in.y = std::move(*y);
  return {WorkerContext{w, static_cast<std::uint64_t>(h[0]), static_cast<std::uint64_t>(h[2]), static_cast<int>(h[3])},
          std::move(in)};
}

//! The worker's answer: step `id` computed `out`.
inline void send_result(PsLink& link, int chief, std::uint64_t id, const StepOutput& out) {
  std::vector<double> r{static_cast<double>(id), static_cast<double>(out.rows), out.loss};
  r.insert(r.end(), out.metrics.begin(), out.metrics.end());
  link.send(std::move(r), chief, kResult);
}
//! The worker's answer: step `id` threw `what`.
inline void send_failure(PsLink& link, int chief, std::uint64_t id, const std::string& what) {
  const std::string msg = std::to_string(id) + "\n" + what;
  link.send(std::vector<char>(msg.begin(), msg.end()), chief, kFailed);
}

//! A worker's answer to a step: its output, or what the step threw there.
struct StepAnswer {
  StepOutput out;
  std::optional<std::string> failed;
};
//! The chief: waits (at most the timeout) for worker rank `src`'s answer to
//! step `id`. A worker that does not answer raises CollectiveTimeout; one
//! that answers another step, an Error.
inline StepAnswer recv_answer(PsLink& link, int src, int w, std::uint64_t id) {
  auto st = link.probe(src, {kResult, kFailed},
                                   "worker " + std::to_string(w) + " (rank " + std::to_string(src) +
                                       ") to answer step " + std::to_string(id));
  if (st.tag == kFailed) {
    const auto m = link.recv_all<char>(st);
    const std::string msg(m.begin(), m.end());
    return {{}, msg.substr(msg.find('\n') + 1)};
  }
  const auto r = link.recv_all<double>(st);
  if (r.size() < 3 || static_cast<std::uint64_t>(r[0]) != id)
    throw Error("ParameterServerStrategy: worker rank " + std::to_string(src) + " answered " +
                (r.empty() ? std::string("nothing") : "step " + std::to_string(static_cast<std::uint64_t>(r[0]))) +
                " when step " + std::to_string(id) + " was expected");
  StepAnswer a;
  a.out.rows = static_cast<std::size_t>(r[1]);
  a.out.loss = r[2];
  a.out.metrics.assign(r.begin() + 3, r.end());
  return a;
}

}  // namespace strata::detail
