// The engine loop: one thread owns the scheduler, the KV cache, the state slots and the model.
// HTTP threads talk to it only through a locked inbox (new requests, cancels) and read a
// stats snapshot it publishes; everything else here runs on the engine thread.
#include "engine/engine.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <deque>
#include <future>
#include <random>
#include <thread>
#include <unordered_set>

#include "base/check.h"
#include "base/log.h"
#include "engine/kv_cache_manager.h"
#include "engine/model_runner.h"
#include "engine/request_sampler.h"
#include "engine/request_state.h"
#include "engine/scheduler.h"
#include "kernels/sampling_ops.h"
#include "kv/block_pool.h"
#include "kv/kv_cache.h"
#include "kv/state_slots.h"

namespace cpm {

using Clock = RequestTimes::Clock;

class Engine::Impl {
 public:
  Impl(std::unique_ptr<Model> model, const EngineConfig& config, ThreadPool* pool)
      : model_(std::move(model)), config_(config), pool_(pool) {}
  ~Impl() { Shutdown(); }

  Status Init();
  std::vector<std::shared_ptr<RequestStream>> SubmitAll(std::vector<EngineRequest> requests);
  void Cancel(const std::string& request_id);
  EngineStats Stats() const {
    std::lock_guard<std::mutex> lock(stats_mu_);
    return stats_;
  }
  void Shutdown();
  const ModelInfo& model_info() const { return model_->info(); }
  const EngineConfig& config() const { return config_; }

 private:
  void Loop();
  // Validates and queues new requests, then applies cancels (a request submitted and
  // cancelled before the engine saw it is cancelled too).
  void Drain(std::vector<std::unique_ptr<RequestState>>* fresh, std::vector<std::string>* cancels);
  // Validates a request whose inputs are complete and hands it to the scheduler (or ends it).
  void Admit(std::unique_ptr<RequestState> r);
  // Whether a live request (scheduled, or waiting for its encoder job) has this id.
  bool IdInUse(const std::string& id) const;
  static Status DuplicateId(const std::string& id);
  // Runs one piece of the oldest pending encoder job; admits its request when it is done.
  void EncodeStep();
  Status Validate(const RequestState& r) const;
  // EngineConfig::warm_up: its encoder hook, a prompt of a full step's tokens, a decode step.
  Status WarmUp();
  void Step();
  // A request's tokens drawn this step (already in r->tokens; the first `num_draft` + 1 rows
  // were its, the drafts verified): bookkeeping, then its event (finishing it if they end it).
  void Deliver(RequestState* r, std::vector<SampledToken> tokens, int64_t num_draft,
               Clock::time_point done);
  // Speculative decoding: the next step's draft for every running decode.
  void ProposeDrafts();
  // Models with a recurrent state: copies r's state into a snapshot slot before a draft step
  // (false when none is free), and drops the copy after it, first putting it back if `restore`.
  bool SnapshotState(RequestState& r);
  void ReleaseSnapshot(RequestState& r, bool restore);
  // Ends a live request: frees its blocks and slot at once, then queues its last event.
  void Finish(RequestState* r, TokenEvent event);
  // Ends a request that never became live: "error" with `error`, or "abort" when it is OK.
  void Reject(RequestState& r, const Status& error);
  TokenEvent MakeEvent(const RequestState& r) const;
  // KV pages are committed ahead of the blocks handed out (KvCache::CommitStep), by commit
  // steps of about a huge page of one layer's K or V each (~3 ms on a 2-vCPU VM, where a first
  // touch costs the host a fault too): while idle one at a time, up to two rows past the pool's
  // high water; between steps up to two, but only while less than one row is left, so that a
  // request pays for no commits it does not need (two a step stay ahead of MiniCPM4's full
  // 256-token prefill steps: 16 blocks, 1.5 huge pages of its 48 arrays).
  int64_t KvCommitTarget(int64_t rows) const {
    return blocks_->high_water() + rows * kv_cache_->blocks_per_row();
  }
  void CommitKvAhead(bool idle) {
    // CommitStep does nothing once `target` is committed.
    const int64_t target = KvCommitTarget(idle ? 2 : 1);
    for (int i = 0; i < (idle ? 1 : 2); ++i) kv_cache_->CommitStep(target);
  }
  void PublishStats();
  void FlushEvents();

  std::unique_ptr<Model> model_;
  EngineConfig config_;
  ThreadPool* pool_;
  std::unique_ptr<ThreadPool> own_pool_;  // when the caller passed none

  // Engine-thread state.
  std::unique_ptr<KvCache> kv_cache_;
  std::unique_ptr<BlockPool> blocks_;
  std::unique_ptr<StateSlots> slots_;
  // Speculative decoding on a model with recurrent state: copies of the states of the step's
  // drafting sequences, taken before the step (null otherwise).
  std::unique_ptr<StateSlots> snapshots_;
  std::unique_ptr<KvCacheManager> kv_manager_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<ModelRunner> runner_;
  StepLogits step_logits_;
  std::vector<std::vector<float>> scratch_;  // per pool worker, for sampling
  // Events of this step, pushed after the stats snapshot so that a client that sees its
  // finished event also sees the freed blocks in Stats().
  std::vector<std::pair<std::shared_ptr<RequestStream>, TokenEvent>> pending_events_;
  // Requests whose encoder jobs (images) are still running, oldest first; not yet admitted.
  std::deque<std::unique_ptr<RequestState>> encoding_;
  int64_t num_steps_ = 0;
  IterationTokens iteration_tokens_;
  int64_t num_finished_ = 0;
  int64_t prompt_tokens_total_ = 0;
  int64_t generation_tokens_total_ = 0;
  int64_t spec_num_drafts_ = 0;
  int64_t spec_num_draft_tokens_ = 0;
  int64_t spec_num_accepted_tokens_ = 0;
  std::vector<int64_t> spec_num_accepted_per_pos_;

  // Inbox, shared with the HTTP threads.
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::unique_ptr<RequestState>> inbox_;
  std::vector<std::string> cancels_;
  bool stop_ = false;
  bool stopped_ = false;
  int64_t next_seq_no_ = 0;
  std::thread thread_;

  mutable std::mutex stats_mu_;
  EngineStats stats_;
};

Status Engine::Impl::Init() {
  const ModelInfo& info = model_->info();
  if (config_.block_size <= 0 || config_.num_kv_blocks <= 0 || config_.max_num_seqs <= 0 ||
      config_.max_num_batched_tokens <= 0) {
    return InvalidArgument("engine config: block_size, num_kv_blocks, max_num_seqs and "
                           "max_num_batched_tokens must be positive");
  }
  if (config_.max_model_len <= 0) config_.max_model_len = info.max_position_embeddings;
  if (!config_.enable_chunked_prefill && config_.max_num_batched_tokens < config_.max_model_len) {
    // A longer prompt would wait for a step with room for it forever.
    return InvalidArgument("engine config: with chunked prefill off, max_num_batched_tokens (" +
                           std::to_string(config_.max_num_batched_tokens) +
                           ") must be at least max_model_len (" +
                           std::to_string(config_.max_model_len) + ")");
  }
  if (!pool_) {
    own_pool_ = std::make_unique<ThreadPool>(1);
    pool_ = own_pool_.get();
  }
  const bool hybrid = info.state_slot_bytes > 0;
  if (config_.speculative.enabled()) {
    const SpeculativeConfig& sc = config_.speculative;
    if (sc.prompt_lookup_min < 1 || sc.prompt_lookup_min > sc.prompt_lookup_max) {
      return InvalidArgument("speculative config: need 1 <= prompt_lookup_min <= prompt_lookup_max");
    }
  }
  if (hybrid && config_.enable_prefix_caching) {
    // A recurrent state summarises the whole prefix and cannot be rebuilt from K/V blocks.
    CPM_LOG_INFO("Hybrid or mamba-based model detected: disabling prefix caching");
    config_.enable_prefix_caching = false;
  }
  try {
    kv_cache_ = std::make_unique<KvCache>(info.kv, config_.num_kv_blocks, config_.block_size, info.dtype);
    if (hybrid) {
      if (config_.num_state_slots <= 0) config_.num_state_slots = config_.max_num_seqs;
      slots_ = std::make_unique<StateSlots>(config_.num_state_slots, info.state_slot_bytes);
      snapshots_ = std::make_unique<StateSlots>(
          SpeculativeStateSnapshots(config_.speculative, config_.max_num_seqs),
          info.state_slot_bytes);
    }
  } catch (const std::bad_alloc&) {
    return ResourceExhausted("cannot allocate the KV cache (" + std::to_string(config_.num_kv_blocks) +
                             " blocks) or the state slots");
  }
  blocks_ = std::make_unique<BlockPool>(config_.num_kv_blocks);
  // The prefix-cache hash key is a per-process secret (see block_hash.h).
  std::random_device rd;
  const uint64_t key = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  kv_manager_ = std::make_unique<KvCacheManager>(*blocks_, config_.block_size, config_.enable_prefix_caching, key);
  SchedulerConfig sc;
  sc.max_num_seqs = config_.max_num_seqs;
  sc.max_num_batched_tokens = config_.max_num_batched_tokens;
  sc.max_model_len = config_.max_model_len;
  sc.enable_chunked_prefill = config_.enable_chunked_prefill;
  sc.long_prefill_token_threshold = config_.long_prefill_token_threshold;
  sc.priority_policy = config_.priority_policy;
  // A step budget below the chunk could never take a long prompt to its first boundary: there
  // the chunks are not aligned, and a hybrid model's results may then depend on the batching.
  sc.prompt_chunk_tokens = info.prompt_chunk_tokens;
  if (info.prompt_chunk_tokens > config_.max_num_batched_tokens) {
    sc.prompt_chunk_tokens = 1;
    CPM_LOG_WARN(
        "--max-num-batched-tokens {} is under the model's {}-token prompt chunks: prefills stop "
        "anywhere, and a reply may then depend on the requests beside it",
        config_.max_num_batched_tokens, info.prompt_chunk_tokens);
  }
  scheduler_ = std::make_unique<Scheduler>(sc, *kv_manager_, slots_.get());
  runner_ = std::make_unique<ModelRunner>(*model_, *kv_cache_, slots_.get(), *pool_);
  std::promise<Status> warmed;
  std::future<Status> warm_result = warmed.get_future();
  thread_ = std::thread([this, warmed = std::move(warmed)]() mutable {
    const Status st = config_.warm_up ? WarmUp() : OkStatus();
    PublishStats();
    warmed.set_value(st);
    Loop();
  });
  if (Status st = warm_result.get(); !st.ok()) {
    Shutdown();
    return st.WithPrefix("warm-up");
  }
  return OkStatus();
}

Status Engine::Impl::WarmUp() {
  if (config_.warm_up_encoder) CPM_RETURN_IF_ERROR(config_.warm_up_encoder(*pool_));
  const int64_t vocab = model_->info().vocab_size;
  // The most tokens a first step computes, leaving room for the decode step's token, up to
  // kMaxWarmUpTokens: a later, longer step grows the buffers further at a cost in proportion
  // to its own compute (a few percent of it), while the warm-up's would lengthen every start
  // (a whole 32k-token prompt for an unchunked MiniCPM4, minutes on two cores).
  constexpr int64_t kMaxWarmUpTokens = 512;
  const int64_t n = std::min({config_.max_num_batched_tokens, kMaxWarmUpTokens,
                              config_.max_model_len - 1,
                              config_.num_kv_blocks * config_.block_size - 1});
  if (n < 1) return OkStatus();
  RequestState r;
  for (int64_t i = 0; i < n; ++i) r.tokens.push_back(static_cast<int32_t>(i % vocab));
  r.num_prompt_tokens = n;
  if (!blocks_->AllocateN(BlocksForTokens(n + 1, config_.block_size), &r.blocks)) {
    return OkStatus();
  }
  if (slots_) {
    r.state_slot = slots_->Allocate(/*zero=*/false).value_or(-1);
    CPM_CHECK(r.state_slot >= 0);  // a new engine's slots are all free, and there is one at least
  }
  const Clock::time_point start = Clock::now();
  Status st;
  for (int64_t step_tokens : {n, int64_t{1}}) {
    SchedulerOutput plan;
    plan.seqs.push_back({&r, step_tokens});
    plan.num_tokens = step_tokens;
    st = runner_->Run(plan, &step_logits_);
    if (!st.ok()) break;
    r.num_computed += step_tokens;
    // The decode step feeds the prefill's greedy token (any would do).
    r.tokens.push_back(static_cast<int32_t>(kernels::ArgMax(step_logits_.logits.data(), vocab)));
  }
  blocks_->ReleaseAll(r.blocks);
  if (r.state_slot >= 0) slots_->Release(r.state_slot);
  if (st.ok()) {
    CPM_LOG_INFO("Warm-up: a {}-token prompt step and a decode step in {:.2f} s", n,
                 std::chrono::duration<double>(Clock::now() - start).count());
  }
  return st;
}

std::vector<std::shared_ptr<RequestStream>> Engine::Impl::SubmitAll(
    std::vector<EngineRequest> requests) {
  std::vector<std::unique_ptr<RequestState>> states;
  std::vector<std::shared_ptr<RequestStream>> streams;
  const Clock::time_point arrival = Clock::now();
  for (EngineRequest& request : requests) {
    auto r = std::make_unique<RequestState>();
    r->stream = std::make_shared<RequestStream>();
    r->times.arrival = arrival;
    // The prompt moves into the sequence's tokens (req.prompt is left empty: not a second copy).
    r->tokens = std::move(request.prompt);
    r->num_prompt_tokens = static_cast<int64_t>(r->tokens.size());
    r->req = std::move(request);
    streams.push_back(r->stream);
    states.push_back(std::move(r));
  }
  {
    // One lock for all: the engine thread takes them into the same step's plan.
    std::lock_guard<std::mutex> lock(mu_);
    for (std::unique_ptr<RequestState>& r : states) {
      r->seq_no = next_seq_no_++;
      // A seeded request owns its generator; others derive one from the engine seed and the
      // request counter, so a run is reproducible for the same arrival order.
      r->rng.seed(r->req.sampling.seed.value_or(config_.seed + static_cast<uint64_t>(r->seq_no)));
      if (stopped_) {
        // The engine thread is gone or going; answer here without touching its state.
        TokenEvent e = MakeEvent(*r);
        e.finished = true;
        e.finish_reason = "error";
        e.error = Unavailable("the engine is shut down");
        e.times.finished = Clock::now();
        r->stream->Push(std::move(e));
        continue;
      }
      inbox_.push_back(std::move(r));
    }
  }
  cv_.notify_one();
  return streams;
}

void Engine::Impl::Cancel(const std::string& request_id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopped_) return;
    cancels_.push_back(request_id);
  }
  cv_.notify_one();
}

void Engine::Impl::Shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void Engine::Impl::Loop() {
  for (;;) {
    std::vector<std::unique_ptr<RequestState>> fresh;
    std::vector<std::string> cancels;
    bool stop = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] {
        return stop_ || !inbox_.empty() || !cancels_.empty() || !scheduler_->empty() ||
               !encoding_.empty() || kv_cache_->CommitPending(KvCommitTarget(2));
      });
      fresh.swap(inbox_);
      cancels.swap(cancels_);
      stop = stop_;
      if (stop) stopped_ = true;  // later Submits are rejected at once
    }
    Drain(&fresh, &cancels);
    if (stop) {
      // Every live request ends with "abort", in admission order of the scheduler's queues.
      std::vector<RequestState*> live(scheduler_->running().begin(), scheduler_->running().end());
      live.insert(live.end(), scheduler_->waiting().begin(), scheduler_->waiting().end());
      for (RequestState* r : live) {
        TokenEvent e = MakeEvent(*r);
        e.finish_reason = "abort";
        Finish(r, std::move(e));
      }
      for (std::unique_ptr<RequestState>& r : encoding_) Reject(*r, OkStatus());
      encoding_.clear();
      PublishStats();
      FlushEvents();
      return;
    }
    EncodeStep();
    if (!scheduler_->empty()) {
      const int64_t tokens = prompt_tokens_total_ + generation_tokens_total_;
      Step();
      // Steps with output only, as vLLM's (a long prompt's earlier chunks make no token).
      const int64_t step_tokens = prompt_tokens_total_ + generation_tokens_total_ - tokens;
      if (step_tokens > 0) iteration_tokens_.Observe(step_tokens);
    }
    // Idle, one commit step a turn, so that an arriving request waits for one at most.
    CommitKvAhead(scheduler_->empty() && encoding_.empty());
    PublishStats();
    FlushEvents();
  }
}

Status Engine::Impl::Validate(const RequestState& r) const {
  const ModelInfo& info = model_->info();
  if (r.tokens.empty()) return InvalidArgument("a prompt needs at least one token");
  for (int32_t t : r.tokens) {
    if (t < 0 || t >= info.vocab_size) {
      return InvalidArgument("token id " + std::to_string(t) + " is out of vocabulary (size " +
                             std::to_string(info.vocab_size) + ")");
    }
  }
  if (r.num_prompt_tokens >= config_.max_model_len) {
    // The caller owns the user-facing text; this is the engine's own guard.
    return InvalidArgument("prompt of " + std::to_string(r.num_prompt_tokens) +
                           " tokens leaves no room in max_model_len " + std::to_string(config_.max_model_len));
  }
  if (r.req.max_tokens < 0 || r.req.min_tokens < 0) return InvalidArgument("max_tokens and min_tokens must be >= 0");
  const size_t rows = r.req.embed_rows.size();
  if (rows > 0) {
    if (r.req.embeds.size() != rows * static_cast<size_t>(info.hidden_size)) {
      return InvalidArgument("embeds must hold embed_rows.size() x hidden_size floats");
    }
    for (int64_t row : r.req.embed_rows) {
      if (row < 0 || row >= r.num_prompt_tokens) return InvalidArgument("embed row outside the prompt");
    }
  }
  return scheduler_->CheckFits(r);
}

void Engine::Impl::Drain(std::vector<std::unique_ptr<RequestState>>* fresh,
                         std::vector<std::string>* cancels) {
  for (std::unique_ptr<RequestState>& r : *fresh) {
    if (r->req.encode && IdInUse(r->req.request_id)) {
      Reject(*r, DuplicateId(r->req.request_id));
    } else if (r->req.encode) {
      encoding_.push_back(std::move(r));
    } else {
      Admit(std::move(r));
    }
  }
  for (const std::string& id : *cancels) {
    auto pending = std::find_if(encoding_.begin(), encoding_.end(),
                                [&](const auto& r) { return r->req.request_id == id; });
    if (pending != encoding_.end()) {
      Reject(**pending, OkStatus());  // "abort": cancelled before it was admitted
      encoding_.erase(pending);
      continue;
    }
    RequestState* r = scheduler_->Find(id);
    if (!r) continue;  // already finished, or never existed
    TokenEvent e = MakeEvent(*r);
    e.finish_reason = "abort";
    Finish(r, std::move(e));
  }
}

bool Engine::Impl::IdInUse(const std::string& id) const {
  if (scheduler_->Find(id) != nullptr) return true;
  return std::any_of(encoding_.begin(), encoding_.end(),
                     [&](const auto& r) { return r->req.request_id == id; });
}

Status Engine::Impl::DuplicateId(const std::string& id) {
  return InvalidArgument("request id '" + id + "' is already in use");
}

void Engine::Impl::Admit(std::unique_ptr<RequestState> r) {
  Status st = Validate(*r);
  if (st.ok() && IdInUse(r->req.request_id)) st = DuplicateId(r->req.request_id);
  if (!st.ok()) {
    Reject(*r, st);
    return;
  }
  if (r->req.max_tokens == 0 && r->req.prompt_logprobs < 0) {  // nothing to compute
    TokenEvent e = MakeEvent(*r);
    e.finished = true;
    e.finish_reason = "length";
    e.num_cached_tokens = 0;
    e.times.finished = Clock::now();
    ++num_finished_;
    pending_events_.emplace_back(r->stream, std::move(e));
    return;
  }
  scheduler_->Add(std::move(r));
}

void Engine::Impl::EncodeStep() {
  if (encoding_.empty()) return;
  RequestState& r = *encoding_.front();
  StatusOr<bool> done = r.req.encode(*pool_, &r.req.embeds);
  if (done.ok() && !*done) return;
  std::unique_ptr<RequestState> front = std::move(encoding_.front());
  encoding_.pop_front();
  if (!done.ok()) {
    Reject(*front, done.status());
    return;
  }
  front->req.encode = nullptr;
  Admit(std::move(front));
}

TokenEvent Engine::Impl::MakeEvent(const RequestState& r) const {
  TokenEvent e;
  e.num_prompt_tokens = r.num_prompt_tokens;
  e.num_cached_tokens = std::max<int64_t>(r.num_cached_tokens, 0);
  e.num_preemptions = r.num_preemptions;
  e.times = r.times;
  return e;
}

void Engine::Impl::Reject(RequestState& r, const Status& error) {
  TokenEvent e = MakeEvent(r);
  e.finished = true;
  e.finish_reason = error.ok() ? "abort" : "error";
  e.error = error;
  e.times.finished = Clock::now();
  ++num_finished_;
  pending_events_.emplace_back(r.stream, std::move(e));
}

void Engine::Impl::Finish(RequestState* r, TokenEvent event) {
  event.finished = true;
  event.times.finished = Clock::now();
  std::shared_ptr<RequestStream> stream = r->stream;
  scheduler_->Remove(r);  // frees blocks and slot; `r` is gone after this
  ++num_finished_;
  pending_events_.emplace_back(std::move(stream), std::move(event));
}

void Engine::Impl::Step() {
  SchedulerOutput plan = scheduler_->Schedule();
  if (plan.seqs.empty()) {
    // Nothing fits although nothing runs: only a request larger than the whole cache could do
    // this, and Validate rejects those; end it rather than spin.
    if (plan.preempted.empty() && scheduler_->num_running() == 0 && scheduler_->num_waiting() > 0) {
      RequestState* r = scheduler_->waiting().front();
      TokenEvent e = MakeEvent(*r);
      e.finish_reason = "error";
      e.error = ResourceExhausted("request does not fit in the KV cache");
      Finish(r, std::move(e));
    }
    return;
  }
  const Clock::time_point start = Clock::now();
  for (const ScheduledSeq& s : plan.seqs) {
    if (!s.req->scheduled_once) {
      s.req->scheduled_once = true;
      s.req->times.first_scheduled = start;
    }
  }
  for (ScheduledSeq& s : plan.seqs) {
    if (s.num_draft > 0 && snapshots_ && !SnapshotState(*s.req)) {
      s.num_draft = 0;  // no room for its state's copy: it decodes plainly this step
      s.req->draft.clear();
    }
  }
  Status st = runner_->Run(plan, &step_logits_);
  ++num_steps_;
  if (!st.ok()) {
    // One failed forward ends the requests in it, never the engine.
    CPM_LOG_ERROR("forward step failed: {}", st.ToString());
    for (const ScheduledSeq& s : plan.seqs) {
      ReleaseSnapshot(*s.req, false);
      TokenEvent e = MakeEvent(*s.req);
      e.finish_reason = "error";
      e.error = st;
      Finish(s.req, std::move(e));
    }
    return;
  }
  for (const ScheduledSeq& s : plan.seqs) {
    s.req->num_computed += s.num_tokens;
    kv_manager_->CacheFullBlocks(*s.req);
  }
  const Clock::time_point done = Clock::now();
  const int64_t vocab = model_->info().vocab_size;
  // Work items: a prompt_logprobs row alone, or one request's sampling rows (one, plus one per
  // draft token), which are drawn in order. Over the pool: each request draws from its own
  // generator and only its own rows, so no token depends on the thread that draws it (a
  // sampled row costs 0.1-3 ms at 73k entries).
  const std::vector<StepLogits::Row>& rows = step_logits_.rows;
  // A request's rows may be in several items (its last prompt chunk's prompt_logprobs rows and
  // its first draw): a draw appends to its tokens while the scoring of another row would read
  // them (a reallocation under the read, found by TSan), so the scored token is read here.
  struct Item {
    size_t row;
    int64_t count;
    int32_t scored_token;  // prompt_logprobs rows: the prompt token that follows
  };
  std::vector<Item> items;
  for (size_t i = 0; i < rows.size();) {
    size_t j = i + 1;
    while (j < rows.size() && rows[j].prompt_position < 0 && rows[j].draft_position > 0) {
      CPM_CHECK(rows[j].req == rows[i].req && rows[j].draft_position == rows[j - 1].draft_position + 1);
      ++j;
    }
    const int64_t p = rows[i].prompt_position;
    items.push_back({i, static_cast<int64_t>(j - i),
                     p >= 0 ? rows[i].req->tokens[static_cast<size_t>(p + 1)] : -1});
    i = j;
  }
  std::vector<TokenLogprobs> scored(rows.size());
  std::vector<std::vector<SampledToken>> drawn(rows.size());  // at each item's first row
  scratch_.resize(pool_->num_threads());
  pool_->ParallelFor(static_cast<int64_t>(items.size()), [&](int64_t t, int worker) {
    const Item& it = items[static_cast<size_t>(t)];
    RequestState* r = rows[it.row].req;
    float* row = step_logits_.logits.data() + static_cast<int64_t>(it.row) * vocab;
    if (rows[it.row].prompt_position >= 0) {
      scored[it.row] = ScoreToken(row, vocab, it.scored_token, r->req.prompt_logprobs,
                                  &scratch_[worker]);
    } else if (r->req.max_tokens != 0) {
      drawn[it.row] =
          SampleWithDraft(*r, row, it.count, vocab, config_.max_model_len, &scratch_[worker]);
    }
  });
  for (const Item& it : items) {
    RequestState* r = rows[it.row].req;
    if (const int64_t p = rows[it.row].prompt_position; p >= 0) {
      CPM_CHECK(p == static_cast<int64_t>(r->prompt_logprobs.size()));
      r->prompt_logprobs.push_back(std::move(scored[it.row]));
      continue;
    }
    if (r->req.max_tokens == 0) {  // a prompt_logprobs request that only scores its prompt
      prompt_tokens_total_ += r->num_prompt_tokens;
      TokenEvent e = MakeEvent(*r);
      e.prompt_logprobs = std::move(r->prompt_logprobs);
      e.finish_reason = "length";
      Finish(r, std::move(e));
      continue;
    }
    Deliver(r, std::move(drawn[it.row]), it.count - 1, done);
  }
  if (config_.speculative.enabled()) ProposeDrafts();
}

void Engine::Impl::Deliver(RequestState* r, std::vector<SampledToken> tokens, int64_t num_draft,
                           Clock::time_point done) {
  const int64_t n_new = static_cast<int64_t>(tokens.size());
  const bool first = r->num_output_tokens() == n_new;
  if (first) {
    prompt_tokens_total_ += r->num_prompt_tokens;
    r->times.first_token = done;
  }
  r->times.token_time = done;
  generation_tokens_total_ += n_new;
  if (num_draft > 0) {
    const int64_t accepted = n_new - 1;
    ++spec_num_drafts_;
    spec_num_draft_tokens_ += num_draft;
    spec_num_accepted_tokens_ += accepted;
    spec_num_accepted_per_pos_.resize(
        std::max<size_t>(spec_num_accepted_per_pos_.size(),
                         static_cast<size_t>(config_.speculative.num_speculative_tokens)));
    for (int64_t p = 0; p < accepted; ++p) ++spec_num_accepted_per_pos_[static_cast<size_t>(p)];
    if (r->state_snapshot >= 0 && accepted < num_draft) {
      // The recurrent state went through draft tokens that did not stand: back to its copy
      // from before the step, and the step's real tokens and accepted drafts are fed again
      // next step, with its newest token (their K/V is rewritten the same).
      r->num_computed = r->snapshot_computed;
      ReleaseSnapshot(*r, true);
    } else {
      // Draft tokens that stood are computed: their K/V went into the cache this step.
      ReleaseSnapshot(*r, false);
      r->num_computed += accepted;
      kv_manager_->CacheFullBlocks(*r);
    }
  }
  r->draft.clear();
  TokenEvent e = MakeEvent(*r);
  // The entries stay in r (a preempted request's recompute skips their rows).
  if (first) e.prompt_logprobs = r->prompt_logprobs;
  for (SampledToken& t : tokens) {
    e.tokens.push_back(t.token);
    if (t.logprobs) e.logprobs.push_back(std::move(*t.logprobs));
  }
  const FinishDecision d = CheckFinish(*r, config_.max_model_len);
  if (d.finished) {
    e.finish_reason = d.reason;
    e.stop_token = d.stop_token;
    Finish(r, std::move(e));
  } else {
    pending_events_.emplace_back(r->stream, std::move(e));
  }
}

void Engine::Impl::ProposeDrafts() {
  const int64_t limit = config_.speculative.disable_by_batch_size;
  if (limit > 0 && scheduler_->num_running() > limit) return;
  // With a recurrent state, each drafting sequence needs a snapshot slot in the step;
  // without one, drafts are not limited.
  int64_t left = snapshots_ ? snapshots_->num_free() : std::numeric_limits<int64_t>::max();
  for (RequestState* r : scheduler_->running()) {
    // Decodes only (a prefill still has prompt tokens to feed), while snapshots last.
    if (r->num_computed < r->num_prompt_tokens || left == 0) continue;
    // Room for the drafts and the token drawn after them, within max_tokens and the context.
    const int64_t room = std::min(r->req.max_tokens - r->num_output_tokens(),
                                  config_.max_model_len - r->num_tokens()) - 1;
    r->draft = ProposeNgramDraft(r->tokens, config_.speculative, room);
    TrimDraftToConstraint(*r, &r->draft);
    left -= !r->draft.empty();
  }
}

bool Engine::Impl::SnapshotState(RequestState& r) {
  const std::optional<int32_t> slot = snapshots_->Allocate(/*zero=*/false);
  if (!slot) return false;
  std::memcpy(snapshots_->Data(*slot), slots_->Data(r.state_slot),
              static_cast<size_t>(slots_->slot_bytes()));
  r.state_snapshot = *slot;
  r.snapshot_computed = r.num_computed;
  return true;
}

void Engine::Impl::ReleaseSnapshot(RequestState& r, bool restore) {
  if (r.state_snapshot < 0) return;
  if (restore) {
    std::memcpy(slots_->Data(r.state_slot), snapshots_->Data(r.state_snapshot),
                static_cast<size_t>(slots_->slot_bytes()));
  }
  snapshots_->Release(r.state_snapshot);
  r.state_snapshot = -1;
}

void Engine::Impl::PublishStats() {
  EngineStats s;
  s.num_running = scheduler_->num_running();
  s.num_waiting = scheduler_->num_waiting() + static_cast<int64_t>(encoding_.size());
  s.kv_cache_usage = blocks_->Usage();
  s.prefix_cache_queries = scheduler_->prefix_cache_queries();
  s.prefix_cache_hits = scheduler_->prefix_cache_hits();
  s.num_preemptions = scheduler_->num_preemptions();
  s.prompt_tokens_total = prompt_tokens_total_;
  s.generation_tokens_total = generation_tokens_total_;
  s.spec_num_drafts = spec_num_drafts_;
  s.spec_num_draft_tokens = spec_num_draft_tokens_;
  s.spec_num_accepted_tokens = spec_num_accepted_tokens_;
  s.spec_decode_enabled = config_.speculative.enabled();
  s.spec_num_accepted_per_pos = spec_num_accepted_per_pos_;
  if (s.spec_decode_enabled) {  // every position from the start, at 0 until a draft stands
    s.spec_num_accepted_per_pos.resize(std::max<size_t>(
        s.spec_num_accepted_per_pos.size(),
        static_cast<size_t>(config_.speculative.num_speculative_tokens)));
  }
  s.num_free_blocks = blocks_->num_free();
  s.num_total_blocks = blocks_->num_blocks();
  s.num_cached_free_blocks = blocks_->num_cached_free();
  s.num_committed_blocks = kv_cache_->committed_blocks();
  s.num_steps = num_steps_;
  s.iteration_tokens = iteration_tokens_;
  s.num_requests_finished = num_finished_;
  s.prefix_caching_enabled = kv_manager_->prefix_caching();
  std::lock_guard<std::mutex> lock(stats_mu_);
  stats_ = s;
}

void Engine::Impl::FlushEvents() {
  for (auto& [stream, event] : pending_events_) stream->Push(std::move(event));
  pending_events_.clear();
}

StatusOr<std::unique_ptr<Engine>> Engine::Create(std::unique_ptr<Model> model, const EngineConfig& config,
                                                  ThreadPool* pool) {
  if (!model) return InvalidArgument("Engine::Create needs a model");
  auto impl = std::make_unique<Impl>(std::move(model), config, pool);
  CPM_RETURN_IF_ERROR(impl->Init());
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() { Shutdown(); }
std::shared_ptr<RequestStream> Engine::Submit(EngineRequest request) {
  std::vector<EngineRequest> one;
  one.push_back(std::move(request));
  return impl_->SubmitAll(std::move(one)).front();
}
std::vector<std::shared_ptr<RequestStream>> Engine::SubmitAll(std::vector<EngineRequest> requests) {
  return impl_->SubmitAll(std::move(requests));
}
void Engine::Cancel(const std::string& request_id) { impl_->Cancel(request_id); }
void IterationTokens::Observe(int64_t tokens) {
  const auto bucket = std::lower_bound(kBounds.begin(), kBounds.end(), tokens) - kBounds.begin();
  ++counts[bucket];
  sum += tokens;
}

EngineStats Engine::Stats() const { return impl_->Stats(); }
const ModelInfo& Engine::model_info() const { return impl_->model_info(); }
const EngineConfig& Engine::config() const { return impl_->config(); }
void Engine::Shutdown() { impl_->Shutdown(); }

}  // namespace cpm
