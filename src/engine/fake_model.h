// FakeModel: a Model for engine tests. Each new token's id is written into the paged KV cache;
// a logits row is a deterministic function of everything read back through the sequence's
// block table (so wrong block tables, bad prefix hits or lost K/V change the output), and of
// the position. Records what each step was asked. Not for production use.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <vector>

#include "model/model.h"

namespace cpm {

struct FakeModelOptions {
  int64_t vocab_size = 97;
  int64_t max_position_embeddings = 4096;
  int64_t state_slot_bytes = 0;  // > 0: behaves as a hybrid model with a recurrent state
  int64_t step_delay_us = 0;     // sleep per Forward (makes cancellation windows wide)
  int32_t fail_token = -1;       // a step containing this token fails (error-path tests)
};

struct FakeStep {
  std::vector<SeqStep> seqs;  // block_table spans are cleared (they dangle after the call)
  int64_t num_tokens = 0;
  int64_t num_logit_rows = 0;
};

class FakeModel : public Model {
 public:
  explicit FakeModel(const FakeModelOptions& options = {});
  const ModelInfo& info() const override { return info_; }
  Status Forward(const ForwardBatch& batch, KvCache& kv, StateSlots* states, float* logits,
                 ThreadPool& pool) override;

  // Thread-safe views for the test thread.
  std::vector<FakeStep> Steps() const;
  // While paused, Forward blocks at entry; WaitUntilBlocked returns once one call is blocked.
  void Pause();
  void WaitUntilBlocked();
  void Resume();

  // The logits the fake computes for a history hash at a position (tests use it as oracle).
  static void Logits(uint64_t history, int64_t pos, int64_t vocab, float* out);

 private:
  ModelInfo info_;
  FakeModelOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool paused_ = false;
  bool blocked_ = false;
  std::vector<FakeStep> steps_;
};

}  // namespace cpm
