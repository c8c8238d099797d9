// KvCacheManager: a request's view of the block pool, as vLLM's KVCacheManager: finds its
// longest cached prefix, grows its block table for the tokens of a step (all or nothing),
// registers its full computed blocks in the prefix cache, and frees its blocks. Knows nothing
// about scheduling order; engine thread only.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/request_state.h"
#include "kv/block_pool.h"

namespace cpm {

// A prefix-cache hit found for a request that is not yet admitted; nothing is held until
// AllocateSlots() takes it.
struct ComputedBlocks {
  std::vector<int32_t> blocks;
  int64_t num_tokens = 0;  // blocks.size() * block_size
};

class KvCacheManager {
 public:
  // `hash_key` keys the block hashes (a per-process secret; see block_hash.h).
  KvCacheManager(BlockPool& pool, int64_t block_size, bool enable_prefix_caching, uint64_t hash_key);

  bool prefix_caching() const { return enable_prefix_caching_; }
  int64_t block_size() const { return block_size_; }
  BlockPool& pool() { return pool_; }

  // Whether `r` looks its prompt up in the prefix cache: caching is on and it asks for no
  // prompt_logprobs (cached tokens would have none).
  bool ReadsPrefixCache(const RequestState& r) const {
    return enable_prefix_caching_ && r.req.prompt_logprobs < 0;
  }
  // The longest run of cached full blocks from the start of `r`'s tokens, leaving at least
  // the last token to compute (its logits are needed even on a full hit). Empty unless
  // ReadsPrefixCache(r). Computes `r.block_hashes` as needed.
  ComputedBlocks GetComputedBlocks(RequestState& r);

  // Makes `r.blocks` cover `r.num_computed + hit.num_tokens + num_new_tokens` tokens, taking
  // the hit's blocks first (then r.num_computed includes them). Returns false and changes
  // nothing when the pool cannot supply the blocks (evictable cached blocks count as free).
  bool AllocateSlots(RequestState& r, int64_t num_new_tokens, const ComputedBlocks* hit);

  // Registers the full blocks of `r` that are computed but not yet cached (after a step).
  void CacheFullBlocks(RequestState& r) { CacheBlocksThrough(r, r.num_computed); }

  // Registers `r`'s full blocks among its first `num_tokens` tokens: those the step being
  // planned will compute too, as vLLM caches blocks when it allocates them, so that a request
  // admitted later in the same step (another choice of an n > 1 request, a shared system
  // prompt) finds them. The forward writes every sequence's K/V of a layer before any of that
  // layer's attention reads it. Blocks past r.num_computed stay pending until the step runs:
  // Free forgets them if the step never does (a preemption while planning, a failed forward).
  void CacheBlocksThrough(RequestState& r, int64_t num_tokens);

  // Releases `r`'s blocks (last first, so its tail is evicted before its prefix) and resets
  // its cache bookkeeping; its tokens stay, so it can be recomputed. Pending blocks (cached
  // for a step that did not run) leave the prefix cache first: their K/V was never written.
  void Free(RequestState& r);

 private:
  // Extends r.block_hashes to cover its first `num_blocks` full blocks.
  void EnsureHashes(RequestState& r, int64_t num_blocks);
  // The identity of what block `i` of `r` holds besides its tokens: the multimodal embeddings
  // placed in it, and for block 0 the request's cache_salt (0 when none).
  uint64_t ExtraKey(const RequestState& r, int64_t i) const;

  BlockPool& pool_;
  int64_t block_size_;
  bool enable_prefix_caching_;
  uint64_t hash_key_;
};

}  // namespace cpm
