// The model interface the engine drives: one batched forward step over a flat list of new
// tokens from several sequences (prefill chunks and decodes mixed), reading and writing a paged
// KV cache and, for hybrid models, per-sequence recurrent-state slots.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "kv/kv_cache.h"
#include "tensor/dtype.h"

namespace cpm {

class StateSlots;  // per-sequence recurrent state of linear-attention layers (hybrid models)

// What the engine must know about a loaded model.
struct ModelInfo {
  std::string architecture;        // HF `architectures[0]`
  int64_t vocab_size = 0;          // rows of the logits
  int64_t hidden_size = 0;
  int64_t max_position_embeddings = 0;
  int64_t max_positions = 0;       // positions this load computes (its RoPE table: max_model_len)
  DType dtype = DType::kBF16;      // compute dtype (weights and KV cache)
  KvCacheSpec kv;                  // paged KV cache shape
  int64_t state_slot_bytes = 0;    // per-sequence recurrent state; 0 for pure attention models
  // > 1: the recurrent layers compute a prompt in chunks of this many positions from position 0
  // (SeqStep::num_prompt_tokens), so a step that stops inside a prompt must stop on a multiple
  // of it for the result not to depend on where it stopped.
  int64_t prompt_chunk_tokens = 1;
  int64_t weight_bytes = 0;        // bytes of weights held (mmapped or owned)
  std::vector<int32_t> eos_token_ids;  // from config.json (the tokenizer may add more)
};

// One sequence's part of a forward step.
struct SeqStep {
  int64_t num_computed = 0;  // tokens already in the cache = position of the first new token
  int64_t num_tokens = 0;    // new tokens in this step (rows of the flat batch, in order)
  std::span<const int32_t> block_table;  // KV blocks covering num_computed + num_tokens tokens
  // Recurrent-state slot (hybrid models only). A sequence with num_computed 0 starts from the
  // zero state whatever the slot holds, so the engine hands out slots without clearing them.
  int32_t state_slot = -1;
  // The sequence's prompt length. Hybrid models compute its positions below this in fixed
  // chunks from position 0 and later ones token by token, so that a token's arithmetic does not
  // depend on how steps split the sequence (ModelInfo::prompt_chunk_tokens).
  int64_t num_prompt_tokens = 0;
};

struct ForwardBatch {
  std::span<const int32_t> tokens;  // [T]: every sequence's new tokens, back to back
  std::span<const SeqStep> seqs;    // their order in `tokens`
  // Rows of [T] whose next-token logits are wanted (usually each sequence's last new token).
  std::span<const int64_t> logit_rows;
  // Optional input embeddings that replace the token embedding where `embed_rows` says
  // (multimodal placeholders): embeds [embed_rows.size(), hidden_size].
  std::span<const int64_t> embed_rows;
  const float* embeds = nullptr;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelInfo& info() const = 0;
  // Runs one step. logits: [logit_rows.size(), vocab_size] f32. Writes the new tokens' K/V
  // (and recurrent state) into `kv` (and `states`). Shapes are validated by the caller.
  virtual Status Forward(const ForwardBatch& batch, KvCache& kv, StateSlots* states,
                         float* logits, ThreadPool& pool) = 0;
};

}  // namespace cpm
