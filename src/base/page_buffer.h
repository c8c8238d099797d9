// PageBuffer: a large, page-aligned, zero-filled anonymous mapping. Pages are committed only when
// first touched (or by Commit), so a KV cache sized for the worst case costs no start-up time and
// only the RAM its sequences actually use (kHuge, from a huge page up: MapHugePages, whole huge
// pages from a huge-page boundary).
// Move-only.
#pragma once

#include <cstddef>
#include <utility>

#include "base/huge_pages.h"

namespace cpm {

class PageBuffer {
 public:
  PageBuffer() = default;
  // Aborts via std::bad_alloc if the mapping fails.
  explicit PageBuffer(size_t bytes, Pages pages = Pages::kSmall);
  ~PageBuffer();
  PageBuffer(PageBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        mapped_(std::exchange(o.mapped_, 0)) {}
  PageBuffer& operator=(PageBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(mapped_, o.mapped_);
    return *this;
  }
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;

  std::byte* data() { return data_; }
  size_t size() const { return size_; }

  // Commits the pages holding bytes [offset, offset + bytes) now, as first writes would, and
  // changes no byte (pages already committed stay as they are): so that a caller can take the
  // cost of faulting them in (zeroing, and under a VM the host's own faults) where it chooses
  // rather than on the path of the first write. A huge-page buffer commits whole huge pages.
  void Commit(size_t offset, size_t bytes);

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;  // bytes mapped (kHuge: rounded up to whole huge pages)
};

}  // namespace cpm
