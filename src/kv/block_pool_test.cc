#include "kv/block_pool.h"

#include <gtest/gtest.h>

#include <vector>

namespace cpm {
namespace {

BlockHash H(int32_t t) {
  const int32_t toks[] = {t, t + 1};
  return HashBlock(nullptr, toks, 0, 42);
}

TEST(BlockPoolTest, AllocateReleaseAndRefCounts) {
  BlockPool pool(3);
  std::vector<int32_t> got;
  ASSERT_TRUE(pool.AllocateN(2, &got));
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_FALSE(pool.AllocateN(2, &got));  // all or nothing
  EXPECT_EQ(got.size(), 2u);
  pool.Retain(got[0]);
  pool.Release(got[0]);
  EXPECT_EQ(pool.num_free(), 1);  // still referenced once
  pool.ReleaseAll(got);
  EXPECT_EQ(pool.num_free(), 3);
  EXPECT_DOUBLE_EQ(pool.Usage(), 0.0);
  EXPECT_EQ(BlocksForTokens(17, 16), 2);
  EXPECT_EQ(BlocksForTokens(0, 16), 0);
}

TEST(BlockPoolTest, FreedCachedBlockIsFoundAndRevived) {
  BlockPool pool(2);
  const int32_t b = *pool.Allocate();
  pool.CacheBlock(b, H(1));
  pool.Release(b);
  EXPECT_EQ(pool.num_free(), 2);
  EXPECT_EQ(pool.num_cached_free(), 1);
  ASSERT_EQ(pool.Lookup(H(1)), b);
  pool.Retain(b);  // a prefix hit takes it out of the free queue
  EXPECT_EQ(pool.num_free(), 1);
  EXPECT_EQ(pool.num_cached_free(), 0);
  EXPECT_EQ(pool.RefCount(b), 1);
  // The other block is the only free one, so allocating cannot evict `b`.
  const int32_t c = *pool.Allocate();
  EXPECT_NE(c, b);
  EXPECT_EQ(pool.Lookup(H(1)), b);
}

TEST(BlockPoolTest, EvictsLeastRecentlyFreedFirst) {
  BlockPool pool(3);
  std::vector<int32_t> bs;
  ASSERT_TRUE(pool.AllocateN(3, &bs));
  for (int i = 0; i < 3; ++i) pool.CacheBlock(bs[i], H(10 * i));
  pool.Release(bs[2]);
  pool.Release(bs[0]);
  pool.Release(bs[1]);  // free order: 2, 0, 1
  EXPECT_EQ(pool.Allocate(), bs[2]);
  EXPECT_FALSE(pool.Lookup(H(20)).has_value());  // evicted when reused
  EXPECT_EQ(pool.Lookup(H(0)), bs[0]);
  EXPECT_EQ(pool.Allocate(), bs[0]);
  EXPECT_FALSE(pool.Lookup(H(0)).has_value());
  EXPECT_EQ(pool.Lookup(H(10)), bs[1]);
  EXPECT_EQ(pool.num_cached_free(), 1);
}

TEST(BlockPoolTest, HighWaterCountsTheBlocksEverHandedOut) {
  BlockPool pool(4);
  EXPECT_EQ(pool.high_water(), 0);
  std::vector<int32_t> bs;
  ASSERT_TRUE(pool.AllocateN(2, &bs));
  EXPECT_EQ(pool.high_water(), 2);
  pool.ReleaseAll(bs);  // freed blocks queue behind the never-used ones
  EXPECT_EQ(pool.Allocate(), 2);
  EXPECT_EQ(pool.high_water(), 3);
  EXPECT_EQ(pool.Allocate(), 3);
  EXPECT_EQ(pool.Allocate(), 0);  // then the freed ones: reuse leaves the mark
  EXPECT_EQ(pool.high_water(), 4);
}

TEST(BlockPoolTest, DuplicateHashKeepsTheFirstBlock) {
  BlockPool pool(2);
  const int32_t a = *pool.Allocate(), b = *pool.Allocate();
  pool.CacheBlock(a, H(5));
  pool.CacheBlock(b, H(5));
  EXPECT_TRUE(pool.IsCached(a));
  EXPECT_FALSE(pool.IsCached(b));
  pool.Release(b);
  pool.Release(a);
  pool.ResetPrefixCache();
  EXPECT_FALSE(pool.Lookup(H(5)).has_value());
  EXPECT_EQ(pool.num_cached_free(), 0);
  EXPECT_EQ(pool.num_free(), 2);
}

TEST(BlockHashTest, ChainsAndSeparates) {
  const int32_t t1[] = {1, 2, 3, 4}, t2[] = {1, 2, 3, 5};
  const BlockHash a = HashBlock(nullptr, t1, 0, 7), b = HashBlock(nullptr, t2, 0, 7);
  EXPECT_NE(a, b);
  EXPECT_EQ(a, HashBlock(nullptr, t1, 0, 7));
  EXPECT_NE(a, HashBlock(nullptr, t1, 1, 7));  // extra key (embeddings) matters
  EXPECT_NE(a, HashBlock(nullptr, t1, 0, 8));  // the per-process key matters
  EXPECT_NE(HashBlock(&a, t1, 0, 7), HashBlock(&b, t1, 0, 7));  // the parent matters
  const float e1[] = {1.0f, 2.0f}, e2[] = {1.0f, 2.5f};
  EXPECT_NE(HashBytes(e1, sizeof(e1), 0), HashBytes(e2, sizeof(e2), 0));
}

}  // namespace
}  // namespace cpm
