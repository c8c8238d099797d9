#include "base/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
#include <unistd.h>

#include "base/aligned_buffer.h"
#include "base/page_buffer.h"
#include "base/resident_pages_test_util.h"

namespace cpm {
namespace {

bool Aligned(const void* p, size_t alignment) {
  return reinterpret_cast<uintptr_t>(p) % alignment == 0;
}

// Field `key` ("VmFlags:", "AnonHugePages:") of the mapping in /proc/self/smaps that holds `p`,
// or "" if none; *header gets the mapping's first line (address range, ..., name).
std::string SmapsField(const void* p, const std::string& key, std::string* header = nullptr) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-' && line.find(':') > line.find(' ')) {
      inside = lo <= a && a < hi;
      if (inside && header != nullptr) *header = line;
    } else if (inside && line.rfind(key, 0) == 0) {
      return line;
    }
  }
  return "";
}

std::string VmFlagsOf(const void* p) { return SmapsField(p, "VmFlags:"); }

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

// THP's mode as /sys shows it, the selected one in brackets ("always [madvise] never").
std::string ThpMode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(f, line);
  return line;
}

// The loader's pattern: a weight's source is touched and freed before the packed copy is
// allocated. Memory from malloc would then be that freed heap block, whose pages are small
// already (advice does not change faulted pages), and only the whole huge pages of the buffer
// were advised, so its last partial one stayed small as well.
TEST(AlignedBufferTest, HugeBuffersAreFreshMappingsAdvisedToTheirLastPage) {
  // Freeing the first (an mmap of its own) raises glibc's mmap threshold above the second, which
  // then comes from the heap and, freed, stays there with its pages faulted.
  for (size_t dirty : {size_t{32} << 20, size_t{16} << 20}) {
    std::vector<char> source(dirty, 1);
    volatile char sink = source[dirty / 2];
    (void)sink;
  }
  const size_t bytes = kHugePage * 3 + 4096 + 5;
  AlignedBuffer buf(bytes, Pages::kHuge);
  ASSERT_TRUE(Aligned(buf.data(), kHugePage));
  std::string header;
  SmapsField(buf.data(), "VmFlags:", &header);
  EXPECT_EQ(header.find("[heap]"), std::string::npos) << header;
  if (!HasThp()) return;
  std::byte* last_page = buf.data() + 3 * kHugePage;
  EXPECT_NE(VmFlagsOf(last_page).find(" hg"), std::string::npos) << VmFlagsOf(last_page);
  if (ThpMode().find("[never]") != std::string::npos) return;
  buf.Zero();
  // Born huge: at least one of the four (compaction may fail for some on a fragmented host).
  const std::string field = SmapsField(buf.data(), "AnonHugePages:");
  ASSERT_FALSE(field.empty());
  long huge_kb = 0;
  std::istringstream(field.substr(field.find(':') + 1)) >> huge_kb;
  EXPECT_GE(huge_kb, static_cast<long>(kHugePage / 1024)) << ThpMode();
}

TEST(PageBufferTest, HugePagesAreAdvisedAndReadAsZeros) {
  PageBuffer small(kHugePage * 2), huge(kHugePage * 2 + 5, Pages::kHuge);
  EXPECT_TRUE(Aligned(huge.data(), kHugePage));
  EXPECT_EQ(huge.data()[kHugePage + 7], std::byte{0});
  EXPECT_EQ(huge.data()[2 * kHugePage + 4], std::byte{0});
  if (HasThp()) {
    EXPECT_EQ(VmFlagsOf(small.data()).find(" hg"), std::string::npos) << VmFlagsOf(small.data());
    EXPECT_NE(VmFlagsOf(huge.data()).find(" hg"), std::string::npos) << VmFlagsOf(huge.data());
    // Its last, partial huge page too.
    const std::byte* tail = huge.data() + 2 * kHugePage;
    EXPECT_NE(VmFlagsOf(tail).find(" hg"), std::string::npos) << VmFlagsOf(tail);
    // Below a huge page nothing is advised: a first touch would commit a whole one.
    PageBuffer under(kHugePage / 2, Pages::kHuge);
    EXPECT_EQ(VmFlagsOf(under.data()).find(" hg"), std::string::npos) << VmFlagsOf(under.data());
  }
}

TEST(PageBufferTest, CommitFaultsInTheRangeAndKeepsItsBytes) {
  PageBuffer buf(kHugePage * 4);
  std::byte* p = buf.data();
  ASSERT_FALSE(PagesResident(p, 4096));
  p[kHugePage + 100] = std::byte{7};  // committed by this write, then committed again below
  buf.Commit(kHugePage + 10, kHugePage / 2);  // rounded out to whole pages
  EXPECT_TRUE(PagesResident(p + kHugePage, kHugePage / 2 + 4096));
  EXPECT_EQ(p[kHugePage + 100], std::byte{7});
  EXPECT_EQ(p[kHugePage + 200], std::byte{0});
  EXPECT_FALSE(PagesResident(p, 4096));  // outside the range: still not faulted
  EXPECT_FALSE(PagesResident(p + 3 * kHugePage, 4096));
  buf.Commit(4 * kHugePage - 1, 1000);  // past the end: clipped to the buffer
  EXPECT_TRUE(PagesResident(p + 4 * kHugePage - 4096, 4096));
  buf.Commit(4 * kHugePage, 10);  // entirely past it: nothing
}

TEST(PageBufferTest, CommitOfAHugePageBufferCommitsWholeHugePages) {
  PageBuffer buf(kHugePage * 3, Pages::kHuge);
  buf.Commit(kHugePage + 4096, 4096);
  EXPECT_TRUE(PagesResident(buf.data() + kHugePage + 4096, 4096));
  EXPECT_FALSE(PagesResident(buf.data(), 4096));
  if (!HasThp() || ThpMode().find("[never]") != std::string::npos) return;
  // Born huge where the kernel could find one (not guaranteed on a fragmented host): then the
  // whole huge page around the range is resident.
  const std::string field = SmapsField(buf.data(), "AnonHugePages:");
  long huge_kb = 0;
  std::istringstream(field.substr(field.find(':') + 1)) >> huge_kb;
  if (huge_kb > 0) {
    EXPECT_TRUE(PagesResident(buf.data() + kHugePage, kHugePage));
  }
}

}  // namespace
}  // namespace cpm
