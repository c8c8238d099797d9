// POST /v1/completions: one or more prompts (text or token ids) -> engine -> text_completion
// (or text_completion SSE chunks ending in `data: [DONE]`). Choice p*n + j is prompt p's j-th.
#include <algorithm>
#include <memory>

#include "server/handlers.h"
#include "server/logprobs_json.h"
#include "server/protocol.h"
#include "server/sampling_request.h"
#include "server/sse.h"

namespace cpm {

using Json = nlohmann::ordered_json;

namespace {

struct CompletionJob {
  std::string id;
  std::string model;
  int64_t created = 0;
  std::vector<ChoicePlan> plans;
  std::vector<std::string> echo;  // per prompt (empty without echo)
  int64_t prompt_tokens = 0;
  ResolvedSampling sampling;
  int top_logprobs = -1;  // -1: no logprobs
  bool echo_logprobs = false;  // echo with logprobs: the prompt's tokens lead the logprobs
  // echo with max_tokens 0: one token is generated, as vLLM does (its finish_reason and usage
  // count), and left out of the text and log-probs.
  bool echo_only = false;
  bool return_token_ids = false;  // prompt_token_ids and token_ids on each choice
  bool include_usage = false;
  bool continuous_usage = false;  // every chunk carries the choice's running usage
  Clock::time_point arrival;
};

// A stream's chunk as vLLM dumps CompletionStreamResponse (every field, null when unset):
// prompt_token_ids and token_ids are filled with return_token_ids, usage under
// continuous_usage_stats.
Json Chunk(const CompletionJob& job, int index, const std::string& text, Json logprobs,
           Json finish_reason, Json stop_reason) {
  Json choice;
  choice["index"] = index;
  choice["text"] = text;
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = std::move(finish_reason);
  choice["stop_reason"] = std::move(stop_reason);
  choice["prompt_token_ids"] = nullptr;
  choice["token_ids"] = nullptr;
  Json c = ResponseHead(job.id, "text_completion", job.created, job.model);
  c["choices"] = Json::array({std::move(choice)});
  c["usage"] = nullptr;
  return c;
}

const std::string& EchoOf(const CompletionJob& job, int index) {
  static const std::string kEmpty;
  return job.echo.empty() ? kEmpty : job.echo[index / job.sampling.n];
}

std::vector<CompletionLogprobs> MakeLogprobs(const ServerContext& ctx, const CompletionJob& job) {
  return std::vector<CompletionLogprobs>(
      job.plans.size(),
      CompletionLogprobs(*ctx.tokenizer, job.top_logprobs, 0,
                         job.sampling.return_tokens_as_token_ids));
}

// Adds an update's log-probs to its choice's: with echo, the prompt's first (unscored) and
// the rest (from the prompt log-probs on the choice's first update) before the generated ones.
void AppendLogprobs(const CompletionJob& job, const ChoiceUpdate& u, CompletionLogprobs* lps) {
  if (job.echo_logprobs && lps->empty()) {  // the choice's first update
    lps->AppendUnscored(job.plans[u.index].prompt.front());
    // vLLM keeps the first logprobs + 1 entries of each prompt position's dict (the token,
    // then the top prompt_logprobs), which differs from the generated tokens' when the request
    // asks for more prompt_logprobs than logprobs.
    lps->Append(u.prompt_logprobs, job.sampling.prompt_logprobs, job.top_logprobs + 1);
  }
  lps->Append(u.logprobs);
}

// How many tokens `with` (a text encoded with its special tokens) has before and after
// `bare` (the same text without them); none if `bare` is not inside it.
SpecialTokenCounts AddedSpecialTokens(const std::vector<int32_t>& with,
                                      const std::vector<int32_t>& bare) {
  if (bare.size() > with.size()) return {};
  for (size_t lead = 0; lead + bare.size() <= with.size(); ++lead) {
    if (std::equal(bare.begin(), bare.end(), with.begin() + static_cast<ptrdiff_t>(lead))) {
      return {lead, with.size() - lead - bare.size()};
    }
  }
  return {};
}

void HideEchoOnlyToken(const CompletionJob& job, ChoiceUpdate* u) {
  if (!job.echo_only) return;
  u->text.clear();
  u->logprobs.clear();
}

// vLLM's completions endpoint logs each prompt as <id>-<index>, a lone one too.
RequestLogOptions CompletionLog(const ServerContext& ctx) {
  RequestLogOptions log = ctx.request_log;
  log.indexed_prompt_ids = true;
  return log;
}

void Stream(const ServerContext& ctx, const CompletionJob& job, const ClientGoneFn& client_gone,
            const std::function<bool(const std::string&)>& write) {
  GenerationRun run(*ctx.engine, *ctx.tokenizer, *ctx.metrics, job.id, job.arrival);
  run.WatchClient(client_gone);
  run.Start(job.plans, job.sampling, ctx.eos_ids, CompletionLog(ctx));
  std::vector<CompletionLogprobs> lps = MakeLogprobs(ctx, job);
  std::vector<bool> echoed(job.plans.size(), false);
  std::vector<bool> ids_sent(job.plans.size(), false);  // return_token_ids: prompt ids sent
  // Prompt p's choices share its token count; plans are in choice order.
  auto emit = [&](Json chunk, int index) {
    if (job.continuous_usage) {
      chunk["usage"] = StreamUsageJson(UsageJson(
          static_cast<int64_t>(job.plans[index].prompt.size()), run.completion_tokens(index)));
    }
    return write(SseEvent(chunk));
  };
  ChoiceUpdate u;
  while (run.Next(&u)) {
    if (!u.error.ok()) {
      run.CancelAll();
      write(SseEvent(ErrorJson(ApiErrorFromStatus(u.error))));
      write(SseDone());
      return;
    }
    HideEchoOnlyToken(job, &u);
    std::string text = u.text;
    if (!echoed[u.index]) {
      text = EchoOf(job, u.index) + text;
      echoed[u.index] = true;
    }
    Json lp = nullptr;
    bool new_logprobs = false;
    if (job.top_logprobs >= 0) {
      AppendLogprobs(job, u, &lps[u.index]);
      new_logprobs = lps[u.index].has_delta();
      lp = lps[u.index].TakeDelta();
    }
    bool ok = true;
    // A choice's last update goes out as one chunk with its finish_reason, as vLLM sends it; a
    // step whose token adds no text yet (a byte held back) still sends one, with text "" (vLLM
    // skips only updates without tokens).
    if (!text.empty() || new_logprobs || u.finished || !u.token_ids.empty()) {
      Json chunk = Chunk(job, u.index, text, !text.empty() || new_logprobs ? lp : Json(nullptr),
                         u.finished ? Json(u.finish_reason) : Json(nullptr),
                         u.finished ? StopReasonJson(u) : Json(nullptr));
      if (job.return_token_ids) {
        // vLLM: the prompt's ids on a choice's first chunk, each chunk's new ids.
        Json& choice = chunk["choices"][0];
        if (!ids_sent[u.index]) choice["prompt_token_ids"] = job.plans[u.index].prompt;
        choice["token_ids"] = u.token_ids;
        ids_sent[u.index] = true;
      }
      ok = emit(std::move(chunk), u.index);
    }
    if (!ok) {
      run.CancelAll();
      return;
    }
  }
  if (job.include_usage) {
    Json c = ResponseHead(job.id, "text_completion", job.created, job.model);
    c["choices"] = Json::array();
    c["usage"] = StreamUsageJson(
        UsageJson(job.prompt_tokens, run.completion_tokens(),
                  ReportedCachedTokens(ctx, run, true)));
    if (!write(SseEvent(c))) return;
  }
  write(SseDone());
}

HttpReply Complete(const ServerContext& ctx, const CompletionJob& job, const ClientGoneFn& client_gone) {
  GenerationRun run(*ctx.engine, *ctx.tokenizer, *ctx.metrics, job.id, job.arrival);
  run.Start(job.plans, job.sampling, ctx.eos_ids, CompletionLog(ctx));
  run.WatchClient(client_gone);
  std::vector<CompletionLogprobs> lps = MakeLogprobs(ctx, job);
  std::vector<std::string> texts(job.plans.size());
  std::vector<std::vector<int32_t>> token_ids(job.plans.size());
  std::vector<Json> finish(job.plans.size()), stop(job.plans.size());
  // Null unless computed; a one-token prompt has only the leading null.
  std::vector<Json> prompt_lps(job.plans.size(), job.sampling.prompt_logprobs >= 0
                                                     ? Json::array({nullptr})
                                                     : Json(nullptr));
  ChoiceUpdate u;
  while (run.Next(&u)) {
    if (!u.error.ok()) {
      run.CancelAll();
      return HttpReply::Error(u.error);
    }
    HideEchoOnlyToken(job, &u);
    texts[u.index] += u.text;
    token_ids[u.index].insert(token_ids[u.index].end(), u.token_ids.begin(), u.token_ids.end());
    if (job.top_logprobs >= 0) AppendLogprobs(job, u, &lps[u.index]);
    if (!u.prompt_logprobs.empty()) {
      prompt_lps[u.index] = PromptLogprobsJson(*ctx.tokenizer, u.prompt_logprobs,
                                               job.sampling.prompt_logprobs);
    }
    if (u.finished) {
      finish[u.index] = u.finish_reason;
      stop[u.index] = StopReasonJson(u);
    }
  }
  if (run.client_left()) return ClientGoneReply();
  Json choices = Json::array();
  for (size_t i = 0; i < job.plans.size(); ++i) {
    Json choice;
    choice["index"] = i;
    choice["text"] = EchoOf(job, static_cast<int>(i)) + texts[i];
    choice["logprobs"] = job.top_logprobs >= 0 ? lps[i].ToJson() : Json(nullptr);
    choice["finish_reason"] = finish[i];
    choice["stop_reason"] = stop[i];
    // vLLM's CompletionResponseChoice, every field (the ids null without return_token_ids).
    choice["token_ids"] = job.return_token_ids ? Json(token_ids[i]) : Json(nullptr);
    choice["prompt_logprobs"] = prompt_lps[i];
    choice["prompt_token_ids"] = job.return_token_ids ? Json(job.plans[i].prompt) : Json(nullptr);
    choices.push_back(std::move(choice));
  }
  return HttpReply::Json(CompleteResponse(job.id, "text_completion", job.created, job.model,
                                          std::move(choices), job.prompt_tokens,
                                          run.completion_tokens(),
                                          ReportedCachedTokens(ctx, run, false)));
}

}  // namespace

HttpReply HandleCompletions(const ServerContext& ctx, const std::string& body,
                            Clock::time_point arrival, const ClientGoneFn& client_gone,
                            const std::string& x_request_id) {
  std::vector<std::string> ignored;
  auto req = protocol::ParseCompletionRequest(body, &ignored, ctx.structured_compact_json);
  if (!req.ok()) return HttpReply::Error(req.status());
  LogIgnoredFields(ignored);
  if (Status s = ctx.CheckModel(req->sampling.model); !s.ok()) return HttpReply::Error(s);
  if (req->suffix) {  // vLLM refuses any suffix, "" included
    return HttpReply::Error(BadRequest("suffix is not currently supported"));
  }
  if (req->sampling.stream && req->sampling.use_beam_search) {  // vLLM's, before anything runs
    return HttpReply::Error(BadRequest("Streaming is not currently supported with beam search"));
  }
  if (req->sampling.use_beam_search && req->echo && req->logprobs) {
    // Beam search scores no prompt (vLLM fails its assertion there): a 400, not misaligned data.
    return HttpReply::Error(
        BadRequest("echo with logprobs is not supported with beam search", "echo"));
  }
  // vLLM's echo without generation: echo with max_tokens 0 returns the prompt (and, with
  // logprobs, its log-probs); the one token vLLM still generates counts in the usage and
  // decides finish_reason, but is not shown.
  protocol::SamplingFields fields = req->sampling;
  const bool echo_only = req->echo && fields.max_tokens && *fields.max_tokens == 0;
  if (echo_only) fields.max_tokens = 1;
  const auto logprobs_count = CompletionLogprobsCount(req->logprobs);
  if (!logprobs_count.ok()) return HttpReply::Error(logprobs_count.status());
  const int64_t logprobs = *logprobs_count;
  auto sampling = ResolveSampling(fields, ctx.generation_defaults, logprobs,
                                  ctx.tokenizer->vocab_size(), ctx.tokenizer, ctx.max_logprobs);
  if (!sampling.ok()) return HttpReply::Error(sampling.status());
  if (Status s = ctx.ApplyServerSampling(fields, &*sampling); !s.ok()) return HttpReply::Error(s);
  if (fields.structured) sampling->constraint = ctx.MakeConstraint(fields.structured, false);
  // Echoed tokens get log-probs like generated ones: the prompt's, at the same top-k unless
  // the request asks for prompt_logprobs itself (then its k, as vLLM's to_sampling_params).
  if (req->echo && req->logprobs && sampling->prompt_logprobs < 0) {
    sampling->prompt_logprobs = static_cast<int32_t>(logprobs);
  }
  const auto num_prompts = static_cast<int64_t>(req->prompts.size());
  if (num_prompts > ctx.max_completion_prompts) {
    return HttpReply::Error(
        BadRequest("prompt list length " + std::to_string(num_prompts) +
                   " exceeds the maximum allowed count of " +
                   std::to_string(ctx.max_completion_prompts) +
                   ". To increase this limit, set the VLLM_MAX_COMPLETION_PROMPTS environment "
                   "variable.",
                   "prompt"));
  }
  if (num_prompts * sampling->n > ctx.max_n_sequences) {
    return HttpReply::Error(BadRequest(
        "too many prompts x n for one request (" + std::to_string(num_prompts * sampling->n) +
        "; at most " + std::to_string(ctx.max_n_sequences) + ", VLLM_MAX_N_SEQUENCES)"));
  }
  auto job = std::make_shared<CompletionJob>();
  const int32_t vocab = ctx.tokenizer->vocab_size();
  for (size_t p = 0; p < req->prompts.size(); ++p) {
    const protocol::CompletionPrompt& cp = req->prompts[p];
    std::vector<int32_t> ids;
    if (cp.is_text) {
      ids = ctx.tokenizer->Encode(cp.text, req->add_special_tokens);
    } else {
      for (int64_t id : cp.ids) {
        if (id < 0 || id >= vocab) {
          return HttpReply::Error(
              BadRequest("Token id " + std::to_string(id) + " is out of vocabulary"));
        }
        ids.push_back(static_cast<int32_t>(id));
      }
    }
    SpecialTokenCounts specials;
    if (cp.is_text && req->add_special_tokens && fields.truncate_prompt_tokens) {
      specials = AddedSpecialTokens(ids, ctx.tokenizer->Encode(cp.text, false));
    }
    if (Status s = TruncatePrompt(fields.truncate_prompt_tokens, fields.truncation_side == "right",
                                  ctx.max_model_len, false, &ids, specials);
        !s.ok()) {
      return HttpReply::Error(s);
    }
    if (ids.empty()) return HttpReply::Error(BadRequest("The decoder prompt cannot be empty"));
    auto max_tokens =
        ResolveMaxTokens(static_cast<int64_t>(ids.size()), sampling->max_tokens, ctx.max_model_len,
                         sampling->max_tokens_cap, sampling->min_tokens);
    if (!max_tokens.ok()) return HttpReply::Error(max_tokens.status());
    if (req->echo) {
      // vLLM echoes a text prompt as sent, cut or not; a token-id prompt as its kept ids' text;
      // with return_token_ids it echoes no text (the ids are in prompt_token_ids).
      job->echo.push_back(req->return_token_ids ? std::string()
                          : cp.is_text          ? cp.text
                                                : ctx.tokenizer->Decode(ids, false));
    }
    job->prompt_tokens += static_cast<int64_t>(ids.size());
    for (int64_t j = 0; j < sampling->n; ++j) {
      job->plans.push_back(
          {static_cast<int>(p * sampling->n + j), ids, echo_only ? 1 : *max_tokens, j});
    }
  }
  job->id = ctx.RequestId("cmpl", x_request_id, req->sampling.request_id);
  job->model = ctx.ReplyModel(req->sampling.model);
  job->created = UnixNow();
  job->sampling = *sampling;
  job->top_logprobs = static_cast<int>(logprobs);
  job->echo_logprobs = req->echo && req->logprobs;
  job->echo_only = echo_only;
  job->return_token_ids = req->return_token_ids;
  // --enable-force-include-usage: every stream ends with usage (vLLM's should_include_usage).
  job->include_usage = req->sampling.include_usage ||
                       (req->sampling.stream && ctx.enable_force_include_usage);
  job->continuous_usage = job->include_usage && req->sampling.continuous_usage_stats;
  job->arrival = arrival;
  if (!req->sampling.stream) return Complete(ctx, *job, client_gone);
  HttpReply reply;
  reply.content_type = kSseContentType;
  const ServerContext* c = &ctx;
  reply.stream = [c, job, client_gone](const std::function<bool(const std::string&)>& write) {
    Stream(*c, *job, client_gone, write);
  };
  return reply;
}

}  // namespace cpm
