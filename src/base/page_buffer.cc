#include "base/page_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
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

void PageBuffer::Commit(size_t offset, size_t bytes) {
  if (bytes == 0 || offset >= size_) return;
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t begin = offset / page * page;
  const size_t end = std::min(mapped_, (offset + bytes + page - 1) / page * page);
  // MADV_POPULATE_WRITE (Linux 5.14) faults the range in writable without touching it. Where
  // it fails for want of memory, the first writes will fault the pages in as before.
  if (madvise(data_ + begin, end - begin, MADV_POPULATE_WRITE) == 0 || errno != EINVAL) return;
  // Older kernels, which do not know the advice: a write to each page that keeps its value (an
  // atomic add of zero).
  for (size_t b = begin; b < end; b += page) {
    __atomic_fetch_add(reinterpret_cast<uint64_t*>(data_ + b), uint64_t{0}, __ATOMIC_RELAXED);
  }
}

}  // namespace cpm
