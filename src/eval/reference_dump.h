// The reference dump: one JSON object per line per prompt, holding the top-K log-probs of the
// prompt's last position (and optionally a greedy continuation). Written by
// scripts/hf_reference_dump.py (transformers) and by `cpmserve eval dump`; read by eval/validate.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace cpm {

// The metrics read the reference's top-20 (top-20 overlap, relative error), so a dump must hold
// at least that many entries per row unless the whole vocabulary is smaller.
constexpr int64_t kReferenceMinTopK = 20;
inline int64_t RequiredReferenceTopK(int64_t vocab_size) {
  return vocab_size < kReferenceMinTopK ? vocab_size : kReferenceMinTopK;
}

// One line of the dump. Field names are the JSON keys (see src/eval/README.md):
//   {"id": "p0", "prompt": "你好", "prompt_ids": [1, 5, 9], "chat": false,
//    "top_logprobs": [[id, logprob], ...], "logsumexp": 12.3,
//    "greedy_ids": [...], "greedy_text": "...", "meta": {"producer": ..., "dtype": ...}}
struct ReferenceRecord {
  std::string id;
  std::optional<std::string> prompt;  // the text the ids came from (before chat rendering)
  std::vector<int32_t> prompt_ids;    // exactly what the model saw, BOS included
  bool chat = false;                  // prompt_ids come from a chat-rendered string
  // Top-K of log_softmax(logits) at the last prompt position, best first (ties: lower id
  // first), K >= 20 unless the vocabulary is smaller.
  std::vector<std::pair<int32_t, double>> top_logprobs;
  std::optional<double> logsumexp;  // of the raw logits of that row: logit = logprob + logsumexp
  std::optional<std::vector<int32_t>> greedy_ids;  // greedy continuation (EOS included if hit)
  std::optional<std::string> greedy_text;
  nlohmann::json meta = nlohmann::json::object();  // producer, model, dtype, threads, ...
  // "path:line" when read by ReadReferenceDump, so that checks against the model (which run
  // long after reading) can still name the file; not written back.
  std::string source;
};

nlohmann::json ReferenceRecordToJson(const ReferenceRecord& record);
// Validates types and invariants (non-empty prompt_ids, ids >= 0, top_logprobs sorted best
// first, log-probs <= 0 up to rounding); the message names the offending field.
StatusOr<ReferenceRecord> ReferenceRecordFromJson(const nlohmann::json& j);

// Reads a whole dump. Blank lines are skipped; errors carry "path:line: ". Ids must be unique.
StatusOr<std::vector<ReferenceRecord>> ReadReferenceDump(const std::string& path);
// Writes one compact JSON line per record (UTF-8, not ASCII-escaped).
Status WriteReferenceDump(const std::string& path, const std::vector<ReferenceRecord>& records);

}  // namespace cpm
