#pragma once
//! A CUDA graph ready to launch: the work a CudaCompute captured between
//! begin_capture() and end_capture(), replayed with one launch (a node of a
//! replayed graph costs about 1 us of host time against about 4 us for an
//! eager kernel launch: docs, DESIGN.md "Numbers that matter").
//!   compute.begin_capture();  step(compute);  strata::cuda::Graph g = compute.end_capture();
//!   for (int i = 0; i < steps; ++i) g.launch();   // same pointers, same shapes, new values
//! A replay reads and writes the same addresses as the captured calls, so
//! buffers used inside must outlive the graph and keep their addresses.

#include <utility>

#include <strata/cuda/error.hpp>
#include <strata/kernels/step_state.hpp>

namespace strata::cuda {

//! An instantiated CUDA graph (cudaGraphExec_t) bound to the stream it was captured on; move-only.
//!   strata::cuda::Graph g = compute.end_capture();
//!   g.launch();  compute.synchronize();
class Graph {
 public:
  Graph() = default;
  //! Takes ownership of `exec`, to be launched on `stream`.
  Graph(cudaGraphExec_t exec, cudaStream_t stream) noexcept : exec_(exec), stream_(stream) {}
  Graph(Graph&& o) noexcept : exec_(std::exchange(o.exec_, nullptr)), stream_(o.stream_) {}
  Graph& operator=(Graph&& o) noexcept {
    std::swap(exec_, o.exec_);
    std::swap(stream_, o.stream_);
    return *this;
  }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  ~Graph() {
    if (exec_) cuda::detail::ignore(cudaGraphExecDestroy(exec_));
  }

  //! Enqueues one replay on the stream it was captured on (returns at once).
  void launch() const { launch(stream_); }
  //! Enqueues one replay on `stream` (of the same device).
  void launch(cudaStream_t stream) const {
    if (!exec_) throw Error("cuda::Graph::launch: an empty graph (moved from or default-constructed)");
    check(cudaGraphLaunch(exec_, stream), "cudaGraphLaunch");
  }
  [[nodiscard]] bool empty() const noexcept { return exec_ == nullptr; }
  [[nodiscard]] cudaGraphExec_t get() const noexcept { return exec_; }

 private:
  cudaGraphExec_t exec_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

//! A captured training step as kernels::StepGraph (CudaCompute::end_step_capture).
class GraphStep final : public kernels::StepGraph {
 public:
  explicit GraphStep(Graph g) noexcept : g_(std::move(g)) {}
  void launch() override { g_.launch(); }

 private:
  Graph g_;
};

}  // namespace strata::cuda
