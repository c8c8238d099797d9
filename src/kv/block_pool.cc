#include "kv/block_pool.h"

#include "base/check.h"

namespace cpm {

BlockPool::BlockPool(int64_t num_blocks) : ref_counts_(num_blocks, 0) {
  for (int64_t b = 0; b < num_blocks; ++b) free_.push_back(static_cast<int32_t>(b));
}

double BlockPool::Usage() const {
  if (ref_counts_.empty()) return 0.0;
  return 1.0 - static_cast<double>(free_.size()) / static_cast<double>(ref_counts_.size());
}

std::optional<int32_t> BlockPool::Allocate() {
  if (free_.empty()) return std::nullopt;
  int32_t b = free_.front();
  free_.pop_front();
  CPM_CHECK(ref_counts_[b] == 0);
  ref_counts_[b] = 1;
  return b;
}

bool BlockPool::AllocateN(int64_t n, std::vector<int32_t>* out) {
  if (n > num_free()) return false;
  for (int64_t i = 0; i < n; ++i) out->push_back(*Allocate());
  return true;
}

void BlockPool::Retain(int32_t block) {
  CPM_CHECK(ref_counts_[block] > 0);
  ++ref_counts_[block];
}

void BlockPool::Release(int32_t block) {
  CPM_CHECK(ref_counts_[block] > 0);
  if (--ref_counts_[block] == 0) free_.push_back(block);
}

void BlockPool::ReleaseAll(const std::vector<int32_t>& blocks) {
  for (int32_t b : blocks) Release(b);
}

}  // namespace cpm
