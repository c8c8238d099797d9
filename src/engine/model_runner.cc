#include "engine/model_runner.h"

#include <algorithm>

#include "base/check.h"

namespace cpm {

Status ModelRunner::Run(const SchedulerOutput& plan, StepLogits* out) {
  tokens_.clear();
  seqs_.clear();
  logit_rows_.clear();
  embed_rows_.clear();
  embeds_.clear();
  out->rows.clear();
  const int64_t hidden = model_.info().hidden_size;
  const int64_t block_size = kv_.block_size();
  for (const ScheduledSeq& s : plan.seqs) {
    RequestState& r = *s.req;
    const int64_t first_row = static_cast<int64_t>(tokens_.size());
    const int64_t begin = r.num_computed, end = r.num_computed + s.num_tokens;
    CPM_CHECK(end <= r.num_tokens());
    CPM_CHECK(s.num_draft <= static_cast<int64_t>(r.draft.size()));
    CPM_CHECK(s.num_draft == 0 || end == r.num_tokens());
    CPM_CHECK(static_cast<int64_t>(r.blocks.size()) * block_size >= end + s.num_draft);
    tokens_.insert(tokens_.end(), r.tokens.begin() + begin, r.tokens.begin() + end);
    tokens_.insert(tokens_.end(), r.draft.begin(), r.draft.begin() + s.num_draft);
    SeqStep step;
    step.num_computed = begin;
    step.num_tokens = s.num_tokens + s.num_draft;
    step.block_table = r.blocks;
    step.state_slot = r.state_slot;
    step.num_prompt_tokens = r.num_prompt_tokens;
    seqs_.push_back(step);
    // Multimodal rows of this chunk (recomputed after a preemption like any prompt row).
    const std::vector<int64_t>& er = r.req.embed_rows;
    for (size_t j = 0; j < er.size(); ++j) {
      if (er[j] < begin || er[j] >= end) continue;
      embed_rows_.push_back(first_row + er[j] - begin);
      const float* e = r.req.embeds.data() + static_cast<int64_t>(j) * hidden;
      embeds_.insert(embeds_.end(), e, e + hidden);
    }
    // prompt_logprobs: every row whose next token is a prompt token not scored yet (rows in
    // ascending order, before the sampling row, which is never one of them).
    if (r.req.prompt_logprobs >= 0) {
      const int64_t from = std::max(begin, static_cast<int64_t>(r.prompt_logprobs.size()));
      for (int64_t p = from; p < std::min(end, r.num_prompt_tokens - 1); ++p) {
        logit_rows_.push_back(first_row + p - begin);
        out->rows.push_back({&r, p});
      }
    }
    // Only a sequence that reaches its newest token samples; a prefill chunk short of it
    // needs no logits.
    if (end == r.num_tokens()) {
      for (int64_t j = 0; j <= s.num_draft; ++j) {
        logit_rows_.push_back(first_row + s.num_tokens - 1 + j);
        out->rows.push_back({&r, -1, j});
      }
    }
  }
  out->logits.resize(logit_rows_.size() * static_cast<size_t>(model_.info().vocab_size));
  ForwardBatch batch;
  batch.tokens = tokens_;
  batch.seqs = seqs_;
  batch.logit_rows = logit_rows_;
  batch.embed_rows = embed_rows_;
  batch.embeds = embeds_.empty() ? nullptr : embeds_.data();
  return model_.Forward(batch, kv_, states_, out->logits.data(), pool_);
}

}  // namespace cpm
