// Producing reference records from the engine: one batched prefill for the distributions,
// then the OfflineGenerator for greedy continuations.
#include "eval/dump_producer.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "engine/offline_generator.h"
#include "kv/block_pool.h"
#include "kv/kv_cache.h"
#include "kv/state_slots.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace cpm {

Status CheckIdsInVocab(const std::vector<int32_t>& ids, int64_t vocab_size, const std::string& what) {
  for (int32_t t : ids) {
    if (t < 0 || t >= vocab_size) {
      return InvalidArgument(what + ": token id " + std::to_string(t) +
                             " is outside the model's vocabulary (" + std::to_string(vocab_size) +
                             "); was the reference made with another tokenizer?");
    }
  }
  return OkStatus();
}

Status CheckPromptIds(const std::vector<int32_t>& ids, int64_t vocab_size, const std::string& id) {
  if (ids.empty()) return InvalidArgument("prompt '" + id + "' has no tokens");
  return CheckIdsInVocab(ids, vocab_size, "prompt '" + id + "'");
}

StatusOr<std::vector<std::vector<float>>> LastPositionLogits(
    Model& model, ThreadPool& pool, const std::vector<std::vector<int32_t>>& prompts,
    int64_t block_size) {
  const ModelInfo& info = model.info();
  std::vector<std::vector<int32_t>> tables(prompts.size());
  int32_t next_block = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) return InvalidArgument("a prompt needs at least one token");
    const int64_t n = BlocksForTokens(static_cast<int64_t>(prompts[i].size()), block_size);
    for (int64_t b = 0; b < n; ++b) tables[i].push_back(next_block++);
  }
  KvCache kv(info.kv, std::max<int32_t>(1, next_block), block_size, info.dtype);
  // Hybrid models (MiniCPM-V-4.6) also keep a recurrent state per sequence, zeroed at the start.
  std::unique_ptr<StateSlots> states;
  if (info.state_slot_bytes > 0) {
    states = std::make_unique<StateSlots>(static_cast<int64_t>(prompts.size()), info.state_slot_bytes);
  }
  std::vector<int32_t> tokens;
  std::vector<SeqStep> steps;
  std::vector<int64_t> rows;
  for (size_t i = 0; i < prompts.size(); ++i) {
    tokens.insert(tokens.end(), prompts[i].begin(), prompts[i].end());
    const int32_t slot = states ? *states->Allocate() : -1;
    const int64_t len = static_cast<int64_t>(prompts[i].size());
    steps.push_back({0, len, tables[i], slot, len});
    rows.push_back(static_cast<int64_t>(tokens.size()) - 1);
  }
  std::vector<float> logits(rows.size() * info.vocab_size);
  ForwardBatch batch;
  batch.tokens = tokens;
  batch.seqs = steps;
  batch.logit_rows = rows;
  CPM_RETURN_IF_ERROR(model.Forward(batch, kv, states.get(), logits.data(), pool));
  std::vector<std::vector<float>> out(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    out[r].assign(logits.begin() + r * info.vocab_size, logits.begin() + (r + 1) * info.vocab_size);
  }
  return out;
}

StatusOr<std::vector<ReferenceRecord>> ProduceDump(Model& model, ThreadPool& pool,
                                                   const Tokenizer* tokenizer,
                                                   const std::vector<PreparedPrompt>& prompts,
                                                   const DumpOptions& o) {
  const int64_t vocab = model.info().vocab_size;
  // `eval logits` refuses a shorter dump (see RequiredReferenceTopK): fail here, not there.
  if (o.top_k < RequiredReferenceTopK(vocab)) {
    return InvalidArgument("--top-k " + std::to_string(o.top_k) + ": a reference needs at least " +
                           std::to_string(RequiredReferenceTopK(vocab)) + " log-probs per prompt");
  }
  std::vector<std::vector<int32_t>> ids;
  for (const PreparedPrompt& p : prompts) {
    CPM_RETURN_IF_ERROR(CheckPromptIds(p.ids, vocab, p.id));
    ids.push_back(p.ids);
  }
  CPM_ASSIGN_OR_RETURN(std::vector<std::vector<float>> logits,
                       LastPositionLogits(model, pool, ids, o.block_size));

  std::vector<ReferenceRecord> records(prompts.size());
  std::vector<float> lp(vocab);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ReferenceRecord& r = records[i];
    r.id = prompts[i].id;
    r.prompt = prompts[i].text;
    r.prompt_ids = prompts[i].ids;
    r.chat = prompts[i].chat;
    r.meta = o.meta;
    const std::vector<float>& row = logits[i];
    // The same log_softmax the engine's sampler reports; the log-sum-exp separately in double.
    LogSoftmax(row.data(), vocab, lp.data());
    const double mx = *std::max_element(row.begin(), row.end());
    double sum = 0;
    for (float v : row) sum += std::exp(static_cast<double>(v) - mx);
    r.logsumexp = mx + std::log(sum);
    for (const auto& [id, v] : TopK(lp.data(), vocab, std::max<int32_t>(1, o.top_k))) {
      r.top_logprobs.emplace_back(id, static_cast<double>(v));
    }
  }

  if (o.greedy_tokens > 0) {
    std::vector<GenerateRequest> reqs;
    for (const auto& p : ids) {
      GenerateRequest g;
      g.prompt = p;
      g.sampling.temperature = 0.0f;
      g.max_tokens = o.greedy_tokens;
      g.stop_token_ids = o.stop_ids;
      reqs.push_back(std::move(g));
    }
    OfflineGeneratorOptions go;
    go.block_size = o.block_size;
    OfflineGenerator gen(model, pool, go);
    CPM_ASSIGN_OR_RETURN(std::vector<GenerateResult> results, gen.Run(reqs));
    for (size_t i = 0; i < results.size(); ++i) {
      records[i].greedy_ids = results[i].output;
      if (tokenizer) records[i].greedy_text = tokenizer->Decode(results[i].output, true);
    }
  }
  return records;
}

}  // namespace cpm
