#include "multimodal/encoder_cache.h"

#include <openssl/evp.h>

#include <cstring>
#include <new>

#include "multimodal/slicing.h"

namespace cpm {

size_t MediaDigestHasher::operator()(const MediaDigest& d) const {
  size_t h;  // the digest is uniformly distributed: any 8 of its bytes are a hash
  std::memcpy(&h, d.bytes.data(), sizeof(h));
  return h;
}

MediaDigest DigestSlices(const std::vector<PixelSlice>& slices, int64_t patches_per_token) {
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx(EVP_MD_CTX_new(), EVP_MD_CTX_free);
  // Allocation and SHA-256 set-up fail only when the process is out of memory.
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) throw std::bad_alloc();
  const auto add = [&](const void* data, size_t size) { EVP_DigestUpdate(ctx.get(), data, size); };
  const int64_t head[2] = {patches_per_token, static_cast<int64_t>(slices.size())};
  add(head, sizeof(head));
  for (const PixelSlice& s : slices) {
    const int64_t size[3] = {s.size.height, s.size.width, static_cast<int64_t>(s.pixels.size())};
    add(size, sizeof(size));
    add(s.pixels.data(), s.pixels.size() * sizeof(float));
  }
  MediaDigest d;
  unsigned int length = 0;
  EVP_DigestFinal_ex(ctx.get(), d.bytes.data(), &length);
  return d;
}

EncoderCache::Rows EncoderCache::Find(const MediaDigest& digest) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto it = index_.find(digest);
  if (it == index_.end()) return nullptr;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->rows;
}

void EncoderCache::Insert(const MediaDigest& digest, Rows rows) {
  if (!rows || BytesOf(rows) > capacity_bytes_) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (const auto it = index_.find(digest); it != index_.end()) {  // encoded twice at once
    lru_.splice(lru_.begin(), lru_, it->second);
    return;
  }
  size_bytes_ += BytesOf(rows);
  lru_.push_front({digest, std::move(rows)});
  index_.emplace(digest, lru_.begin());
  while (size_bytes_ > capacity_bytes_) {
    const Entry& last = lru_.back();
    size_bytes_ -= BytesOf(last.rows);
    index_.erase(last.digest);
    lru_.pop_back();
  }
}

void EncoderCache::CountQuery(bool hit) {
  std::lock_guard<std::mutex> lock(mu_);
  ++queries_;
  if (hit) ++hits_;
}

EncoderCacheStats EncoderCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {true, queries_, hits_};
}

int64_t EncoderCache::size_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return size_bytes_;
}

}  // namespace cpm
