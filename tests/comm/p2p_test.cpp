// Point-to-point send/recv between CPU replicas: every dtype and edge count,
// in either arrival order, rings with more replicas than cores, tags matched
// in order, mismatches named on the receiver, timeouts, departed and failed
// peers; and ReplicaContext over any Communicator.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <strata/strata.hpp>

#include "support/watchdog.hpp"

namespace p2p_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

using namespace std::chrono_literals;

static_assert(strata::Communicator<strata::ThreadCommunicator>);
static_assert(std::is_same_v<strata::ReplicaContext<strata::Direct>,
                             strata::ReplicaContext<strata::Direct, strata::ThreadCommunicator>>);

namespace {

strata::CommOptions options(std::chrono::milliseconds timeout) {
  strata::CommOptions o;
  o.timeout = timeout;
  return o;
}

template <class T>
T payload(int src, int tag, std::size_t i) {
  return static_cast<T>(static_cast<std::int64_t>((i * 7 + static_cast<std::size_t>(src) * 1001 +
                                                   static_cast<std::size_t>(tag) * 13) % 100003) - 5000);
}

template <class T>
std::vector<T> message(int src, int tag, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = payload<T>(src, tag, i);
  return v;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST_CASE_TEMPLATE("send/recv: 0, 1, 1000 and 300001 elements arrive intact, receiver first or sender first", T,
                   float, double, std::int32_t, std::int64_t) {
  strata_test::Watchdog dog("send/recv counts", 120s);
  strata::MirroredStrategy s{strata::cpu_replicas(2), options(60s)};
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1000}, std::size_t{300001}}) {
    for (bool sender_first : {true, false}) {
      INFO("n=" << n << " sender_first=" << sender_first);
      // sender_first: the message is buffered before the receive starts (the
      // barrier orders them); otherwise the receiver is most likely waiting
      // already and the sender copies into its memory.
      auto got = s.run([&](auto& ctx) {
        std::vector<T> buf(n, T{-1});
        if (ctx.replica_id_in_sync_group() == 0) {
          const auto m = message<T>(0, 3, n);
          if (!sender_first) std::this_thread::sleep_for(20ms);
          ctx.send(m, 1, 3);
          if (sender_first) ctx.barrier();
          return buf;
        }
        if (sender_first) ctx.barrier();
        ctx.recv(buf, 0, 3);
        return buf;
      });
      CHECK(got[1] == message<T>(0, 3, n));
    }
  }
}

TEST_CASE("send/recv: a ring of sends then receives on 2, 3 and 8 replicas, many rounds") {
  for (int p : {2, 3, 8}) {  // 8 replicas on fewer cores: waits must yield, not spin
    strata_test::Watchdog dog("p2p ring p=" + std::to_string(p), 120s);
    strata::MirroredStrategy s{strata::cpu_replicas(p), options(60s)};
    auto bad = s.run([&](auto& ctx) {
      const int r = ctx.replica_id_in_sync_group();
      const int right = (r + 1) % p, left = (r + p - 1) % p;
      int wrong = 0;
      std::vector<float> in(1000);
      for (int round = 0; round < 50; ++round) {
        const std::size_t n = 1000 - static_cast<std::size_t>(round % 3);  // sizes change: buffers are reused
        ctx.send(message<float>(r, round, n), right, round);
        in.resize(n);
        ctx.recv(in, left, round);
        wrong += in != message<float>(left, round, n);
      }
      return wrong;
    });
    for (int r = 0; r < p; ++r) CHECK_MESSAGE(bad[static_cast<std::size_t>(r)] == 0, "p=" << p << " replica " << r);
  }
}

TEST_CASE("send/recv: several tags in flight are matched by tag, in send order per tag and source") {
  strata_test::Watchdog dog("p2p tags", 60s);
  strata::MirroredStrategy s{strata::cpu_replicas(3), options(60s)};
  auto got = s.run([&](auto& ctx) {
    const int r = ctx.replica_id_in_sync_group();
    std::vector<std::vector<std::int64_t>> out;
    if (r != 1) {
      // tag 3 twice: the first sent must be the first received
      for (int k = 0; k < 5; ++k) {
        const int tag = std::vector<int>{3, 1, 3, 2, 1}[static_cast<std::size_t>(k)];
        ctx.send(std::vector<std::int64_t>{r, tag, k}, 1, tag);
      }
      return out;
    }
    std::vector<std::int64_t> b(3);
    for (auto [src, tag] : std::vector<std::pair<int, int>>{{2, 1}, {0, 2}, {0, 3}, {2, 3}, {0, 3}, {0, 1},
                                                             {2, 3}, {0, 1}, {2, 2}, {2, 1}}) {
      ctx.recv(b, src, tag);
      out.push_back(b);
    }
    return out;
  });
  using V = std::vector<std::int64_t>;
  const std::vector<V> want{{2, 1, 1}, {0, 2, 3}, {0, 3, 0}, {2, 3, 0}, {0, 3, 2},
                            {0, 1, 1}, {2, 3, 2}, {0, 1, 4}, {2, 2, 3}, {2, 1, 4}};
  CHECK(got[1] == want);
}

TEST_CASE("send/recv: size and dtype mismatches are named on the receiver, and the next message still arrives") {
  strata_test::Watchdog dog("p2p mismatch", 60s);
  strata::MirroredStrategy s{strata::cpu_replicas(2), options(60s)};
  std::vector<std::string> errors(2);
  auto next = s.run([&](auto& ctx) {
    const int r = ctx.replica_id_in_sync_group();
    std::vector<float> f(6, -1.f);
    if (r == 0) {
      ctx.send(std::vector<float>(5, 1.f), 1, 4);
      ctx.send(std::vector<double>(6, 2.0), 1, 4);
      ctx.send(std::vector<float>(6, 3.f), 1, 4);
      return f;
    }
    for (int k = 0; k < 2; ++k) {
      try {
        ctx.recv(f, 0, 4);
        errors[static_cast<std::size_t>(k)] = "no error";
      } catch (const strata::CollectiveMismatch& e) {
        errors[static_cast<std::size_t>(k)] = e.what();
      }
    }
    ctx.recv(f, 0, 4);
    return f;
  });
  INFO(errors[0]);
  CHECK(contains(errors[0], "recv on replica 1 from replica 0 with tag 4"));
  CHECK(contains(errors[0], "expected float32, 6 elements"));
  CHECK(contains(errors[0], "sent float32, 5 elements"));
  INFO(errors[1]);
  CHECK(contains(errors[1], "expected float32, 6 elements"));
  CHECK(contains(errors[1], "sent float64, 6 elements"));
  CHECK(next[1] == std::vector<float>(6, 3.f));
}

TEST_CASE("send/recv: an unmatched recv times out within bounds, naming the peer and the tag") {
  strata_test::Watchdog dog("p2p timeout", 60s);
  strata::MirroredStrategy s{strata::cpu_replicas(2), options(200ms)};
  std::string error;
  double waited = 0;
  s.run([&](auto& ctx) {
    if (ctx.replica_id_in_sync_group() == 0) {
      ctx.send(std::vector<int>{1}, 1, 8);  // a message with another tag: listed as unreceived
      std::this_thread::sleep_for(3000ms);  // alive, but never sends tag 9
      return 0;
    }
    std::vector<int> b(1);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      ctx.recv(b, 0, 9);
      error = "no error";
    } catch (const strata::CollectiveTimeout& e) {
      error = e.what();
    }
    waited = seconds_since(t0);
    return 0;
  });
  INFO(error);
  CHECK(contains(error, "recv on replica 1 from replica 0 with tag 9 (int32, 1 elements) timed out after 200 ms"));
  CHECK(contains(error, "unreceived: tag(s) 8"));
  CHECK(waited >= 0.19);
  CHECK(waited < 2.5);  // released by its own deadline, not by the sender's return
}

TEST_CASE("send/recv: a recv from a replica that returned without sending fails at once") {
  strata_test::Watchdog dog("p2p departed", 60s);
  strata::MirroredStrategy s{strata::cpu_replicas(2), options(60s)};
  std::string error;
  double waited = 0;
  s.run([&](auto& ctx) {
    if (ctx.replica_id_in_sync_group() == 0) return 0;
    std::vector<double> b(4);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      ctx.recv(b, 0, 0);
      error = "no error";
    } catch (const strata::CollectiveTimeout& e) {
      error = e.what();
    }
    waited = seconds_since(t0);
    return 0;
  });
  INFO(error);
  CHECK(contains(error, "from replica 0 with tag 0"));
  CHECK(contains(error, "replica 0 returned from its function without sending it"));
  CHECK(waited < 10);
}

TEST_CASE("send/recv: a replica that throws releases a replica waiting to receive from it") {
  strata_test::Watchdog dog("p2p abort", 60s);
  strata::MirroredStrategy s{strata::cpu_replicas(3), options(60s)};
  std::string error;
  double waited = 0;
  try {
    s.run([&](auto& ctx) {
      const int r = ctx.replica_id_in_sync_group();
      if (r == 1) {
        std::this_thread::sleep_for(100ms);
        throw strata::Error("stage 1 ran out of memory");
      }
      if (r == 0) {
        std::vector<float> b(10);
        const auto t0 = std::chrono::steady_clock::now();
        try {
          ctx.recv(b, 1, 2);
          error = "no error";
        } catch (const strata::CollectiveAborted& e) {
          error = e.what();
        }
        waited = seconds_since(t0);
      }
      return 0;
    });
    FAIL("the failing replica must be reported");
  } catch (const strata::ReplicaError& e) {
    CHECK(e.replica() == 1);
  }
  INFO(error);
  CHECK(contains(error, "replica 0 abandoned recv from replica 1 with tag 2"));
  CHECK(contains(error, "replica 1 failed: stage 1 ran out of memory"));
  CHECK(waited < 10);  // not the 60 s timeout
}

TEST_CASE("send/recv: self, out-of-range peers and negative tags are errors; leftovers do not leak into the next run") {
  strata_test::Watchdog dog("p2p arguments", 60s);
  strata::MirroredStrategy s{strata::cpu_replicas(2), options(300ms)};
  auto errors = s.run([&](auto& ctx) {
    const int r = ctx.replica_id_in_sync_group();
    std::vector<std::string> e;
    std::vector<float> b(1);
    for (auto [peer, tag] : std::vector<std::pair<int, int>>{{r, 0}, {2, 0}, {-1, 0}, {1 - r, -1}}) {
      try {
        ctx.send(b, peer, tag);
        e.push_back("no error");
      } catch (const strata::Error& x) {
        e.push_back(x.what());
      }
      try {
        ctx.recv(b, peer, tag);
        e.push_back("no error");
      } catch (const strata::Error& x) {
        e.push_back(x.what());
      }
    }
    return e;
  });
  const auto& e = errors[0];
  REQUIRE(e.size() == 8);
  CHECK(contains(e[0], "send on replica 0: peer 0 is this replica itself"));
  CHECK(contains(e[1], "recv on replica 0: peer 0 is this replica itself"));
  CHECK(contains(e[2], "peer 2 is not a replica; name another replica of the team, 0 .. 1"));
  CHECK(contains(e[4], "peer -1 is not a replica"));
  CHECK(contains(e[6], "tag -1 is negative"));
  CHECK(contains(e[7], "tag -1 is negative"));

  // run 1 leaves a message unreceived; run 2 must not receive it
  s.run([&](auto& ctx) {
    if (ctx.replica_id_in_sync_group() == 0) ctx.send(std::vector<float>{1.f}, 1, 5);
    ctx.barrier();
    return 0;
  });
  auto got = s.run([&](auto& ctx) {
    std::vector<float> b{0.f};
    if (ctx.replica_id_in_sync_group() == 0) {
      std::this_thread::sleep_for(50ms);
      ctx.send(std::vector<float>{2.f}, 1, 5);
    } else {
      ctx.recv(b, 0, 5);
    }
    return b[0];
  });
  CHECK(got[1] == 2.f);
}

namespace {
// A communicator that only records what it was asked: ReplicaContext must
// carry any model of strata::Communicator and forward to it.
struct RecordingComm {
  std::vector<std::string>* log;
  [[nodiscard]] int rank() const noexcept { return 1; }
  [[nodiscard]] int size() const noexcept { return 4; }
  template <class B, strata::ReduceOperation Op, class A = strata::AutoReduce>
  void all_reduce(B&& b, Op, A = {}) { log->push_back("all_reduce " + std::to_string(std::size(b)) + " " + std::string(A::name)); }
  template <class I, class O, strata::ReduceOperation Op, class A = strata::AutoReduce>
  void all_reduce(I&&, O&&, Op, A = {}) { log->push_back("all_reduce out"); }
  template <class B>
  void broadcast(B&&, int root) { log->push_back("broadcast " + std::to_string(root)); }
  template <class I, class O, class Op>
  void reduce_scatter(I&&, O&&, Op) { log->push_back("reduce_scatter"); }
  template <class I, class O>
  void all_gather(I&&, O&&) { log->push_back("all_gather"); }
  void barrier() { log->push_back("barrier"); }
  template <class B>
  void send(B&& b, int peer, int tag) {
    log->push_back("send " + std::to_string(std::size(b)) + " to " + std::to_string(peer) + " tag " + std::to_string(tag));
  }
  template <class B>
  void recv(B&& b, int peer, int tag) {
    log->push_back("recv " + std::to_string(std::size(b)) + " from " + std::to_string(peer) + " tag " + std::to_string(tag));
  }
};
static_assert(strata::Communicator<RecordingComm>);
}  // namespace

TEST_CASE("ReplicaContext carries any Communicator and forwards every call to it") {
  std::vector<std::string> log;
  strata::ReplicaContext<strata::Ring, RecordingComm> ctx{RecordingComm{&log}};
  std::vector<float> a(3), b(3);
  CHECK(ctx.replica_id_in_sync_group() == 1);
  CHECK(ctx.num_replicas_in_sync() == 4);
  ctx.all_reduce(a, strata::Sum);
  ctx.send(a, 2, 7);
  ctx.recv(b, 0, 8);
  ctx.barrier();
  CHECK(log == std::vector<std::string>{"all_reduce 3 ring", "send 3 to 2 tag 7", "recv 3 from 0 tag 8", "barrier"});
}

}  // namespace p2p_test
