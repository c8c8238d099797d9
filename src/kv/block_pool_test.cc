#include "kv/block_pool.h"

#include <gtest/gtest.h>

namespace cpm {
namespace {

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

}  // namespace
}  // namespace cpm
