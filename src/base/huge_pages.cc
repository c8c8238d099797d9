#include "base/huge_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

namespace cpm {

void AdviseHugePages(void* begin, size_t bytes) {
  if (bytes > 0) madvise(begin, bytes, MADV_HUGEPAGE);  // an error leaves small pages
}

void* MapHugePages(size_t bytes, size_t* mapped_bytes) {
  const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  // One huge page more than needed, so that a boundary lies within the first; the slack on
  // either side of the aligned range is returned at once.
  const size_t span = rounded + kHugePage;
  void* p = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  const uintptr_t start = reinterpret_cast<uintptr_t>(p);
  const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > start) munmap(p, aligned - start);
  const uintptr_t end = start + span, used_end = aligned + rounded;
  if (end > used_end) munmap(reinterpret_cast<void*>(used_end), end - used_end);
  AdviseHugePages(reinterpret_cast<void*>(aligned), rounded);
  *mapped_bytes = rounded;
  return reinterpret_cast<void*>(aligned);
}

void UnmapPages(void* begin, size_t mapped_bytes) {
  if (begin != nullptr) munmap(begin, mapped_bytes);
}

void ReleaseWholePages(const void* begin, size_t bytes) {
  const uintptr_t b = reinterpret_cast<uintptr_t>(begin), e = b + bytes;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t first = (b + page - 1) / page * page, last = e / page * page;
  if (last > first) madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

}  // namespace cpm
