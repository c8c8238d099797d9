// Paged KV storage: for every attention layer, K and V arrays of fixed-size blocks (layouts in
// kernels/attention.h: KvLayerView). Which block belongs to which sequence is
// the block pool's business (block_pool.h); this class only owns the memory.
#pragma once

#include <cstdint>
#include <vector>

#include "base/page_buffer.h"
#include "kernels/attention.h"
#include "tensor/dtype.h"

namespace cpm {

// The shape of a model's paged KV cache (per block of tokens).
struct KvCacheSpec {
  int64_t num_attention_layers = 0;  // layers with a KV cache (hybrid models have fewer)
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
};

class KvCache {
 public:
  KvCache(const KvCacheSpec& spec, int64_t num_blocks, int64_t block_size, DType dtype);

  // Bytes one block takes over all layers (K and V).
  static int64_t BytesPerBlock(const KvCacheSpec& spec, int64_t block_size, DType dtype);

  kernels::KvLayerView Layer(int64_t attention_layer);

  // The cache's pages are committed by the writes that first touch them: a whole huge page of
  // each layer's K and V at a time, 512 blocks of MiniCPM4 (8192 tokens, 96 MiB over its 48
  // arrays), which took ~150 ms on a 2-vCPU VM, stalling the step whose KV writes crossed into
  // them (the pool hands out never-used blocks before reusing freed ones, so every 8192 tokens
  // of a server's first million did). The engine commits ahead of the blocks it hands out
  // instead, between steps and while idle, in steps of bounded work.
  // Whether blocks [0, end_block) (clipped to the cache) are not all committed yet.
  bool CommitPending(int64_t end_block) const;
  // If so, commits one more array's pages of the next row of blocks past committed_blocks() (a
  // row: blocks_per_row() blocks, a huge page of one array).
  void CommitStep(int64_t end_block);
  // Blocks [0, committed_blocks()) are committed in every layer's K and V.
  int64_t committed_blocks() const { return committed_; }
  int64_t blocks_per_row() const { return row_blocks_; }
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }
  DType dtype() const { return dtype_; }
  const KvCacheSpec& spec() const { return spec_; }

 private:
  KvCacheSpec spec_;
  int64_t num_blocks_;
  int64_t block_size_;
  DType dtype_;
  std::vector<PageBuffer> k_;  // per attention layer; zero pages, committed when first written
  std::vector<PageBuffer> v_;
  int64_t layer_block_bytes_;  // one block of one layer's K (or V)
  int64_t row_blocks_;         // blocks in a huge page of one array (at least 1)
  int64_t committed_ = 0;      // every array holds blocks [0, committed_) committed
  // The row being committed is the next after committed_; arrays (K0, V0, K1, V1, ...) before
  // next_array_ hold it already.
  int64_t next_array_ = 0;
};

}  // namespace cpm
