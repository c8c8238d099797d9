// AlignedBuffer: an owning, 64-byte aligned, uninitialised byte buffer for activations,
// repacked weights and caches. Move-only; a deep copy would be explicit.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#include "base/huge_pages.h"

namespace cpm {

class AlignedBuffer {
 public:
  static constexpr size_t kAlignment = 64;

  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes, Pages pages = Pages::kSmall) { Resize(bytes, pages); }
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  // Discards the contents; new bytes are uninitialised. kHuge: a buffer of at least one huge
  // page starts on a huge-page boundary, its whole huge pages advised (huge_pages.h).
  void Resize(size_t bytes, Pages pages = Pages::kSmall) {
    if (bytes == size_) return;
    std::free(data_);
    data_ = nullptr;
    size_ = 0;
    if (bytes == 0) return;
    const bool huge = pages == Pages::kHuge && bytes >= kHugePage;
    const size_t alignment = huge ? kHugePage : kAlignment;
    const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    data_ = static_cast<std::byte*>(std::aligned_alloc(alignment, rounded));
    if (!data_) throw std::bad_alloc();
    size_ = bytes;
    if (huge) AdviseHugePages(data_, bytes / kHugePage * kHugePage);
  }
  void Zero() {
    if (data_) std::memset(data_, 0, size_);
  }

  std::byte* data() { return data_; }
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  template <typename T>
  T* as() {
    return reinterpret_cast<T*>(data_);
  }
  template <typename T>
  const T* as() const {
    return reinterpret_cast<const T*>(data_);
  }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace cpm
