#pragma once
//! The host-side contract of the NCCL communicator (private to
//! strata/comm/nccl): before an NCCL call is enqueued, every rank's call is
//! agreed on the host, so that ranks that disagree raise CollectiveMismatch
//! and a rank that never arrives is named by a CollectiveTimeout, instead of
//! NCCL kernels that wait for each other forever. In one process the ranks
//! are replica threads and agree through a detail::Team (TeamContract, here);
//! across processes they agree over MPI (MpiContract, world.hpp).
//! Point-to-point messages send a small header ahead of their data the same
//! way, so a receiver checks tag, type and size before NCCL moves anything.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <strata/comm/threads/call.hpp>
#include <strata/comm/threads/team.hpp>
#include <strata/core/error.hpp>

namespace strata::detail::nccl {

//! What a send announces to its receiver: its tag, element count and type
//! (an index into dtype_names).
struct Header {
  std::int64_t tag = 0;
  std::int64_t count = 0;
  std::int64_t dtype = 0;
};

//! How the ranks of one NCCL communicator agree on the host.
class Contract {
 public:
  Contract() = default;
  Contract(const Contract&) = delete;
  Contract& operator=(const Contract&) = delete;
  virtual ~Contract() = default;

  //! Agrees on collective `d` with every rank and returns its sequence
  //! number; with `counts`, every rank's `in_count` (index = rank). Raises
  //! CollectiveMismatch on every rank when the calls disagree (nothing is
  //! enqueued anywhere then), CollectiveTimeout naming the ranks that never
  //! arrived, CollectiveAborted once another rank failed.
  virtual std::uint64_t agree(const CallDesc& d, std::vector<std::size_t>* counts) = 0;
  //! Announces a message to `peer` (never waits for it).
  virtual void post(int peer, const Header& h) = 0;
  //! The next header `peer` announced to this rank, in the order sent;
  //! CollectiveTimeout when none comes within the timeout.
  virtual Header take(int peer) = 0;
  //! Tells the other ranks that this one failed (`why`), so that they stop
  //! waiting for it and abort their communicators too. Never throws.
  virtual void fail(const std::string& why) noexcept = 0;
  //! Empty while every rank is healthy as far as this one knows; else why not.
  [[nodiscard]] virtual std::string failed_elsewhere() = 0;
};

//! The ranks are replica threads of one process: the team's enter / leave
//! (call.hpp's agreement, deadlines, abort) and its mailbox for headers.
class TeamContract final : public Contract {
 public:
  TeamContract(Team& team, int me) : team_(team), me_(me) {}

  std::uint64_t agree(const CallDesc& d, std::vector<std::size_t>* counts) override {
    const std::uint64_t seq = team_.enter(me_, d, nullptr, nullptr);
    if (counts != nullptr) {
      counts->resize(static_cast<std::size_t>(team_.size()));
      for (int r = 0; r < team_.size(); ++r) (*counts)[static_cast<std::size_t>(r)] = team_.slot(r).desc.in_count;
    }
    // Every replica leaves only once all have entered and read the others'
    // descriptions: a replica that gave up on entering (timeout) never
    // leaves, so no replica enqueues a collective that another one skipped.
    team_.leave(me_, seq, d);
    return seq;
  }

  void post(int peer, const Header& h) override {
    team_.send(me_, peer, channel,
               P2pBuffer{.dtype = "int64", .count = 3, .bytes = sizeof(Header), .in = &h, .out = nullptr});
  }

  Header take(int peer) override {
    Header h;
    team_.recv(me_, peer, channel,
               P2pBuffer{.dtype = "int64", .count = 3, .bytes = sizeof(Header), .in = nullptr, .out = &h});
    return h;
  }

  void fail(const std::string& why) noexcept override {
    try {
      team_.abort(me_, why);
    } catch (...) {  // allocation failure while building the reason: the flag is what matters
    }
  }

  [[nodiscard]] std::string failed_elsewhere() override { return team_.aborted() ? team_.abort_reason() : std::string(); }

 private:
  //! The mailbox tag of headers: one channel per pair, so that headers are
  //! taken in the order sent whatever their tags, as NCCL matches the data.
  static constexpr int channel = 0;
  Team& team_;
  int me_;
};

}  // namespace strata::detail::nccl
