// Engine: the online serving core. One engine thread owns the scheduler, the KV cache (block
// pool + prefix cache), the state slots and the model; every step it mixes decodes and prefill
// chunks under a token budget, runs one batched forward, samples, and pushes each request's new
// tokens to its RequestStream. Submit, Cancel, Stats and Shutdown are thread-safe (HTTP threads
// call them); nothing else is.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <functional>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "engine/ngram_proposer.h"
#include "engine/offline_generator.h"  // TokenLogprobs
#include "model/model.h"
#include "sampling/logits_rules.h"
#include "sampling/sampling_params.h"
#include "sampling/thinking_budget.h"
#include "structured/constraint.h"

namespace cpm {

struct EngineConfig {
  int64_t max_num_seqs = 128;             // running sequences per step
  int64_t max_num_batched_tokens = 2048;  // token budget per step (chunked prefill)
  int64_t long_prefill_token_threshold = 0;  // a request's most tokens a step (0: no cap)
  bool enable_chunked_prefill = true;     // off: prompts prefilled whole (SchedulerConfig)
  bool priority_policy = false;           // vLLM's --scheduling-policy priority (SchedulerConfig)
  int64_t max_model_len = 0;              // prompt + output limit
  int64_t block_size = 16;
  int64_t num_kv_blocks = 0;              // sized by the caller from the memory budget
  int64_t num_state_slots = 0;            // hybrid models: recurrent-state slots
  bool enable_prefix_caching = true;
  uint64_t seed = 0;                      // --seed: generator seed of requests without one
  // n-gram speculative decoding (engine/ngram_proposer.h); off by default. With a recurrent
  // state, a drafting sequence's state is copied before its step and put back if a draft token
  // did not stand (SpeculativeStateSnapshots copies at most).
  SpeculativeConfig speculative;
  // Before serving (Create returns after it): `warm_up_encoder` if set (the server's image
  // encoder on one slice), then one step of a prompt as long as a step may hold (up to 512
  // tokens) and one decode step after it, on blocks handed back at once. The model and the
  // kernels' scratch (the engine thread's own: it runs there) grow and first touch their
  // buffers then rather than during the first requests, which paid ~0.04 s for them (0.2 s for
  // a first image) on a 2-vCPU VM; vLLM's start-up profile run does the same. Neither step
  // shows in Stats() or the prefix cache. The server sets it; tests that count steps leave it
  // off.
  bool warm_up = false;
  std::function<Status(ThreadPool& pool)> warm_up_encoder;
};

struct EngineRequest {
  std::string request_id;
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  int64_t max_tokens = 16;
  int64_t min_tokens = 0;               // stop tokens are ignored before this many outputs
  std::vector<int32_t> stop_token_ids;  // finish with "stop" after emitting one (always)
  std::vector<int32_t> eos_token_ids;   // finish with "stop" unless ignore_eos
  bool ignore_eos = false;
  int64_t priority = 0;                 // with EngineConfig::priority_policy: lower runs first
  // Mixed into the prompt's first block hash (so into every later one): requests share cached
  // prefix blocks only when their salts are equal (vLLM's cache_salt); "" for none.
  std::string cache_salt;
  int32_t logprobs = -1;                // -1: none; k >= 0: chosen token + top-k per step
  // -1: none; k >= 0: the logprob, rank and top-k of every prompt token after the first (vLLM's
  // prompt_logprobs). Such a request never reads the prefix cache (as in vLLM: cached tokens
  // would have no logits), and a step computes at most kPromptLogprobsChunk prompt log-prob rows
  // over all requests, which bounds the logits buffer. With max_tokens 0 it still runs its prompt.
  int32_t prompt_logprobs = -1;
  // Structured output (response_format / structured_outputs): the tokens it allows at each
  // step (structured/constraint.h); null: any.
  std::shared_ptr<const structured::Constraint> constraint;
  // logit_bias, allowed_token_ids, bad_words (sampling/logits_rules.h); null: none. Shared by
  // the choices of one HTTP request.
  std::shared_ptr<const LogitsRules> logits_rules;
  // thinking_token_budget (sampling/thinking_budget.h): the end marker is forced once a
  // thinking section holds this many generated tokens; null: no cap.
  std::shared_ptr<const ThinkingBudget> thinking_budget;
  // Multimodal: rows of the prompt whose embedding is replaced, and the embeddings.
  std::vector<int64_t> embed_rows;
  std::vector<float> embeds;            // [embed_rows.size(), hidden]
  // Multimodal inputs still to encode (images), one piece per call (about one vision encoder
  // layer of a slice): the engine thread calls it with the compute pool, once between forward
  // steps, until it returns true; `embeds` is then complete and the request is validated and
  // queued. Encoding on the engine thread keeps the HTTP threads off the compute cores, and one
  // piece per step keeps running streams going while an image encodes (the role of vLLM's
  // encoder budget, finer). An error ends the request with it.
  std::function<StatusOr<bool>(ThreadPool& pool, std::vector<float>* embeds)> encode;
};

// When things happened to one request (steady clock), for the server's latency histograms
// (vLLM's metric in brackets):
//   queue    = first_scheduled - arrival        [request_queue_time_seconds]
//   TTFT     = first_token - arrival            [time_to_first_token_seconds]
//   ITL      = token_time - previous event's token_time  [inter_token_latency_seconds]
//   TPOT     = (finished - first_token) / (num outputs - 1)  [time_per_output_token_seconds]
//   prefill  = first_token - first_scheduled    [request_prefill_time_seconds]
//   decode   = finished - first_token           [request_decode_time_seconds]
//   e2e      = finished - arrival               [e2e_request_latency_seconds]
// A field is the clock's epoch (time_since_epoch() == 0) until it has happened; a request
// that never produced a token keeps first_token unset. Every TokenEvent carries the current
// times, so the finished event has all of them.
struct RequestTimes {
  using Clock = std::chrono::steady_clock;
  Clock::time_point arrival;          // Submit() was called
  Clock::time_point first_scheduled;  // the first step that ran any of its tokens
  Clock::time_point first_token;      // the step that produced its first output token
  Clock::time_point token_time;       // the step that produced this event's tokens
  Clock::time_point finished;         // set on the finished event
};

// One step's output for one request, in order.
struct TokenEvent {
  // The step's new tokens: one, or with speculative decoding the accepted drafts and the token
  // drawn after them.
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;  // one per token when requested
  // On a request's first event (prompt_logprobs >= 0): prompt tokens 1..n-1, in order.
  std::vector<TokenLogprobs> prompt_logprobs;
  bool finished = false;
  // "stop", "length", "abort" when finished; "error" with a non-OK `error`.
  std::string finish_reason;
  std::optional<int32_t> stop_token;    // the stop token id that ended it, if any (not EOS)
  int64_t num_prompt_tokens = 0;
  int64_t num_cached_tokens = 0;        // prompt tokens served from the prefix cache
  Status error;                         // non-OK ends the request with this error
  int64_t num_preemptions = 0;          // times this request was preempted so far
  RequestTimes times;
};

// The per-request channel from the engine thread to one HTTP handler. Thread-safe.
// Wakes a reader of several streams (a request's n choices) when any of them gets an event:
// RequestStream::Listen. Thread-safe.
class StreamSignal {
 public:
  // Events raised so far.
  uint64_t count() const;
  // Blocks until count() differs from `seen`, or `timeout` has passed.
  void WaitPast(uint64_t seen, std::chrono::milliseconds timeout);
  void Raise();

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  uint64_t count_ = 0;
};

class RequestStream {
 public:
  // Blocks up to `timeout` for the next event; false on timeout.
  bool Next(TokenEvent* out, std::chrono::milliseconds timeout);
  void Push(TokenEvent event);
  // Raises `signal` on every later event too (events already queued are for Next to find).
  void Listen(std::shared_ptr<StreamSignal> signal);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TokenEvent> events_;
  std::shared_ptr<StreamSignal> signal_;  // guarded by mu_
};

// A snapshot for /metrics and the periodic log line.
// Tokens per forward step that produced any, as vLLM's vllm:iteration_tokens_total counts them:
// a request's prompt tokens all at the step of its first token, plus the tokens each step
// generated.
struct IterationTokens {
  static constexpr std::array<int64_t, 13> kBounds = {1,    8,    16,   32,   64,   128, 256,
                                                      512,  1024, 2048, 4096, 8192, 16384};
  std::array<int64_t, kBounds.size() + 1> counts{};  // per bucket (≤ bound), the last +Inf
  int64_t sum = 0;
  void Observe(int64_t tokens);
};

struct EngineStats {
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  double kv_cache_usage = 0.0;  // 0..1
  int64_t prefix_cache_queries = 0;  // prompt tokens looked up
  int64_t prefix_cache_hits = 0;     // of which found in the cache
  int64_t num_preemptions = 0;
  int64_t prompt_tokens_total = 0;
  int64_t generation_tokens_total = 0;
  int64_t num_free_blocks = 0;        // cached free blocks included (they are evictable)
  int64_t num_total_blocks = 0;
  int64_t num_cached_free_blocks = 0;  // free blocks still holding a cached prefix
  int64_t num_committed_blocks = 0;    // blocks whose KV pages are committed (KvCache::CommitStep)
  int64_t num_steps = 0;               // forward steps run
  int64_t num_requests_finished = 0;   // any reason, errors and aborts included
  bool prefix_caching_enabled = false; // false for hybrid models even if configured
  // Speculative decoding (vLLM's spec_decode counters): verification steps that had a draft,
  // draft tokens proposed, and of those accepted.
  bool spec_decode_enabled = false;  // --speculative-config given (vLLM exports the series then)
  int64_t spec_num_drafts = 0;
  int64_t spec_num_draft_tokens = 0;
  int64_t spec_num_accepted_tokens = 0;
  // [num_speculative_tokens]: drafts whose token at this position stood.
  std::vector<int64_t> spec_num_accepted_per_pos;
  IterationTokens iteration_tokens;
};

class Engine {
 public:
  // Takes ownership of the model; allocates the KV cache; starts the engine thread. `pool`
  // (may be null: the engine then runs the model on its own thread only) must outlive the
  // engine and is used by the engine thread alone. max_model_len 0 means the model's
  // max_position_embeddings; num_state_slots 0 means max_num_seqs (hybrid models).
  static StatusOr<std::unique_ptr<Engine>> Create(std::unique_ptr<Model> model,
                                                  const EngineConfig& config, ThreadPool* pool);
  ~Engine();  // Shutdown()

  // Queues a request; its events arrive on the returned stream: one event per step that
  // drew tokens for it (TokenEvent::tokens), the last one with finished = true. Validation
  // of lengths against max_model_len is the caller's job (it owns the error texts); the
  // engine still guards itself and ends a bad request with a single finished event whose
  // `error` is set and finish_reason "error":
  // empty prompt, token ids outside the vocabulary, negative max_tokens/min_tokens, embeds
  // that do not match embed_rows x hidden_size (kInvalidArgument); a request id already live
  // (kInvalidArgument; ids must be unique among live requests); a request whose prompt +
  // max_tokens needs more KV blocks than the whole cache (kResourceExhausted); after Shutdown
  // (kUnavailable). max_tokens 0 finishes at once with "length" and no tokens.
  std::shared_ptr<RequestStream> Submit(EngineRequest request);
  // Submits several requests at once (the choices of an n > 1 request): they reach the engine
  // thread in one drain, so one step plans them together where it has room (budget, sequences,
  // blocks), the later ones hitting the prompt blocks the first computes. Requests with images
  // to encode are admitted one per step (EncodeStep). Streams in the order given.
  std::vector<std::shared_ptr<RequestStream>> SubmitAll(std::vector<EngineRequest> requests);
  // Ends a request (client gone or stop string matched): its blocks return to the pool at once
  // and its stream gets a finished "abort" event. Unknown ids are ignored. Asynchronous: the
  // engine thread acts on it before its next step; Stats() reflects the freed blocks by the
  // time the "abort" event is pushed.
  void Cancel(const std::string& request_id);
  EngineStats Stats() const;
  const ModelInfo& model_info() const;
  const EngineConfig& config() const;
  // Finishes every request with "abort" and stops the engine thread. Idempotent.
  void Shutdown();

  class Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cpm
