// The engine side of `eval logits` / `eval greedy`: build requests from the reference, run them
// in shared batched steps, hand the rows to the metric code.
#include "eval/eval_runner.h"

#include <algorithm>

#include "engine/offline_generator.h"
#include "eval/dump_producer.h"
#include "tokenizer/tokenizer.h"

namespace cpm {
namespace {

// "REF.jsonl:3: record 'p0'": where a reference record came from, for messages about it.
std::string Where(const ReferenceRecord& r) {
  return (r.source.empty() ? "" : r.source + ": ") + "record '" + r.id + "'";
}

Status CheckRecordPromptIds(const ReferenceRecord& r, int64_t vocab) {
  Status s = CheckPromptIds(r.prompt_ids, vocab, r.id);
  return s.ok() || r.source.empty() ? s : s.WithPrefix(r.source);
}

// Ids another tokenizer produced would be scored as impossible tokens (KL inf, empty text) and
// still come out as a normal table, so they are refused like foreign prompt ids.
Status CheckFieldIds(const ReferenceRecord& r, const char* field, const std::vector<int32_t>& ids,
                     int64_t vocab) {
  return CheckIdsInVocab(ids, vocab, Where(r) + ": " + field);
}

// The table reports top-20 overlap and the error over the reference's top-20: a shorter list
// would make those figures describe fewer ids than they claim (K = 1 reads as "20/20").
Status CheckTopLogprobs(const ReferenceRecord& r, int64_t vocab) {
  const int64_t need = RequiredReferenceTopK(vocab);
  if (static_cast<int64_t>(r.top_logprobs.size()) < need) {
    return InvalidArgument(Where(r) + ": top_logprobs: holds " + std::to_string(r.top_logprobs.size()) +
                           " entries, the metrics need at least " + std::to_string(need) +
                           " (top-20, or the whole vocabulary of " + std::to_string(vocab) +
                           " when smaller); dump with a larger top-k");
  }
  std::vector<int32_t> ids;
  for (const auto& [id, lp] : r.top_logprobs) ids.push_back(id);
  return CheckFieldIds(r, "top_logprobs", ids, vocab);
}

}  // namespace

Status CheckReferenceForModel(const std::vector<ReferenceRecord>& refs, int64_t vocab) {
  for (const ReferenceRecord& r : refs) {
    CPM_RETURN_IF_ERROR(CheckRecordPromptIds(r, vocab));
    CPM_RETURN_IF_ERROR(CheckTopLogprobs(r, vocab));
    if (r.greedy_ids) CPM_RETURN_IF_ERROR(CheckFieldIds(r, "greedy_ids", *r.greedy_ids, vocab));
  }
  return OkStatus();
}

std::string PromptLabel(const ReferenceRecord& r, const Tokenizer* tokenizer) {
  if (r.prompt) return *r.prompt;
  if (tokenizer) return tokenizer->Decode(r.prompt_ids, /*skip_special_tokens=*/true);
  std::string s = "ids";
  for (size_t i = 0; i < r.prompt_ids.size() && i < 8; ++i) s += " " + std::to_string(r.prompt_ids[i]);
  if (r.prompt_ids.size() > 8) s += " ...";
  return s;
}

StatusOr<LogitsEval> RunLogitsEval(Model& model, ThreadPool& pool,
                                   const std::vector<ReferenceRecord>& refs,
                                   const Tokenizer* tokenizer, const EvalRunOptions& o) {
  const int64_t vocab = model.info().vocab_size;
  std::vector<GenerateRequest> reqs;
  for (const ReferenceRecord& r : refs) {
    CPM_RETURN_IF_ERROR(CheckRecordPromptIds(r, vocab));
    CPM_RETURN_IF_ERROR(CheckTopLogprobs(r, vocab));
  }
  for (const ReferenceRecord& r : refs) {
    GenerateRequest g;
    g.prompt = r.prompt_ids;
    g.max_tokens = 0;
    g.sampling.temperature = 0.0f;
    g.record_logprob_rows = true;
    reqs.push_back(std::move(g));
  }
  OfflineGeneratorOptions go;
  go.block_size = o.block_size;
  OfflineGenerator gen(model, pool, go);
  CPM_ASSIGN_OR_RETURN(std::vector<GenerateResult> results, gen.Run(reqs));
  LogitsEval eval;
  std::vector<RowMetrics> rows;
  for (size_t i = 0; i < refs.size(); ++i) {
    if (results[i].logprob_rows.empty()) return Internal("the engine returned no log-prob row");
    const std::vector<float>& row = results[i].logprob_rows.back();
    const double eng_logsumexp = results[i].row_logsumexps.back();
    LogitsPromptResult p{refs[i].id, PromptLabel(refs[i], tokenizer),
                         ComputeRowMetrics(refs[i].top_logprobs, row, refs[i].logsumexp,
                                           eng_logsumexp)};
    rows.push_back(p.metrics);
    eval.prompts.push_back(std::move(p));
  }
  eval.summary = SummarizeRows(rows);
  return eval;
}

StatusOr<GreedyEval> RunGreedyEval(Model& model, ThreadPool& pool,
                                   const std::vector<ReferenceRecord>& refs,
                                   const Tokenizer* tokenizer, int64_t tokens,
                                   const EvalRunOptions& o) {
  const int64_t vocab = model.info().vocab_size;
  for (const ReferenceRecord& r : refs) {
    if (!r.greedy_ids) {
      return InvalidArgument(Where(r) + " has no greedy_ids (make the dump with --greedy-tokens N)");
    }
    CPM_RETURN_IF_ERROR(CheckRecordPromptIds(r, vocab));
    CPM_RETURN_IF_ERROR(CheckFieldIds(r, "greedy_ids", *r.greedy_ids, vocab));
  }
  const bool tokens_given = tokens > 0;
  if (tokens <= 0) {
    const auto& meta = refs.front().meta;
    if (auto it = meta.find("greedy_tokens"); it != meta.end() && it->is_number_integer()) {
      tokens = it->get<int64_t>();
    }
    for (const ReferenceRecord& r : refs) {
      tokens = std::max<int64_t>(tokens, static_cast<int64_t>(r.greedy_ids->size()));
    }
    if (tokens <= 0) return InvalidArgument("the reference's greedy continuations are empty");
  }
  // A reference cut shorter than N (not by an EOS) cannot say what its later tokens would have
  // been: comparing against it would count each of them as a divergence. With --tokens it is
  // refused; with N taken from the reference, that record is compared over its own length.
  std::vector<int64_t> lengths;
  for (const ReferenceRecord& r : refs) {
    const std::vector<int32_t>& ids = *r.greedy_ids;
    const bool ended =
        !ids.empty() &&
        std::find(o.stop_ids.begin(), o.stop_ids.end(), ids.back()) != o.stop_ids.end();
    const int64_t held = static_cast<int64_t>(ids.size());
    if (held < tokens && !ended && tokens_given) {
      return InvalidArgument(Where(r) + ": greedy_ids holds " + std::to_string(ids.size()) +
                             " tokens and no EOS, fewer than the " + std::to_string(tokens) +
                             " to compare (--tokens); the reference was made with fewer");
    }
    lengths.push_back(held < tokens && !ended ? held : tokens);
  }
  std::vector<GenerateRequest> reqs;
  for (size_t i = 0; i < refs.size(); ++i) {
    const ReferenceRecord& r = refs[i];
    GenerateRequest g;
    g.prompt = r.prompt_ids;
    g.max_tokens = lengths[i];
    g.sampling.temperature = 0.0f;
    g.stop_token_ids = o.stop_ids;
    reqs.push_back(std::move(g));
  }
  OfflineGeneratorOptions go;
  go.block_size = o.block_size;
  OfflineGenerator gen(model, pool, go);
  CPM_ASSIGN_OR_RETURN(std::vector<GenerateResult> results, gen.Run(reqs));

  GreedyEval eval;
  eval.tokens = tokens;
  std::vector<GreedyComparison> rows;
  for (size_t i = 0; i < refs.size(); ++i) {
    GreedyPromptResult p;
    p.id = refs[i].id;
    p.label = PromptLabel(refs[i], tokenizer);
    p.ref_ids = *refs[i].greedy_ids;
    // A reference longer than N is compared on its first N tokens only.
    if (static_cast<int64_t>(p.ref_ids.size()) > tokens) p.ref_ids.resize(tokens);
    p.eng_ids = results[i].output;
    if (tokenizer) {
      p.ref_text = tokenizer->Decode(p.ref_ids, true);
      p.eng_text = tokenizer->Decode(p.eng_ids, true);
    } else if (refs[i].greedy_text && p.ref_ids.size() == refs[i].greedy_ids->size()) {
      p.ref_text = *refs[i].greedy_text;
    }
    p.comparison = CompareGreedy(p.ref_ids, p.eng_ids);
    rows.push_back(p.comparison);
    eval.prompts.push_back(std::move(p));
  }
  eval.summary = SummarizeGreedy(rows);
  return eval;
}

}  // namespace cpm
