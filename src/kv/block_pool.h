// BlockPool: hands out KV-cache block ids and takes them back. Reference-counted so that
// several sequences can share blocks (prefix caching builds on this). Single-threaded: only
// the engine thread touches it.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

namespace cpm {

class BlockPool {
 public:
  explicit BlockPool(int64_t num_blocks);

  int64_t num_blocks() const { return static_cast<int64_t>(ref_counts_.size()); }
  int64_t num_free() const { return static_cast<int64_t>(free_.size()); }
  // Fraction of blocks in use, 0..1 (vLLM's kv_cache_usage_perc).
  double Usage() const;

  // Takes one free block (ref count 1), or nullopt when none is left.
  std::optional<int32_t> Allocate();
  // Takes `n` blocks, all or nothing.
  bool AllocateN(int64_t n, std::vector<int32_t>* out);
  // Adds a reference to an allocated block.
  void Retain(int32_t block);
  // Drops a reference; the block returns to the free list at zero.
  void Release(int32_t block);
  void ReleaseAll(const std::vector<int32_t>& blocks);
  int32_t RefCount(int32_t block) const { return ref_counts_[block]; }

 private:
  std::vector<int32_t> ref_counts_;
  std::deque<int32_t> free_;
};

// Number of blocks needed to hold `tokens` tokens.
inline int64_t BlocksForTokens(int64_t tokens, int64_t block_size) {
  return (tokens + block_size - 1) / block_size;
}

}  // namespace cpm
