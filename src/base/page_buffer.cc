#include "base/page_buffer.h"

#include <sys/mman.h>

#include <new>

namespace cpm {

PageBuffer::PageBuffer(size_t bytes, Pages pages) : size_(bytes) {
  if (bytes == 0) return;
  // Below a huge page, advice could only round the buffer up to one: a whole huge page
  // committed at its first touch (a bench's 1 MiB-per-layer KV cache: +96 MB resident).
  if (pages == Pages::kHuge && bytes >= kHugePage) {
    data_ = static_cast<std::byte*>(MapHugePages(bytes, &mapped_));
    if (data_ == nullptr) throw std::bad_alloc();
    return;
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  data_ = static_cast<std::byte*>(p);
  mapped_ = bytes;
}

PageBuffer::~PageBuffer() { UnmapPages(data_, mapped_); }

}  // namespace cpm
