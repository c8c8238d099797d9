// The vision tower's outputs for images seen before, so that a conversation that sends its image
// again with every turn (as OpenAI clients do) encodes it once: vLLM's multimodal cache
// (--mm-processor-cache-gb, an LRU over recent items) and encoder cache in one. An entry is keyed
// by a SHA-256 of exactly what the tower reads, each slice's size and normalized pixels and the
// downsample mode, so any two requests whose media come out as the same slices share it,
// whatever URL, format or mm_processor_kwargs brought them there. Equal rows also give equal
// prefix-cache block hashes, where prefix caching is on (MiniCPM-V-4.6's Gated DeltaNet layers
// turn it off: there the saving is the tower's alone).
#pragma once

#include <array>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace cpm {

struct PixelSlice;

struct MediaDigest {
  std::array<uint8_t, 32> bytes{};
  bool operator==(const MediaDigest&) const = default;
};

struct MediaDigestHasher {
  size_t operator()(const MediaDigest& d) const;
};

// SHA-256 over the slices' sizes and pixels and the mode (patches per output token).
MediaDigest DigestSlices(const std::vector<PixelSlice>& slices, int64_t patches_per_token);

// Queries and hits in media items (an image, or a video as all its frames), vLLM's
// vllm:mm_cache_queries / vllm:mm_cache_hits.
struct EncoderCacheStats {
  bool enabled = false;
  int64_t queries = 0;
  int64_t hits = 0;
};

// A thread-safe LRU map from digest to encoder output rows, bounded by the rows' bytes.
class EncoderCache {
 public:
  using Rows = std::shared_ptr<const std::vector<float>>;

  explicit EncoderCache(int64_t capacity_bytes) : capacity_bytes_(capacity_bytes) {}

  // The rows under `digest` (made the most recently used), or null.
  Rows Find(const MediaDigest& digest);
  // Keeps `rows` under `digest`, dropping the least recently used entries beyond the capacity;
  // rows larger than the whole capacity are not kept.
  void Insert(const MediaDigest& digest, Rows rows);
  // One media item looked up: `hit` when every image of it was found.
  void CountQuery(bool hit);

  EncoderCacheStats stats() const;
  int64_t size_bytes() const;

 private:
  struct Entry {
    MediaDigest digest;
    Rows rows;
  };
  static int64_t BytesOf(const Rows& rows) {
    return static_cast<int64_t>(rows->size() * sizeof(float));
  }

  const int64_t capacity_bytes_;
  mutable std::mutex mu_;
  std::list<Entry> lru_;  // most recently used first
  std::unordered_map<MediaDigest, std::list<Entry>::iterator, MediaDigestHasher> index_;
  int64_t size_bytes_ = 0;
  int64_t queries_ = 0, hits_ = 0;
};

}  // namespace cpm
