#pragma once
//! The servers' side of a sharded variable: shard i lives on server
//! i % servers; pulls copy a shard's current value, pushes apply an update
//! (the optimizer, whose state lives with the shard) to it. Pushes and pulls
//! of different shards proceed concurrently; those of one shard are
//! serialized, so a pull never sees a half-applied update. Each shard counts
//! its versions (updates applied).
//!   strata::ShardStore<float> store{strata::ShardedVariable<float>{init, 4}, 2};
//!   auto v = store.pull(1, buffer);                             // copy of shard 1, its version
//!   store.push(1, grad, [&](std::span<float> w, std::span<const float> g, std::size_t offset) { ... });

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <utility>

#include <strata/core/error.hpp>
#include <strata/ps/sharded_variable.hpp>

namespace strata {

template <Element T>
class ShardStore {
 public:
  ShardStore(ShardedVariable<T> variable, int servers) : var_(std::move(variable)), servers_(servers) {
    if (servers < 1) throw Error("ShardStore: at least one server, got " + std::to_string(servers));
    slots_.resize(var_.num_shards());
    counters_.resize(static_cast<std::size_t>(servers));
  }
  ShardStore(const ShardStore&) = delete;
  ShardStore& operator=(const ShardStore&) = delete;

  [[nodiscard]] std::size_t num_shards() const noexcept { return var_.num_shards(); }
  [[nodiscard]] int servers() const noexcept { return servers_; }
  //! The server holding shard i (round-robin, as TensorFlow places shards).
  [[nodiscard]] int server_of(std::size_t i) const { return static_cast<int>(check(i, "server_of") % static_cast<std::size_t>(servers_)); }
  //! The elements of the whole variable that shard i holds.
  [[nodiscard]] Range elements(std::size_t i) const { return var_.elements(check(i, "elements")); }
  [[nodiscard]] const Shape& shape() const noexcept { return var_.shape(); }

  //! Copies shard i's value into `out` (exactly its size); returns its version.
  std::uint64_t pull(std::size_t i, std::span<T> out) const {
    const Tensor<T>& s = var_.shard(check(i, "pull"));
    if (out.size() != s.size())
      throw ShapeError("ShardStore::pull: shard " + std::to_string(i) + " holds " + std::to_string(s.size()) +
                       " elements, the buffer " + std::to_string(out.size()));
    const Slot& slot = slots_[i];
    std::lock_guard lk(slot.mu);
    std::copy_n(s.data(), s.size(), out.data());
    counters_[static_cast<std::size_t>(server_of(i))].pulls.fetch_add(1, std::memory_order_relaxed);
    return slot.version;
  }

  //! Applies `update(value, grad, offset)` to shard i (`grad` exactly its
  //! size; `offset`: where the shard starts in the whole, for optimizer
  //! state kept per element); returns the shard's new version.
  template <class F>
  std::uint64_t push(std::size_t i, std::span<const T> grad, F&& update) {
    Tensor<T>& s = var_.shard(check(i, "push"));
    if (grad.size() != s.size())
      throw ShapeError("ShardStore::push: shard " + std::to_string(i) + " holds " + std::to_string(s.size()) +
                       " elements, the gradient " + std::to_string(grad.size()));
    Slot& slot = slots_[i];
    std::lock_guard lk(slot.mu);
    update(s.span(), grad, var_.elements(i).begin);
    counters_[static_cast<std::size_t>(server_of(i))].pushes.fetch_add(1, std::memory_order_relaxed);
    return ++slot.version;
  }

  //! Updates applied to shard i so far.
  [[nodiscard]] std::uint64_t version(std::size_t i) const {
    const Slot& slot = slots_[check(i, "version")];
    std::lock_guard lk(slot.mu);
    return slot.version;
  }
  //! The whole value, each shard read consistently (shards may be at
  //! different versions while pushes are under way).
  [[nodiscard]] Tensor<T> value() const {
    Tensor<T> out{var_.shape()};
    for (std::size_t i = 0; i < num_shards(); ++i) {
      const Range r = var_.elements(i);
      pull(i, out.span().subspan(r.begin, r.size()));
    }
    return out;
  }
  //! Pushes and pulls served by `server` so far.
  [[nodiscard]] std::uint64_t pushes(int server) const { return counters_.at(static_cast<std::size_t>(server)).pushes.load(); }
  [[nodiscard]] std::uint64_t pulls(int server) const { return counters_.at(static_cast<std::size_t>(server)).pulls.load(); }

 private:
  struct Slot {
    mutable std::mutex mu;
    std::uint64_t version = 0;  // guarded by mu
  };
  struct alignas(64) Counters {
    std::atomic<std::uint64_t> pushes{0}, pulls{0};
  };

  std::size_t check(std::size_t i, const char* what) const {
    if (i >= var_.num_shards())
      throw Error(std::string("ShardStore::") + what + ": no shard " + std::to_string(i) + " (there are " +
                  std::to_string(var_.num_shards()) + ")");
    return i;
  }

  ShardedVariable<T> var_;
  int servers_;
  std::deque<Slot> slots_;         // deque: mutexes never move
  mutable std::deque<Counters> counters_;
};

}  // namespace strata
