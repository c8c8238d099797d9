// BlockPool: hands out KV-cache block ids and takes them back. Reference-counted so that
// several sequences can share blocks, and a prefix cache: a full block can carry a hash of its
// contents, and a freed cached block stays findable until a fresh block is needed (vLLM's
// BlockPool: free blocks wait in an LRU-ordered queue, evicted from its head). Single-threaded:
// only the engine thread touches it.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "base/check.h"
#include "kv/block_hash.h"

namespace cpm {

class BlockPool {
 public:
  explicit BlockPool(int64_t num_blocks);

  int64_t num_blocks() const { return static_cast<int64_t>(ref_counts_.size()); }
  // Blocks with no reference, cached ones included (they are evictable).
  int64_t num_free() const { return num_free_; }
  // Free blocks that still hold a cached prefix.
  int64_t num_cached_free() const { return num_cached_free_; }
  // Fraction of blocks in use, 0..1 (vLLM's kv_cache_usage_perc: cached free blocks count
  // as free).
  double Usage() const;

  // Takes the block at the head of the free queue (ref count 1), evicting its cached hash if
  // it has one, or nullopt when none is left.
  std::optional<int32_t> Allocate();
  // Takes `n` blocks, all or nothing.
  bool AllocateN(int64_t n, std::vector<int32_t>* out);
  // Adds a reference to a block. A free (cached) block leaves the free queue: this is how a
  // prefix-cache hit takes a block back.
  void Retain(int32_t block);
  // Drops a reference; at zero the block goes to the tail of the free queue (it keeps its
  // hash, so it can still be hit until it reaches the head and is reused).
  void Release(int32_t block);
  // Releases in order; callers pass a sequence's blocks last-first so that its tail blocks
  // are evicted before its shared prefix.
  void ReleaseAll(const std::vector<int32_t>& blocks);
  int32_t RefCount(int32_t block) const { return ref_counts_[block]; }
  // One past the highest block id ever handed out: the never-used blocks leave the free queue
  // in id order, ahead of every freed one, so blocks [0, high_water()) are the ones written so
  // far (KvCache::CommitStep commits ahead of it).
  int64_t high_water() const { return high_water_; }

  // Prefix cache. Marks a full, computed, referenced block as holding `hash`. When another
  // block already holds the same hash the call does nothing (the first one stays the hit).
  void CacheBlock(int32_t block, const BlockHash& hash);
  // The block holding `hash`, if still cached (referenced or free).
  std::optional<int32_t> Lookup(const BlockHash& hash) const;
  bool IsCached(int32_t block) const { return cached_[block]; }
  // Takes `block`'s hash out of the prefix cache (a block cached before its K/V was written,
  // whose step did not run); nothing when it holds none. The block must be referenced: a free
  // one is counted in num_cached_free(), which this does not update.
  void Forget(int32_t block) {
    CPM_CHECK(ref_counts_[block] > 0);
    Uncache(block);
  }
  // Forgets every cached hash of free blocks (tests; a weight reload would need it).
  void ResetPrefixCache();

 private:
  // Intrusive doubly-linked free queue over block ids; kNone ends it.
  static constexpr int32_t kNone = -1;
  void PushTail(int32_t block);
  void Unlink(int32_t block);
  void Uncache(int32_t block);

  std::vector<int32_t> ref_counts_;
  std::vector<int32_t> prev_, next_;
  int32_t head_ = kNone, tail_ = kNone;
  int64_t num_free_ = 0;
  int64_t num_cached_free_ = 0;
  int64_t high_water_ = 0;
  std::vector<bool> cached_;
  std::vector<BlockHash> hashes_;  // valid where cached_
  std::unordered_map<BlockHash, int32_t, BlockHashHasher> by_hash_;
};

// Number of blocks needed to hold `tokens` tokens.
inline int64_t BlocksForTokens(int64_t tokens, int64_t block_size) {
  return (tokens + block_size - 1) / block_size;
}

}  // namespace cpm
