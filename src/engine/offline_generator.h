// OfflineGenerator: runs a fixed set of prompts to completion in shared batched steps (prefill
// chunks and decodes mixed in one forward), for `cpmserve generate`, evaluation and tests.
// The online server's scheduler (continuous batching, preemption) builds on the same Model API.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/model.h"
#include "sampling/sampling_params.h"

namespace cpm {

struct GenerateRequest {
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int64_t max_tokens = 16;
  std::vector<int32_t> stop_token_ids;  // generation ends after emitting one of these
  bool ignore_eos = false;              // if true, stop_token_ids are ignored
  int32_t top_logprobs = 0;             // top-k log-probs recorded per generated token
  bool record_logprob_rows = false;     // keep full-vocabulary log-prob rows (tests, eval)
  bool all_prompt_positions = false;    // with rows: one per prompt position, not just the last
  // Multimodal: prompt rows (ascending) whose embedding is replaced, and the embeddings.
  std::vector<int64_t> embed_rows;
  std::vector<float> embeds;            // [embed_rows.size(), hidden]
};

struct TokenLogprobs {
  int32_t token = 0;
  float logprob = 0.0f;
  std::vector<std::pair<int32_t, float>> top;  // (id, logprob), best first
  int64_t rank = 0;  // 1-based rank of `token` in its distribution (prompt logprobs only)
};

struct GenerateResult {
  std::vector<int32_t> output;
  std::vector<TokenLogprobs> logprobs;         // per generated token (if top_logprobs > 0)
  std::vector<int64_t> row_positions;          // prompt positions of the first rows
  std::vector<std::vector<float>> logprob_rows;  // [rows, vocab] if record_logprob_rows
  std::vector<float> row_logsumexps;           // [rows]: each row's raw logit = logprob + this
  std::string finish_reason;                   // "stop" or "length"
};

struct OfflineGeneratorOptions {
  int64_t block_size = 16;
  // Prompt tokens of one sequence per step (0: whole prompt at once). Small values make
  // steps that mix one sequence's prefill chunk with other sequences' decodes.
  int64_t prefill_chunk = 0;
  uint64_t seed = 0;  // generator seed for requests without their own
};

class OfflineGenerator {
 public:
  OfflineGenerator(Model& model, ThreadPool& pool, OfflineGeneratorOptions options)
      : model_(model), pool_(pool), options_(options) {}

  StatusOr<std::vector<GenerateResult>> Run(const std::vector<GenerateRequest>& requests);

 private:
  Model& model_;
  ThreadPool& pool_;
  OfflineGeneratorOptions options_;
};

}  // namespace cpm
