#include "engine/kv_cache_manager.h"

#include <algorithm>

#include "base/check.h"

namespace cpm {

KvCacheManager::KvCacheManager(BlockPool& pool, int64_t block_size, bool enable_prefix_caching,
                               uint64_t hash_key)
    : pool_(pool),
      block_size_(block_size),
      enable_prefix_caching_(enable_prefix_caching),
      hash_key_(hash_key) {}

uint64_t KvCacheManager::ExtraKey(const RequestState& r, int64_t i) const {
  // vLLM salts block 0 only: the chain carries it into every later block's hash.
  uint64_t key = i == 0 && !r.req.cache_salt.empty()
                     ? HashBytes(r.req.cache_salt.data(), r.req.cache_salt.size(), 0x5a17)
                     : 0;
  const std::vector<int64_t>& rows = r.req.embed_rows;
  if (rows.empty()) return key;
  const int64_t hidden = static_cast<int64_t>(r.req.embeds.size() / rows.size());
  const int64_t begin = i * block_size_, end = begin + block_size_;
  for (size_t j = 0; j < rows.size(); ++j) {
    if (rows[j] < begin || rows[j] >= end) continue;
    // Position within the block and the embedding values: equal keys mean equal inputs.
    const float* e = r.req.embeds.data() + static_cast<int64_t>(j) * hidden;
    key = HashBytes(e, static_cast<size_t>(hidden) * sizeof(float),
                    key ^ static_cast<uint64_t>(rows[j] - begin + 1));
  }
  return key;
}

void KvCacheManager::EnsureHashes(RequestState& r, int64_t num_blocks) {
  CPM_CHECK(num_blocks * block_size_ <= r.num_tokens());
  while (static_cast<int64_t>(r.block_hashes.size()) < num_blocks) {
    const int64_t i = static_cast<int64_t>(r.block_hashes.size());
    const BlockHash* parent = i > 0 ? &r.block_hashes[i - 1] : nullptr;
    std::span<const int32_t> toks(r.tokens.data() + i * block_size_, static_cast<size_t>(block_size_));
    r.block_hashes.push_back(HashBlock(parent, toks, ExtraKey(r, i), hash_key_));
  }
}

ComputedBlocks KvCacheManager::GetComputedBlocks(RequestState& r) {
  ComputedBlocks hit;
  if (!ReadsPrefixCache(r)) return hit;
  // vLLM: a full hit would leave nothing to compute, and the last token's logits are needed.
  const int64_t max_blocks = (r.num_tokens() - 1) / block_size_;
  EnsureHashes(r, max_blocks);
  for (int64_t i = 0; i < max_blocks; ++i) {
    const std::optional<int32_t> b = pool_.Lookup(r.block_hashes[i]);
    if (!b) break;
    hit.blocks.push_back(*b);
  }
  hit.num_tokens = static_cast<int64_t>(hit.blocks.size()) * block_size_;
  return hit;
}

bool KvCacheManager::AllocateSlots(RequestState& r, int64_t num_new_tokens, const ComputedBlocks* hit) {
  const int64_t hit_tokens = hit ? hit->num_tokens : 0;
  const int64_t hit_blocks = hit ? static_cast<int64_t>(hit->blocks.size()) : 0;
  if (hit_blocks > 0) CPM_CHECK(r.blocks.empty() && r.num_computed == 0);
  const int64_t total = r.num_computed + hit_tokens + num_new_tokens;
  const int64_t need = BlocksForTokens(total, block_size_) - static_cast<int64_t>(r.blocks.size()) - hit_blocks;
  // Hit blocks that sit in the free queue stop being free once taken.
  int64_t hit_free = 0;
  for (int64_t i = 0; i < hit_blocks; ++i) hit_free += pool_.RefCount(hit->blocks[i]) == 0;
  if (need > pool_.num_free() - hit_free) return false;
  for (int64_t i = 0; i < hit_blocks; ++i) {
    pool_.Retain(hit->blocks[i]);
    r.blocks.push_back(hit->blocks[i]);
  }
  r.num_computed += hit_tokens;
  r.num_cached_blocks = std::max(r.num_cached_blocks, hit_blocks);
  if (need > 0) CPM_CHECK(pool_.AllocateN(need, &r.blocks));
  return true;
}

void KvCacheManager::CacheBlocksThrough(RequestState& r, int64_t num_tokens) {
  if (!enable_prefix_caching_) return;
  const int64_t full = num_tokens / block_size_;
  if (full <= r.num_cached_blocks) return;
  EnsureHashes(r, full);
  for (int64_t i = r.num_cached_blocks; i < full; ++i) pool_.CacheBlock(r.blocks[i], r.block_hashes[i]);
  r.num_cached_blocks = full;
}

void KvCacheManager::Free(RequestState& r) {
  // Blocks from r.num_computed on are r's own fresh ones (a hit's shared blocks come before it).
  for (int64_t i = r.num_computed / block_size_; i < r.num_cached_blocks; ++i) {
    pool_.Forget(r.blocks[static_cast<size_t>(i)]);
  }
  for (auto it = r.blocks.rbegin(); it != r.blocks.rend(); ++it) pool_.Release(*it);
  r.blocks.clear();
  r.num_computed = 0;
  r.num_cached_blocks = 0;
}

}  // namespace cpm
