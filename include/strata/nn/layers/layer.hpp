#pragma once
//! The layer interface. A layer is built once for a per-sample input shape
//! (the batch axis is never part of a built shape), declares its parameters,
//! and is then cloned once per replica: each clone keeps its own activations
//! cache and is bound to that replica's view of the parameters (its own copy
//! under Mirrored placement, the shared one under CentralStorage).
//!   struct Twice : strata::nn::Layer { ... };   // see nn/layers/activations.hpp for a small one
//! Buffers passed to forward/backward are [batch, ...per-sample shape] in
//! the memory of the replica's Compute (kernels/compute.hpp: host or a GPU);
//! a layer reaches its elements only through that Compute's operations, so
//! one layer file runs in every space. The batch may be 0 (a replica that
//! got no samples of a short last batch). On host tensors, the non-virtual
//! forward/backward overloads run a layer on the host compute.

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/kernels/buffer.hpp>
#include <strata/kernels/host/compute.hpp>
#include <strata/nn/layers/random.hpp>
#include <strata/device/tensor_group.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::nn {

class Node;  // nn/program/node.hpp: a functional model's graph

using kernels::Compute;
//! What layers pass between them: a float buffer in the replica's space.
using Act = kernels::Buffer<float>;

//! How a parameter starts.
enum class Init { Zeros, GlorotUniform };

//! A parameter a layer declares after build.
struct ParamSpec {
  std::string name;   //!< "kernel", "bias"
  Shape shape;
  Init init = Init::Zeros;
  std::size_t fan_in = 0, fan_out = 0;  //!< for GlorotUniform
  float l2 = 0.f;                       //!< L2 regularization factor (0: none)
};

//! Where a bound parameter lives: its value (read-only to layers; the
//! optimizer updates it) and its gradient, both flat, in the memory of the
//! Compute the layer runs on (never dereferenced by a layer off the host).
struct ParamRef {
  std::span<const float> value;
  std::span<float> grad;
};

//! What a forward pass knows about where it runs.
struct RunInfo {
  bool training = false;
  int replica = 0;
  std::uint64_t seed = 0;  //!< the model's seed
  std::uint64_t step = 0;  //!< global step (batches trained so far)
  std::uint64_t layer = 0; //!< index of the layer in its model (keys per-layer random streams)
  //! A capturable step's counters in the compute's memory (kernels/step_state.hpp):
  //! when set, a layer keys its randomness by their iteration, not by `step`.
  const kernels::StepCounters* counters = nullptr;
  //! Tensor parallelism: the group a split layer sums its partial results
  //! with (null: no layer is split). A split layer keeps it for its backward.
  TensorGroup* group = nullptr;
};

namespace detail {
//! A host tensor as a buffer of the host compute (for the host-tensor overloads).
inline Act borrow_host(const Tensor<float>& t) {
  return Act::borrow(kernels::host_compute(), const_cast<float*>(t.data()), t.shape());
}
//! A host buffer's elements into host tensor `t`, which takes its shape.
inline void store_host(const Act& a, Tensor<float>& t) {
  if (t.shape() != a.shape()) t = Tensor<float>(a.shape());
  if (a.size()) std::copy_n(a.data(), a.size(), t.data());
}
}  // namespace detail

class Layer {
 public:
  virtual ~Layer() = default;

  //! The kind of layer, as shown by summary(): "Dense", "Conv2D", ...
  [[nodiscard]] virtual std::string kind() const = 0;
  //! Checks `input` (per-sample shape) and returns the per-sample output
  //! shape. Throws ShapeError naming the layer and what it expected.
  virtual Shape build(const Shape& input) = 0;
  //! Parameters, in a fixed order (valid after build).
  [[nodiscard]] virtual std::vector<ParamSpec> params() const { return {}; }
  //! Binds storage for the parameters, in params() order.
  virtual void bind(std::span<const ParamRef> /*params*/) {}
  //! y = layer(x) on `c`. `y` is resized by the layer as needed (reuse it between calls).
  virtual void forward(Compute& c, const Act& x, Act& y, const RunInfo& info) = 0;
  //! Given x, y of the last forward and dL/dy, writes dL/dparams into the
  //! bound gradients (overwriting them) and, when `dx` is not null, dL/dx.
  virtual void backward(Compute& c, const Act& x, const Act& y, const Act& dy, Act* dx) = 0;

  //! forward on host tensors (the host compute; parameters bound to host memory).
  void forward(const Tensor<float>& x, Tensor<float>& y, const RunInfo& info) {
    Compute& c = kernels::host_compute();
    Act out;
    forward(c, detail::borrow_host(x), out, info);
    detail::store_host(out, y);
  }
  //! backward on host tensors.
  void backward(const Tensor<float>& x, const Tensor<float>& y, const Tensor<float>& dy, Tensor<float>* dx) {
    Compute& c = kernels::host_compute();
    Act out;
    backward(c, detail::borrow_host(x), detail::borrow_host(y), detail::borrow_host(dy), dx ? &out : nullptr);
    if (dx) detail::store_host(out, *dx);
  }
  //! Tensor parallelism (device/tensor_group.hpp): whether this built
  //! layer can take `role` over a group of `size` (Replicated: always).
  [[nodiscard]] virtual bool can_split(TensorRole role, int /*size*/) const { return role == TensorRole::Replicated; }
  //! Turns this built layer (a replica's clone) into member `rank` of
  //! `size`'s part in `role`: params() then gives its shard's shapes, in the
  //! order bind() takes them. Returns where that shard's elements are in
  //! the layer's own logical parameters (offsets from its first), in that
  //! order. Replicated: every parameter whole, unchanged.
  virtual std::vector<TensorSegment> split(TensorRole role, int /*rank*/, int /*size*/) {
    if (role != TensorRole::Replicated)
      throw Error(kind() + ": this layer cannot be split by tensor parallelism (an internal error: can_split said no)");
    std::vector<TensorSegment> segs;
    std::size_t off = 0;
    for (const ParamSpec& p : params()) {
      segs.push_back({off, p.shape.elements(), true});
      off += p.shape.elements();
    }
    return segs;
  }

  //! A copy of this built layer with its own caches (bindings are not copied meaningfully: rebind).
  [[nodiscard]] virtual std::unique_ptr<Layer> clone() const = 0;

  //! This layer applied to nodes of a functional model (nn/program/node.hpp, which
  //! must be included): a new node whose layer is a copy of this one.
  //!   strata::nn::Node h = strata::nn::Dense{64}(x);
  template <class... N>
    requires(sizeof...(N) > 0 && (std::same_as<N, Node> && ...))
  auto operator()(const N&... inputs) const {
    using First = std::tuple_element_t<0, std::tuple<N...>>;  // Node, named through the pack: complete by now
    return First::apply(*this, {&inputs...});
  }

};

namespace detail {
//! [batch, per_sample...].
inline Shape batch_shape(std::size_t batch, const Shape& per_sample) {
  std::vector<std::size_t> dims;
  dims.reserve(per_sample.rank() + 1);
  dims.push_back(batch);
  dims.insert(dims.end(), per_sample.dims().begin(), per_sample.dims().end());
  return Shape(std::move(dims));
}

//! Makes `t` have shape [batch, per_sample...] in `c`'s space, reallocating only to grow.
inline void resize(Compute& c, Act& t, std::size_t batch, const Shape& per_sample) {
  t.resize(c, batch_shape(batch, per_sample));
}

//! Makes host tensor `t` have shape [batch, per_sample...], reallocating only when the element count changes.
inline void resize(Tensor<float>& t, std::size_t batch, const Shape& per_sample) {
  Shape s = batch_shape(batch, per_sample);
  if (t.size() == s.elements()) t.reshape(std::move(s));
  else t = Tensor<float>(std::move(s));
}

//! The group a layer split in `role` sums with in this forward (null when
//! not split); a split layer run without one is an Error naming it.
inline TensorGroup* split_group(TensorRole role, const RunInfo& info, const std::string& layer) {
  if (role == TensorRole::Replicated) return nullptr;
  if (!info.group)
    throw Error(layer + ": split by tensor parallelism, it needs its group (RunInfo::group) to sum its partial "
                        "results with; run it under a tensor-parallel executor");
  return info.group;
}

//! The per-sample shape of a batch tensor (all but the first extent).
inline Shape sample_shape(const Shape& batch_shape) {
  if (batch_shape.rank() == 0) throw ShapeError("strata::nn: a batch tensor needs a batch axis, got a scalar");
  return Shape(std::vector<std::size_t>(batch_shape.dims().begin() + 1, batch_shape.dims().end()));
}

inline void check_input(const std::string& layer, const Shape& want, const Act& x) {
  if (x.shape().rank() == 0 || sample_shape(x.shape()) != want)
    throw ShapeError(layer + ": expected input [batch, " + want.str().substr(1) + " but got " + x.shape().str());
}

//! A CRTP helper: clone() by copy construction.
template <class Derived>
class LayerBase : public Layer {
 public:
  [[nodiscard]] std::unique_ptr<Layer> clone() const override {
    return std::make_unique<Derived>(static_cast<const Derived&>(*this));
  }
};
}  // namespace detail

}  // namespace strata::nn
