// ModelRunner: turns a SchedulerOutput into one ForwardBatch (flat tokens, per-sequence steps,
// embedding rows, logit rows for sequences that reach their last known token) and runs the
// model. Knows nothing about sampling or stopping. Engine thread only.
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
  std::vector<float> logits;          // [rows.size(), vocab]
  std::vector<RequestState*> rows;    // the request each logits row belongs to
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
