#include "kv/kv_cache.h"

#include <gtest/gtest.h>

#include <cstddef>

#include "base/resident_pages_test_util.h"

namespace cpm {
namespace {

// MiniCPM4's block: 2 KV heads × 16 tokens × 64 dims in bf16, 4 KiB of each layer's K and V,
// so a row of 512 blocks fills a huge page of each array.
TEST(KvCacheTest, CommitStepsGoAnArrayAtATimeAndStopAtTheEnd) {
  KvCache cache({3, 2, 64}, 1200, 16, DType::kBF16);
  const size_t block_bytes = 2 * 16 * 64 * 2;
  ASSERT_EQ(cache.blocks_per_row(), 512);
  EXPECT_EQ(cache.committed_blocks(), 0);
  EXPECT_FALSE(cache.CommitPending(0));  // nothing asked for
  // The first row: one step per array (K0, V0, K1, V1, K2, V2).
  for (int step = 0; step < 6; ++step) {
    EXPECT_EQ(cache.committed_blocks(), 0) << step;
    ASSERT_TRUE(cache.CommitPending(10)) << step;
    const kernels::KvLayerView view = cache.Layer(step / 2);
    const void* array = step % 2 == 0 ? view.k : view.v;
    EXPECT_FALSE(PagesResident(array, block_bytes)) << step;
    cache.CommitStep(10);
    EXPECT_TRUE(PagesResident(array, block_bytes)) << step;
  }
  EXPECT_EQ(cache.committed_blocks(), 512);
  EXPECT_FALSE(cache.CommitPending(10));  // done: [0, 10) is committed
  cache.CommitStep(10);                   // and a step does nothing
  EXPECT_EQ(cache.committed_blocks(), 512);
  for (int64_t l = 0; l < 3; ++l) {
    const kernels::KvLayerView view = cache.Layer(l);
    EXPECT_TRUE(PagesResident(view.k, 512 * block_bytes)) << l;
    EXPECT_TRUE(PagesResident(view.v, 512 * block_bytes)) << l;
    const std::byte* past_the_row = static_cast<const std::byte*>(view.v) + 600 * block_bytes;
    EXPECT_FALSE(PagesResident(past_the_row, 4096)) << l;
  }
  // Past the cache's end, the last row is the partial one.
  while (cache.CommitPending(5000)) cache.CommitStep(5000);
  EXPECT_EQ(cache.committed_blocks(), 1200);
  EXPECT_TRUE(PagesResident(cache.Layer(2).v, 1200 * block_bytes));
}

TEST(KvCacheTest, NoAttentionLayersCommitNothing) {
  KvCache cache({0, 2, 64}, 100, 16, DType::kBF16);
  EXPECT_FALSE(cache.CommitPending(100));
  cache.CommitStep(100);
  EXPECT_EQ(cache.committed_blocks(), 0);
}

}  // namespace
}  // namespace cpm
