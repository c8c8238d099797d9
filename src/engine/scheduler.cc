#include "engine/scheduler.h"

#include <algorithm>

#include "base/check.h"

namespace cpm {

const char* ToString(RequestStatus s) {
  switch (s) {
    case RequestStatus::kWaiting: return "waiting";
    case RequestStatus::kRunning: return "running";
    case RequestStatus::kFinished: return "finished";
    case RequestStatus::kCount: break;
  }
  return "?";
}

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager& kv, StateSlots* slots)
    : config_(config), kv_(kv), slots_(slots) {
  CPM_CHECK(config_.max_num_seqs > 0 && config_.max_num_batched_tokens > 0);
}

Status Scheduler::CheckFits(const RequestState& r) const {
  const int64_t max_tokens = std::max<int64_t>(r.req.max_tokens, 0);
  int64_t tokens = r.num_tokens() + max_tokens;
  if (config_.max_model_len > 0) tokens = std::min(tokens, config_.max_model_len);
  // The last sampled token is never fed, so the cache holds at most tokens - 1; a prompt_logprobs
  // request with no token to sample (max_tokens 0) feeds its whole prompt.
  const int64_t cached = max_tokens == 0 && r.req.prompt_logprobs >= 0 ? tokens : tokens - 1;
  const int64_t need = BlocksForTokens(std::max<int64_t>(cached, 1), kv_.block_size());
  if (need > kv_.pool().num_blocks()) {
    return ResourceExhausted("request needs " + std::to_string(need) + " KV cache blocks (" +
                             std::to_string(tokens) + " tokens of prompt and output) but the cache has only " +
                             std::to_string(kv_.pool().num_blocks()));
  }
  return OkStatus();
}

void Scheduler::Add(std::unique_ptr<RequestState> r) {
  RequestState* p = r.get();
  CPM_CHECK(requests_.emplace(p->req.request_id, std::move(r)).second);
  p->status = RequestStatus::kWaiting;
  Enqueue(p, false);
}

namespace {

// Earlier in the priority policy's order: lower priority value, then earlier arrival.
bool ComesBefore(const RequestState& a, const RequestState& b) {
  return a.req.priority != b.req.priority ? a.req.priority < b.req.priority : a.seq_no < b.seq_no;
}

}  // namespace

void Scheduler::Enqueue(RequestState* r, bool preempted) {
  if (!config_.priority_policy) {
    if (preempted) {
      waiting_.push_front(r);
    } else {
      waiting_.push_back(r);
    }
    return;
  }
  auto at = std::upper_bound(waiting_.begin(), waiting_.end(), r,
                             [](const RequestState* a, const RequestState* b) {
                               return ComesBefore(*a, *b);
                             });
  waiting_.insert(at, r);
}

size_t Scheduler::VictimIndex() const {
  if (!config_.priority_policy) return running_.size() - 1;
  size_t v = 0;
  for (size_t i = 1; i < running_.size(); ++i) {
    if (ComesBefore(*running_[v], *running_[i])) v = i;
  }
  return v;
}

RequestState* Scheduler::Find(const std::string& request_id) {
  auto it = requests_.find(request_id);
  return it == requests_.end() ? nullptr : it->second.get();
}

void Scheduler::ReleaseResources(RequestState& r) {
  kv_.Free(r);
  if (r.state_slot >= 0) {
    slots_->Release(r.state_slot);
    r.state_slot = -1;
  }
}

RequestState* Scheduler::Preempt(size_t index) {
  RequestState* victim = running_[index];
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
  // Recompute from scratch later: its tokens (prompt and outputs so far) stay; the state
  // slot is freed too because a recurrent state cannot be rewound.
  ReleaseResources(*victim);
  victim->draft.clear();
  victim->status = RequestStatus::kWaiting;
  ++victim->num_preemptions;
  ++num_preemptions_;
  Enqueue(victim, true);
  return victim;
}

namespace {

// The first of `r`'s positions from `from` on whose prompt log-probs are still to be computed
// (a recompute after preemption does not score its positions again: ModelRunner).
int64_t FirstUnscored(const RequestState& r, int64_t from) {
  return std::max(from, static_cast<int64_t>(r.prompt_logprobs.size()));
}

// Rows of prompt log-probs (each a vocab-wide logits row) that `n` tokens of `r` from `from` ask
// for: positions not scored yet whose next token is a prompt token (ModelRunner's rows).
int64_t PromptLogprobRows(const RequestState& r, int64_t from, int64_t n) {
  if (r.req.prompt_logprobs < 0) return 0;
  return std::max<int64_t>(
      0, std::min(from + n, r.num_prompt_tokens - 1) - FirstUnscored(r, from));
}

// Tokens `r` may take this step out of `budget` and `logprob_rows` (what is left of the step's
// kPromptLogprobsChunk rows), starting from `from` computed tokens. A step that stops inside
// the prompt stops on a multiple of `prompt_chunk` (hybrid models compute a prompt in chunks of
// that many positions from position 0: SeqStep::num_prompt_tokens), so 0 when the budget does
// not reach the next multiple; the request then waits for a step with more.
int64_t ChunkSize(const RequestState& r, int64_t from, int64_t budget, int64_t logprob_rows,
                  int64_t prompt_chunk) {
  int64_t n = std::min(r.num_tokens() - from, budget);
  if (PromptLogprobRows(r, from, n) > logprob_rows) {
    n = FirstUnscored(r, from) + logprob_rows - from;
  }
  if (const int64_t end = from + n; prompt_chunk > 1 && end < r.num_prompt_tokens) {
    n = std::max<int64_t>(0, end / prompt_chunk * prompt_chunk - from);
  }
  return n;
}

}  // namespace

int64_t Scheduler::RequestBudget(int64_t budget) const {
  const int64_t threshold = config_.long_prefill_token_threshold;
  if (threshold <= 0 || !config_.enable_chunked_prefill) return budget;
  const int64_t chunk = std::max<int64_t>(1, config_.prompt_chunk_tokens);
  return std::min(budget, (threshold + chunk - 1) / chunk * chunk);
}

SchedulerOutput Scheduler::Schedule() {
  SchedulerOutput out;
  int64_t budget = config_.max_num_batched_tokens;
  int64_t logprob_rows = kPromptLogprobsChunk;  // over all of the step's requests
  // Running requests first (mostly decodes: one token each), in admission order.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    RequestState* r = running_[i];
    const int64_t room = RequestBudget(budget);  // this request's share of the step
    const int64_t n =
        ChunkSize(*r, r->num_computed, room, logprob_rows, config_.prompt_chunk_tokens);
    if (n == 0) {  // a prefill short of its next chunk boundary, or of log-prob rows: later
      ++i;
      continue;
    }
    // A decode's draft rides along where budget and blocks allow; it is dropped rather than
    // making room for it by preempting.
    int64_t d = r->num_computed + n == r->num_tokens()
                    ? std::min(static_cast<int64_t>(r->draft.size()), room - n)
                    : 0;
    if (d > 0 && !kv_.AllocateSlots(*r, n + d, nullptr)) d = 0;
    if (d == 0) r->draft.clear();
    bool self_preempted = false;
    while (d == 0 && !kv_.AllocateSlots(*r, n, nullptr)) {
      const size_t v = VictimIndex();
      if (v < i) {
        // Met earlier this step (priority policy only): out of the plan again if it is in it
        // (a prefill left for a later step is not), and the running list shifts by one.
        const auto planned =
            std::find_if(out.seqs.begin(), out.seqs.end(),
                         [&](const ScheduledSeq& s) { return s.req == running_[v]; });
        if (planned != out.seqs.end()) {
          budget += planned->num_tokens + planned->num_draft;
          logprob_rows += PromptLogprobRows(*planned->req, planned->req->num_computed,
                                            planned->num_tokens);
          out.num_tokens -= planned->num_tokens + planned->num_draft;
          out.seqs.erase(planned);
        }
        --i;
      }
      RequestState* victim = Preempt(v);
      out.preempted.push_back(victim);
      if (victim == r) {
        self_preempted = true;
        break;
      }
    }
    if (self_preempted) break;
    kv_.CacheBlocksThrough(*r, r->num_computed + n);  // the step's own tokens, not its draft
    out.seqs.push_back({r, n, d});
    out.num_tokens += n + d;
    budget -= n + d;
    logprob_rows -= PromptLogprobRows(*r, r->num_computed, n);
    ++i;
  }
  // As vLLM: no new admissions in a step that had to preempt (memory is tight).
  if (out.preempted.empty()) ScheduleWaiting(&budget, &logprob_rows, &out);
  return out;
}

void Scheduler::ScheduleWaiting(int64_t* budget, int64_t* logprob_rows, SchedulerOutput* out) {
  for (size_t w = 0;
       w < waiting_.size() && *budget > 0 && num_running() < config_.max_num_seqs;) {
    RequestState* r = waiting_[w];
    CPM_CHECK(r->num_computed == 0 && r->blocks.empty());
    if (slots_ && slots_->num_free() == 0) break;
    ComputedBlocks hit = kv_.GetComputedBlocks(*r);
    if (!config_.enable_chunked_prefill && r->num_tokens() - hit.num_tokens > *budget &&
        r->req.prompt_logprobs < 0) {
      break;  // FCFS: waits for a step with room for its whole prompt
    }
    const int64_t n = ChunkSize(*r, hit.num_tokens, RequestBudget(*budget), *logprob_rows,
                                config_.prompt_chunk_tokens);
    if (n == 0) {
      // Out of this step's prompt log-prob rows: the requests behind it, which need none, may
      // still go (it keeps its place). Short of a prompt-chunk boundary: FCFS, all wait.
      if (*logprob_rows == 0 && PromptLogprobRows(*r, hit.num_tokens, 1) > 0) {
        ++w;
        continue;
      }
      break;
    }
    if (!kv_.AllocateSlots(*r, n, &hit)) break;  // waits for blocks; FCFS, no skipping
    if (slots_) {
      // Not cleared here: the model starts a sequence's first step from the zero state (SeqStep),
      // and a MiniCPM-V-4.6 slot is ~19 MiB of the engine thread's time.
      const std::optional<int32_t> slot = slots_->Allocate(/*zero=*/false);
      CPM_CHECK(slot.has_value());  // checked free above
      r->state_slot = *slot;
    }
    if (r->num_cached_tokens < 0) {
      // Counted once per request, at its first admission (recomputes after preemption are
      // not new queries), and only where the cache was looked up (vLLM: a request that skips
      // the lookup is no query).
      r->num_cached_tokens = hit.num_tokens;
      if (kv_.ReadsPrefixCache(*r)) {
        prefix_cache_queries_ += r->num_tokens();
        prefix_cache_hits_ += hit.num_tokens;
      }
    }
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(w));
    r->status = RequestStatus::kRunning;
    running_.push_back(r);
    kv_.CacheBlocksThrough(*r, r->num_computed + n);
    out->seqs.push_back({r, n});
    out->num_tokens += n;
    *budget -= n;
    *logprob_rows -= PromptLogprobRows(*r, hit.num_tokens, n);
  }
}

std::unique_ptr<RequestState> Scheduler::Remove(RequestState* r) {
  auto it = requests_.find(r->req.request_id);
  CPM_CHECK(it != requests_.end() && it->second.get() == r);
  std::unique_ptr<RequestState> owned = std::move(it->second);
  requests_.erase(it);
  if (r->status == RequestStatus::kRunning) {
    running_.erase(std::find(running_.begin(), running_.end(), r));
  } else if (r->status == RequestStatus::kWaiting) {
    auto w = std::find(waiting_.begin(), waiting_.end(), r);
    if (w != waiting_.end()) waiting_.erase(w);
  }
  ReleaseResources(*r);
  r->status = RequestStatus::kFinished;
  return owned;
}

}  // namespace cpm
