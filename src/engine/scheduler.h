// Scheduler: vLLM v1's unified token budget. There is no prefill or decode phase: each request
// has num_computed tokens and a target (all its known tokens), and each step hands out tokens
// under max_num_batched_tokens and max_num_seqs, running requests first, then waiting ones;
// a chunked prefill is just a request given fewer tokens than it needs. When blocks run out
// the most recently admitted running request is preempted (freed, recomputed later). Owns
// every live RequestState. Engine thread only; never touches tensors.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "engine/kv_cache_manager.h"
#include "engine/request_state.h"
#include "kv/state_slots.h"

namespace cpm {

// The most prompt log-prob rows a step computes, over all its prompt_logprobs requests: each is a
// logits row (vocab floats), so this bounds that buffer (256 x 73448 x 4 B = 72 MiB for
// MiniCPM4, 242 MiB for MiniCPM-V-4.6).
constexpr int64_t kPromptLogprobsChunk = 256;

struct SchedulerConfig {
  int64_t max_num_seqs = 128;
  int64_t max_num_batched_tokens = 2048;
  int64_t max_model_len = 0;
  // Off: a waiting request is admitted only when its whole prompt (less its cached prefix) fits
  // the step's budget, else it and those behind it wait (vLLM V1). Prompt log-prob requests still
  // run in chunks of kPromptLogprobsChunk, which bound their logits.
  bool enable_chunked_prefill = true;
  // vLLM's --scheduling-policy priority: the waiting queue is ordered by (priority, arrival),
  // lower first, and a preemption takes the running request last in that order (perhaps one
  // already scheduled this step, which is then taken out of the plan). Off: first come, first
  // served, and the newest running request is preempted.
  bool priority_policy = false;
  // ModelInfo::prompt_chunk_tokens: a prefill step that stops inside a prompt stops on a
  // multiple of it.
  int64_t prompt_chunk_tokens = 1;
  // vLLM's --long-prefill-token-threshold: with chunked prefill, a request takes at most this
  // many tokens a step (0: no cap), rounded up to prompt_chunk_tokens, so that long prompts
  // leave room in the step for others.
  int64_t long_prefill_token_threshold = 0;
};

struct ScheduledSeq {
  RequestState* req = nullptr;
  int64_t num_tokens = 0;  // new tokens this step, from req->num_computed on
  int64_t num_draft = 0;   // draft tokens fed after them (req->draft's first ones)
};

// The plan of one step: a plain data contract between the scheduler and the step runner.
struct SchedulerOutput {
  std::vector<ScheduledSeq> seqs;  // running ones first, in running order
  int64_t num_tokens = 0;
  std::vector<RequestState*> preempted;  // this step; they are waiting again
};

class Scheduler {
 public:
  // `slots` is null unless the model keeps per-sequence state.
  Scheduler(const SchedulerConfig& config, KvCacheManager& kv, StateSlots* slots);

  // OK if the request can ever run: it must fit in the whole KV cache alone.
  Status CheckFits(const RequestState& r) const;
  // Queues a request: at the back of the waiting queue (fcfs), or after those that come before
  // it by (priority, arrival) under the priority policy.
  void Add(std::unique_ptr<RequestState> r);
  RequestState* Find(const std::string& request_id);

  SchedulerOutput Schedule();

  // Removes a live request (finished, cancelled or failed), freeing its blocks and slot.
  std::unique_ptr<RequestState> Remove(RequestState* r);

  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  bool empty() const { return requests_.empty(); }
  const std::vector<RequestState*>& running() const { return running_; }
  const std::deque<RequestState*>& waiting() const { return waiting_; }

  int64_t num_preemptions() const { return num_preemptions_; }
  int64_t prefix_cache_queries() const { return prefix_cache_queries_; }  // tokens
  int64_t prefix_cache_hits() const { return prefix_cache_hits_; }        // tokens

 private:
  // The running request a preemption takes: the newest, or under the priority policy the last
  // by (priority, arrival).
  size_t VictimIndex() const;
  // Frees running_[index] and queues it to wait again (FCFS: at the front).
  RequestState* Preempt(size_t index);
  // Queues `r` to wait: FCFS at the back (or the front for a preempted one); under the
  // priority policy at its place by (priority, arrival).
  void Enqueue(RequestState* r, bool preempted);
  void ReleaseResources(RequestState& r);
  // Admits waiting requests into the remaining budget; stops at the first that does not fit.
  void ScheduleWaiting(int64_t* budget, int64_t* logprob_rows, SchedulerOutput* out);
  // What one request may take of the step's remaining `budget` (long_prefill_token_threshold).
  int64_t RequestBudget(int64_t budget) const;

  SchedulerConfig config_;
  KvCacheManager& kv_;
  StateSlots* slots_;
  std::unordered_map<std::string, std::unique_ptr<RequestState>> requests_;
  std::vector<RequestState*> running_;  // admission order; the back is preempted first
  std::deque<RequestState*> waiting_;
  int64_t num_preemptions_ = 0;
  int64_t prefix_cache_queries_ = 0;
  int64_t prefix_cache_hits_ = 0;
};

}  // namespace cpm
