// Turns one row of logits into a token: penalties, temperature, top-k, top-p, min-p, then a draw
// from the request's own generator (so a seeded request samples the same tokens whatever else
// is in the batch). Also the log-probabilities that OpenAI's `logprobs` reports.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "sampling/sampling_params.h"

namespace cpm {

using Rng = std::mt19937_64;

// out[i] = logits[i] − logsumexp(logits), the sum accumulated in f64 (kernels::LogSoftmax).
// Returns logsumexp(logits), so that a raw logit is out[i] plus it.
float LogSoftmax(const float* logits, int64_t n, float* out);

// How many of values[0, n) are at or above `threshold` (NaNs never are): a token's rank as vLLM
// reports it is the count at or above its own log-prob, itself included, so that tied tokens
// share the worse rank (its batched_count_greater_than is `x >= value`; kernels::CountAtLeast).
int64_t CountAtLeast(const float* values, int64_t n, float threshold);

// The k largest entries (index, value), largest first; ties go to the lower index.
std::vector<std::pair<int32_t, float>> TopK(const float* values, int64_t n, int64_t k);

// Applies presence/frequency/repetition penalties in place (vLLM semantics): `prompt_tokens`
// count for repetition only, `output_tokens` for all three.
void ApplyPenalties(float* logits, int64_t n, const SamplingParams& p,
                    std::span<const int32_t> prompt_tokens, std::span<const int32_t> output_tokens);

// Picks the next token from (already penalised) logits. Greedy is argmax (lowest index on ties).
int32_t SampleToken(const float* logits, int64_t n, const SamplingParams& p, Rng& rng);

}  // namespace cpm
