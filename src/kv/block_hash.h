// BlockHash: the identity of a full KV block's contents for prefix caching, chained so that a
// block's hash covers every token before it (vLLM's hash(parent, tokens, extra keys)).
// 128 bits, keyed per process so clients cannot precompute collisions; not cryptographic.
#pragma once

#include <cstdint>
#include <cstring>
#include <span>

namespace cpm {

struct BlockHash {
  uint64_t lo = 0, hi = 0;
  bool operator==(const BlockHash&) const = default;
};

struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const { return static_cast<size_t>(h.lo ^ (h.hi * 0x9E3779B97F4A7C15ull)); }
};

// Hashes one full block: `parent` is the previous block's hash (null for the first block),
// `tokens` its token ids, `extra` anything else that changes the K/V (e.g. the identity of
// multimodal embeddings placed in the block; 0 when none). `key` is the per-process secret.
BlockHash HashBlock(const BlockHash* parent, std::span<const int32_t> tokens, uint64_t extra,
                    uint64_t key);

// A 64-bit digest of raw bytes (e.g. the embedding rows that fall into a block), for `extra`.
uint64_t HashBytes(const void* data, size_t size, uint64_t seed);

}  // namespace cpm
