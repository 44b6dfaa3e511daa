// Partitioners and sharded variables (the parameter server's placement):
// TensorFlow's documented examples, sizes that do not divide, edges, errors.
#include <doctest/doctest.h>

#include <numeric>
#include <vector>

#include <strata/ps/partitioner.hpp>
#include <strata/ps/sharded_variable.hpp>

using strata::Shape;
using strata::Tensor;

TEST_CASE("partitioners decide as TensorFlow's do") {
  const Shape six{6, 1};  // 6 rows of one float32: 24 bytes
  CHECK(strata::MinSizePartitioner{.min_shard_bytes = 4, .max_shards = 2}(six, 4) == 2);
  CHECK(strata::MinSizePartitioner{.min_shard_bytes = 4, .max_shards = 10}(six, 4) == 6);
  CHECK(strata::MinSizePartitioner{.min_shard_bytes = 100, .max_shards = 10}(six, 4) == 1);  // too small to split
  CHECK(strata::MinSizePartitioner{}(Shape{784, 128}, 4) == 1);                                // the default: 1 shard
  CHECK(strata::MinSizePartitioner{.min_shard_bytes = 64 << 10, .max_shards = 4}(Shape{784, 128}, 4) == 4);
  CHECK(strata::MaxSizePartitioner{.max_shard_bytes = 4}(six, 4) == 6);
  CHECK(strata::MaxSizePartitioner{.max_shard_bytes = 4, .max_shards = 2}(six, 4) == 2);
  CHECK(strata::MaxSizePartitioner{.max_shard_bytes = 1024}(six, 4) == 1);
  CHECK(strata::MaxSizePartitioner{.max_shard_bytes = 9}(six, 4) == 3);        // two rows per shard
  CHECK(strata::MaxSizePartitioner{.max_shard_bytes = 1}(Shape{3, 10}, 4) == 3);  // a row is never split
  CHECK(strata::FixedShardsPartitioner{.num_shards = 2}(Shape{10, 3}, 4) == 2);
  CHECK(strata::FixedShardsPartitioner{.num_shards = 5}(Shape{3, 3}, 4) == 3);  // at most one per row
  // edges: a scalar, an empty variable
  CHECK(strata::FixedShardsPartitioner{.num_shards = 4}(Shape{}, 4) == 1);
  CHECK(strata::MaxSizePartitioner{.max_shard_bytes = 4}(Shape{0, 7}, 4) == 1);
  CHECK(strata::MinSizePartitioner{.min_shard_bytes = 1, .max_shards = 3}(Shape{0, 7}, 4) == 1);
  // nonsense settings say what is wrong
  CHECK_THROWS_WITH_AS((void)strata::FixedShardsPartitioner{.num_shards = 0}(six, 4), doctest::Contains("num_shards"),
                       strata::Error);
  CHECK_THROWS_AS((void)strata::MinSizePartitioner{.min_shard_bytes = 0}(six, 4), strata::Error);
  const strata::MinSizePartitioner no_shards{.min_shard_bytes = 4, .max_shards = 0};
  CHECK_THROWS_AS((void)no_shards(six, 4), strata::Error);
  CHECK_THROWS_WITH_AS((void)strata::MaxSizePartitioner{}(six, 4), doctest::Contains("max_shard_bytes"), strata::Error);
  static_assert(strata::Partitioner<strata::MinSizePartitioner>);
}

TEST_CASE("shards split rows as evenly as possible, the first ones longer") {
  const auto r = strata::partition_rows(Shape{10, 3}, 4);
  REQUIRE(r.size() == 4);
  CHECK(r[0] == strata::Range{0, 3});
  CHECK(r[1] == strata::Range{3, 6});
  CHECK(r[2] == strata::Range{6, 8});
  CHECK(r[3] == strata::Range{8, 10});
  CHECK_THROWS_AS(strata::partition_rows(Shape{10, 3}, 0), strata::Error);
}

TEST_CASE("a sharded variable reads and writes as one variable") {
  Tensor<float> init{{7, 3}};
  std::iota(init.data(), init.data() + init.size(), 0.f);
  strata::ShardedVariable<float> v{init, strata::FixedShardsPartitioner{.num_shards = 3}};
  REQUIRE(v.num_shards() == 3);
  CHECK(v.shape() == init.shape());
  CHECK(v.shard(0).shape() == Shape{3, 3});
  CHECK(v.shard(2).shape() == Shape{2, 3});
  CHECK(v.rows(1) == strata::Range{3, 5});
  CHECK(v.elements(1) == strata::Range{9, 15});
  CHECK(v.shard(1)[0] == 9.f);  // row 3 of the whole
  CHECK(v.shard_of_row(6) == 2);
  CHECK_THROWS_AS((void)v.shard_of_row(7), strata::Error);
  const Tensor<float> whole = v.value();
  CHECK(std::equal(whole.data(), whole.data() + whole.size(), init.data()));
  Tensor<float> next{{7, 3}};
  next.fill(2.5f);
  v.assign(next);
  CHECK(v.shard(2)[5] == 2.5f);
  CHECK(v.value()[20] == 2.5f);
  CHECK_THROWS_AS(v.assign(Tensor<float>{{3, 7}}), strata::ShapeError);  // same size, another shape: refused
  CHECK(v.value()[0] == 2.5f);                                           // and nothing changed
  // more shards than rows, none, and the edges that still work
  CHECK_THROWS_WITH_AS((strata::ShardedVariable<float>(init, 8)), doctest::Contains("a row is never split"),
                       strata::ShapeError);
  CHECK_THROWS_AS((strata::ShardedVariable<float>(init, 0)), strata::Error);
  strata::ShardedVariable<double> scalar{Tensor<double>{Shape{}}, strata::MaxSizePartitioner{.max_shard_bytes = 1}};
  CHECK(scalar.num_shards() == 1);
  strata::ShardedVariable<float> empty{Tensor<float>{{0, 4}}, 1};
  CHECK(empty.value().size() == 0);
  strata::ShardedVariable<std::int32_t> bias{Tensor<std::int32_t>{{5}}, strata::MinSizePartitioner{.min_shard_bytes = 8, .max_shards = 9}};
  CHECK(bias.num_shards() == 2);  // 20 bytes hold two shards of at least 8
}
