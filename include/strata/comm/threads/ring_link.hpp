#pragma once
//! The shared-memory ring link of the thread team: a replica's ring steps
//! read the left neighbour's chunk in place (comm/algorithm/ring.hpp drives it).

#include <cstddef>
#include <cstdint>

#include <strata/comm/threads/team.hpp>
#include <strata/core/partition.hpp>

namespace strata::detail {

//! The shared-memory ring link: the left neighbour's chunk is read in
//! place from its buffer once it has completed the previous step.
template <class T>
class ThreadRingLink {
 public:
  ThreadRingLink(Team& team, int me, std::uint64_t seq, const CallDesc& d, T* mine)
      : team_(team), me_(me), p_(team.size()), seq_(seq), d_(d), mine_(mine),
        left_(static_cast<const T*>(team.slot((me + p_ - 1) % p_).out)),
        base_(team.slot(me).progress.load()) {}
  [[nodiscard]] int rank() const noexcept { return me_; }
  [[nodiscard]] int size() const noexcept { return p_; }
  template <class Fn>
  void step(std::size_t k, Range /*send*/, Range recv, Fn fn) {
    // The left neighbour finished step k-1, so its chunk is ready; the right
    // one finished step k-1 too, so it no longer reads what we overwrite.
    team_.wait_progress(me_, (me_ + p_ - 1) % p_, (me_ + 1) % p_, base_ + k, seq_, d_);
    fn(mine_ + recv.begin, left_ + recv.begin, recv.size());
    team_.publish_progress(me_, base_ + k + 1);
  }

 private:
  Team& team_;
  int me_, p_;
  std::uint64_t seq_;
  const CallDesc& d_;
  T* mine_;
  const T* left_;
  std::uint64_t base_;
};
}  // namespace strata::detail
