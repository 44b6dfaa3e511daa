#pragma once
//! What the processes of one run must agree on before it starts, as named
//! fields ("parameter count" = "101770", "global batch" = "128", ...), sent
//! in a fixed-size record so that one non-blocking all-gather (bounded by the
//! timeout like every other wait) carries every rank's, and a difference is
//! reported naming the ranks, the field and both values:
//!   fingerprint mismatch: rank 1 has global batch 64, rank 0 has 128
//! Each field travels as its name, a 64-bit hash of its whole value (what is
//! compared) and the value's first characters (what the message shows).
//!   strata::detail::mpi::agree_on_run(comm, {{"seed", "42"}}, "fingerprint");

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <strata/core/error.hpp>

namespace strata {

//! The processes of a run disagree on what must match (model layout,
//! optimizer, batch, seed; a parameter-server job's cluster): every rank
//! raises it, naming the ranks, the field and the values.
class RunMismatch : public CollectiveMismatch {
 public:
  using CollectiveMismatch::CollectiveMismatch;
};

//! A named value every process of a run must agree on.
using RunField = std::pair<std::string, std::string>;

namespace detail::mpi {

//! The wire record: at most max_fields fields of name, hash, shown value.
struct FingerprintWire {
  static constexpr std::size_t max_fields = 12, name_bytes = 32, shown_bytes = 64;
  //! int64 words of one field, and of one rank's record (a count, then the fields).
  static constexpr std::size_t field_words = (name_bytes + shown_bytes) / 8 + 1;
  static constexpr std::size_t words = 1 + max_fields * field_words;
};

//! FNV-1a: the same on every rank and build.
inline std::uint64_t fingerprint_hash(std::string_view s) noexcept {
  std::uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

//! `fields` as one rank's record (fields beyond max_fields are an Error: a
//! programming mistake, the same on every rank).
inline std::vector<std::int64_t> encode_fingerprint(const std::vector<RunField>& fields) {
  using W = FingerprintWire;
  if (fields.size() > W::max_fields)
    throw Error("strata: a run fingerprint holds at most " + std::to_string(W::max_fields) + " fields, got " +
                std::to_string(fields.size()));
  std::vector<std::int64_t> out(W::words, 0);
  out[0] = static_cast<std::int64_t>(fields.size());
  for (std::size_t f = 0; f < fields.size(); ++f) {
    auto* w = out.data() + 1 + f * W::field_words;
    char text[W::name_bytes + W::shown_bytes] = {};
    std::memcpy(text, fields[f].first.data(), std::min(fields[f].first.size(), W::name_bytes - 1));
    std::memcpy(text + W::name_bytes, fields[f].second.data(), std::min(fields[f].second.size(), W::shown_bytes - 1));
    std::memcpy(w, text, sizeof(text));
    w[W::field_words - 1] = static_cast<std::int64_t>(fingerprint_hash(fields[f].second));
  }
  return out;
}

//! Rank `r`'s field `f` of the gathered records: name, hash, shown value.
struct DecodedField {
  std::string name, shown;
  std::int64_t hash = 0;
};
inline DecodedField decode_field(std::span<const std::int64_t> all, int r, std::size_t f) {
  using W = FingerprintWire;
  const auto* w = all.data() + static_cast<std::size_t>(r) * W::words + 1 + f * W::field_words;
  char text[W::name_bytes + W::shown_bytes];
  std::memcpy(text, w, sizeof(text));
  text[W::name_bytes - 1] = text[sizeof(text) - 1] = '\0';
  return {std::string(text), std::string(text + W::name_bytes), w[W::field_words - 1]};
}

//! Empty when every rank's record (`all`, `ranks` records in rank order)
//! equals rank 0's; else "<what> mismatch: rank 1 has global batch 64, rank 0
//! has 128; ..." naming every rank and field that differs.
inline std::string fingerprint_mismatch(std::span<const std::int64_t> all, int ranks, std::string_view what) {
  using W = FingerprintWire;
  std::string diffs;
  const auto count = [&](int r) { return static_cast<std::size_t>(all[static_cast<std::size_t>(r) * W::words]); };
  for (int r = 1; r < ranks; ++r) {
    const std::size_t n = std::max(count(0), count(r));
    for (std::size_t f = 0; f < n; ++f) {
      const DecodedField a = f < count(0) ? decode_field(all, 0, f) : DecodedField{"(none)", "", 0};
      const DecodedField b = f < count(r) ? decode_field(all, r, f) : DecodedField{"(none)", "", 0};
      if (a.name == b.name && a.hash == b.hash) continue;
      if (!diffs.empty()) diffs += "; ";
      diffs += "rank " + std::to_string(r) + " has ";
      if (a.name == b.name)
        diffs += a.name + " " + b.shown + ", rank 0 has " + a.shown;
      else
        diffs += "field \"" + b.name + "\" where rank 0 has \"" + a.name + "\" (different versions of the program?)";
    }
  }
  if (diffs.empty()) return {};
  return std::string(what) + " mismatch: " + diffs;
}

//! Every rank of `comm` (an MpiCommunicator, or anything with a bounded
//! int64 all_gather, rank(), size() and agreed_failure()) agrees on `fields`:
//! RunMismatch on every rank if any differ (agreed: its unwinding past the
//! communicator sends no abort notice that could end a peer still in the
//! all-gather otherwise), CollectiveTimeout naming a rank that never arrives.
//! Collective.
template <class Comm>
void agree_on_run(Comm& comm, const std::vector<RunField>& fields, std::string_view what) {
  const std::vector<std::int64_t> mine = encode_fingerprint(fields);
  std::vector<std::int64_t> all(mine.size() * static_cast<std::size_t>(comm.size()));
  comm.all_gather(mine, all);
  if (auto why = fingerprint_mismatch(all, comm.size(), what); !why.empty()) {
    comm.agreed_failure();
    throw RunMismatch("strata: " + why + " (seen on rank " + std::to_string(comm.rank()) + ")");
  }
}

}  // namespace detail::mpi
}  // namespace strata
