#include "kv/block_pool.h"

#include <algorithm>

#include "base/check.h"

namespace cpm {

BlockPool::BlockPool(int64_t num_blocks)
    : ref_counts_(num_blocks, 0),
      prev_(num_blocks, kNone),
      next_(num_blocks, kNone),
      cached_(num_blocks, false),
      hashes_(num_blocks) {
  for (int64_t b = 0; b < num_blocks; ++b) PushTail(static_cast<int32_t>(b));
}

double BlockPool::Usage() const {
  if (ref_counts_.empty()) return 0.0;
  return 1.0 - static_cast<double>(num_free_) / static_cast<double>(ref_counts_.size());
}

void BlockPool::PushTail(int32_t block) {
  prev_[block] = tail_;
  next_[block] = kNone;
  if (tail_ != kNone) {
    next_[tail_] = block;
  } else {
    head_ = block;
  }
  tail_ = block;
  ++num_free_;
  if (cached_[block]) ++num_cached_free_;
}

void BlockPool::Unlink(int32_t block) {
  const int32_t p = prev_[block], n = next_[block];
  if (p != kNone) {
    next_[p] = n;
  } else {
    head_ = n;
  }
  if (n != kNone) {
    prev_[n] = p;
  } else {
    tail_ = p;
  }
  prev_[block] = next_[block] = kNone;
  --num_free_;
  if (cached_[block]) --num_cached_free_;
}

void BlockPool::Uncache(int32_t block) {
  if (!cached_[block]) return;
  auto it = by_hash_.find(hashes_[block]);
  CPM_CHECK(it != by_hash_.end() && it->second == block);
  by_hash_.erase(it);
  cached_[block] = false;
}

std::optional<int32_t> BlockPool::Allocate() {
  if (head_ == kNone) return std::nullopt;
  const int32_t b = head_;
  CPM_CHECK(ref_counts_[b] == 0);
  Unlink(b);
  Uncache(b);  // eviction: the block is about to hold other tokens
  ref_counts_[b] = 1;
  high_water_ = std::max<int64_t>(high_water_, b + 1);
  return b;
}

bool BlockPool::AllocateN(int64_t n, std::vector<int32_t>* out) {
  if (n > num_free()) return false;
  for (int64_t i = 0; i < n; ++i) out->push_back(*Allocate());
  return true;
}

void BlockPool::Retain(int32_t block) {
  if (ref_counts_[block] == 0) {
    // Only a cached block may be revived from the free queue; an uncached free block has no
    // contents anyone could want.
    CPM_CHECK(cached_[block]);
    Unlink(block);
  }
  ++ref_counts_[block];
}

void BlockPool::Release(int32_t block) {
  CPM_CHECK(ref_counts_[block] > 0);
  if (--ref_counts_[block] == 0) PushTail(block);
}

void BlockPool::ReleaseAll(const std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) Release(b);
}

void BlockPool::CacheBlock(int32_t block, const BlockHash& hash) {
  CPM_CHECK(ref_counts_[block] > 0);
  if (cached_[block]) return;
  if (!by_hash_.emplace(hash, block).second) return;
  cached_[block] = true;
  hashes_[block] = hash;
}

std::optional<int32_t> BlockPool::Lookup(const BlockHash& hash) const {
  auto it = by_hash_.find(hash);
  if (it == by_hash_.end()) return std::nullopt;
  return it->second;
}

void BlockPool::ResetPrefixCache() {
  for (int32_t b = head_; b != kNone; b = next_[b]) {
    if (cached_[b]) {
      Uncache(b);
      --num_cached_free_;
    }
  }
}

}  // namespace cpm
