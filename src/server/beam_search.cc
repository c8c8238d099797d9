#include "server/beam_search.h"

#include <algorithm>
#include <cmath>

namespace cpm {
namespace {

// One way to extend a live beam: beam `from` followed by `token`.
struct Candidate {
  size_t from = 0;
  int32_t token = 0;
  float logprob = 0;
  double cum_logprob = 0;
};

Beam Extend(const Beam& b, const TokenLogprobs& step, const Candidate& c) {
  Beam out = b;
  out.tokens.push_back(c.token);
  TokenLogprobs lp = step;  // the step's candidates, with the token this beam took
  lp.token = c.token;
  lp.logprob = c.logprob;
  out.logprobs.push_back(std::move(lp));
  out.cum_logprob = c.cum_logprob;
  return out;
}

}  // namespace

double BeamScore(const Beam& b, int64_t prompt_len, float length_penalty) {
  const int64_t len = prompt_len + static_cast<int64_t>(b.tokens.size()) - (b.ended_by_eos ? 1 : 0);
  return b.cum_logprob / std::pow(static_cast<double>(std::max<int64_t>(len, 1)), length_penalty);
}

StatusOr<std::vector<Beam>> RunBeamSearch(const BeamSearchParams& p, const ExpandBeams& expand) {
  const int k = 2 * p.width;
  const auto is_eos = [&](int32_t t) {
    return !p.ignore_eos && std::find(p.eos_ids.begin(), p.eos_ids.end(), t) != p.eos_ids.end();
  };
  std::vector<Beam> live(1), completed;
  for (int64_t step = 0; step < p.max_tokens && !live.empty(); ++step) {
    std::vector<const std::vector<int32_t>*> prefixes;
    for (const Beam& b : live) prefixes.push_back(&b.tokens);
    auto steps = expand(prefixes, k);
    if (!steps.ok()) return steps.status();
    std::vector<Candidate> candidates;
    for (size_t i = 0; i < live.size(); ++i) {
      for (const auto& [token, logprob] : (*steps)[i].top) {
        const Candidate c{i, token, logprob, live[i].cum_logprob + logprob};
        if (is_eos(token)) {
          // Every EOS candidate completes a beam, whatever its rank (as vLLM).
          completed.push_back(Extend(live[i], (*steps)[i], c));
          completed.back().ended_by_eos = true;
        } else {
          candidates.push_back(c);
        }
      }
    }
    const size_t keep = std::min(candidates.size(), static_cast<size_t>(p.width));
    std::partial_sort(candidates.begin(), candidates.begin() + static_cast<ptrdiff_t>(keep),
                      candidates.end(), [](const Candidate& a, const Candidate& b) {
                        return a.cum_logprob > b.cum_logprob;
                      });
    std::vector<Beam> next;
    for (size_t j = 0; j < keep; ++j) {
      next.push_back(Extend(live[candidates[j].from], (*steps)[candidates[j].from], candidates[j]));
    }
    live = std::move(next);
  }
  for (Beam& b : live) completed.push_back(std::move(b));
  std::stable_sort(completed.begin(), completed.end(), [&](const Beam& a, const Beam& b) {
    return BeamScore(a, p.prompt_len, p.length_penalty) > BeamScore(b, p.prompt_len, p.length_penalty);
  });
  if (completed.size() > static_cast<size_t>(p.width)) completed.resize(static_cast<size_t>(p.width));
  return completed;
}

}  // namespace cpm
