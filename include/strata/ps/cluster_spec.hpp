#pragma once
//! Which rank of a multi-process job plays which part in parameter-server
//! training: one chief (runs the program's training loop and the
//! coordinator), servers (hold the variables' shards), workers (compute
//! steps). Written as TensorFlow's cluster spec, one role per entry:
//!   "chief:0 ps:1,2 worker:3-5"      (ps or server; ranks, or a-b ranges)
//! or derived from counts: rank 0 the chief, the next S ranks servers, the
//! rest workers. Every rank must have exactly one role.
//!   auto spec = strata::ClusterSpec::parse("chief:0 ps:1 worker:2,3", 4);

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <strata/core/error.hpp>

namespace strata {

struct ClusterSpec {
  int chief = 0;
  std::vector<int> servers;
  std::vector<int> workers;

  enum class Role { Chief, Server, Worker };

  //! `servers` servers after the chief (rank 0), workers for the rest of `world` ranks.
  static ClusterSpec from_counts(int servers, int world) {
    if (servers < 1) throw Error("ClusterSpec: at least one server, got " + std::to_string(servers));
    if (world < servers + 2)
      throw Error("ClusterSpec: " + std::to_string(servers) + " server(s) need a job of at least " +
                  std::to_string(servers + 2) + " ranks (a chief, the servers, a worker); this one has " +
                  std::to_string(world));
    ClusterSpec c;
    for (int r = 1; r <= servers; ++r) c.servers.push_back(r);
    for (int r = servers + 1; r < world; ++r) c.workers.push_back(r);
    c.validate(world);
    return c;
  }

  //! Parses "chief:0 ps:1,2 worker:3-5" (entries separated by spaces or
  //! ';'), checked against a job of `world` ranks.
  static ClusterSpec parse(std::string_view text, int world) {
    ClusterSpec c;
    c.chief = -1;
    std::size_t i = 0;
    const auto fail = [&](const std::string& why) -> Error {
      return Error("ClusterSpec \"" + std::string(text) + "\": " + why);
    };
    while (i < text.size()) {
      while (i < text.size() && (text[i] == ' ' || text[i] == ';' || text[i] == '\t')) ++i;
      if (i >= text.size()) break;
      std::size_t end = i;
      while (end < text.size() && text[end] != ' ' && text[end] != ';' && text[end] != '\t') ++end;
      const std::size_t colon = text.substr(0, end).find(':', i);
      if (colon == std::string_view::npos)
        throw fail("expected role:ranks at \"" + std::string(text.substr(i, end - i)) + "\"");
      const std::string role(text.substr(i, colon - i));
      const std::vector<int> ranks = parse_ranks(text.substr(colon + 1, end - colon - 1), role, fail);
      if (role == "chief") {
        if (c.chief != -1 || ranks.size() != 1) throw fail("exactly one chief rank, e.g. chief:0");
        c.chief = ranks[0];
      } else if (role == "ps" || role == "server") {
        c.servers.insert(c.servers.end(), ranks.begin(), ranks.end());
      } else if (role == "worker") {
        c.workers.insert(c.workers.end(), ranks.begin(), ranks.end());
      } else {
        throw fail("unknown role \"" + role + "\" (known: chief, ps, worker)");
      }
      i = end;
    }
    if (c.chief == -1) throw fail("no chief (add e.g. chief:0)");
    try {
      c.validate(world);
    } catch (const Error& e) {
      throw fail(e.what());
    }
    return c;
  }

  //! Throws unless every rank of a `world`-rank job has exactly one role,
  //! with at least one server and one worker.
  void validate(int world) const {
    if (servers.empty()) throw Error("no parameter server (ps) ranks");
    if (workers.empty()) throw Error("no worker ranks");
    std::vector<int> seen(static_cast<std::size_t>(std::max(world, 0)), 0);
    const auto mark = [&](int r, const char* role) {
      if (r < 0 || r >= world)
        throw Error(std::string(role) + " rank " + std::to_string(r) + " is outside this job of " +
                    std::to_string(world) + " ranks (0-" + std::to_string(world - 1) + ")");
      if (seen[static_cast<std::size_t>(r)]++) throw Error("rank " + std::to_string(r) + " has two roles");
    };
    mark(chief, "chief");
    for (int r : servers) mark(r, "ps");
    for (int r : workers) mark(r, "worker");
    for (int r = 0; r < world; ++r)
      if (!seen[static_cast<std::size_t>(r)])
        throw Error("rank " + std::to_string(r) + " of " + std::to_string(world) + " has no role");
  }

  [[nodiscard]] Role role_of(int rank) const {
    if (rank == chief) return Role::Chief;
    if (std::find(servers.begin(), servers.end(), rank) != servers.end()) return Role::Server;
    if (std::find(workers.begin(), workers.end(), rank) != workers.end()) return Role::Worker;
    throw Error("ClusterSpec: rank " + std::to_string(rank) + " has no role");
  }
  //! The index of `rank` among the servers / workers.
  [[nodiscard]] int server_index(int rank) const { return index_in(servers, rank, "server"); }
  [[nodiscard]] int worker_index(int rank) const { return index_in(workers, rank, "worker"); }

 private:
  static int index_in(const std::vector<int>& v, int rank, const char* what) {
    const auto it = std::find(v.begin(), v.end(), rank);
    if (it == v.end()) throw Error("ClusterSpec: rank " + std::to_string(rank) + " is not a " + what);
    return static_cast<int>(it - v.begin());
  }
  template <class Fail>
  static std::vector<int> parse_ranks(std::string_view s, const std::string& role, const Fail& fail) {
    std::vector<int> out;
    if (s.empty()) throw fail("no ranks after \"" + role + ":\"");
    std::size_t i = 0;
    const auto number = [&]() {
      const std::size_t b = i;
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
      if (b == i || i - b > 6) throw fail("expected a rank number in \"" + std::string(s) + "\"");
      return std::atoi(std::string(s.substr(b, i - b)).c_str());
    };
    while (i < s.size()) {
      const int a = number();
      int b = a;
      if (i < s.size() && s[i] == '-') {
        ++i;
        b = number();
        if (b < a) throw fail("empty range " + std::to_string(a) + "-" + std::to_string(b));
      }
      for (int r = a; r <= b; ++r) out.push_back(r);
      if (i < s.size()) {
        if (s[i] != ',') throw fail("unexpected '" + std::string(1, s[i]) + "' in \"" + std::string(s) + "\"");
        ++i;
        if (i == s.size()) throw fail("a trailing ',' in \"" + std::string(s) + "\"");
      }
    }
    return out;
  }
};

namespace detail {
//! A parameter-server runtime whose processes agree on a run before it
//! starts (over MPI): `fields` (name, value) must match on every process,
//! else every one raises a typed error naming the ranks and the field.
class RunAgreement {
 public:
  virtual ~RunAgreement() = default;
  virtual void agree_on_run(const std::vector<std::pair<std::string, std::string>>& fields) = 0;
};
}  // namespace detail

}  // namespace strata
