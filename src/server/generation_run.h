// One HTTP request's generation: submits its engine requests (n choices, times the prompts of
// a batched completion), then turns their token events into per-choice text deltas with
// incremental detokenization and stop-string hold-back, tracks usage and timing, and reports
// each finished choice to the metrics. Used by chat and completions alike, streamed or not.
// With use_beam_search the n choices of a prompt are the beams of one search (beam_search.h),
// each reported as one finished update once the search is over.
// Not thread-safe: owned by the handler thread serving the request.
#pragma once

#include <chrono>
#include <climits>
#include <functional>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/engine.h"
#include "multimodal/image_processor.h"
#include "server/beam_search.h"
#include "server/engine_client.h"
#include "server/metrics.h"
#include "server/request_log.h"
#include "server/sampling_request.h"
#include "server/stop_matcher.h"
#include "tokenizer/incremental_detokenizer.h"
#include "tokenizer/tokenizer.h"

namespace cpm {

using Clock = std::chrono::steady_clock;
using ClientGoneFn = std::function<bool()>;

// What one choice produced since the last update.
struct ChoiceUpdate {
  int index = 0;
  std::string text;                      // new text (may be empty)
  std::vector<TokenLogprobs> logprobs;   // for the tokens of this step (when requested)
  std::vector<int32_t> token_ids;        // the tokens of this step (vLLM's token_ids)
  // The choice's first update, when prompt log-probs were requested: prompt tokens 1..n-1.
  std::vector<TokenLogprobs> prompt_logprobs;
  bool finished = false;
  std::string finish_reason;             // stop | length | abort
  std::optional<std::string> stop_string;  // stop_reason when a stop string ended it
  std::optional<int32_t> stop_token;       // stop_reason when a stop token ended it
  Status error;                          // non-OK: the request failed
};

// One engine request to run: a prompt and its choice index.
struct ChoicePlan {
  int index = 0;
  std::vector<int32_t> prompt;
  int64_t max_tokens = 16;
  int64_t seed_offset = 0;  // added to a request seed: the choice's place among its prompt's n
  std::shared_ptr<const MultimodalInputs> multimodal;  // image rows and their encoder, if any
};

class GenerationRun {
 public:
  GenerationRun(EngineClient& engine, const Tokenizer& tokenizer, ServerMetrics& metrics,
                std::string request_id, Clock::time_point arrival);
  ~GenerationRun();  // cancels what is still running

  // Submits every choice. The j-th of n choices of a seeded prompt uses seed + j (vLLM's rule).
  // With `log` enabled each prompt (its first choice's plan) is logged first (request_log.h).
  void Start(const std::vector<ChoicePlan>& plans, const ResolvedSampling& sampling,
             const std::vector<int32_t>& eos_ids, const RequestLogOptions& log = {});

  // Waits for progress of any unfinished choice; false once every choice has finished, or
  // once `client_gone` (see WatchClient) says the client left: then every choice is cancelled.
  bool Next(ChoiceUpdate* out);
  // Checked while waiting for events (every 50-100 ms), for plain replies and streams alike: a
  // stream may write nothing for long (queued, prefilling, or text a parser holds back), so its
  // failed write alone would notice a gone client late.
  void WatchClient(ClientGoneFn client_gone) { client_gone_ = std::move(client_gone); }
  bool client_left() const { return client_left_; }
  // The client went away: cancels every unfinished choice (their blocks return at once).
  void CancelAll();

  // Generated tokens over all choices (stop tokens included, tokens after a stop string not).
  int64_t completion_tokens() const;
  // Generated tokens of the choice with this index so far.
  int64_t completion_tokens(int index) const;
  // Prompt tokens found in the prefix cache, one count per prompt: vLLM's num_cached_tokens of
  // the RequestOutput its reply reads, i.e. of the choice whose event came first for a stream
  // (read on its first iteration) and of the choice that finished last otherwise (the parent's
  // final output is made by its last child). The choices of an n > 1 prompt differ: the first
  // computes the prompt, the others hit its blocks.
  int64_t cached_tokens(bool streamed) const;

 private:
  // The id prompt `prompt` of `num_prompts` is logged under (RequestLogOptions).
  std::string PromptLogId(size_t prompt, size_t num_prompts) const;
  void LogPrompts(const std::vector<ChoicePlan>& plans, const ResolvedSampling& sampling,
                  int64_t max_len) const;

  struct Choice {
    int index = 0;
    std::string engine_id;
    std::shared_ptr<RequestStream> stream;
    std::unique_ptr<IncrementalDetokenizer> detok;
    std::unique_ptr<StopMatcher> stop;
    std::vector<int32_t> prompt;
    int64_t num_prompt = 0;
    int64_t max_tokens = 0;
    int64_t seed_offset = 0;
    std::shared_ptr<const MultimodalInputs> multimodal;
    int64_t generated = 0;
    bool finished = false;
    bool aborted = false;  // finished as "abort" (cancelled, or the client left)
    Clock::time_point last_token{};
    bool has_token = false;
    size_t prompt_index = 0;         // which prompt of the request it continues
    int64_t cached_tokens = 0;       // its engine request's, from its latest event
    double itl_sum = 0;  // seconds between its token events, summed
    RequestTimes times;  // the engine's, from the latest event
  };

  void Process(Choice& c, const TokenEvent& ev, ChoiceUpdate* out);
  void Finish(Choice& c, const std::string& reason);
  // Beam search: runs every prompt's search on the first call, then hands out one update per
  // choice.
  bool NextBeam(ChoiceUpdate* out);
  Status SearchBeams(size_t first, size_t n);
  // Top-k next tokens of each beam: one-token engine requests, run side by side.
  StatusOr<std::vector<TokenLogprobs>> ExpandBeams(const Choice& c,
                                                   const std::vector<const std::vector<int32_t>*>& beams,
                                                   int k);
  void BeamUpdate(Choice& c, const Beam* beam);

  EngineClient& engine_;
  const Tokenizer& tokenizer_;
  ServerMetrics& metrics_;
  std::string request_id_;     // the reply's id (logs)
  std::string engine_prefix_;  // the engine requests' ids: <request id>-<run number>-<choice>
  Clock::time_point arrival_;
  ResolvedSampling sampling_;
  std::vector<Choice> choices_;
  size_t next_poll_ = 0;
  // Raised by every choice's stream when there are several (Next sleeps on it).
  std::shared_ptr<StreamSignal> signal_ = std::make_shared<StreamSignal>();
  ClientGoneFn client_gone_;
  bool client_left_ = false;
  RequestLogOptions log_;  // --enable-log-requests: prompts and cancellations are logged
  // Per prompt: the cached tokens of its first event and of its choice that finished last (see
  // cached_tokens()), ordered as the engine emits them: by step, then by choice within a step.
  struct PromptCache {
    using Key = std::pair<Clock::time_point, int>;  // (step, choice index)
    Key first_key{Clock::time_point::max(), INT_MAX}, last_key{Clock::time_point::min(), -1};
    int64_t first = 0, last = 0;
  };
  std::vector<PromptCache> prompts_;  // indexed by Choice::prompt_index
  // Beam search (sampling_.beam_search): the eos ids, whether the searches have run, and the
  // updates they left.
  std::vector<int32_t> eos_ids_;
  bool beams_searched_ = false;
  std::deque<ChoiceUpdate> beam_updates_;
  int64_t beam_step_ = 0;  // numbers the one-token requests
};

}  // namespace cpm
