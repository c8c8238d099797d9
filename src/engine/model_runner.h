// ModelRunner: turns a SchedulerOutput into one ForwardBatch (flat tokens, per-sequence steps,
// embedding rows, logit rows for sequences that reach their last known token and for the
// prompt rows of prompt_logprobs requests) and runs the model. Knows nothing about sampling or stopping. Engine thread only.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/scheduler.h"
#include "kv/kv_cache.h"
#include "kv/state_slots.h"
#include "model/model.h"

namespace cpm {

struct StepLogits {
  struct Row {
    RequestState* req = nullptr;
    // -1: the row samples the request's next token. Else a prompt_logprobs row: it scores
    // prompt token prompt_position + 1.
    int64_t prompt_position = -1;
    // Sampling rows under speculative decoding: 0 after the request's newest token, j after
    // its draft token j - 1 (a request's sampling rows are consecutive, in this order).
    int64_t draft_position = 0;
  };
  std::vector<float> logits;  // [rows.size(), vocab]
  std::vector<Row> rows;      // what each logits row is for
};

class ModelRunner {
 public:
  ModelRunner(Model& model, KvCache& kv, StateSlots* states, ThreadPool& pool)
      : model_(model), kv_(kv), states_(states), pool_(pool) {}

  // Runs every scheduled sequence's new tokens. Does not advance num_computed.
  Status Run(const SchedulerOutput& plan, StepLogits* out);

 private:
  Model& model_;
  KvCache& kv_;
  StateSlots* states_;
  ThreadPool& pool_;
  // Reused across steps.
  std::vector<int32_t> tokens_;
  std::vector<SeqStep> seqs_;
  std::vector<int64_t> logit_rows_;
  std::vector<int64_t> embed_rows_;
  std::vector<float> embeds_;
};

}  // namespace cpm
