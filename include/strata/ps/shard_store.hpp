#pragma once
//! The servers' side of sharded variables: every shard of every variable,
//! numbered in order (variable 0's shards first), shard i on server
//! i % servers (round-robin, as TensorFlow places them). Pulls copy a
//! shard's current value; pushes apply an update (the optimizer, whose state
//! lives with the shard) to it. Pushes and pulls of different shards proceed
//! concurrently; those of one shard are serialized, so a pull never sees a
//! half-applied update. Each shard counts its versions (updates applied).
//! For synchronous rounds a push may instead be staged per worker and the
//! round applied once: the staged gradients summed in worker order (so a
//! round's result does not depend on arrival order) and averaged.
//!   strata::ShardStore<float> store{strata::ShardedVariable<float>{init, 4}, 2};
//!   auto v = store.pull(1, buffer);                             // copy of shard 1, its version
//!   store.push(1, grad, [&](std::span<float> w, std::span<const float> g, std::size_t offset, std::uint64_t step) {});

#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/ps/sharded_variable.hpp>

namespace strata {

template <Element T>
class ShardStore {
 public:
  //! The shards of `variables` (laid end to end: variable v's elements
  //! start where variable v-1's end) on `servers` servers.
  ShardStore(const std::vector<ShardedVariable<T>>& variables, int servers)
      : ShardStore(concat(variables), layout(variables), servers) {
    shapes_.clear();
    for (const auto& v : variables) shapes_.push_back(v.shape());
  }
  ShardStore(const ShardedVariable<T>& variable, int servers)
      : ShardStore(std::vector<ShardedVariable<T>>{variable}, servers) {}
  //! `init` (one flat vector) as the shards `shards` (consecutive ranges
  //! covering it) on `servers` servers.
  ShardStore(Tensor<T> init, const std::vector<Range>& shards, int servers)
      : value_(std::move(init)), servers_(servers) {
    if (servers < 1) throw Error("ShardStore: at least one server, got " + std::to_string(servers));
    std::size_t at = 0;
    for (const Range& r : shards) {
      if (r.begin != at || r.end < r.begin)
        throw Error("ShardStore: shards must be consecutive ranges from 0; shard " + std::to_string(index_.size()) +
                    " starts at " + std::to_string(r.begin) + ", expected " + std::to_string(at));
      at = r.end;
      index_.push_back(r);
    }
    if (at != value_.size())
      throw Error("ShardStore: the shards cover " + std::to_string(at) + " elements of " + std::to_string(value_.size()));
    if (shapes_.empty()) shapes_.push_back(value_.shape());
    slots_.resize(index_.size());
    counters_.resize(static_cast<std::size_t>(servers));
  }
  ShardStore(const ShardStore&) = delete;
  ShardStore& operator=(const ShardStore&) = delete;
  ShardStore(ShardStore&&) noexcept = default;  // not while in use: the shards move with it
  ShardStore& operator=(ShardStore&&) noexcept = default;

  [[nodiscard]] std::size_t num_shards() const noexcept { return index_.size(); }
  [[nodiscard]] int servers() const noexcept { return servers_; }
  //! The server holding shard i (round-robin, as TensorFlow places shards).
  [[nodiscard]] int server_of(std::size_t i) const { return static_cast<int>(check(i, "server_of") % static_cast<std::size_t>(servers_)); }
  //! The elements of the variables laid end to end that shard i holds.
  [[nodiscard]] Range elements(std::size_t i) const { return index_[check(i, "elements")]; }
  //! Elements of all variables together.
  [[nodiscard]] std::size_t total_elements() const noexcept { return value_.size(); }
  //! The shape of the (only, or first) variable.
  [[nodiscard]] const Shape& shape() const { return shapes_.at(0); }
  //! All shards as one contiguous vector, read without the shards' locks:
  //! for synchronous use only, where no push can run during the read
  //! (CentralStorage replicas read it between their collective updates).
  [[nodiscard]] const Tensor<T>& unsynchronized_value() const noexcept { return value_; }

  //! Copies shard i's value into `out` (exactly its size); returns its version.
  std::uint64_t pull(std::size_t i, std::span<T> out) const {
    const std::span<const T> s = shard(check(i, "pull"));
    if (out.size() != s.size())
      throw ShapeError("ShardStore::pull: shard " + std::to_string(i) + " holds " + std::to_string(s.size()) +
                       " elements, the buffer " + std::to_string(out.size()));
    const Slot& slot = slots_[i];
    std::lock_guard lk(slot.mu);
    std::copy_n(s.data(), s.size(), out.data());
    counters_[static_cast<std::size_t>(server_of(i))].pulls.fetch_add(1, std::memory_order_relaxed);
    return slot.version;
  }

  //! Applies `update(value, grad, offset, step)` to shard i (`grad` exactly
  //! its size; `offset`: where the shard starts among all elements, for
  //! optimizer state kept per element; `step`: the shard's version before
  //! this update). The update may also omit `step`, or `offset` and `step`.
  //! Returns the shard's new version.
  template <class F>
  std::uint64_t push(std::size_t i, std::span<const T> grad, F&& update) {
    const std::span<T> s = shard(check(i, "push"));
    check_size(i, grad.size(), "push");
    Slot& slot = slots_[i];
    std::lock_guard lk(slot.mu);
    call(update, s, grad, index_[i].begin, slot.version);
    counters_[static_cast<std::size_t>(server_of(i))].pushes.fetch_add(1, std::memory_order_relaxed);
    return ++slot.version;
  }

  //! Keeps worker `w`'s gradient for shard i until apply_staged (a worker
  //! staging twice before then replaces its gradient). Counts as a push.
  void stage(std::size_t i, int w, std::span<const T> grad) {
    check_size(check(i, "stage"), grad.size(), "stage");
    if (w < 0) throw Error("ShardStore::stage: no worker " + std::to_string(w));
    Slot& slot = slots_[i];
    std::lock_guard lk(slot.mu);
    const auto k = static_cast<std::size_t>(w);
    if (slot.staged.size() <= k) {
      slot.staged.resize(k + 1);
      slot.has.resize(k + 1, false);
    }
    slot.staged[k].assign(grad.begin(), grad.end());
    slot.has[k] = true;
    counters_[static_cast<std::size_t>(server_of(i))].pushes.fetch_add(1, std::memory_order_relaxed);
  }
  //! Forgets what worker `w` staged (its step will not count).
  void drop_staged(int w) {
    for (Slot& slot : slots_) {
      std::lock_guard lk(slot.mu);
      if (static_cast<std::size_t>(w) < slot.has.size()) slot.has[static_cast<std::size_t>(w)] = false;
    }
  }
  //! Applies every shard's staged gradients as one update: their sum in
  //! worker order divided by how many were staged (shards with none are left
  //! as they are). Returns how many shards changed.
  template <class F>
  std::size_t apply_staged(F&& update) {
    std::size_t changed = 0;
    for (std::size_t i = 0; i < slots_.size(); ++i) {
      Slot& slot = slots_[i];
      std::lock_guard lk(slot.mu);
      std::size_t n = 0;
      for (std::size_t w = 0; w < slot.has.size(); ++w) {
        if (!slot.has[w]) continue;
        if (n == 0) slot.sum = slot.staged[w];
        else
          for (std::size_t e = 0; e < slot.sum.size(); ++e) slot.sum[e] += slot.staged[w][e];
        slot.has[w] = false;
        ++n;
      }
      if (n == 0) continue;
      if (n > 1)
        for (auto& x : slot.sum) x /= static_cast<T>(n);
      call(update, shard(i), std::span<const T>(slot.sum), index_[i].begin, slot.version);
      ++slot.version;
      ++changed;
    }
    return changed;
  }

  //! Updates applied to shard i so far.
  [[nodiscard]] std::uint64_t version(std::size_t i) const {
    const Slot& slot = slots_[check(i, "version")];
    std::lock_guard lk(slot.mu);
    return slot.version;
  }
  //! Sets shard i's version (a checkpoint's: the optimizer's step there).
  void set_version(std::size_t i, std::uint64_t v) {
    Slot& slot = slots_[check(i, "set_version")];
    std::lock_guard lk(slot.mu);
    slot.version = v;
  }
  //! Every variable laid end to end, each shard read consistently (shards
  //! may be at different versions while pushes are under way).
  void value(std::span<T> out) const {
    if (out.size() != value_.size())
      throw ShapeError("ShardStore::value: the variables hold " + std::to_string(value_.size()) + " elements, the buffer " +
                       std::to_string(out.size()));
    for (std::size_t i = 0; i < num_shards(); ++i) {
      const Range r = index_[i];
      pull(i, out.subspan(r.begin, r.size()));
    }
  }
  //! The (only, or first) variable's whole value.
  [[nodiscard]] Tensor<T> value() const {
    Tensor<T> all{Shape{value_.size()}};
    value(all.span());
    Tensor<T> out{shape()};
    std::copy_n(all.data(), out.size(), out.data());
    return out;
  }
  //! Sets every variable (laid end to end); not concurrently with pushes.
  void assign(std::span<const T> in) {
    if (in.size() != value_.size())
      throw ShapeError("ShardStore::assign: the variables hold " + std::to_string(value_.size()) + " elements, the value " +
                       std::to_string(in.size()));
    for (std::size_t i = 0; i < num_shards(); ++i) {
      std::lock_guard lk(slots_[i].mu);
      const Range r = index_[i];
      std::copy_n(in.data() + r.begin, r.size(), shard(i).data());
    }
  }
  //! Pushes and pulls served by `server` so far.
  [[nodiscard]] std::uint64_t pushes(int server) const { return counters_.at(static_cast<std::size_t>(server)).pushes.load(); }
  [[nodiscard]] std::uint64_t pulls(int server) const { return counters_.at(static_cast<std::size_t>(server)).pulls.load(); }

 private:
  struct Slot {
    mutable std::mutex mu;
    std::uint64_t version = 0;  // all guarded by mu
    std::vector<std::vector<T>> staged;
    std::vector<bool> has;
    std::vector<T> sum;
  };
  struct alignas(64) Counters {
    std::atomic<std::uint64_t> pushes{0}, pulls{0};
  };
  static Tensor<T> concat(const std::vector<ShardedVariable<T>>& vs) {
    std::size_t n = 0;
    for (const auto& v : vs) n += v.shape().elements();
    Tensor<T> out{Shape{n}};
    T* o = out.data();
    for (const auto& v : vs)
      for (std::size_t i = 0; i < v.num_shards(); ++i) o = std::copy_n(v.shard(i).data(), v.shard(i).size(), o);
    return out;
  }
  static std::vector<Range> layout(const std::vector<ShardedVariable<T>>& vs) {
    std::vector<Range> out;
    std::size_t base = 0;
    for (const auto& v : vs) {
      for (std::size_t i = 0; i < v.num_shards(); ++i) out.push_back({base + v.elements(i).begin, base + v.elements(i).end});
      base += v.shape().elements();
    }
    return out;
  }

  template <class F>
  static void call(F& f, std::span<T> w, std::span<const T> g, std::size_t offset, std::uint64_t step) {
    if constexpr (std::invocable<F&, std::span<T>, std::span<const T>, std::size_t, std::uint64_t>) f(w, g, offset, step);
    else if constexpr (std::invocable<F&, std::span<T>, std::span<const T>, std::size_t>) f(w, g, offset);
    else f(w, g);
  }
  std::span<T> shard(std::size_t i) { return value_.span().subspan(index_[i].begin, index_[i].size()); }
  std::span<const T> shard(std::size_t i) const { return std::span<const T>(value_.span()).subspan(index_[i].begin, index_[i].size()); }
  void check_size(std::size_t i, std::size_t got, const char* what) const {
    if (got != index_[i].size())
      throw ShapeError(std::string("ShardStore::") + what + ": shard " + std::to_string(i) + " holds " +
                       std::to_string(index_[i].size()) + " elements, the gradient " + std::to_string(got));
  }
  std::size_t check(std::size_t i, const char* what) const {
    if (i >= index_.size())
      throw Error(std::string("ShardStore::") + what + ": no shard " + std::to_string(i) + " (there are " +
                  std::to_string(index_.size()) + ")");
    return i;
  }

  Tensor<T> value_;  // every shard, end to end
  int servers_;
  std::vector<Range> index_;
  std::vector<Shape> shapes_;
  std::deque<Slot> slots_;  // deque: mutexes never move
  mutable std::deque<Counters> counters_;
};

}  // namespace strata
