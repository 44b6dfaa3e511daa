#pragma once
//! What travels between the chief and a server rank for the optimizer state
//! (checkpoints across processes): the server's shards' versions, then each
//! optimizer slot's elements of its shards, end to end, slot after slot, in
//! one message of bytes. The chief sends it at a run's start (kAssignState)
//! and gets it back at the run's end (kReadState, kReadStateReply). Written
//! once here so the two ends cannot disagree.
//!   auto bytes = detail::pack_state(part);                        // one end
//!   auto part = detail::unpack_state(bytes, shards, floats, who); // the other

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <strata/core/error.hpp>
#include <strata/core/partition.hpp>
#include <strata/ps/mpi/link.hpp>

namespace strata::detail {

//! One server's part of the optimizer state.
struct ServerStatePart {
  std::vector<std::uint64_t> versions;  //!< one per shard of the server, in the layout's order
  std::vector<float> slots;             //!< slots x the server's elements
};

//! The element ranges of server `s`'s shards (among all variables), in order.
inline std::vector<Range> server_ranges(const ServerLayout& layout, std::size_t s) {
  std::vector<Range> out;
  for (std::size_t i : layout.of(s)) out.push_back(layout.shards()[i]);
  return out;
}

//! The bytes of `p`: its versions, then its slots.
inline std::vector<char> pack_state(const ServerStatePart& p) {
  const std::size_t nv = p.versions.size() * sizeof(std::uint64_t), nf = p.slots.size() * sizeof(float);
  std::vector<char> out(nv + nf);
  if (nv) std::memcpy(out.data(), p.versions.data(), nv);
  if (nf) std::memcpy(out.data() + nv, p.slots.data(), nf);
  return out;
}

//! The part in `bytes`, which must hold `shards` versions and `floats` slot
//! elements; else a ShapeError naming `what` (who sent it) and both sizes.
inline ServerStatePart unpack_state(std::span<const char> bytes, std::size_t shards, std::size_t floats,
                                    const std::string& what) {
  const std::size_t nv = shards * sizeof(std::uint64_t), nf = floats * sizeof(float);
  if (bytes.size() != nv + nf)
    throw ShapeError("ParameterServerStrategy: " + what + " holds " + std::to_string(bytes.size()) +
                     " bytes of optimizer state, expected " + std::to_string(nv + nf) + " (" + std::to_string(shards) +
                     " shard versions and " + std::to_string(floats) +
                     " slot elements: the same model and optimizer on every rank?)");
  ServerStatePart p{std::vector<std::uint64_t>(shards), std::vector<float>(floats)};
  if (nv) std::memcpy(p.versions.data(), bytes.data(), nv);
  if (nf) std::memcpy(p.slots.data(), bytes.data() + nv, nf);
  return p;
}

//! Bytes of server `s`'s part under `slots` optimizer slots.
inline std::size_t state_bytes(const ServerLayout& layout, std::size_t s, std::size_t slots) {
  return layout.of(s).size() * sizeof(std::uint64_t) + slots * layout.count_of(s) * sizeof(float);
}

}  // namespace strata::detail
