#include <algorithm>
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <strata/strata.hpp>

namespace tensor_test {  // each test file in its own namespace: a unity build joins them (tests/meson.build)

using strata::Shape;
using strata::Tensor;

TEST_CASE_TEMPLATE("tensor: construction, shape and fill", T, float, double, std::int32_t, std::int64_t) {
  Tensor<T> t{{2, 3}, T{7}};
  CHECK(t.shape() == Shape{2, 3});
  CHECK(t.size() == 6);
  CHECK(t.bytes() == 6 * sizeof(T));
  for (T v : t) CHECK(v == T{7});
  t.fill(T{2});
  CHECK(t(1, 2) == T{2});
  t(1, 2) = T{5};
  CHECK(t[5] == T{5});
  CHECK(reinterpret_cast<std::uintptr_t>(t.data()) % 64 == 0);

  Tensor<T> z{Shape{4}};
  for (T v : z) CHECK(v == T{0});
}

TEST_CASE("tensor: empty and scalar shapes") {
  Tensor<float> e{Shape{0, 5}};
  CHECK(e.empty());
  CHECK(e.size() == 0);
  CHECK(e.span().empty());
  Tensor<float> copy = e;
  CHECK(copy == e);

  Tensor<double> s{Shape{}, 3.5};
  CHECK(s.size() == 1);
  CHECK(s.shape().rank() == 0);
  CHECK(s[0] == 3.5);

  Tensor<float> d;
  CHECK(d.empty());
}

TEST_CASE("tensor: values must match the shape") {
  CHECK_THROWS_AS((Tensor<float>{{2, 2}, {1.f, 2.f, 3.f}}), strata::ShapeError);
  CHECK_THROWS_WITH((Tensor<float>{{2, 2}, {1.f, 2.f, 3.f}}),
                    doctest::Contains("shape [2, 2] holds 4 elements but 3 values"));
}

TEST_CASE("tensor: multi-index bounds are checked") {
  Tensor<int> t{{2, 3}};
  CHECK_THROWS_WITH(t(2, 0), doctest::Contains("index 2 out of range for dimension 0 of shape [2, 3]"));
  CHECK_THROWS_WITH(t(0), doctest::Contains("1 indices given for a tensor of rank 2"));
}

TEST_CASE("tensor: copies are deep, moves steal") {
  Tensor<float> a{{3}, {1.f, 2.f, 3.f}};
  Tensor<float> b = a;
  b[0] = 9.f;
  CHECK(a[0] == 1.f);
  Tensor<float> c = std::move(b);
  CHECK(c[0] == 9.f);
  CHECK(b.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  a = c;
  CHECK(a == c);
}

TEST_CASE("tensor: reshape and views keep the elements") {
  Tensor<float> t{{2, 3}, {0, 1, 2, 3, 4, 5}};
  auto v = t.reshaped({3, 2});
  CHECK(v.shape() == Shape{3, 2});
  CHECK(v[5] == 5.f);
  v[0] = 42.f;
  CHECK(t[0] == 42.f);
  CHECK_THROWS_AS(t.reshape({4, 2}), strata::ShapeError);
  t.reshape({6});
  CHECK(t.shape() == Shape{6});
}

TEST_CASE("tensor: copy_from checks the shape") {
  Tensor<double> a{{2, 2}, 1.0};
  Tensor<double> b{{4}, 2.0};
  CHECK_THROWS_WITH(a.copy_from(b), doctest::Contains("destination shape [2, 2] differs from source shape [4]"));
  Tensor<double> c{{2, 2}, 3.0};
  a.copy_from(c);
  CHECK(a == c);
}

TEST_CASE("tensor: allclose uses rtol and atol, integers exactly") {
  Tensor<float> a{{3}, {1.f, 2.f, 3.f}};
  Tensor<float> b{{3}, {1.f, 2.f + 1e-6f, 3.f}};
  CHECK(allclose(a, b, {1e-5, 0}));
  CHECK_FALSE(allclose(a, b, {1e-8, 0}));
  CHECK_FALSE(a == b);
  Tensor<float> n{{3}, {1.f, std::numeric_limits<float>::quiet_NaN(), 3.f}};
  CHECK_FALSE(allclose(n, n));
  CHECK_FALSE(allclose(a, Tensor<float>{{1, 3}, {1.f, 2.f, 3.f}}));  // shapes differ
  Tensor<std::int64_t> i{{2}, {1, 2}}, j{{2}, {1, 3}};
  CHECK_FALSE(allclose(i, j, {1.0, 1.0}));
}

TEST_CASE("partition: balanced shards cover the range exactly") {
  for (std::size_t n : {0u, 1u, 5u, 16u, 17u, 1000u})
    for (std::size_t p = 1; p <= 16; ++p) {
      std::size_t next = 0, lo = n, hi = 0;
      for (std::size_t i = 0; i < p; ++i) {
        auto r = strata::shard_range(n, p, i);
        CHECK(r.begin == next);
        next = r.end;
        lo = std::min(lo, r.size());
        hi = std::max(hi, r.size());
      }
      CHECK(next == n);
      CHECK(hi - lo <= 1);
      std::size_t anext = 0;
      for (std::size_t i = 0; i < p; ++i) {
        auto r = strata::detail::aligned_range(n, p, i, 16);
        CHECK(r.begin == anext);
        CHECK((r.begin % 16 == 0 || r.begin == n));
        anext = r.end;
      }
      CHECK(anext == n);
    }
  CHECK(strata::shard_range(10, 4, 1) == strata::Range{3, 6});
}

TEST_CASE("large host blocks are recycled (no fresh pages per step), within bounds") {
  using Cache = strata::detail::HostBlockCache;
  const std::size_t n = Cache::min_bytes / sizeof(float) + 17;  // an unusual size: no other test holds one
  const float* first = nullptr;
  {
    strata::Tensor<float> t{{n}};
    first = t.data();
    t[0] = 5.f;
  }
  strata::Tensor<float> again{{n}};
  CHECK(again.data() == first);  // the block came back
  CHECK(again[0] == 0.f);        // and is zeroed as any new tensor
  // bounded: a full cache refuses more (its owner then frees the block)
  const std::size_t b = Cache::min_bytes + 4096;
  std::vector<void*> blocks(Cache::max_blocks + 8);
  std::size_t kept = 0;
  for (auto& p : blocks) p = strata::HostSpace::allocate(b);  // all distinct, all live
  for (void* p : blocks) kept += Cache::instance().keep(p, b);
  CHECK(kept >= 1);
  CHECK(kept <= Cache::max_blocks);
  std::size_t back = 0;
  while (void* p = Cache::instance().take(b)) {  // exactly the kept ones come back
    back += std::find(blocks.begin(), blocks.begin() + static_cast<std::ptrdiff_t>(kept), p) != blocks.begin() + static_cast<std::ptrdiff_t>(kept);
  }
  CHECK(back == kept);
  for (void* p : blocks) ::operator delete(p, std::align_val_t{64});
  CHECK(Cache::instance().take(12345) == nullptr);  // nothing of a size never freed
}

}  // namespace tensor_test
