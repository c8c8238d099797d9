// Runs a reference dump's prompts (by prompt_ids) through the engine and compares: the last
// position's distribution (`eval logits`) and the greedy continuation (`eval greedy`).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "eval/greedy_metrics.h"
#include "eval/logit_metrics.h"
#include "eval/reference_dump.h"
#include "model/model.h"

namespace cpm {

class Tokenizer;

struct LogitsPromptResult {
  std::string id;
  std::string label;  // the prompt text, or its decoded ids
  RowMetrics metrics;
};

struct LogitsEval {
  std::vector<LogitsPromptResult> prompts;
  LogitsSummary summary;
};

struct GreedyPromptResult {
  std::string id;
  std::string label;
  std::vector<int32_t> ref_ids;  // the reference's continuation, cut to the compared length
  std::vector<int32_t> eng_ids;
  std::string ref_text;
  std::string eng_text;
  GreedyComparison comparison;
};

struct GreedyEval {
  int64_t tokens = 0;  // N: continuation length asked for
  std::vector<GreedyPromptResult> prompts;
  GreedySummary summary;
};

struct EvalRunOptions {
  int64_t block_size = 16;
  std::vector<int32_t> stop_ids;  // greedy stops after one of these (EOS), like HF generate
};

// Label of a record for tables: its prompt text, else the decoded ids, else the ids.
std::string PromptLabel(const ReferenceRecord& r, const Tokenizer* tokenizer);

// The checks the runs below make of a reference before computing anything, for a model of
// `vocab` ids: every record's prompt_ids, top_logprobs (enough of them) and greedy_ids (when
// present) usable. Errors name the file, line, record and field. `validate` calls it before
// starting its servers.
Status CheckReferenceForModel(const std::vector<ReferenceRecord>& refs, int64_t vocab);

// All prompts in one OfflineGenerator run with max_tokens 0 and recorded log-prob rows.
StatusOr<LogitsEval> RunLogitsEval(Model& model, ThreadPool& pool,
                                   const std::vector<ReferenceRecord>& refs,
                                   const Tokenizer* tokenizer, const EvalRunOptions& options);

// `tokens` 0: the reference's own length (meta.greedy_tokens, else its longest greedy_ids).
// Records without greedy_ids are an error: the dump was made without --greedy-tokens.
StatusOr<GreedyEval> RunGreedyEval(Model& model, ThreadPool& pool,
                                   const std::vector<ReferenceRecord>& refs,
                                   const Tokenizer* tokenizer, int64_t tokens,
                                   const EvalRunOptions& options);

}  // namespace cpm
