#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>
#include <ranges>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include <strata/data/dataset.hpp>
#include <strata/data/split.hpp>

#include "support/watchdog.hpp"

namespace dataset_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

using namespace std::chrono_literals;
using strata::Shape;
using strata::Tensor;
using namespace strata::data;

using I32 = Tensor<std::int32_t>;
using F32 = Tensor<float>;

static_assert(std::input_iterator<RangeIterator<F32>>);
static_assert(std::ranges::input_range<Dataset<std::tuple<F32, I32>>>);
static_assert(DatasetElement<std::tuple<Tensor<double>, Tensor<std::int64_t>>>);
static_assert(!DatasetElement<float>);
static_assert(!DatasetElement<std::tuple<>>);
static_assert(!DatasetElement<std::tuple<F32, int>>);

namespace {

//! 0, 1, ..., n-1 as int32 scalars (one-element rank-0 tensors).
Dataset<I32> range_ds(std::int32_t n) {
  I32 t{Shape{static_cast<std::size_t>(n)}};
  std::iota(t.begin(), t.end(), 0);
  return from_tensor_slices(std::move(t));
}

//! The values of a pass over a dataset of int32 tensors, flattened.
std::vector<std::int32_t> values(const Dataset<I32>& ds) {
  std::vector<std::int32_t> out;
  auto it = ds.iterator();
  while (auto e = it.next()) out.insert(out.end(), e->begin(), e->end());
  return out;
}

std::vector<std::int32_t> iota_vec(std::int32_t n, std::int32_t from = 0) {
  std::vector<std::int32_t> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), from);
  return v;
}

//! The same values, but through the generic (element, not row) path: map
//! hides the slice table from later stages.
Dataset<I32> generic(const Dataset<I32>& ds) {
  return ds.map([](I32 t) { return t; });
}

bool is_permutation_of_iota(std::vector<std::int32_t> v, std::int32_t n) {
  std::sort(v.begin(), v.end());
  return v == iota_vec(n);
}

}  // namespace

TEST_CASE("dataset: from_tensor_slices slices along axis 0") {
  F32 x{{3, 2}, {0, 1, 2, 3, 4, 5}};
  I32 y{{3}, {7, 8, 9}};
  auto ds = from_tensor_slices(x, y);
  CHECK(ds.cardinality() == 3u);
  std::vector<std::tuple<F32, I32>> got;
  for (auto& e : ds) got.push_back(std::move(e));
  REQUIRE(got.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) {
    const auto& [xi, yi] = got[i];
    CHECK(xi == F32{{2}, {float(2 * i), float(2 * i + 1)}});
    CHECK(yi.shape() == Shape{});  // rank-0, one element
    CHECK(yi.size() == 1);
    CHECK(yi[0] == static_cast<std::int32_t>(7 + i));
  }
  // The dataset holds its own copy: changing the source later changes nothing.
  x.fill(-1.f);
  CHECK(std::get<0>(*ds.iterator().next()) == F32{{2}, {0.f, 1.f}});

  // One tensor gives Tensor elements, not 1-tuples.
  auto single = from_tensor_slices(Tensor<double>{{2, 1, 2}, {1, 2, 3, 4}});
  static_assert(std::is_same_v<decltype(single)::element_type, Tensor<double>>);
  CHECK(*single.iterator().next() == Tensor<double>{{1, 2}, {1, 2}});
}

TEST_CASE("dataset: from_tensor_slices rejects mismatched extents and scalars") {
  CHECK_THROWS_AS(from_tensor_slices(F32{{3, 2}}, I32{{4}}), strata::ShapeError);
  CHECK_THROWS_WITH(from_tensor_slices(F32{{3, 2}}, I32{{4}}),
                    doctest::Contains("same first extent, but the shapes are [3, 2], [4]"));
  CHECK_THROWS_AS(from_tensor_slices(F32{Shape{}}), strata::ShapeError);
  CHECK_THROWS_WITH(from_tensor_slices(I32{{2}}, F32{Shape{}}), doctest::Contains("tensor 1 is a scalar"));
}

TEST_CASE("dataset: from_tensors is a single element") {
  auto ds = from_tensors(F32{{2, 2}, 1.f}, Tensor<std::int64_t>{{3}, std::int64_t{4}});
  CHECK(ds.cardinality() == 1u);
  auto it = ds.iterator();
  auto e = it.next();
  REQUIRE(e);
  CHECK(std::get<0>(*e) == F32{{2, 2}, 1.f});
  CHECK(std::get<1>(*e) == Tensor<std::int64_t>{{3}, std::int64_t{4}});
  CHECK_FALSE(it.next());
  CHECK_FALSE(it.next());
  CHECK(ds.repeat(3).batch(3).cardinality() == 1u);
  CHECK(std::get<0>(*ds.repeat(3).batch(3).iterator().next()).shape() == Shape{3, 2, 2});
}

TEST_CASE("dataset: empty datasets") {
  auto empty = range_ds(0);
  CHECK(empty.cardinality() == 0u);
  CHECK(values(empty).empty());
  CHECK(values(empty.batch(4)).empty());
  CHECK(values(empty.shuffle(8, 1)).empty());
  CHECK(values(empty.skip(2).take(3)).empty());
  CHECK(values(empty.prefetch(2)).empty());
  CHECK(values(generic(empty).batch(2)).empty());

  Dataset<F32> none;  // default: no elements
  CHECK(none.cardinality() == 0u);
  CHECK_FALSE(none.iterator().next());
  CHECK(none.begin() == none.end());

  // A row of zero elements is still a row.
  auto zero_width = from_tensor_slices(F32{Shape{4, 0}});
  CHECK(zero_width.cardinality() == 4u);
  auto b = zero_width.batch(3).iterator().next();
  REQUIRE(b);
  CHECK(b->shape() == Shape{3, 0});

  // repeat() of an empty pass ends instead of spinning.
  strata_test::Watchdog dog("repeat() of an empty dataset", 30s);
  CHECK(empty.repeat().cardinality() == 0u);
  CHECK(values(empty.repeat()).empty());
  CHECK(values(generic(empty).repeat()).empty());
}

TEST_CASE("dataset: batch stacks rows, with and without a remainder") {
  for (bool via_rows : {true, false}) {
    CAPTURE(via_rows);
    auto ds = via_rows ? range_ds(10) : generic(range_ds(10));

    std::vector<Shape> shapes;
    std::vector<std::int32_t> all;
    for (auto& b : ds.batch(3)) {
      shapes.push_back(b.shape());
      all.insert(all.end(), b.begin(), b.end());
    }
    CHECK(shapes == std::vector<Shape>{{3}, {3}, {3}, {1}});
    CHECK(all == iota_vec(10));
    CHECK(ds.batch(3).cardinality() == 4u);

    shapes.clear();
    for (auto& b : ds.batch(3, true)) shapes.push_back(b.shape());
    CHECK(shapes == std::vector<Shape>{{3}, {3}, {3}});
    CHECK(ds.batch(3, true).cardinality() == 3u);
    CHECK(values(ds.batch(3, true)) == iota_vec(9));

    CHECK(ds.batch(5, true).cardinality() == 2u);  // no remainder: nothing to drop
    CHECK(values(ds.batch(5, true)) == iota_vec(10));

    // batch of 1 adds the axis
    auto one = ds.batch(1).iterator().next();
    REQUIRE(one);
    CHECK(one->shape() == Shape{1});
    CHECK(ds.batch(1).cardinality() == 10u);

    // larger than the data: one short batch, or none when dropped
    CHECK(ds.batch(64).cardinality() == 1u);
    CHECK(ds.batch(64).iterator().next()->shape() == Shape{10});
    CHECK(ds.batch(64, true).cardinality() == 0u);
    CHECK_FALSE(ds.batch(64, true).iterator().next());

    // batch of batches
    auto bb = ds.batch(2).batch(2, true).iterator().next();
    REQUIRE(bb);
    CHECK(*bb == I32{{2, 2}, {0, 1, 2, 3}});
  }
  CHECK_THROWS_AS((void)range_ds(3).batch(0), strata::Error);
  CHECK_THROWS_WITH((void)range_ds(3).batch(0), doctest::Contains("batch size must be at least 1"));
}

TEST_CASE("dataset: batch of tuples keeps the per-row shape of each component") {
  F32 x{{5, 2, 3}};
  std::iota(x.begin(), x.end(), 0.f);
  Tensor<std::int64_t> y{{5}, {10, 11, 12, 13, 14}};
  auto rows = from_tensor_slices(x, y);
  auto elems = rows.map([](F32 a, Tensor<std::int64_t> b) { return std::tuple{std::move(a), std::move(b)}; });
  for (const auto& ds : {rows, elems}) {
    auto it = ds.shuffle(5, 3).batch(2).iterator();
    auto [bx, by] = *it.next();
    CHECK(bx.shape() == Shape{2, 2, 3});
    CHECK(by.shape() == Shape{2});
    for (std::size_t j = 0; j < 2; ++j) {  // row j of bx is row (by[j] - 10) of x
      const auto r = static_cast<std::size_t>(by[j] - 10);
      CHECK(std::equal(bx.begin() + 6 * j, bx.begin() + 6 * (j + 1), x.begin() + 6 * r));
    }
  }
}

TEST_CASE("dataset: batch names the element whose shape differs") {
  auto ds = from_function([i = 0]() mutable -> std::optional<F32> {
    ++i;
    if (i > 5) return std::nullopt;
    return F32{{i == 4 ? std::size_t{3} : std::size_t{2}}, 1.f};
  });
  auto it = ds.batch(2).iterator();
  CHECK(it.next()->shape() == Shape{2, 2});
  CHECK_THROWS_AS(it.next(), strata::ShapeError);
  auto it2 = ds.batch(2).iterator();
  it2.next();
  CHECK_THROWS_WITH(it2.next(), doctest::Contains("element 3 of the pass (1 of batch 1) has shape [3] but the "
                                                  "batch's first element (element 2) has [2]"));

  auto tup = from_function([i = 0]() mutable -> std::optional<std::tuple<F32, I32>> {
    if (i == 2) return std::nullopt;
    return std::tuple{F32{{2}}, I32{{std::size_t(++i)}}};
  });
  CHECK_THROWS_WITH(tup.batch(2).iterator().next(), doctest::Contains("has component 1 shape [2]"));
}

TEST_CASE("dataset: cardinality propagates") {
  auto ds = range_ds(10);
  CHECK(ds.cardinality() == 10u);
  CHECK(ds.repeat(3).cardinality() == 30u);
  CHECK(ds.repeat(0).cardinality() == 0u);
  CHECK(ds.repeat().cardinality() == std::nullopt);
  CHECK(ds.repeat().infinite());
  CHECK_FALSE(ds.infinite());
  CHECK(ds.repeat().take(25).cardinality() == 25u);
  CHECK(ds.repeat().batch(4).infinite());
  CHECK(ds.repeat().skip(4).infinite());
  CHECK(ds.repeat().shard(3, 1).infinite());
  CHECK(ds.batch(4).cardinality() == 3u);
  CHECK(ds.batch(4, true).cardinality() == 2u);
  CHECK(generic(ds).cardinality() == 10u);
  CHECK(ds.shuffle(4, 1).cardinality() == 10u);
  CHECK(ds.prefetch(2).cardinality() == 10u);
  CHECK(ds.take(4).cardinality() == 4u);
  CHECK(ds.take(40).cardinality() == 10u);
  CHECK(ds.take(0).cardinality() == 0u);
  CHECK(ds.skip(4).cardinality() == 6u);
  CHECK(ds.skip(40).cardinality() == 0u);
  CHECK(ds.shard(3, 0).cardinality() == 4u);
  CHECK(ds.shard(3, 1).cardinality() == 3u);
  CHECK(ds.shard(3, 2).cardinality() == 3u);
  CHECK(ds.shuffle(10, 2).repeat(2).batch(3).cardinality() == 7u);

  auto fn = from_function([]() -> std::optional<I32> { return std::nullopt; });
  CHECK(fn.cardinality() == std::nullopt);
  CHECK_FALSE(fn.infinite());
  CHECK(fn.take(3).cardinality() == std::nullopt);  // may have fewer
  CHECK(fn.take(0).cardinality() == 0u);
  CHECK(fn.repeat(0).cardinality() == 0u);

  // Every advertised cardinality matches an actual pass.
  for (const auto& d : {ds.repeat(3), ds.batch(4), ds.batch(4, true), ds.take(4), ds.skip(4), ds.shard(3, 0),
                        ds.shard(3, 2), ds.shuffle(3, 1).skip(1).repeat(2).batch(3)}) {
    std::size_t n = 0;
    for (auto& e : d) (void)e, ++n;
    CHECK(d.cardinality() == n);
  }
}

TEST_CASE("dataset: repeat, finite and forever") {
  strata_test::Watchdog dog("repeat", 60s);
  for (bool via_rows : {true, false}) {
    CAPTURE(via_rows);
    auto ds = via_rows ? range_ds(4) : generic(range_ds(4));
    CHECK(values(ds.repeat(3)) == std::vector<std::int32_t>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3});
    CHECK(values(ds.repeat(1)) == iota_vec(4));
    CHECK(values(ds.repeat(0)).empty());
    std::vector<std::int32_t> want;
    for (int i = 0; i < 25; ++i) want.push_back(i % 4);
    CHECK(values(ds.repeat().take(25)) == want);
    // batches span the repetitions, as in tf.data
    auto b = ds.repeat(2).batch(3).iterator();
    b.next();
    CHECK(*b.next() == I32{{3}, {3, 0, 1}});
  }
  // an infinite pass can be read far
  auto it = range_ds(3).repeat().iterator();
  std::int64_t sum = 0;
  for (int i = 0; i < 30000; ++i) sum += (*it.next())[0];
  CHECK(sum == 30000);
}

TEST_CASE("dataset: shuffle is a seeded permutation") {
  const std::int32_t n = 100;
  for (bool via_rows : {true, false}) {
    CAPTURE(via_rows);
    auto src = via_rows ? range_ds(n) : generic(range_ds(n));
    auto a = values(src.shuffle(n, 42));
    CHECK(is_permutation_of_iota(a, n));
    CHECK(a != iota_vec(n));
    // the same seed on a freshly built pipeline: the same order, run to run
    CHECK(values(src.shuffle(n, 42)) == a);
    CHECK(values(range_ds(n).shuffle(n, 42)) == a);  // and the same on both paths
    // another seed: another order
    auto b = values(src.shuffle(n, 43));
    CHECK(is_permutation_of_iota(b, n));
    CHECK(b != a);
    // a buffer smaller than the data still permutes
    auto c = values(src.shuffle(7, 42));
    CHECK(is_permutation_of_iota(c, n));
    CHECK(c != iota_vec(n));
    // buffer 1 keeps the order
    CHECK(values(src.shuffle(1, 42)) == iota_vec(n));
  }
  CHECK_THROWS_WITH((void)range_ds(3).shuffle(0, 1), doctest::Contains("buffer_size must be at least 1"));
}

TEST_CASE("dataset: shuffle's buffer bounds how far an element moves") {
  // With a buffer of b, the element output at position p was among the first
  // p + b input elements.
  const std::int32_t n = 200;
  const std::size_t b = 5;
  auto v = values(range_ds(n).shuffle(b, 9));
  CHECK(is_permutation_of_iota(v, n));
  for (std::size_t p = 0; p < v.size(); ++p) CHECK(static_cast<std::size_t>(v[p]) < p + b);
}

TEST_CASE("dataset: shuffle reshuffles each pass unless told not to") {
  const std::int32_t n = 50;
  auto ds = range_ds(n).shuffle(n, 7);
  auto p0 = values(ds), p1 = values(ds);
  CHECK(is_permutation_of_iota(p1, n));
  CHECK(p0 != p1);
  auto copy = ds;  // copies share the pass count
  auto p2 = values(copy);
  CHECK(p2 != p0);
  CHECK(p2 != p1);
  // pass k of a fresh dataset is always the same
  auto fresh = range_ds(n).shuffle(n, 7);
  CHECK(values(fresh) == p0);
  CHECK(values(fresh) == p1);

  auto fixed = range_ds(n).shuffle(n, 7, false);
  auto f0 = values(fixed);
  CHECK(f0 == p0);  // pass 0 uses the same key either way
  CHECK(values(fixed) == f0);
  CHECK(values(fixed) == f0);

  // repeat after shuffle: each epoch is a new permutation
  auto epochs = values(range_ds(n).shuffle(n, 7).repeat(2));
  REQUIRE(epochs.size() == 100);
  std::vector<std::int32_t> e0(epochs.begin(), epochs.begin() + n), e1(epochs.begin() + n, epochs.end());
  CHECK(e0 == p0);
  CHECK(e1 == p1);
  auto same = values(range_ds(n).shuffle(n, 7, false).repeat(2));
  CHECK(std::equal(same.begin(), same.begin() + n, same.begin() + n));
}

TEST_CASE("dataset: map unpacks tuples, changes types and restarts its state per pass") {
  F32 x{{3, 2}, {0, 1, 2, 3, 4, 5}};
  I32 y{{3}, {1, 2, 3}};
  auto ds = from_tensor_slices(x, y);

  // unpacked, to another element type
  auto scaled = ds.map([](F32 a, I32 b) {
    Tensor<double> out{a.shape()};
    for (std::size_t i = 0; i < a.size(); ++i) out[i] = a[i] * b[0];
    return out;
  });
  static_assert(std::is_same_v<decltype(scaled)::element_type, Tensor<double>>);
  std::vector<Tensor<double>> got;
  for (auto& e : scaled) got.push_back(std::move(e));
  REQUIRE(got.size() == 3);
  CHECK(got[2] == Tensor<double>{{2}, {12.0, 15.0}});

  // unpacked by const reference, to a tuple of another arity
  auto swapped = ds.map([](const F32& a, const I32& b) { return std::tuple{b, a, a}; });
  CHECK(std::get<2>(*swapped.iterator().next()) == F32{{2}, {0.f, 1.f}});

  // the whole element
  auto whole = ds.map([](const std::tuple<F32, I32>& e) { return std::get<1>(e); });
  CHECK(values(whole) == std::vector<std::int32_t>{1, 2, 3});

  // a single tensor to a tuple
  auto pair = range_ds(3).map([](I32 t) { return std::tuple{t, Tensor<std::int64_t>{{1}, std::int64_t{t[0] * 2}}}; });
  CHECK(std::get<1>(*pair.skip(2).iterator().next())[0] == 4);

  // a generic lambda taking the components
  auto sum = ds.map([](auto a, auto b) { return I32{{1}, static_cast<std::int32_t>(a[0] + a[1]) + b[0]}; });
  CHECK(values(sum) == std::vector<std::int32_t>{2, 7, 12});

  // state in a mutable function restarts every pass
  auto counted = range_ds(3).map([k = 0](I32 t) mutable { t[0] += 100 * k++; return t; });
  CHECK(values(counted) == std::vector<std::int32_t>{0, 101, 202});
  CHECK(values(counted) == std::vector<std::int32_t>{0, 101, 202});

  // exceptions from f reach next()
  auto bad = range_ds(3).map([](I32 t) {
    if (t[0] == 1) throw std::runtime_error("map failed at 1");
    return t;
  });
  auto it = bad.iterator();
  CHECK(it.next());
  CHECK_THROWS_WITH_AS(it.next(), "map failed at 1", std::runtime_error);
}

TEST_CASE("dataset: take and skip") {
  auto ds = range_ds(6);
  CHECK(values(ds.take(2)) == std::vector<std::int32_t>{0, 1});
  CHECK(values(ds.take(60)) == iota_vec(6));
  CHECK(values(ds.take(0)).empty());
  CHECK(values(ds.skip(4)) == std::vector<std::int32_t>{4, 5});
  CHECK(values(ds.skip(0)) == iota_vec(6));
  CHECK(values(ds.skip(60)).empty());
  CHECK(values(ds.skip(1).take(3)) == std::vector<std::int32_t>{1, 2, 3});
  CHECK(values(generic(ds).skip(2).take(2)) == std::vector<std::int32_t>{2, 3});
}

TEST_CASE("dataset: shard keeps every num_shards-th element from index") {
  for (bool via_rows : {true, false}) {
    CAPTURE(via_rows);
    auto ds = via_rows ? range_ds(10) : generic(range_ds(10));
    CHECK(values(ds.shard(3, 0)) == std::vector<std::int32_t>{0, 3, 6, 9});
    CHECK(values(ds.shard(3, 1)) == std::vector<std::int32_t>{1, 4, 7});
    CHECK(values(ds.shard(3, 2)) == std::vector<std::int32_t>{2, 5, 8});
    CHECK(values(ds.shard(1, 0)) == iota_vec(10));
    CHECK(values(ds.shard(12, 11)).empty());
    CHECK(values(ds.shard(12, 9)) == std::vector<std::int32_t>{9});
  }
  CHECK_THROWS_WITH((void)range_ds(3).shard(0, 0), doctest::Contains("num_shards must be at least 1"));
  CHECK_THROWS_AS((void)range_ds(3).shard(2, 2), strata::Error);
  CHECK_THROWS_WITH((void)range_ds(3).shard(2, 2), doctest::Contains("index 2 is out of range for 2 shards"));
}

TEST_CASE("dataset: prefetch delivers the same sequence") {
  strata_test::Watchdog dog("prefetch sequence", 60s);
  auto plain = values(range_ds(1000).shuffle(100, 5));
  for (std::size_t n : {1u, 3u, 64u, 5000u}) {
    CAPTURE(n);
    CHECK(values(range_ds(1000).shuffle(100, 5).prefetch(n)) == plain);
  }
  CHECK(values(generic(range_ds(7)).batch(2).prefetch(2).repeat(2)) ==
        std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4, 5, 6});
  CHECK(values(range_ds(50).prefetch(4).batch(8)) == iota_vec(50));
  CHECK(values(range_ds(50).prefetch(1).prefetch(1)) == iota_vec(50));
  CHECK_THROWS_WITH((void)range_ds(3).prefetch(0), doctest::Contains("buffer size must be at least 1"));
}

TEST_CASE("dataset: prefetch rethrows the producer's exception in order") {
  strata_test::Watchdog dog("prefetch exception", 60s);
  struct Boom : std::runtime_error {
    using std::runtime_error::runtime_error;
  };
  auto ds = from_function([i = 0]() mutable -> std::optional<I32> {
              if (i == 5) throw Boom("generator failed at 5");
              return I32{{1}, i++};
            }).prefetch(3);
  auto it = ds.iterator();
  for (std::int32_t i = 0; i < 5; ++i) {
    auto e = it.next();
    REQUIRE(e);
    CHECK((*e)[0] == i);
  }
  CHECK_THROWS_WITH_AS(it.next(), "generator failed at 5", Boom);
  CHECK_FALSE(it.next());  // the pass is over after the error
  // a map failing in the producer thread, under a batch
  auto bad = range_ds(10).map([](I32 t) {
    if (t[0] == 7) throw strata::ShapeError("bad element 7");
    return t;
  });
  auto it2 = bad.prefetch(2).batch(4).iterator();
  CHECK(it2.next());
  CHECK_THROWS_AS(it2.next(), strata::ShapeError);
}

TEST_CASE("dataset: destroying a prefetching iterator early does not hang") {
  strata_test::Watchdog dog("prefetch early destruction", 60s);
  std::atomic<int> made{0};
  auto forever = from_function([&made]() -> std::optional<I32> { return I32{{1}, made++}; });
  {
    auto it = forever.prefetch(4).iterator();  // destroyed before any read
  }
  made = 0;
  {
    auto it = forever.prefetch(2).iterator();
    CHECK((*it.next())[0] == 0);
    // the producer is blocked on a full queue; wait until it is
    for (int i = 0; i < 2000 && made.load() < 3; ++i) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(20ms);
    // bounded: at most the one consumed + 2 queued + none beyond that
    CHECK(made.load() == 3);
  }
  {
    int n = 0;
    for (auto& e : forever.map([](I32 t) { return t; }).prefetch(8).batch(3).prefetch(2)) {
      (void)e;
      if (++n == 10) break;  // leaves the range-for with both threads running
    }
    CHECK(n == 10);
  }
  for (int i = 0; i < 50; ++i) {  // races between start-up and shutdown
    auto it = range_ds(1000).repeat().prefetch(1).prefetch(1).iterator();
    if (i % 2) it.next();
  }
}

TEST_CASE("dataset: iterator and range-for; passes outlive the Dataset") {
  auto ds = range_ds(5).batch(2);
  std::vector<std::int32_t> a, b;
  for (const auto& e : ds) a.insert(a.end(), e.begin(), e.end());
  for (auto it = ds.iterator(); auto e = it.next();) b.insert(b.end(), e->begin(), e->end());
  CHECK(a == iota_vec(5));
  CHECK(a == b);
  std::optional<Iterator<I32>> it;
  {
    auto tmp = range_ds(3).map([](I32 t) { return t; }).prefetch(1);
    it.emplace(tmp.iterator());
  }
  CHECK((*it->next())[0] == 0);
  CHECK((*it->next())[0] == 1);
  CHECK((*it->next())[0] == 2);
  CHECK_FALSE(it->next());
}

TEST_CASE("dataset: from_function restarts per pass and is not called after its end") {
  int calls = 0;
  auto ds = from_function([&calls, i = 0]() mutable -> std::optional<I32> {
    ++calls;
    if (i == 3) return std::nullopt;
    return I32{{1}, i++};
  });
  CHECK(values(ds) == std::vector<std::int32_t>{0, 1, 2});
  CHECK(values(ds.shuffle(10, 1)).size() == 3);
  calls = 0;
  auto it = ds.iterator();
  while (it.next()) {
  }
  CHECK_FALSE(it.next());
  CHECK(calls == 4);
}

TEST_CASE("split: batch_size and its checks") {
  CHECK(batch_size(F32{{4, 3}}) == 4);
  CHECK(batch_size(std::tuple{F32{{0, 3}}, I32{{0}}}) == 0);
  CHECK_THROWS_AS(batch_size(std::tuple{F32{{4, 3}}, I32{{5}}}), strata::ShapeError);
  CHECK_THROWS_WITH(batch_size(std::tuple{F32{{4, 3}}, I32{{5}}}),
                    doctest::Contains("component 1 has 5 rows (shape [5]) but component 0 has 4 (shape [4, 3])"));
  CHECK_THROWS_WITH(batch_size(F32{Shape{}}), doctest::Contains("is a scalar"));
}

TEST_CASE("split: slice_rows copies a range of rows of every component") {
  F32 x{{4, 2}, {0, 1, 2, 3, 4, 5, 6, 7}};
  I32 y{{4}, {10, 11, 12, 13}};
  auto batch = std::tuple{x, y};
  auto [sx, sy] = slice_rows(batch, 1, 3);
  CHECK(sx == F32{{2, 2}, {2, 3, 4, 5}});
  CHECK(sy == I32{{2}, {11, 12}});
  auto [ex, ey] = slice_rows(batch, 2, 2);
  CHECK(ex.shape() == Shape{0, 2});
  CHECK(ey.shape() == Shape{0});
  CHECK(slice_rows(x, 0, 4) == x);
  sx[0] = 99.f;  // a copy, not a view
  CHECK(x[2] == 2.f);
  CHECK_THROWS_WITH(slice_rows(x, 3, 5), doctest::Contains("rows [3, 5) are not a valid range of a batch of 4 rows"));
  CHECK_THROWS_AS(slice_rows(x, 3, 2), strata::ShapeError);
  CHECK_THROWS_AS(slice_rows(std::tuple{x, I32{{3}}}, 0, 1), strata::ShapeError);
  // a batch of 0 rows keeps its trailing shape
  CHECK(slice_rows(F32{{0, 5}}, 0, 0).shape() == Shape{0, 5});
}

TEST_CASE("split: split_batch balances rows over replicas") {
  F32 x{{10, 2}};
  std::iota(x.begin(), x.end(), 0.f);
  I32 y{{10}};
  std::iota(y.begin(), y.end(), 0);
  auto parts = split_batch(std::tuple{x, y}, 4);
  REQUIRE(parts.size() == 4);
  std::vector<std::size_t> sizes;
  std::vector<std::int32_t> labels;
  for (auto& [px, py] : parts) {
    sizes.push_back(batch_size(std::tuple{px, py}));
    CHECK(px.shape()[1] == 2);
    labels.insert(labels.end(), py.begin(), py.end());
    for (std::size_t r = 0; r < py.size(); ++r) CHECK(px[2 * r] == 2.f * static_cast<float>(py[r]));
  }
  CHECK(sizes == std::vector<std::size_t>{3, 3, 2, 2});
  CHECK(labels == iota_vec(10));

  // 3 rows over 4 replicas: the last gets an empty batch, not an error
  auto small = split_batch(std::tuple{F32{{3, 2}}, I32{{3}, {5, 6, 7}}}, 4);
  REQUIRE(small.size() == 4);
  CHECK(std::get<1>(small[0]) == I32{{1}, {5}});
  CHECK(std::get<1>(small[2]) == I32{{1}, {7}});
  CHECK(std::get<0>(small[3]).shape() == Shape{0, 2});
  CHECK(std::get<1>(small[3]).shape() == Shape{0});

  CHECK(split_batch(x, 1).front() == x);
  CHECK_THROWS_WITH(split_batch(x, 0), doctest::Contains("replicas must be at least 1, got 0"));
  CHECK_THROWS_AS(split_batch(std::tuple{x, I32{{9}}}, 2), strata::ShapeError);
}

namespace {
// n float32 values start, start + 1, ... in a raw file; the reader below makes rows of them
std::filesystem::path write_floats(const std::filesystem::path& dir, const std::string& name, float start,
                                   std::size_t n) {
  std::filesystem::create_directories(dir);
  const auto p = dir / name;
  std::ofstream f(p, std::ios::binary);
  for (std::size_t i = 0; i < n; ++i) {
    const float v = start + static_cast<float>(i);
    f.write(reinterpret_cast<const char*>(&v), sizeof v);
  }
  return p;
}
Dataset<Tensor<float>> read_floats(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::vector<float> v;
  float x;
  while (f.read(reinterpret_cast<char*>(&x), sizeof x)) v.push_back(x);
  if (v.empty()) throw std::runtime_error("empty file " + p.string());
  const std::size_t n = v.size();
  return from_tensor_slices(Tensor<float>({n}, std::move(v)));
}
std::vector<float> values(const Dataset<Tensor<float>>& ds) {
  std::vector<float> out;
  for (const auto& t : ds)
    for (float x : t) out.push_back(x);
  return out;
}
}  // namespace

TEST_CASE("from_files: the elements of every file, file after file, read when a pass reaches it") {
  const auto dir = std::filesystem::temp_directory_path() / ("strata_files_" + std::to_string(::getpid()));
  std::vector<std::filesystem::path> files{write_floats(dir, "a", 0, 3), write_floats(dir, "b", 10, 2),
                                           write_floats(dir, "c", 20, 4)};
  int opened = 0;
  auto ds = from_files(files, [&](const std::filesystem::path& p) {
    ++opened;
    return read_floats(p);
  });
  CHECK(opened == 0);  // nothing read before a pass
  CHECK(!ds.cardinality());
  CHECK(values(ds) == std::vector<float>{0, 1, 2, 10, 11, 20, 21, 22, 23});
  CHECK(opened == 3);
  CHECK(values(ds.batch(4)) == values(ds));  // and through a pipeline
  CHECK(from_files(std::vector<std::filesystem::path>{}, read_floats).cardinality() == 0u);
  // a reader's failure reaches the consumer, naming the file
  auto bad = from_files({dir / "missing"}, read_floats);
  CHECK_THROWS_WITH_AS(values(bad), doctest::Contains("missing"), std::runtime_error);
  std::filesystem::remove_all(dir);
}

TEST_CASE("shard_files: each worker reads every num-th file, batches its share, the pipeline otherwise intact") {
  const auto dir = std::filesystem::temp_directory_path() / ("strata_shard_" + std::to_string(::getpid()));
  std::vector<std::filesystem::path> files;
  for (int i = 0; i < 5; ++i) files.push_back(write_floats(dir, "f" + std::to_string(i), 100.f * i, 4));
  auto ds = from_files(files, read_floats).map([](Tensor<float> x) {
    x[0] += 0.5f;
    return x;
  }).shuffle(100, 7).batch(6).prefetch(2);
  auto w0 = ds.shard_files(2, 0), w1 = ds.shard_files(2, 1);
  REQUIRE(w0);
  REQUIRE(w1);
  auto sorted = [](std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  // worker 0: files 0, 2, 4; worker 1: files 1, 3; the map still applies; batches of ceil(6 / 2) = 3
  CHECK(sorted(values(*w0)) == std::vector<float>{0.5f, 1.5f, 2.5f, 3.5f, 200.5f, 201.5f, 202.5f, 203.5f, 400.5f,
                                                   401.5f, 402.5f, 403.5f});
  CHECK(sorted(values(*w1)) == std::vector<float>{100.5f, 101.5f, 102.5f, 103.5f, 300.5f, 301.5f, 302.5f, 303.5f});
  for (const auto& b : *w1) CHECK(b.shape()[0] <= 3);
  std::size_t batches = 0;
  for (const auto& b : *w0) batches += b.shape()[0] == 3;
  CHECK(batches == 4);
  // not read from files: nothing to shard by file
  CHECK(!from_tensor_slices(Tensor<float>({4}, {1, 2, 3, 4})).batch(2).shard_files(2, 0));
  // fewer files than workers
  CHECK_THROWS_WITH_AS((void)ds.shard_files(6, 0), doctest::Contains("5 input file(s) for 6 workers"), strata::Error);
  CHECK_THROWS_AS((void)ds.shard_files(2, 2), strata::Error);
  std::filesystem::remove_all(dir);
}

}  // namespace dataset_test
