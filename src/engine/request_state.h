// RequestState: everything the engine thread knows about one live request: its tokens (prompt,
// then outputs), how many of them have K/V in the cache, its blocks, state slot, generator and
// timestamps. Owned by the scheduler; only the engine thread touches it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "kv/block_hash.h"
#include "sampling/sampler.h"
#include "structured/json_matcher.h"

namespace cpm {

enum class RequestStatus { kWaiting, kRunning, kFinished, kCount };
const char* ToString(RequestStatus s);

struct RequestState {
  EngineRequest req;
  std::shared_ptr<RequestStream> stream;
  int64_t seq_no = 0;  // admission order of Submit (the engine's request counter)

  // Prompt then generated tokens. After a preemption the generated ones are recomputed like
  // prompt tokens, so the request continues where it stopped.
  std::vector<int32_t> tokens;
  int64_t num_prompt_tokens = 0;
  // Tokens whose K/V (and recurrent state) are in the cache; always < tokens.size() while the
  // request is live, because the newest sampled token has not been fed yet.
  int64_t num_computed = 0;
  std::vector<int32_t> blocks;        // covers at least num_computed tokens
  std::vector<BlockHash> block_hashes;  // of the full blocks of `tokens`, computed lazily
  int64_t num_cached_blocks = 0;      // leading blocks registered in the prefix cache
  int32_t state_slot = -1;
  Rng rng;
  // prompt_logprobs requests: entries for prompt tokens 1..prompt_logprobs.size(), filled as
  // prefill chunks run; kept across preemptions (the recompute skips their rows).
  std::vector<TokenLogprobs> prompt_logprobs;

  // The structured output's matcher over the generated text (from the first draw), and
  // whether the constraint applies yet (Constraint::starts_after).
  std::optional<structured::Matcher> matcher;
  bool constraint_active = false;
  // Speculative decoding: tokens proposed to follow `tokens`, verified in the next step (their
  // K/V is written then; those not accepted are overwritten later). Empty: none.
  std::vector<int32_t> draft;
  // Its state's copy taken before this step's draft (models with a recurrent state; -1: none),
  // and num_computed then: the tokens that state summarises.
  int32_t state_snapshot = -1;
  int64_t snapshot_computed = 0;
  // thinking_token_budget requests: where the output stands in its thinking sections.
  std::optional<ThinkingBudgetState> thinking;

  RequestStatus status = RequestStatus::kWaiting;
  int64_t num_cached_tokens = -1;     // prefix-cache hit at first admission; -1 before
  int64_t num_preemptions = 0;
  RequestTimes times;
  bool scheduled_once = false;

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  std::span<const int32_t> prompt() const {
    return std::span<const int32_t>(tokens).first(static_cast<size_t>(num_prompt_tokens));
  }
  std::span<const int32_t> output() const {
    return std::span<const int32_t>(tokens).subspan(static_cast<size_t>(num_prompt_tokens));
  }
};

}  // namespace cpm
