#include "kv/block_hash.h"

namespace cpm {
namespace {

// splitmix64's finaliser: a full-avalanche 64-bit mix.
uint64_t Mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

uint64_t Rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

}  // namespace

BlockHash HashBlock(const BlockHash* parent, std::span<const int32_t> tokens, uint64_t extra,
                    uint64_t key) {
  // Two lanes with different constants; each absorbs every word, and the lanes are
  // cross-mixed at the end so both halves depend on all input.
  uint64_t a = Mix(key ^ 0x243F6A8885A308D3ull), b = Mix(key ^ 0x13198A2E03707344ull);
  auto absorb = [&](uint64_t w) {
    a = Rotl(a ^ Mix(w + 0x9E3779B97F4A7C15ull), 23) * 0xA0761D6478BD642Full;
    b = Rotl(b ^ Mix(w ^ 0xE7037ED1A0B428DBull), 29) * 0x8EBC6AF09C88C6E3ull;
  };
  absorb(parent ? parent->lo : 0x5851F42D4C957F2Dull);
  absorb(parent ? parent->hi : 0x14057B7EF767814Full);
  absorb(tokens.size());
  for (int32_t t : tokens) absorb(static_cast<uint32_t>(t));
  absorb(extra);
  BlockHash h;
  h.lo = Mix(a ^ Rotl(b, 17));
  h.hi = Mix(b + Rotl(a, 41) + 0x589965CC75374CC3ull);
  return h;
}

uint64_t HashBytes(const void* data, size_t size, uint64_t seed) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint64_t h = Mix(seed ^ size);
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = Mix(h ^ w) + 0x9E3779B97F4A7C15ull;
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p + i, size - i);
  return Mix(h ^ tail ^ (static_cast<uint64_t>(size - i) << 56));
}

}  // namespace cpm
