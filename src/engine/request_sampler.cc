#include "engine/request_sampler.h"

#include <algorithm>
#include <limits>

namespace cpm {
namespace {

bool EndsGeneration(const EngineRequest& req, int32_t token) {
  const auto has = [token](const std::vector<int32_t>& ids) {
    return std::find(ids.begin(), ids.end(), token) != ids.end();
  };
  return has(req.eos_token_ids) || has(req.stop_token_ids);
}

// Whether the request's structured output constrains this draw (its matcher made on the first).
bool ConstraintActive(RequestState& r) {
  if (!r.req.constraint) return false;
  if (!r.matcher) {
    r.matcher.emplace(r.req.constraint->schema);
    r.constraint_active = r.req.constraint->starts_after < 0;
  }
  return r.constraint_active;
}

// Masks out of `row` the tokens the constraint does not take next (`allowed`: its token
// table's mask for the matcher's state). The tokens that end generation (EOS, stop tokens)
// stay only once the text is complete. Should nothing be left (a min_tokens mask on the end
// tokens of a complete text), they are allowed after all: the output is done.
void ApplyConstraint(const RequestState& r, const std::vector<uint8_t>& allowed, float* row,
                     int64_t vocab) {
  const structured::Constraint& c = *r.req.constraint;
  constexpr float kOff = -std::numeric_limits<float>::infinity();
  std::vector<std::pair<int32_t, float>> ends;  // their logits before the mask
  for (const auto* ids : {&r.req.eos_token_ids, &r.req.stop_token_ids}) {
    for (int32_t t : *ids) {
      if (t >= 0 && t < vocab) ends.push_back({t, row[t]});
    }
  }
  const int64_t table = std::min<int64_t>(vocab, c.tokens->size());
  for (int64_t t = 0; t < table; ++t) {
    if (allowed[t] == 0) row[t] = kOff;
  }
  std::fill(row + table, row + vocab, kOff);
  const bool complete = r.matcher->Complete();
  for (const auto& [t, logit] : ends) row[t] = complete ? logit : kOff;
  if (std::none_of(row, row + vocab, [](float v) { return v > kOff; })) {
    for (const auto& [t, logit] : ends) row[t] = logit;
  }
}

// The drawn token moves the matcher on (or starts the constraint after `starts_after`).
void AdvanceConstraint(RequestState& r, int32_t token) {
  const structured::Constraint& c = *r.req.constraint;
  if (!r.constraint_active) {
    r.constraint_active = token == c.starts_after;
    return;
  }
  if (EndsGeneration(r.req, token) || token >= c.tokens->size()) return;
  r.matcher->Advance(c.tokens->bytes(token));
}

// The token a thinking_token_budget forces on this draw, or -1.
int32_t ForcedByThinkingBudget(RequestState& r) {
  if (!r.req.thinking_budget) return -1;
  if (!r.thinking) r.thinking.emplace(*r.req.thinking_budget, r.prompt());
  return r.thinking->Next(*r.req.thinking_budget, r.output());
}

}  // namespace

void TrimDraftToConstraint(RequestState& r, std::vector<int32_t>* draft) {
  if (draft->empty() || !ConstraintActive(r)) return;
  const structured::Constraint& c = *r.req.constraint;
  structured::Matcher m = *r.matcher;  // a copy: the draws advance the real one
  size_t keep = 0;
  for (; keep < draft->size(); ++keep) {
    const int32_t t = (*draft)[keep];
    if (EndsGeneration(r.req, t)) {
      keep += m.Complete() ? 1 : 0;
      break;
    }
    if (t < 0 || t >= c.tokens->size() || !m.Advance(c.tokens->bytes(t))) break;
  }
  draft->resize(keep);
}

SampledToken SampleForRequest(RequestState& r, float* row, int64_t vocab, std::vector<float>* scratch) {
  SampledToken out;
  const bool want_logprobs = r.req.logprobs >= 0;
  const bool constrained = ConstraintActive(r);
  thread_local std::vector<uint8_t> allowed;  // the constraint's mask, computed once a draw
  if (constrained) r.req.constraint->tokens->Allowed(*r.matcher, &allowed);
  if (want_logprobs) {
    // vLLM returns the model's distribution, before penalties and temperature, but after its
    // grammar bitmask (applied to the logits before its sampler): the tokens the structured
    // output forbids are -inf there, and the others renormalised among themselves.
    scratch->assign(row, row + vocab);
    if (constrained) ApplyConstraint(r, allowed, scratch->data(), vocab);
    LogSoftmax(scratch->data(), vocab, scratch->data());
  }
  // vLLM's order: the allowed-token mask, bad words and logit bias, then the penalties.
  if (r.req.logits_rules) ApplyLogitsRules(*r.req.logits_rules, r.output(), row, vocab);
  ApplyPenalties(row, vocab, r.req.sampling, r.prompt(), r.output());
  if (r.num_output_tokens() < r.req.min_tokens) {
    // vLLM's min-tokens processor: stop tokens and EOS cannot be drawn yet.
    for (const auto* ids : {&r.req.stop_token_ids, &r.req.eos_token_ids}) {
      for (int32_t t : *ids) {
        if (t >= 0 && t < vocab) row[t] = -std::numeric_limits<float>::infinity();
      }
    }
  }
  // On the sampled row after the other rules, so that its fallback sees their masks.
  if (constrained) ApplyConstraint(r, allowed, row, vocab);
  // A thinking section at its budget: the end marker's next token, whatever the logits say
  // (vLLM's processor sets its logit to 1e9 after every other rule but the penalties).
  const int32_t forced = ForcedByThinkingBudget(r);
  out.token = forced >= 0 ? forced : SampleToken(row, vocab, r.req.sampling, r.rng);
  if (r.req.constraint) AdvanceConstraint(r, out.token);
  if (want_logprobs) {
    TokenLogprobs lp;
    lp.token = out.token;
    lp.logprob = (*scratch)[out.token];
    if (r.req.logprobs > 0) lp.top = TopK(scratch->data(), vocab, std::min<int64_t>(r.req.logprobs, vocab));
    out.logprobs = std::move(lp);
  }
  return out;
}

std::vector<SampledToken> SampleWithDraft(RequestState& r, float* rows, int64_t count,
                                          int64_t vocab, int64_t max_model_len,
                                          std::vector<float>* scratch) {
  std::vector<SampledToken> out;
  for (int64_t j = 0; j < count; ++j) {
    out.push_back(SampleForRequest(r, rows + j * vocab, vocab, scratch));
    const int32_t token = out.back().token;
    r.tokens.push_back(token);
    if (CheckFinish(r, max_model_len).finished) break;
    if (j + 1 < count && token != r.draft[static_cast<size_t>(j)]) break;
  }
  return out;
}

TokenLogprobs ScoreToken(const float* row, int64_t vocab, int32_t token, int32_t k,
                         std::vector<float>* scratch) {
  scratch->resize(static_cast<size_t>(vocab));
  LogSoftmax(row, vocab, scratch->data());
  TokenLogprobs lp;
  lp.token = token;
  lp.logprob = (*scratch)[token];
  lp.rank = CountAtLeast(scratch->data(), vocab, lp.logprob);
  if (k > 0) lp.top = TopK(scratch->data(), vocab, std::min<int64_t>(k, vocab));
  return lp;
}

FinishDecision CheckFinish(const RequestState& r, int64_t max_model_len) {
  FinishDecision d;
  const int32_t tok = r.tokens.back();
  const int64_t n_out = r.num_output_tokens();
  // min_tokens holds back stop tokens and EOS alike (vLLM; they are also masked while
  // sampling, see SampleForRequest).
  if (n_out >= r.req.min_tokens) {
    // EOS first, as vLLM's check_stop: an EOS id also listed in stop_token_ids is no
    // stop_reason.
    const auto& eos = r.req.eos_token_ids;
    if (!r.req.ignore_eos && std::find(eos.begin(), eos.end(), tok) != eos.end()) {
      d.finished = true;
      d.reason = "stop";
      return d;
    }
    const auto& stops = r.req.stop_token_ids;
    if (std::find(stops.begin(), stops.end(), tok) != stops.end()) {
      d.finished = true;
      d.reason = "stop";
      d.stop_token = tok;
      return d;
    }
  }
  if (n_out >= r.req.max_tokens || (max_model_len > 0 && r.num_tokens() >= max_model_len)) {
    d.finished = true;
    d.reason = "length";
  }
  return d;
}

}  // namespace cpm
