// Beam search as vLLM's OpenAI server runs it (use_beam_search, for chat and completions): at
// each of max_tokens steps every live beam is expanded by its 2·width most likely next tokens
// (the model's log-probs); candidates that are EOS complete a beam, the others compete on
// their cumulative log-prob for the `width` live places. At the end the completed and live
// beams are ranked by cumulative log-prob / length^length_penalty, the length counting the
// prompt and not the EOS (Hugging Face's rule, as vLLM's get_beam_search_score), and the best
// `width` are the choices.
//
// Where vLLM differs: it also takes the token its one-token request happened to sample as a
// candidate when that is outside the top 2·width (a random one at temperature > 0); here the
// candidates are the top 2·width only, so a search is deterministic.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "base/status.h"
#include "engine/offline_generator.h"  // TokenLogprobs

namespace cpm {

struct BeamSearchParams {
  int width = 1;                // beams kept, and choices returned (the request's n)
  int64_t max_tokens = 16;
  int64_t prompt_len = 0;       // counts in every beam's length
  float length_penalty = 1.0f;
  bool ignore_eos = false;
  std::vector<int32_t> eos_ids;
};

struct Beam {
  std::vector<int32_t> tokens;          // generated, an EOS that ended it included
  std::vector<TokenLogprobs> logprobs;  // per token: its log-prob and the step's candidates
  double cum_logprob = 0;
  bool ended_by_eos = false;
};

// Expands live beams: for each (its generated tokens), the top `k` next tokens with their
// log-probs, best first, as TokenLogprobs::top (one entry per beam, in order).
using ExpandBeams = std::function<StatusOr<std::vector<TokenLogprobs>>(
    const std::vector<const std::vector<int32_t>*>& beams, int k)>;

// The search; the returned beams are best first (at most `width`). An expansion's error ends it.
StatusOr<std::vector<Beam>> RunBeamSearch(const BeamSearchParams& p, const ExpandBeams& expand);

// vLLM's beam score: cumulative log-prob / (prompt + generated tokens, EOS not counted)^penalty.
double BeamScore(const Beam& b, int64_t prompt_len, float length_penalty);

}  // namespace cpm
