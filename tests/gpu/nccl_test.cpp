// NcclCommunicator in one process: an NcclTeam over every GPU of the machine
// (one replica thread and stream per GPU; a 1-rank team on a 1-GPU machine
// still goes through every call path): every collective x every operation x
// every element type x counts 0, 1, p-1, p+1, odd, large against a host
// reference; uneven reduce_scatter shards and all_gather inputs; send / recv
// between GPUs; and the contract: disagreements are CollectiveMismatch before
// any data moves, a replica that never calls is named by CollectiveTimeout,
// two ranks on one GPU are refused before NCCL sees them.

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <exception>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <strata/cuda/nccl/team.hpp>
#include <strata/cuda/device.hpp>
#include <strata/cuda/stream.hpp>

#include "device_vector.hpp"
#include "skip.hpp"

namespace nccl_gpu_test {  // each file in its own namespace: the unity group joins them (tests/gpu/meson.build)

using namespace std::chrono_literals;

namespace {
using gpu_test::DeviceVector;

std::vector<int> every_gpu() {
  std::vector<int> d(static_cast<std::size_t>(strata::cuda::device_count()));
  std::iota(d.begin(), d.end(), 0);
  return d;
}


//! One thread per rank, its GPU current, with its own stream and
//! communicator: f(comm, rank, stream), which synchronizes before its device
//! buffers go. Rethrows the first rank's exception once every thread joined.
template <class F>
void each_rank(strata::NcclTeam& team, F f) {
  const auto p = static_cast<std::size_t>(team.size());
  std::vector<std::exception_ptr> errors(p);
  std::vector<std::thread> threads;
  for (int r = 0; r < team.size(); ++r)
    threads.emplace_back([&, r] {
      try {
        strata::cuda::DeviceGuard g{team.device(r)};
        strata::cuda::Stream s{team.device(r)};
        auto comm = team.communicator(r, s.get());
        f(comm, r, s.get());
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

//! Small values in [-2, 2]: sums, products (|x| <= 2^p) and means of them are
//! exact or nearly so in every element type.
template <class T>
T value(int rank, std::size_t i) {
  return static_cast<T>(static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 3) % 5) - 2);
}
template <class T>
std::vector<T> values(int rank, std::size_t n) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value<T>(rank, i);
  return v;
}

//! The reduction of element i over p ranks, in double.
template <class Op>
double reference(int p, std::size_t i) {
  double acc = value<double>(0, i);
  for (int r = 1; r < p; ++r) {
    const double x = value<double>(r, i);
    if constexpr (Op::kind == strata::detail::OpKind::min) acc = std::min(acc, x);
    else if constexpr (Op::kind == strata::detail::OpKind::max) acc = std::max(acc, x);
    else if constexpr (Op::kind == strata::detail::OpKind::product) acc *= x;
    else acc += x;
  }
  return Op::kind == strata::detail::OpKind::mean ? acc / p : acc;
}

//! Element `first + k` of the reduction for every k of `got`; names the first that differs.
template <class T, class Op>
void check_reduced(const std::vector<T>& got, std::size_t first, int p, const std::string& what) {
  for (std::size_t k = 0; k < got.size(); ++k) {
    const double want = reference<Op>(p, first + k);
    const double g = static_cast<double>(got[k]);
    const bool ok = Op::kind == strata::detail::OpKind::mean ? std::abs(g - want) <= 1e-5 : g == want;
    if (!ok) {
      FAIL_CHECK(what << ": element " << first + k << " is " << g << ", expected " << want);
      return;
    }
  }
}

std::vector<std::size_t> counts(int p) {
  const auto q = static_cast<std::size_t>(p);
  std::vector<std::size_t> c{0, 1, q - 1, q + 1, 1001, (std::size_t{1} << 22) + 3};
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  return c;
}

template <class T, class Op>
void check_all_reduce(strata::NcclTeam& team, Op op, std::size_t n) {
  const int p = team.size();
  std::vector<std::vector<T>> out_of_place(static_cast<std::size_t>(p)), in_place(static_cast<std::size_t>(p));
  each_rank(team, [&](strata::NcclCommunicator& c, int r, cudaStream_t s) {
    DeviceVector<T> in(values<T>(r, n), c.device(), s), out(std::vector<T>(n, T{-7}), c.device(), s);
    c.all_reduce(in.span(), out.span(), op);
    c.synchronize();
    out_of_place[static_cast<std::size_t>(r)] = out.read();
    c.all_reduce(in.span(), op);
    c.synchronize();
    in_place[static_cast<std::size_t>(r)] = in.read();
  });
  for (int r = 0; r < p; ++r) {
    const std::string where = std::string(Op::name) + " on rank " + std::to_string(r);
    check_reduced<T, Op>(out_of_place[static_cast<std::size_t>(r)], 0, p, "out of place " + where);
    check_reduced<T, Op>(in_place[static_cast<std::size_t>(r)], 0, p, "in place " + where);
  }
}

template <class T, class Op>
void check_reduce_scatter(strata::NcclTeam& team, Op op, std::size_t n) {
  const int p = team.size();
  std::vector<std::vector<T>> got(static_cast<std::size_t>(p));
  each_rank(team, [&](strata::NcclCommunicator& c, int r, cudaStream_t s) {
    const strata::Range mine = strata::shard_range(n, static_cast<std::size_t>(p), static_cast<std::size_t>(r));
    DeviceVector<T> in(values<T>(r, n), c.device(), s), out(std::vector<T>(mine.size(), T{-7}), c.device(), s);
    c.reduce_scatter(in.span(), out.span(), op);
    c.synchronize();
    got[static_cast<std::size_t>(r)] = out.read();
  });
  for (int r = 0; r < p; ++r) {
    const strata::Range mine = strata::shard_range(n, static_cast<std::size_t>(p), static_cast<std::size_t>(r));
    REQUIRE(got[static_cast<std::size_t>(r)].size() == mine.size());
    check_reduced<T, Op>(got[static_cast<std::size_t>(r)], mine.begin, p,
                         "reduce_scatter " + std::string(Op::name) + " shard of rank " + std::to_string(r));
  }
}

//! all_gather with rank r contributing count(r) elements (value<T>(r, i)).
template <class T, class Count>
void check_all_gather(strata::NcclTeam& team, Count count) {
  const int p = team.size();
  std::size_t total = 0;
  std::vector<T> want;
  for (int r = 0; r < p; ++r) {
    const auto v = values<T>(r, count(r));
    want.insert(want.end(), v.begin(), v.end());
    total += v.size();
  }
  std::vector<std::vector<T>> got(static_cast<std::size_t>(p));
  each_rank(team, [&](strata::NcclCommunicator& c, int r, cudaStream_t s) {
    DeviceVector<T> in(values<T>(r, count(r)), c.device(), s), out(std::vector<T>(total, T{-7}), c.device(), s);
    c.all_gather(in.span(), out.span());
    c.synchronize();
    got[static_cast<std::size_t>(r)] = out.read();
  });
  for (int r = 0; r < p; ++r) CHECK_MESSAGE(got[static_cast<std::size_t>(r)] == want, "all_gather on rank " << r);
}

template <class T>
void check_broadcast(strata::NcclTeam& team, int root, std::size_t n) {
  const int p = team.size();
  std::vector<std::vector<T>> got(static_cast<std::size_t>(p));
  each_rank(team, [&](strata::NcclCommunicator& c, int r, cudaStream_t s) {
    DeviceVector<T> data(r == root ? values<T>(root, n) : std::vector<T>(n, T{-7}), c.device(), s);
    c.broadcast(data.span(), root);
    c.barrier();
    c.synchronize();
    got[static_cast<std::size_t>(r)] = data.read();
  });
  for (int r = 0; r < p; ++r)
    CHECK_MESSAGE(got[static_cast<std::size_t>(r)] == values<T>(root, n), "broadcast from " << root << " on rank " << r);
}

//! What a rank's call raised: its message, or "" when it returned.
template <class F>
std::string raised(F f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE_TEMPLATE("every collective matches the host on every GPU", T, float, double, std::int32_t, std::int64_t) {
  strata::NcclTeam team{every_gpu(), {.timeout = 120s}};
  const int p = team.size();
  MESSAGE("NCCL team of " << p << " GPU(s)");
  for (std::size_t n : counts(p)) {
    CAPTURE(n);
    check_all_reduce<T>(team, strata::Sum, n);
    if constexpr (std::floating_point<T>) check_all_reduce<T>(team, strata::Mean, n);
    check_all_reduce<T>(team, strata::Min, n);
    check_all_reduce<T>(team, strata::Max, n);
    check_all_reduce<T>(team, strata::Product, n);
    check_broadcast<T>(team, 0, n);
    check_broadcast<T>(team, p - 1, n);
    check_reduce_scatter<T>(team, strata::Sum, n);  // n % p == 0: ncclReduceScatter, else grouped ncclReduce
    check_reduce_scatter<T>(team, strata::Max, n);
    if constexpr (std::floating_point<T>) check_reduce_scatter<T>(team, strata::Mean, n);
    check_reduce_scatter<T>(team, strata::Sum, n * static_cast<std::size_t>(p));  // equal shards
    check_all_gather<T>(team, [&](int) { return n; });                           // ncclAllGather
    check_all_gather<T>(team, [&](int r) { return r % 2 == 0 ? n : n / 2 + 1; });  // uneven: grouped broadcasts
    check_all_gather<T>(team, [&](int r) { return r == 0 ? n : 0; });             // only rank 0 contributes
  }
}

TEST_CASE("send and recv between GPUs: data, order, mismatches (two GPUs)") {
  STRATA_GPU_SKIP_UNLESS(every_gpu().size() >= 2,
                         "NCCL send / recv need 2 GPUs; this machine has " + std::to_string(every_gpu().size()));
  strata::NcclTeam team{every_gpu(), {.timeout = 60s}};
  const std::vector<std::size_t> sizes{0, 1, 1001, (std::size_t{1} << 22) + 3};
  std::vector<std::vector<float>> echoed(sizes.size());
  std::vector<std::vector<std::int64_t>> ints(sizes.size());
  std::string wrong_size, wrong_tag;
  std::vector<float> after_wrong_size, tag3, tag4;
  each_rank(team, [&](strata::NcclCommunicator& c, int r, cudaStream_t s) {
    if (r > 1) return;
    const int peer = 1 - r;
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      const std::size_t n = sizes[k];
      // rank 0 -> rank 1 (tag 7), then rank 1 sends it back (tag 8)
      DeviceVector<float> buf(r == 0 ? values<float>(5, n) : std::vector<float>(n, -7.f), c.device(), s);
      DeviceVector<std::int64_t> ib(r == 0 ? values<std::int64_t>(6, n) : std::vector<std::int64_t>(n, -7),
                                    c.device(), s);
      if (r == 0) {
        c.send(buf.span(), peer, 7);
        c.send(ib.span(), peer, 9);
        DeviceVector<float> back(std::vector<float>(n, -7.f), c.device(), s);
        c.recv(back.span(), peer, 8);
        c.synchronize();
        echoed[k] = back.read();
      } else {
        c.recv(buf.span(), peer, 7);
        c.recv(ib.span(), peer, 9);
        c.send(buf.span(), peer, 8);
        c.synchronize();
        ints[k] = ib.read();
      }
    }
    // A size mismatch drops the message on the receiver; the next one still arrives whole.
    DeviceVector<float> ten(values<float>(1, 10), c.device(), s), twelve(std::vector<float>(12), c.device(), s);
    DeviceVector<float> five(r == 0 ? values<float>(2, 5) : std::vector<float>(5, -7.f), c.device(), s);
    if (r == 0) {
      c.send(ten.span(), peer, 1);
      c.send(five.span(), peer, 2);
    } else {
      wrong_size = raised([&] { c.recv(twelve.span(), peer, 1); });
      c.recv(five.span(), peer, 2);
      c.synchronize();
      after_wrong_size = five.read();
    }
    // Tags are received in the order sent: the wrong one is refused and kept.
    DeviceVector<float> four(r == 0 ? values<float>(3, 4) : std::vector<float>(4), c.device(), s);
    DeviceVector<float> six(r == 0 ? values<float>(4, 6) : std::vector<float>(6), c.device(), s);
    if (r == 0) {
      c.send(four.span(), peer, 3);
      c.send(six.span(), peer, 4);
    } else {
      wrong_tag = raised([&] { c.recv(six.span(), peer, 4); });
      c.recv(four.span(), peer, 3);
      c.recv(six.span(), peer, 4);
      c.synchronize();
      tag3 = four.read();
      tag4 = six.read();
    }
    CHECK_THROWS_AS(c.send(ten.span(), r, 0), strata::Error);  // itself
    CHECK_THROWS_AS(c.send(ten.span(), peer, -1), strata::Error);
    c.synchronize();
  });
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    CHECK_MESSAGE(echoed[k] == values<float>(5, sizes[k]), "round trip of " << sizes[k] << " floats");
    CHECK_MESSAGE(ints[k] == values<std::int64_t>(6, sizes[k]), sizes[k] << " int64 from rank 0");
  }
  CHECK(wrong_size.find("expected 12 float32 but rank 0 sent 10 float32") != std::string::npos);
  CHECK(after_wrong_size == values<float>(2, 5));
  CHECK(wrong_tag.find("has tag 3") != std::string::npos);
  CHECK(tag3 == values<float>(3, 4));
  CHECK(tag4 == values<float>(4, 6));
}

TEST_CASE("disagreements are CollectiveMismatch on every rank, and the communicator stays usable") {
  strata::NcclTeam team{every_gpu(), {.timeout = 60s}};
  const int p = team.size();
  std::vector<std::string> counts_differ(static_cast<std::size_t>(p)), bad_root(static_cast<std::size_t>(p));
  std::vector<std::vector<float>> after(static_cast<std::size_t>(p));
  std::vector<char> mismatch_type(static_cast<std::size_t>(p), 0);
  each_rank(team, [&](strata::NcclCommunicator& c, int r, cudaStream_t s) {
    const auto ur = static_cast<std::size_t>(r);
    DeviceVector<float> a(values<float>(r, 8 + ur), c.device(), s);
    if (p >= 2) {  // rank r passes 8 + r elements
      try {
        c.all_reduce(a.span(), strata::Sum);
      } catch (const strata::CollectiveMismatch& e) {
        counts_differ[ur] = e.what();
        mismatch_type[ur] = 1;
      }
    }
    try {
      c.broadcast(a.span().first(8), p);  // root p is not a rank
    } catch (const strata::CollectiveMismatch& e) {
      bad_root[ur] = e.what();
    }
    DeviceVector<float> ok(values<float>(r, 8), c.device(), s);
    c.all_reduce(ok.span(), strata::Sum);
    c.synchronize();
    after[ur] = ok.read();
  });
  for (int r = 0; r < p; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    if (p >= 2) {
      CHECK(mismatch_type[ur] == 1);
      CHECK(counts_differ[ur].find("element counts differ") != std::string::npos);
      CHECK(counts_differ[ur].find("replica 1 called all_reduce(sum, float32, 9 elements)") != std::string::npos);
    }
    CHECK(bad_root[ur].find("root " + std::to_string(p) + " is not a replica") != std::string::npos);
    check_reduced<float, strata::SumOp>(after[ur], 0, p, "all_reduce after the mismatches");
  }
}

TEST_CASE("a replica that never calls is named by CollectiveTimeout, and the team is aborted (two GPUs)") {
  const auto gpus = every_gpu();
  STRATA_GPU_SKIP_UNLESS(gpus.size() >= 2,
                         "a missing NCCL replica needs 2 GPUs; this machine has " + std::to_string(gpus.size()));
  // (the timeout bounds NCCL's initialization of every GPU too: not too short)
  const auto timeout = 5s;
  strata::NcclTeam team{gpus, {.timeout = timeout}};
  std::string timed_out, later;
  bool was_timeout = false, later_aborted = false;
  std::chrono::steady_clock::duration took{};
  each_rank(team, [&](strata::NcclCommunicator& c, int r, cudaStream_t s) {
    if (r != 0) return;  // the others never call
    DeviceVector<float> a(values<float>(0, 100), c.device(), s);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      c.all_reduce(a.span(), strata::Sum);
    } catch (const strata::CollectiveTimeout& e) {
      was_timeout = true;
      timed_out = e.what();
    }
    took = std::chrono::steady_clock::now() - t0;
    try {
      c.barrier();  // at once: the communicator is aborted
    } catch (const strata::CollectiveAborted& e) {
      later_aborted = true;
      later = e.what();
    }
  });
  CHECK(was_timeout);
  CHECK(timed_out.find("missing: replica 1") != std::string::npos);
  CHECK(took >= timeout);
  CHECK(took < timeout + 10s);
  CHECK(later_aborted);
  CHECK(later.find("aborted by an earlier failure") != std::string::npos);
  CHECK(team.aborted());
  // every other replica's next call fails at once too
  std::string other;
  try {
    strata::cuda::Stream s{team.device(1)};
    auto c1 = team.communicator(1, s.get());
    c1.barrier();
  } catch (const strata::CollectiveAborted& e) {
    other = e.what();
  }
  CHECK(other.find("abandoned because replica 0 failed") != std::string::npos);
}

TEST_CASE("two ranks on one GPU are a strata::Error before NCCL sees them") {
  CHECK_THROWS_WITH_AS(strata::NcclTeam({0, 0}), doctest::Contains("ranks 0 and 1 both use GPU 0"), strata::Error);
  CHECK_THROWS_WITH_AS(strata::NcclTeam({}), doctest::Contains("no GPUs given"), strata::Error);
  CHECK_THROWS_AS(strata::NcclTeam({strata::cuda::device_count()}), strata::CudaError);  // no such GPU
}

TEST_CASE("buffers must be memory of the communicator's GPU") {
  strata::NcclTeam team{{0}, {.timeout = 30s}};
  strata::cuda::Stream s{0};
  auto c = team.communicator(0, s.get());
  std::vector<float> host(16, 1.f);
  CHECK_THROWS_WITH_AS(c.all_reduce(host, strata::Sum), doctest::Contains("buffer is host memory"), strata::Error);
  DeviceVector<float> d(values<float>(0, 16), 0, s.get());
  c.all_reduce(d.span(), strata::Sum);  // still usable: the wrong call never reached the contract
  c.synchronize();
  CHECK(d.read() == values<float>(0, 16));
  CHECK(c.failure().empty());
  CHECK_THROWS_AS(team.communicator(1, s.get()), strata::Error);
}

}  // namespace nccl_gpu_test
