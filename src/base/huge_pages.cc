#include "base/huge_pages.h"

#include <sys/mman.h>

namespace cpm {

void AdviseHugePages(void* begin, size_t bytes) {
  if (bytes > 0) madvise(begin, bytes, MADV_HUGEPAGE);  // an error leaves small pages
}

}  // namespace cpm
