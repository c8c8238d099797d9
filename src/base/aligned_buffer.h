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
  ~AlignedBuffer() { Release(); }
  AlignedBuffer(AlignedBuffer&& o) noexcept
      : data_(std::exchange(o.data_, nullptr)),
        size_(std::exchange(o.size_, 0)),
        mapped_(std::exchange(o.mapped_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept {
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
    std::swap(mapped_, o.mapped_);
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  // Discards the contents; new bytes are uninitialised. kHuge: a buffer of at least one huge
  // page is a fresh mapping of whole huge pages (MapHugePages, which says why not malloc), its
  // last partial one advised too: left on small pages, that tail streamed slowly as a decode
  // matmul's last tasks and held the call's end (MiniCPM-V-4.6's 7 MiB MLP weights ran at half
  // the rate of the others).
  void Resize(size_t bytes, Pages pages = Pages::kSmall) {
    if (bytes == size_) return;
    Release();
    if (bytes == 0) return;
    if (pages == Pages::kHuge && bytes >= kHugePage) {
      data_ = static_cast<std::byte*>(MapHugePages(bytes, &mapped_));
    } else {
      const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
      data_ = static_cast<std::byte*>(std::aligned_alloc(kAlignment, rounded));
    }
    if (!data_) throw std::bad_alloc();
    size_ = bytes;
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
  void Release() {
    if (mapped_ != 0) {
      UnmapPages(data_, mapped_);
    } else {
      std::free(data_);
    }
    data_ = nullptr;
    size_ = 0;
    mapped_ = 0;
  }

  std::byte* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;  // bytes of the huge-page mapping holding data_, 0: from aligned_alloc
};

}  // namespace cpm
