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
};

}  // namespace cpm
