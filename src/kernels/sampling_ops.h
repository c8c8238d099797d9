// Vocabulary-wide ops for sampling: log-softmax and top-k over one row of logits.
// The sampler calls them once per sampled row; they are single-threaded (a row is ~73k floats).
#pragma once

#include <bit>
#include <cstdint>

namespace cpm::kernels {

// max(x[0, n)), NaNs ignored; -inf for n = 0.
float Max(const float* x, int64_t n);

// The smallest finite value of x[0, n) (NaNs and infinities ignored); +inf if there is none.
float MinFinite(const float* x, int64_t n);

// The lowest index of max(x[0, n)) (greedy decoding's token, as std::max_element picks it),
// NaNs ignored; 0 when there is no such index (n = 0, or only NaNs).
int64_t ArgMax(const float* x, int64_t n);

// How many of x[0, n) are at or above `threshold` (NaNs never are): a token's rank among the
// logits as vLLM reports it, the count at or above its own (so tied tokens share the worse rank).
int64_t CountAtLeast(const float* x, int64_t n, float threshold);

// Top-p's histogram slices (sampler.cc SampleSelected): out[i] is the slice of [lo, lo +
// count/scale) that x[i] falls in, trunc((x[i] − lo)·scale) held to [0, count − 1] (a NaN
// product counts as 0), or kNanSlice for a NaN, -1 for -inf, count for +inf. 1 ≤ count < 2^15.
constexpr int16_t kNanSlice = -2;
void MassSlices(const float* x, int64_t n, float lo, float scale, int count, int16_t* out);

// The first index i >= begin with x[i] == v, or n (a slice's tokens in index order).
int64_t FindEqual(const int16_t* x, int64_t begin, int64_t n, int16_t v);

// out[i] = x[i] - max(x) - log(Σ_j exp(x[j] - max(x))), the sum in f64. out may alias x. n >= 1.
// Returns log(Σ_j exp(x[j])) (the log-partition), which callers can reuse.
float LogSoftmax(const float* x, int64_t n, float* out);

// out[i] = exp(x[i] - max(x)) / Σ_j exp(x[j] - max(x)). out may alias x. n >= 1.
void Softmax(const float* x, int64_t n, float* out);

// out[i] = exp((x[i] - shift) · scale) (softmax with temperature 1/scale, unnormalised, for
// shift = max(x)); returns Σ out[i]. out may alias x.
float ExpScaled(const float* x, int64_t n, float shift, float scale, float* out);

// The k largest values of x[0, n) in descending order, ties broken by the lower index (as a
// stable sort would); NaNs are never selected. Writes min(k, n) entries; returns that count.
int64_t TopK(const float* x, int64_t n, int64_t k, int32_t* indices, float* values);

// A 64-bit key of element i of value v (not NaN) that orders as (v descending, i ascending)
// when keys are compared as unsigned integers: TopK's order, for sorting and selecting on
// plain integers. The index is the low half (RankKeyIndex).
inline uint64_t RankKey(float v, int64_t i) {
  const uint32_t bits = std::bit_cast<uint32_t>(v == 0.0f ? 0.0f : v);  // −0 ties with +0
  // Order-preserving as unsigned: negative floats reversed, positive ones above them.
  const uint32_t ordered = (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
  return (uint64_t{~ordered} << 32) | static_cast<uint32_t>(i);
}
inline int32_t RankKeyIndex(uint64_t key) { return static_cast<int32_t>(key & 0xffffffffu); }

}  // namespace cpm::kernels
