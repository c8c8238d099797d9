// EncoderCache: least-recently-used eviction within the byte capacity, and digests that change
// with anything the vision tower reads.
#include "multimodal/encoder_cache.h"

#include <gtest/gtest.h>

#include <cmath>

#include "multimodal/slicing.h"

namespace cpm {
namespace {

MediaDigest Key(uint8_t i) {
  MediaDigest d;
  d.bytes[0] = i;
  return d;
}

EncoderCache::Rows RowsOf(size_t floats, float value) {
  return std::make_shared<const std::vector<float>>(floats, value);
}

TEST(EncoderCacheTest, EvictsTheLeastRecentlyUsedBeyondItsBytes) {
  EncoderCache cache(3 * 4 * sizeof(float));  // three entries of 4 floats
  cache.Insert(Key(1), RowsOf(4, 1));
  cache.Insert(Key(2), RowsOf(4, 2));
  cache.Insert(Key(3), RowsOf(4, 3));
  EXPECT_EQ(cache.size_bytes(), 48);
  ASSERT_NE(cache.Find(Key(1)), nullptr);  // 1 is now the most recently used: 2 goes first
  cache.Insert(Key(4), RowsOf(4, 4));
  EXPECT_EQ(cache.Find(Key(2)), nullptr);
  EXPECT_EQ((*cache.Find(Key(1)))[0], 1.0f);
  EXPECT_EQ((*cache.Find(Key(4)))[0], 4.0f);
  // One entry of 8 floats evicts the two least recent (3, then 1 or 4 as used).
  cache.Insert(Key(5), RowsOf(8, 5));
  EXPECT_LE(cache.size_bytes(), 48);
  EXPECT_EQ(cache.Find(Key(3)), nullptr);
  EXPECT_NE(cache.Find(Key(5)), nullptr);
  // Too large for the whole cache: not kept, nothing evicted for it.
  const int64_t before = cache.size_bytes();
  cache.Insert(Key(6), RowsOf(13, 6));
  EXPECT_EQ(cache.Find(Key(6)), nullptr);
  EXPECT_EQ(cache.size_bytes(), before);
  // Inserted twice (two requests encoded it at once): kept once.
  cache.Insert(Key(5), RowsOf(8, 9));
  EXPECT_EQ((*cache.Find(Key(5)))[0], 5.0f);
  EXPECT_EQ(cache.size_bytes(), before);
  // Rows a request holds outlive their eviction.
  EncoderCache::Rows held = cache.Find(Key(5));
  cache.Insert(Key(7), RowsOf(12, 7));
  EXPECT_EQ(cache.Find(Key(5)), nullptr);
  EXPECT_EQ((*held)[7], 5.0f);
}

TEST(EncoderCacheTest, CountsItemsAsVllmsCounters) {
  EncoderCache cache(1024);
  cache.CountQuery(false);
  cache.CountQuery(true);
  cache.CountQuery(true);
  const EncoderCacheStats s = cache.stats();
  EXPECT_TRUE(s.enabled);
  EXPECT_EQ(s.queries, 3);
  EXPECT_EQ(s.hits, 2);
}

TEST(EncoderCacheTest, DigestCoversPixelsSizesAndMode) {
  std::vector<PixelSlice> slices(2);
  slices[0].size = {28, 56};
  slices[0].pixels.assign(28 * 56 * 3, 0.25f);
  slices[1].size = {56, 28};
  slices[1].pixels.assign(56 * 28 * 3, -0.5f);
  const MediaDigest d = DigestSlices(slices, 16);
  EXPECT_EQ(DigestSlices(slices, 16), d);
  EXPECT_NE(DigestSlices(slices, 4), d);
  std::vector<PixelSlice> changed = slices;
  changed[1].pixels[1000] = std::nextafter(-0.5f, 0.0f);
  EXPECT_NE(DigestSlices(changed, 16), d);
  changed = slices;
  changed[0].size = {56, 28};  // the same pixels read as another shape
  EXPECT_NE(DigestSlices(changed, 16), d);
  changed = slices;
  std::swap(changed[0], changed[1]);
  EXPECT_NE(DigestSlices(changed, 16), d);
  changed.pop_back();
  EXPECT_NE(DigestSlices(changed, 16), d);
}

}  // namespace
}  // namespace cpm
