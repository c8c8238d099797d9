#include "base/aligned_buffer.h"

#include <sys/mman.h>

namespace cpm {

void AlignedBuffer::AdviseHugePages(std::byte* begin, size_t bytes) {
  madvise(begin, bytes, MADV_HUGEPAGE);  // best effort: an error leaves small pages
}

}  // namespace cpm
