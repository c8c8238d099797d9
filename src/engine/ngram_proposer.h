// Speculative decoding's n-gram proposer (vLLM's `--speculative-config '{"method": "ngram", ...}'`,
// prompt lookup): the draft for a sequence is what followed the earliest earlier occurrence of
// its longest suffix of prompt_lookup_min..prompt_lookup_max tokens. No model runs: on a CPU,
// where a decode step streams every weight once whatever its row count, verifying k drafts costs
// little more than one token, so each accepted draft token is a step saved.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace cpm {

struct SpeculativeConfig {
  int64_t num_speculative_tokens = 0;  // 0: speculative decoding off
  int64_t prompt_lookup_min = 5;
  int64_t prompt_lookup_max = 5;
  // No drafts while more than this many requests run (0: no limit): a batch that large is
  // compute-bound, where every draft row costs its FLOPs (vLLM's disable_by_batch_size; checked
  // at every step here, where vLLM decides once per request as it arrives).
  int64_t disable_by_batch_size = 0;

  bool enabled() const { return num_speculative_tokens > 0; }
};

// Models with a recurrent state: how many sequences may carry a draft in one step. Each needs a
// copy of its state taken before the step (a rejected draft token has updated the state, which
// is then put back and the accepted tokens fed again), so this bounds that memory: the batch
// limit when there is one, else 4 (past a few sequences a CPU step is compute-bound and drafts
// pay little). 0 when speculation is off.
int64_t SpeculativeStateSnapshots(const SpeculativeConfig& c, int64_t max_num_seqs);

// Up to `max_draft` tokens proposed after `tokens` (prompt and output so far): those that
// followed the earliest occurrence, ending before the last token, of the longest suffix of
// prompt_lookup_min..prompt_lookup_max tokens that occurred before. Empty if none did.
std::vector<int32_t> ProposeNgramDraft(std::span<const int32_t> tokens, const SpeculativeConfig& c,
                                       int64_t max_draft);

}  // namespace cpm
