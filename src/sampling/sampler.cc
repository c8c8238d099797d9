#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>

namespace cpm {

void LogSoftmax(const float* logits, int64_t n, float* out) {
  const float mx = *std::max_element(logits, logits + n);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i] - mx));
  const float lse = mx + static_cast<float>(std::log(sum));
  for (int64_t i = 0; i < n; ++i) out[i] = logits[i] - lse;
}

std::vector<std::pair<int32_t, float>> TopK(const float* values, int64_t n, int64_t k) {
  k = std::min(k, n);
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  auto better = [&](int32_t a, int32_t b) {
    return values[a] > values[b] || (values[a] == values[b] && a < b);
  };
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), better);
  std::vector<std::pair<int32_t, float>> out;
  for (int64_t i = 0; i < k; ++i) out.emplace_back(idx[i], values[idx[i]]);
  return out;
}

void ApplyPenalties(float* logits, int64_t n, const SamplingParams& p,
                    std::span<const int32_t> prompt_tokens, std::span<const int32_t> output_tokens) {
  if (p.presence_penalty == 0.0f && p.frequency_penalty == 0.0f && p.repetition_penalty == 1.0f)
    return;
  std::unordered_map<int32_t, int32_t> out_counts;
  for (int32_t t : output_tokens) ++out_counts[t];
  if (p.repetition_penalty != 1.0f) {
    std::vector<bool> seen(n, false);
    for (int32_t t : prompt_tokens) seen[t] = true;
    for (const auto& [t, c] : out_counts) seen[t] = true;
    for (int64_t i = 0; i < n; ++i) {
      if (!seen[i]) continue;
      logits[i] = logits[i] > 0 ? logits[i] / p.repetition_penalty : logits[i] * p.repetition_penalty;
    }
  }
  for (const auto& [t, c] : out_counts) {
    logits[t] -= p.frequency_penalty * static_cast<float>(c) + p.presence_penalty;
  }
}

int32_t SampleToken(const float* logits, int64_t n, const SamplingParams& p, Rng& rng) {
  if (p.greedy()) {
    return static_cast<int32_t>(std::max_element(logits, logits + n) - logits);
  }
  // Candidates sorted by logit (descending), then filtered by top-k, min-p and top-p.
  const int64_t k = (p.top_k > 0 && p.top_k < n) ? p.top_k : n;
  std::vector<std::pair<int32_t, float>> cand = TopK(logits, n, k);
  const float inv_t = 1.0f / p.temperature;
  const double mx = cand[0].second * inv_t;
  std::vector<double> probs(cand.size());
  double sum = 0.0;
  for (size_t i = 0; i < cand.size(); ++i) sum += probs[i] = std::exp(cand[i].second * inv_t - mx);
  for (double& q : probs) q /= sum;
  size_t keep = probs.size();
  if (p.min_p > 0.0f) {
    const double floor = p.min_p * probs[0];
    keep = std::find_if(probs.begin(), probs.end(), [&](double q) { return q < floor; }) - probs.begin();
  }
  if (p.top_p < 1.0f) {
    double cum = 0.0;
    size_t i = 0;
    // Keep the smallest prefix whose mass reaches top_p (at least one token).
    for (; i < keep; ++i) {
      cum += probs[i];
      if (cum >= p.top_p) {
        ++i;
        break;
      }
    }
    keep = std::max<size_t>(1, std::min(keep, i));
  }
  keep = std::max<size_t>(1, keep);
  double mass = 0.0;
  for (size_t i = 0; i < keep; ++i) mass += probs[i];
  std::uniform_real_distribution<double> u(0.0, mass);
  double r = u(rng), acc = 0.0;
  for (size_t i = 0; i < keep; ++i) {
    acc += probs[i];
    if (r < acc) return cand[i].first;
  }
  return cand[keep - 1].first;
}

}  // namespace cpm
