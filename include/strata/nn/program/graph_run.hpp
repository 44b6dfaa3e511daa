#pragma once
//! Forward and backward over a functional model's nodes (a LayerProgram
//! whose layers are not a chain), for a replica (nn/program/layer_replica.hpp) and
//! a pipeline stage (nn/program/stage_program.hpp): a range of nodes [begin, end)
//! whose only input from outside is node begin - 1's output (the model's
//! input when begin = 0; LayerProgram::cut_before says where a range may
//! start). Backward runs the nodes last first; a node's output gradient is
//! the sum of what its consumers give it, added in the order the consumers
//! run (last node first): fixed, so the bits are the same in every run.
//!   detail::NodeRun run{m, c, {0, m.layers.size()}};  run.forward(layers, x, acts, info, [&](std::size_t l, auto&& call) { call(); });

#include <span>
#include <vector>

#include <strata/core/partition.hpp>
#include <strata/nn/layers/layer.hpp>
#include <strata/nn/layers/merge.hpp>
#include <strata/nn/program/node.hpp>

namespace strata::nn::detail {

class LayerProgram;

//! What one replica or one pipeline slot keeps for a range's backward.
struct NodeGrads {
  std::vector<Act> d;      // per node of the range: dL/d(its output)
  std::vector<char> has;   // per node: whether d holds a consumer's share yet
  std::vector<Act> extra;  // per input position of a node: a later consumer's share, added after
  bool ext_has = false;    // whether the range input's gradient holds a share
};

//! The graph walk over nodes [r.begin, r.end) of `m` on compute `c`.
//! `layers[i]` is node r.begin + i's layer (a replica's or a slot's clone),
//! `acts[i]` its output.
template <class Program>
class NodeRun {
 public:
  NodeRun(const Program& m, Compute& c, Range r) : m_(m), c_(c), r_(r) {}

  //! Node r.begin - 1's index, the range's input (graph_input for the model's input).
  [[nodiscard]] std::size_t ext() const noexcept { return r_.begin ? r_.begin - 1 : graph_input; }

  //! Every node's forward, each as around(l, call) calls it (windows, trace spans).
  template <class Around>
  void forward(std::span<const std::unique_ptr<Layer>> layers, const Act& in, std::span<Act> acts, RunInfo run,
               Around&& around) const {
    std::vector<const Act*> xs;
    for (std::size_t i = 0; i < r_.size(); ++i) {
      const std::size_t l = r_.begin + i;
      run.layer = l;
      const auto& ins = m_.inputs[l];
      xs.clear();
      for (std::size_t p : ins) xs.push_back(&act(p, in, acts));
      around(l, [&] {
        if (auto* merge = dynamic_cast<Merge*>(layers[i].get())) merge->forward(c_, xs, acts[i], run);
        else layers[i]->forward(c_, *xs[0], acts[i], run);
      });
    }
  }

  //! Every node's backward that a gradient needs, last first, from `dy`
  //! (node r.end - 1's output gradient). `ext_grad`, when not null, gets the
  //! range input's gradient (if any node of the range needs it; returns
  //! whether it was written). Each node's as around(l, call) calls it.
  template <class Around>
  bool backward(std::span<const std::unique_ptr<Layer>> layers, const Act& in, std::span<const Act> acts,
                const Act& dy, NodeGrads& g, Act* ext_grad, Around&& around) const {
    const std::size_t n = r_.size();
    g.d.resize(n);
    g.has.assign(n, 0);
    g.ext_has = false;
    std::vector<const Act*> xs;
    std::vector<Act*> dxs;
    for (std::size_t i = n; i-- > 0;) {
      const std::size_t l = r_.begin + i;
      if (!m_.grad_needed[l]) continue;  // no parameter at or before it
      const Act* d = i + 1 == n ? &dy : &g.d[i];
      if (i + 1 < n && !g.has[i])
        throw Error("strata::nn: node " + std::to_string(l) + " has no consumer in its model (an internal error)");
      const auto& ins = m_.inputs[l];
      if (g.extra.size() < ins.size()) g.extra.resize(ins.size());
      xs.clear();
      dxs.clear();
      std::vector<std::pair<Act*, Act*>> adds;  // (share, sum): added once the backward wrote the share
      for (std::size_t j = 0; j < ins.size(); ++j) {
        const std::size_t p = ins[j];
        xs.push_back(&act(p, in, acts));
        Act* target = nullptr;
        if (p == ext()) {
          if (ext_grad && p != graph_input && m_.grad_needed[p]) {
            if (!g.ext_has) target = ext_grad, g.ext_has = true;
            else target = &g.extra[j], adds.emplace_back(target, ext_grad);
          }
        } else if (m_.grad_needed[p]) {
          const std::size_t k = p - r_.begin;
          if (!g.has[k]) target = &g.d[k], g.has[k] = 1;
          else target = &g.extra[j], adds.emplace_back(target, &g.d[k]);
        }
        dxs.push_back(target);
      }
      around(l, [&] {
        if (auto* merge = dynamic_cast<Merge*>(layers[i].get())) merge->backward(c_, xs, acts[i], *d, dxs);
        else layers[i]->backward(c_, *xs[0], acts[i], *d, dxs[0]);
        for (auto [share, sum] : adds)
          if (sum->size()) c_.axpy(1.f, share->data(), sum->data(), sum->size());
      });
    }
    return g.ext_has;
  }

 private:
  const Act& act(std::size_t p, const Act& in, std::span<const Act> acts) const {
    if (p == ext()) return in;
    if (p == graph_input || p < r_.begin || p >= r_.end)
      throw Error("strata::nn: node inputs cross a pipeline stage's boundary (an internal error: the stage's cut "
                  "is not one LayerProgram::cut_before allows)");
    return acts[p - r_.begin];
  }
  const Act& act(std::size_t p, const Act& in, std::span<Act> acts) const {
    return act(p, in, std::span<const Act>(acts.data(), acts.size()));
  }

  const Program& m_;
  Compute& c_;
  Range r_;
};

}  // namespace strata::nn::detail
