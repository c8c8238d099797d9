#include "base/page_buffer.h"

#include <sys/mman.h>

#include <new>

namespace cpm {

PageBuffer::PageBuffer(size_t bytes, Pages pages) : size_(bytes) {
  if (bytes == 0) return;
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  data_ = static_cast<std::byte*>(p);
  // Linux places mappings of >= 2 MiB on huge-page boundaries.
  if (pages == Pages::kHuge) AdviseHugePages(p, bytes);
}

PageBuffer::~PageBuffer() {
  if (data_) ::munmap(data_, size_);
}

}  // namespace cpm
