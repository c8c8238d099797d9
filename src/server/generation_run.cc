// Engine token events -> per-choice text deltas, usage and metrics for one HTTP request.
#include "server/generation_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>

#include "base/log.h"

namespace cpm {

namespace {
double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Numbers this process's runs: a client may name two requests alike (X-Request-Id), and the
// engine needs each live request id once.
uint64_t NextRunNumber() {
  static std::atomic<uint64_t> next{0};
  return next.fetch_add(1, std::memory_order_relaxed);
}

// vLLM's SamplingParams.update_from_generation_config: of the model's EOS ids (`eos_ids`, the
// tokenizer's own first, then generation_config.json's and config.json's others), the others
// are stop token ids, so a reply that ends on one reports it as its stop_reason; with
// ignore_eos they do not stop it at all, as the tokenizer's own does not, but min_tokens still
// keeps every one of them from being drawn (vLLM's _all_stop_token_ids), so they stay EOS ids.
void SplitEosIds(const std::vector<int32_t>& eos_ids, const ResolvedSampling& sampling,
                 EngineRequest* r) {
  r->stop_token_ids = sampling.stop_token_ids;
  if (eos_ids.empty()) return;
  if (sampling.ignore_eos) {
    r->eos_token_ids = eos_ids;
    return;
  }
  r->eos_token_ids = {eos_ids.front()};
  for (size_t i = 1; i < eos_ids.size(); ++i) {
    if (std::find(r->stop_token_ids.begin(), r->stop_token_ids.end(), eos_ids[i]) ==
        r->stop_token_ids.end()) {
      r->stop_token_ids.push_back(eos_ids[i]);
    }
  }
}

}  // namespace

GenerationRun::GenerationRun(EngineClient& engine, const Tokenizer& tokenizer,
                             ServerMetrics& metrics, std::string request_id,
                             Clock::time_point arrival)
    : engine_(engine),
      tokenizer_(tokenizer),
      metrics_(metrics),
      request_id_(std::move(request_id)),
      engine_prefix_(fmt::format("{}-{}", request_id_, NextRunNumber())),
      arrival_(arrival) {}

GenerationRun::~GenerationRun() { CancelAll(); }

void GenerationRun::Start(const std::vector<ChoicePlan>& plans, const ResolvedSampling& sampling,
                          const std::vector<int32_t>& eos_ids, const RequestLogOptions& log) {
  log_ = log;
  if (log.enabled) LogPrompts(plans, sampling, log.max_len);
  sampling_ = sampling;
  choices_.reserve(plans.size());
  size_t prompt_index = 0;
  for (const ChoicePlan& plan : plans) {
    Choice c;
    // Choices are consecutive per prompt from seed offset 0.
    if (plan.seed_offset == 0 && !choices_.empty()) ++prompt_index;
    c.prompt_index = prompt_index;
    c.index = plan.index;
    c.engine_id = engine_prefix_ + "-" + std::to_string(plan.index);
    c.prompt = plan.prompt;
    c.num_prompt = static_cast<int64_t>(plan.prompt.size());
    c.max_tokens = plan.max_tokens;
    c.seed_offset = plan.seed_offset;
    c.multimodal = plan.multimodal;
    c.detok = std::make_unique<IncrementalDetokenizer>(tokenizer_, sampling.skip_special_tokens,
                                                       c.prompt);
    c.stop = std::make_unique<StopMatcher>(sampling.stop, sampling.include_stop_str_in_output);
    choices_.push_back(std::move(c));
  }
  prompts_.assign(prompt_index + 1, PromptCache());
  if (sampling.beam_search) {  // NextBeam runs the searches
    eos_ids_ = eos_ids;
    return;
  }
  // Submit after every choice exists, so that a failure to build one never leaves an
  // orphaned engine request behind; all at once, so that a step can plan them together.
  std::vector<EngineRequest> requests;
  for (Choice& c : choices_) {
    EngineRequest r;
    r.request_id = c.engine_id;
    r.prompt = c.prompt;
    r.sampling = sampling.params;
    if (sampling.params.seed) r.sampling.seed = *sampling.params.seed + c.seed_offset;
    r.max_tokens = c.max_tokens;
    r.min_tokens = sampling.min_tokens;
    SplitEosIds(eos_ids, sampling, &r);
    r.ignore_eos = sampling.ignore_eos;
    r.priority = sampling.priority;
    r.cache_salt = sampling.cache_salt;
    r.logprobs = sampling.logprobs;
    r.prompt_logprobs = sampling.prompt_logprobs;
    r.constraint = sampling.constraint;
    r.logits_rules = sampling.logits_rules;
    r.thinking_budget = sampling.thinking_budget;
    if (c.multimodal) {
      r.embed_rows = c.multimodal->embed_rows;
      r.embeds = c.multimodal->embeds;  // all of them when nothing is left to encode
      r.encode = c.multimodal->encode;
    }
    requests.push_back(std::move(r));
  }
  std::vector<std::shared_ptr<RequestStream>> streams = engine_.SubmitAll(std::move(requests));
  for (size_t i = 0; i < choices_.size(); ++i) {
    choices_[i].stream = std::move(streams[i]);
    if (plans.size() > 1) choices_[i].stream->Listen(signal_);
  }
}

void GenerationRun::LogPrompts(const std::vector<ChoicePlan>& plans,
                               const ResolvedSampling& sampling, int64_t max_len) const {
  // A prompt's first choice (seed offset 0) stands for it.
  std::vector<const ChoicePlan*> prompts;
  for (const ChoicePlan& plan : plans) {
    if (plan.seed_offset == 0) prompts.push_back(&plan);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    const ChoicePlan& p = *prompts[i];
    CPM_LOG_INFO("{}", RequestLogLine(PromptLogId(i, prompts.size()),
                                      tokenizer_.Decode(p.prompt, false), p.prompt, sampling,
                                      p.max_tokens, max_len));
  }
}

int64_t GenerationRun::completion_tokens() const {
  int64_t total = 0;
  for (const Choice& c : choices_) total += c.generated;
  return total;
}

int64_t GenerationRun::completion_tokens(int index) const {
  for (const Choice& c : choices_) {
    if (c.index == index) return c.generated;
  }
  return 0;
}

std::string GenerationRun::PromptLogId(size_t prompt, size_t num_prompts) const {
  if (num_prompts == 1 && !log_.indexed_prompt_ids) return request_id_;
  return fmt::format("{}-{}", request_id_, prompt);
}

void GenerationRun::CancelAll() {
  size_t logged = SIZE_MAX;
  for (Choice& c : choices_) {
    if (c.finished || !c.stream) continue;
    engine_.Cancel(c.engine_id);
    Finish(c, "abort");
    if (log_.enabled && logged != c.prompt_index) {
      // vLLM's AsyncLLM.generate, once per prompt, under the id its request log gave it.
      logged = c.prompt_index;
      CPM_LOG_INFO("Request {} aborted.", PromptLogId(c.prompt_index, prompts_.size()));
    }
  }
}

bool GenerationRun::Next(ChoiceUpdate* out) {
  if (sampling_.beam_search) return NextBeam(out);
  *out = ChoiceUpdate();
  TokenEvent ev;
  for (;;) {
    if (client_gone_ && client_gone_()) {
      client_left_ = true;
      CancelAll();
      return false;
    }
    std::vector<size_t> open;
    for (size_t k = 0; k < choices_.size(); ++k) {
      const size_t i = (next_poll_ + k) % choices_.size();
      if (!choices_[i].finished) open.push_back(i);
    }
    if (open.empty()) return false;
    if (open.size() == 1) {
      Choice& c = choices_[open[0]];
      if (c.stream->Next(&ev, std::chrono::milliseconds(100))) {
        Process(c, ev, out);
        return true;
      }
      continue;
    }
    // Several choices: take whichever has an event, round robin so none starves; else sleep
    // until one of them gets one. The count is read before the polls, so an event pushed after
    // them (when the polls found nothing) has already moved it: no lost wake-up.
    const uint64_t seen = signal_->count();
    for (size_t i : open) {
      if (choices_[i].stream->Next(&ev, std::chrono::milliseconds(0))) {
        next_poll_ = i + 1;
        Process(choices_[i], ev, out);
        return true;
      }
    }
    signal_->WaitPast(seen, std::chrono::milliseconds(100));
  }
}

void GenerationRun::Process(Choice& c, const TokenEvent& ev, ChoiceUpdate* out) {
  out->index = c.index;
  if (!ev.error.ok()) {
    out->finished = true;
    out->finish_reason = "error";
    out->error = ev.error;
    Finish(c, "error");
    return;
  }
  c.cached_tokens = ev.num_cached_tokens;
  PromptCache& p = prompts_[c.prompt_index];
  if (const PromptCache::Key key{ev.times.token_time, c.index}; key < p.first_key) {
    p.first_key = key;
    p.first = ev.num_cached_tokens;
  }
  c.times = ev.times;
  out->prompt_logprobs = ev.prompt_logprobs;
  // The engine stamps when the step ran; the handler may see the event later.
  const Clock::time_point now =
      ev.times.token_time.time_since_epoch().count() != 0 ? ev.times.token_time : Clock::now();
  if (!ev.tokens.empty()) {
    if (c.has_token) {
      const double gap = Seconds(now - c.last_token);
      c.itl_sum += gap;
      metrics_.ObserveInterTokenLatency(gap);
    } else {
      metrics_.ObserveFirstToken(Seconds(now - arrival_));
    }
    c.last_token = now;
    c.has_token = true;
  }
  // vLLM leaves the text of the EOS / stop token that ended generation out of the output.
  const bool hide_last = ev.finished && ev.finish_reason == "stop" &&
                         !sampling_.include_stop_str_in_output;
  for (size_t k = 0; k < ev.tokens.size(); ++k) {
    ++c.generated;
    out->token_ids.push_back(ev.tokens[k]);
    if (k < ev.logprobs.size()) out->logprobs.push_back(ev.logprobs[k]);
    if (hide_last && k + 1 == ev.tokens.size()) break;
    // The text of the first min_tokens tokens is not checked for stop strings (vLLM's
    // detokenizer), as the engine ignores stop tokens there.
    const std::string piece = c.detok->Push(ev.tokens[k]);
    out->text += c.generated <= sampling_.min_tokens ? c.stop->PushUnchecked(piece)
                                                      : c.stop->Push(piece);
    if (c.stop->matched()) break;
  }
  if (c.stop->matched()) {
    // The engine keeps going until it sees the cancel; whatever it sends later is dropped.
    if (!ev.finished) engine_.Cancel(c.engine_id);
    out->finished = true;
    out->finish_reason = "stop";
    out->stop_string = c.stop->matched_stop();
    Finish(c, "stop");
    return;
  }
  if (ev.finished) {
    out->text += c.stop->Flush();
    out->finished = true;
    out->finish_reason = ev.finish_reason.empty() ? "stop" : ev.finish_reason;
    if (out->finish_reason == "stop") out->stop_token = ev.stop_token;
    Finish(c, out->finish_reason);
  }
}

int64_t GenerationRun::cached_tokens(bool streamed) const {
  int64_t sum = 0;
  for (const PromptCache& p : prompts_) sum += streamed ? p.first : p.last;
  return sum;
}

void GenerationRun::Finish(Choice& c, const std::string& reason) {
  c.finished = true;
  PromptCache& p = prompts_[c.prompt_index];
  if (const PromptCache::Key key{c.times.token_time, c.index}; key >= p.last_key) {
    p.last_key = key;
    p.last = c.cached_tokens;
  }
  c.aborted = reason == "abort";
  if (c.aborted) return;  // no finished-request statistics (RequestObservation)
  RequestObservation o;
  o.finish_reason = reason;
  const Clock::time_point now = Clock::now();
  o.e2e_s = Seconds(now - arrival_);
  const auto happened = [](Clock::time_point t) { return t.time_since_epoch().count() != 0; };
  const RequestTimes& t = c.times;
  if (happened(t.first_scheduled) && happened(t.arrival)) {
    o.queue_s = Seconds(t.first_scheduled - t.arrival);
  }
  // The engine's phases, as vLLM's: prefill until the first token, decode until the last.
  if (happened(t.first_scheduled) && happened(t.first_token) && happened(t.token_time)) {
    o.prefill_s = Seconds(t.first_token - t.first_scheduled);
    o.decode_s = Seconds(t.token_time - t.first_token);
    o.inference_s = Seconds(t.token_time - t.first_scheduled);
  }
  if (c.generated > 1) o.time_per_output_token_s = c.itl_sum / static_cast<double>(c.generated - 1);
  o.prompt_tokens = c.num_prompt;
  o.generation_tokens = c.generated;
  o.max_tokens = c.max_tokens;
  metrics_.Observe(o);
  // The prompt's n choices are consecutive from its seed offset 0 (ChoicePlan): the last of them
  // to finish reports the prompt, as vLLM's parent request does, unless one was aborted.
  const size_t first = static_cast<size_t>(&c - choices_.data() - c.seed_offset);
  const size_t end = std::min(choices_.size(), first + static_cast<size_t>(sampling_.n));
  int64_t most = 0;
  for (size_t i = first; i < end; ++i) {
    if (!choices_[i].finished || choices_[i].aborted) return;
    most = std::max(most, choices_[i].generated);
  }
  metrics_.ObservePrompt(sampling_.n, most);
}

bool GenerationRun::NextBeam(ChoiceUpdate* out) {
  *out = ChoiceUpdate();
  if (!beams_searched_) {
    beams_searched_ = true;
    // A prompt's n choices are consecutive, numbered from seed offset 0 (ChoicePlan).
    for (size_t first = 0; first < choices_.size();) {
      size_t n = 1;
      while (first + n < choices_.size() && choices_[first + n].seed_offset != 0) ++n;
      const Status s = SearchBeams(first, n);
      if (client_left_) return false;
      if (!s.ok()) {
        // Aborted (a shutdown): every choice left ends with "abort", as a sampled one does.
        const bool aborted = s.code() == StatusCode::kCancelled;
        for (Choice& c : choices_) {
          if (c.finished) continue;
          ChoiceUpdate u;
          u.index = c.index;
          u.finished = true;
          u.finish_reason = aborted ? "abort" : "error";
          if (!aborted) u.error = s;
          Finish(c, u.finish_reason);
          beam_updates_.push_back(std::move(u));
        }
        break;
      }
      first += n;
    }
  }
  if (beam_updates_.empty()) return false;
  *out = std::move(beam_updates_.front());
  beam_updates_.pop_front();
  return true;
}

Status GenerationRun::SearchBeams(size_t first, size_t n) {
  const Choice& c = choices_[first];
  BeamSearchParams p;
  p.width = static_cast<int>(n);
  p.max_tokens = c.max_tokens;
  p.prompt_len = c.num_prompt;
  p.length_penalty = sampling_.length_penalty;
  p.ignore_eos = sampling_.ignore_eos;
  p.eos_ids = eos_ids_;
  auto beams = RunBeamSearch(
      p, [&](const std::vector<const std::vector<int32_t>*>& prefixes, int k) {
        return ExpandBeams(c, prefixes, k);
      });
  if (!beams.ok()) return beams.status();
  for (size_t j = 0; j < n; ++j) {
    BeamUpdate(choices_[first + j], j < beams->size() ? &(*beams)[j] : nullptr);
  }
  return OkStatus();
}

StatusOr<std::vector<TokenLogprobs>> GenerationRun::ExpandBeams(
    const Choice& c, const std::vector<const std::vector<int32_t>*>& beams, int k) {
  std::vector<std::string> ids;
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < beams.size(); ++i) {
    EngineRequest r;
    r.request_id = c.engine_id + "-beam-" + std::to_string(beam_step_) + "-" + std::to_string(i);
    r.prompt = c.prompt;
    r.prompt.insert(r.prompt.end(), beams[i]->begin(), beams[i]->end());
    r.sampling.temperature = 0.0f;  // its draw is not used: the candidates are the log-probs
    r.max_tokens = 1;
    r.ignore_eos = true;
    r.logprobs = k;
    ids.push_back(r.request_id);
    streams.push_back(engine_.Submit(std::move(r)));
  }
  ++beam_step_;
  const auto cancel_all = [&] {
    for (const std::string& id : ids) engine_.Cancel(id);
  };
  std::vector<TokenLogprobs> out(beams.size());
  for (size_t i = 0; i < streams.size(); ++i) {
    for (TokenEvent ev;;) {
      if (client_gone_ && client_gone_()) {
        client_left_ = true;
        cancel_all();
        return Cancelled("the client disconnected");
      }
      if (!streams[i]->Next(&ev, std::chrono::milliseconds(100))) continue;
      if (!ev.error.ok()) {
        cancel_all();
        return ev.error;
      }
      // The engine shutting down: the search ends there (not as a step with no candidates,
      // which reads as beams that ran out of room).
      if (ev.finished && ev.finish_reason == "abort") {
        cancel_all();
        return Cancelled("the beam search was aborted");
      }
      if (!ev.logprobs.empty()) out[i] = ev.logprobs.back();
      if (ev.finished) break;
    }
  }
  return out;
}

// A finished search's beam as its choice's one update (no beam: an empty "length" choice,
// where the vocabulary offered fewer candidates than n).
void GenerationRun::BeamUpdate(Choice& c, const Beam* beam) {
  ChoiceUpdate u;
  u.index = c.index;
  u.finished = true;
  u.finish_reason = beam != nullptr && beam->ended_by_eos ? "stop" : "length";
  if (beam != nullptr) {
    c.generated = static_cast<int64_t>(beam->tokens.size());
    c.has_token = !beam->tokens.empty();
    if (c.has_token) metrics_.ObserveFirstToken(Seconds(Clock::now() - arrival_));
    // The EOS that ended a beam stays out of its text, as a sampled one does (vLLM's rule),
    // and names it as the stop reason (as vLLM's beam search does).
    const bool hide_eos = beam->ended_by_eos && !sampling_.include_stop_str_in_output;
    const size_t shown = beam->tokens.size() - (hide_eos ? 1 : 0);
    for (size_t t = 0; t < shown; ++t) u.text += c.detok->Push(beam->tokens[t]);
    u.token_ids = beam->tokens;
    if (beam->ended_by_eos) u.stop_token = beam->tokens.back();
    if (sampling_.logprobs >= 0) {
      for (TokenLogprobs lp : beam->logprobs) {
        if (lp.top.size() > static_cast<size_t>(sampling_.logprobs)) {
          lp.top.resize(static_cast<size_t>(sampling_.logprobs));
        }
        u.logprobs.push_back(std::move(lp));
      }
    }
  }
  Finish(c, u.finish_reason);
  beam_updates_.push_back(std::move(u));
}

}  // namespace cpm
