#include "kv/state_slots.h"

#include <gtest/gtest.h>

#include <cstring>

namespace cpm {
namespace {

TEST(StateSlotsTest, AllocatesZeroedAlignedSlotsAndRunsOut) {
  StateSlots slots(2, 100);
  EXPECT_EQ(slots.slot_stride(), 128);
  const auto a = slots.Allocate(), b = slots.Allocate();
  ASSERT_TRUE(a && b);
  EXPECT_NE(*a, *b);
  EXPECT_FALSE(slots.Allocate().has_value());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(slots.Data(*b)) % 64, 0u);
  std::memset(slots.Data(*a), 0xAB, 100);
  slots.Release(*a);
  EXPECT_EQ(slots.num_free(), 1);
  const auto c = slots.Allocate();
  ASSERT_EQ(c, a);  // reused, and zeroed again
  for (int i = 0; i < 100; ++i) ASSERT_EQ(static_cast<int>(slots.Data(*c)[i]), 0);
  EXPECT_TRUE(slots.InUse(*c));
}

}  // namespace
}  // namespace cpm
