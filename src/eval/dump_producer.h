// `cpmserve eval dump`: runs prepared prompts through a loaded model and returns reference
// records (top-K log-probs of the last position with the raw logits' log-sum-exp, and an
// optional greedy continuation), so one cpmserve configuration can be another's reference.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "base/thread_pool.h"
#include "eval/prompt_set.h"
#include "eval/reference_dump.h"
#include "model/model.h"

namespace cpm {

class Tokenizer;

struct DumpOptions {
  int32_t top_k = 20;                // entries of top_logprobs (the format wants >= 20)
  int64_t greedy_tokens = 0;         // 0: no greedy continuation
  std::vector<int32_t> stop_ids;     // greedy stops after emitting one of these (EOS)
  int64_t block_size = 16;
  nlohmann::json meta = nlohmann::json::object();  // copied into every record
};

// Raw logits of each prompt's last position, all prompts in one batched forward — the same
// step the OfflineGenerator runs first, so a dump and `eval logits` of one configuration agree
// bit for bit. rows[i] has vocab_size entries.
StatusOr<std::vector<std::vector<float>>> LastPositionLogits(
    Model& model, ThreadPool& pool, const std::vector<std::vector<int32_t>>& prompts,
    int64_t block_size);

// `tokenizer` (may be null) decodes greedy_text.
StatusOr<std::vector<ReferenceRecord>> ProduceDump(Model& model, ThreadPool& pool,
                                                   const Tokenizer* tokenizer,
                                                   const std::vector<PreparedPrompt>& prompts,
                                                   const DumpOptions& options);

// InvalidArgument naming `what` ("prompt 'p0'", a record's field) when an id is outside the
// model's vocabulary (a dump from another model's tokenizer).
Status CheckIdsInVocab(const std::vector<int32_t>& ids, int64_t vocab_size, const std::string& what);
// The same for a prompt's ids, which must also not be empty.
Status CheckPromptIds(const std::vector<int32_t>& ids, int64_t vocab_size, const std::string& id);

}  // namespace cpm
