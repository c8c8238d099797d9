#include "base/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

#include "base/aligned_buffer.h"
#include "base/page_buffer.h"

namespace cpm {
namespace {

bool Aligned(const void* p, size_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

// The VmFlags line of the mapping in /proc/self/smaps that holds `p`, or "" if none.
std::string VmFlagsOf(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = lo <= a && a < hi;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

bool HasThp() { return access("/sys/kernel/mm/transparent_hugepage/enabled", F_OK) == 0; }

TEST(AlignedBufferTest, SmallPagesAreCacheLineAligned) {
  for (size_t bytes : {size_t{1}, size_t{100}, kHugePage * 3}) {
    AlignedBuffer buf(bytes);
    EXPECT_TRUE(Aligned(buf.data(), AlignedBuffer::kAlignment)) << bytes;
    EXPECT_EQ(buf.size(), bytes);
  }
}

TEST(AlignedBufferTest, HugePagesStartOnAHugePageAndAreAdvised) {
  const size_t bytes = kHugePage * 3 + 4096 + 5;
  AlignedBuffer buf(bytes, Pages::kHuge);
  ASSERT_EQ(buf.size(), bytes);
  EXPECT_TRUE(Aligned(buf.data(), kHugePage));
  buf.Zero();  // every byte is ours to write
  // Where the kernel has transparent huge pages, the advice shows as the mapping's "hg" flag.
  if (HasThp()) {
    EXPECT_NE(VmFlagsOf(buf.data()).find(" hg"), std::string::npos) << VmFlagsOf(buf.data());
  }
}

TEST(PageBufferTest, HugePagesAreAdvisedAndReadAsZeros) {
  PageBuffer small(kHugePage * 2), huge(kHugePage * 2, Pages::kHuge);
  EXPECT_EQ(huge.data()[kHugePage + 7], std::byte{0});
  if (HasThp()) {
    EXPECT_EQ(VmFlagsOf(small.data()).find(" hg"), std::string::npos) << VmFlagsOf(small.data());
    EXPECT_NE(VmFlagsOf(huge.data()).find(" hg"), std::string::npos) << VmFlagsOf(huge.data());
  }
}

}  // namespace
}  // namespace cpm
