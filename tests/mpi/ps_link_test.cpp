// The parameter servers' link over the MPI communicator's headerless tagged
// messages (detail::PsLink, comm/mpi/point_to_point.hpp), 3 ranks named
// chief 0, server 1, worker 2: a wait names the rank that never sent, within
// the deadline, and gives its buffer up to MPI (a late message lands there,
// not in the next receive); one rank's threads wait at once without holding
// MPI from each other; a probe takes messages from any rank with any of its
// tags, of sizes it did not know.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <strata/ps/mpi/link.hpp>

namespace ps_link_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

using namespace std::chrono_literals;
using strata::detail::PsLink;

void name_roles(PsLink& link) {
  link.set_role_names({"chief", "server", "worker"});
  link.set_role_name(link.rank() == 0 ? "chief" : link.rank() == 1 ? "server" : "worker");
}

TEST_CASE("a wait names the rank that never sent within the deadline, and its late message lands in the given-up buffer") {
  PsLink link{MPI_COMM_WORLD, 1000ms};
  REQUIRE(link.size() == 3);
  name_roles(link);
  using strata::detail::kPullReply;
  if (link.rank() == 0) {
    auto a = std::make_shared<std::vector<float>>(4), b = std::make_shared<std::vector<float>>(4);
    std::string what;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      PsLink::Requests r;
      r.keep = {a, b};
      link.irecv(r, a->data(), a->size(), 1, kPullReply);
      link.irecv(r, b->data(), b->size(), 2, kPullReply);
      link.wait_all(r, "the replies");
    } catch (const strata::CollectiveTimeout& e) {
      what = e.what();
    }
    const auto took = std::chrono::steady_clock::now() - t0;
    CAPTURE(what);
    CHECK(what.find("strata: rank 0 (chief) waited 1000 ms for the replies; no answer from rank 2 (worker)") !=
          std::string::npos);
    CHECK(what.find("rank 1") == std::string::npos);  // the server sent
    CHECK((*a)[3] == 4.f);
    CHECK(took < 1000ms + 3s);
    MPI_Barrier(MPI_COMM_WORLD);
    // the late message took the given-up receive (kept alive with its buffer); the next receive gets the next one
    auto c = std::make_shared<std::vector<float>>(4);
    PsLink::Requests r;
    r.keep = {c};
    link.irecv(r, c->data(), c->size(), 2, kPullReply);
    link.wait_all(r, "the second reply");
    CHECK((*c)[0] == 7.f);
  } else if (link.rank() == 1) {
    link.send(std::vector<float>{1, 2, 3, 4}, 0, kPullReply);
    MPI_Barrier(MPI_COMM_WORLD);
  } else {
    MPI_Barrier(MPI_COMM_WORLD);  // after the chief's deadline
    link.send(std::vector<float>(4, 5.f), 0, kPullReply);
    link.send(std::vector<float>(4, 7.f), 0, kPullReply);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("threads of one rank wait on messages at once: a wait holds MPI only for each look") {
  // The chief's waiting thread would keep its other thread from sending (and
  // so time out) if a wait held the MPI lock for its whole length.
  PsLink link{MPI_COMM_WORLD, 5000ms};
  name_roles(link);
  using strata::detail::kResult, strata::detail::kStep;
  if (link.rank() == 0) {
    std::vector<double> answer;
    std::exception_ptr failed;
    std::thread waiter([&] {
      try {
        auto m = link.probe(1, {kResult}, "the server's answer");
        answer = link.recv_all<double>(m);
      } catch (...) {
        failed = std::current_exception();
      }
    });
    std::this_thread::sleep_for(50ms);  // most likely waiting by now (the check holds either way)
    link.send(std::vector<std::int64_t>{42}, 1, kStep);
    waiter.join();
    CHECK(!failed);
    REQUIRE(answer.size() == 1);
    CHECK(answer[0] == 42.0);
  } else if (link.rank() == 1) {
    auto m = link.probe(0, {kStep}, "the chief's question");
    const auto q = link.recv_all<std::int64_t>(m);
    REQUIRE(q.size() == 1);
    link.send(std::vector<double>{static_cast<double>(q[0])}, 0, kResult);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("a probe takes messages from any rank with any of its tags, of sizes it did not know; a silent one is named") {
  PsLink link{MPI_COMM_WORLD, 1000ms};
  name_roles(link);
  using strata::detail::kFailed, strata::detail::kPush, strata::detail::kPull;
  if (link.rank() == 1) {
    std::string text;
    std::vector<float> push;
    for (int i = 0; i < 2; ++i) {
      auto m = link.probe(MPI_ANY_SOURCE, {kPull, kPush, kFailed}, "requests");
      if (m.tag == kFailed) {
        CHECK(m.source == 0);
        const auto c = link.recv_all<char>(m);
        text.assign(c.begin(), c.end());
      } else {
        CHECK(m.tag == kPush);
        CHECK(m.source == 2);
        push = link.recv_all<float>(m);
      }
    }
    CHECK(text == "hello");
    CHECK(push == std::vector<float>{1, 2, 3});
    std::string what;
    try {
      (void)link.probe(MPI_ANY_SOURCE, {kPull, kPush}, "requests");
    } catch (const strata::CollectiveTimeout& e) {
      what = e.what();
    }
    CAPTURE(what);
    CHECK(what.find("strata: rank 1 (server) waited 1000 ms for requests") != std::string::npos);
    CHECK(what.find("no answer") == std::string::npos);
  } else if (link.rank() == 0) {
    link.send(std::vector<char>{'h', 'e', 'l', 'l', 'o'}, 1, kFailed);
  } else {
    link.send(std::vector<float>{1, 2, 3}, 1, kPush);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace ps_link_test
