#include "base/steal_time.h"

#include <gtest/gtest.h>

namespace cpm {
namespace {

TEST(StealTime, ParsesEachCpusStealColumn) {
  // A real kernel's layout: the aggregate line first (skipped), then one line per CPU; CPU 2
  // offline (no line), steal the 8th number.
  const char* text =
      "cpu  101242 0 12950 58561 513 0 73 419 0 0\n"
      "cpu0 50568 0 6222 29807 77 0 9 191 0 0\n"
      "cpu1 50673 0 6728 28753 435 0 64 228 0 0\n"
      "cpu3 1 2 3 4 5 6 7 8 9 10\n"
      "intr 123 4 5\n"
      "ctxt 99\n";
  EXPECT_EQ(ParseStealTicks(text), (std::vector<int64_t>{191, 228, 0, 8}));
}

TEST(StealTime, KernelsWithoutTheColumnGiveNothing) {
  // Linux before 2.6.11 had 7 fields; a torn or garbled line is skipped, not misread.
  EXPECT_EQ(ParseStealTicks("cpu0 1 2 3 4 5 6 7\n"), std::vector<int64_t>{});
  EXPECT_EQ(ParseStealTicks("cpu0 1 2 x 4 5 6 7 8\ncpu1 1 2 3 4 5 6 7 9"),
            (std::vector<int64_t>{0, 9}));
  EXPECT_EQ(ParseStealTicks(""), std::vector<int64_t>{});
}

TEST(StealTime, NeverGoesBackwards) {
  const double a = StolenCpuSeconds();
  const double b = StolenCpuSeconds();
  EXPECT_GE(a, 0);
  EXPECT_GE(b, a);
}

}  // namespace
}  // namespace cpm
