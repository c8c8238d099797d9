// POST /v1/chat/completions: messages -> template -> tokens -> engine -> chat.completion (or
// chat.completion.chunk SSE events ending in `data: [DONE]`).
#include <charconv>
#include <cstdlib>
#include <memory>
#include <utility>

#include "base/log.h"
#include "server/chat_prompt.h"
#include "server/escaped_newline_normalizer.h"
#include "server/forced_tool_choice.h"
#include "server/handlers.h"
#include "server/logprobs_json.h"
#include "server/protocol.h"
#include "server/reasoning_parser.h"
#include "server/sampling_request.h"
#include "server/sse.h"
#include "server/tool_call_parser.h"

namespace cpm {

using Json = nlohmann::ordered_json;

namespace {

// Everything the reply needs once validation has passed.
struct ChatJob {
  std::string id;
  std::string model;
  int64_t created = 0;
  std::vector<int32_t> prompt;
  std::shared_ptr<const MultimodalInputs> multimodal;  // the prompt's images, if any
  ResolvedSampling sampling;
  int64_t max_tokens = 0;
  bool want_logprobs = false;
  int top_logprobs = 0;
  bool include_usage = false;
  bool continuous_usage = false;  // every chunk carries the choice's running usage
  bool cached_tokens_details = false;  // usage.prompt_tokens_details from the prefix cache
  bool echo = false;
  bool return_token_ids = false;  // prompt_token_ids on the reply, token_ids on each choice
  std::string echo_prefix;  // with echo: the last message's text (EchoedContent)
  // The reply's role: --response-role, or without add_generation_prompt the last message's
  // (the reply continues it), as vLLM's get_chat_request_role.
  std::string role = "assistant";
  std::string reasoning_parser;     // "" for none
  bool opens_in_reasoning = false;  // the prompt ends inside an open <think>
  bool include_reasoning = true;    // false: the parsed reasoning is left out of the reply
  ReasoningMarkerIds reasoning_ids;  // the parser's markers' ids (reasoning_tokens)
  bool responses = false;    // run for the Responses API (ChatApi::kResponses)
  bool parse_tools = false;  // tool_choice "auto" with --enable-auto-tool-choice and tools
  bool parallel_tool_calls = true;  // false: a reply's first call only
  Json tools;                // the request's tools (their parameter types)
  std::optional<ForcedToolChoice> forced;  // tool_choice "required" or a named function
  Clock::time_point arrival;
};

// vLLM's include_reasoning false with a parser: the reasoning is left out, and with it the
// logprobs and token_ids, whose tokens would show it (suppress_metadata).
bool HidesReasoningMetadata(const ChatJob& job) {
  return !job.include_reasoning && !job.reasoning_parser.empty();
}

// usage.completion_tokens_details with a reasoning parser (recent vLLM): the choices' reasoning
// tokens, summed. Usage without a parser is left as it is.
void AddReasoningTokens(const ChatJob& job, const std::vector<std::vector<int32_t>>& token_ids,
                        Json* usage) {
  if (job.reasoning_parser.empty()) return;
  int64_t n = 0;
  for (const auto& ids : token_ids) {
    n += CountReasoningTokens(ids, job.reasoning_ids, job.opens_in_reasoning);
  }
  (*usage)["completion_tokens_details"] = {{"reasoning_tokens", n}};
}

Json ChunkBase(const ChatJob& job) {
  return ResponseHead(job.id, "chat.completion.chunk", job.created, job.model);
}

Json Chunk(const ChatJob& job, int index, Json delta, Json logprobs, Json finish_reason,
           Json stop_reason, bool with_stop_reason) {
  Json c = ChunkBase(job);
  Json choice;
  choice["index"] = index;
  choice["delta"] = std::move(delta);
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = std::move(finish_reason);
  if (with_stop_reason) choice["stop_reason"] = std::move(stop_reason);
  c["choices"] = Json::array({std::move(choice)});
  return c;
}

// One reasoning parser per choice, or none.
std::vector<std::unique_ptr<ReasoningParser>> Parsers(const ChatJob& job) {
  std::vector<std::unique_ptr<ReasoningParser>> parsers(job.sampling.n);
  if (job.reasoning_parser.empty()) return parsers;
  // A tool-call parser reads the content as generated (see ContentNewlinesAfterTools); a
  // forced call's content is the call's JSON itself, whose "\n" escapes are the arguments'; a
  // structured output's content is what its constraint made (a JSON string's "\n" escape is
  // JSON, and a raw newline there would not be).
  const bool recover = !job.parse_tools && !job.forced && job.sampling.constraint == nullptr;
  for (auto& p : parsers) {
    p = MakeReasoningParser(job.reasoning_parser, job.opens_in_reasoning,
                            /*recover_content_newlines=*/recover);
  }
  return parsers;
}

// A stream delta for text released by the parser (or all text without one). Reasoning goes
// under both of vLLM's spellings, as clients read either, unless the request left it out.
Json DeltaJson(ReasoningParser* parser, const ChoiceUpdate& u, bool include_reasoning) {
  Json delta = Json::object();
  if (!parser) {
    if (!u.text.empty()) delta["content"] = u.text;
    return delta;
  }
  ReasoningDelta d = parser->Feed(u.text, u.finished);
  if (!d.reasoning.empty() && include_reasoning) {
    delta["reasoning"] = d.reasoning;
    delta["reasoning_content"] = d.reasoning;
  }
  if (!d.content.empty()) delta["content"] = std::move(d.content);
  return delta;
}

// Whether the content a tool-call parser releases gets the reasoning parser's newline recovery,
// which the reasoning parser then left out (vLLM's minicpmv parser recovers newlines in the
// content, never in tool call arguments).
bool ContentNewlinesAfterTools(const ChatJob& job) {
  return job.parse_tools && RecoversEscapedNewlines(job.reasoning_parser);
}

// One tool-call parser per choice when the request's tool calls are parsed, else none.
std::vector<std::unique_ptr<ToolCallParser>> ToolParsers(const ChatJob& job) {
  std::vector<std::unique_ptr<ToolCallParser>> parsers(job.sampling.n);
  if (!job.parse_tools) return parsers;
  const uint64_t seed = std::hash<std::string>{}(job.id);
  for (int i = 0; i < job.sampling.n; ++i) {
    parsers[i] = std::make_unique<ToolCallParser>(job.tools, seed + 0x632be59bd9b4e019ULL * i,
                                                  /*stream_text_after_calls=*/!job.responses);
  }
  return parsers;
}

// OpenAI's tool_calls entries; `first_index` numbers a stream's deltas (a reply has none).
Json ToolCallsJson(const std::vector<ToolCall>& calls, std::optional<int> first_index) {
  Json out = Json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    Json c;
    if (first_index) c["index"] = *first_index + static_cast<int>(k);
    c["id"] = calls[k].id;
    c["type"] = "function";
    c["function"] = {{"name", calls[k].name}, {"arguments", calls[k].arguments}};
    out.push_back(std::move(c));
  }
  return out;
}

// A stream delta's content through the choice's tool-call parser: content it releases stays,
// calls it completes go out as tool_calls deltas.
void ParseToolDelta(ToolCallParser* parser, bool final, Json* delta) {
  if (!parser) return;
  std::string content;
  if (auto it = delta->find("content"); it != delta->end()) {
    content = it->get<std::string>();
    delta->erase(it);
  }
  const int first = parser->calls_sent();
  ToolCallParser::Delta d = parser->Feed(content, final);
  if (!d.content.empty()) (*delta)["content"] = std::move(d.content);
  if (!d.calls.empty()) (*delta)["tool_calls"] = ToolCallsJson(d.calls, first);
}

std::vector<ChoicePlan> Plans(const ChatJob& job) {
  std::vector<ChoicePlan> plans;
  for (int i = 0; i < job.sampling.n; ++i) plans.push_back({i, job.prompt, job.max_tokens, i, job.multimodal});
  return plans;
}

void Stream(const ServerContext& ctx, const ChatJob& job, const ClientGoneFn& client_gone,
            const std::function<bool(const std::string&)>& write) {
  GenerationRun run(*ctx.engine, *ctx.tokenizer, *ctx.metrics, job.id, job.arrival);
  run.WatchClient(client_gone);
  run.Start(Plans(job), job.sampling, ctx.eos_ids, ctx.request_log);
  const int64_t num_prompt = static_cast<int64_t>(job.prompt.size());
  // A choice's chunk, with its running usage under continuous_usage_stats (vLLM; the role and
  // echo chunks count no completion tokens, though they go out with the first).
  auto emit = [&](Json chunk, int index, bool preamble = false) {
    if (job.continuous_usage) {
      chunk["usage"] =
          StreamUsageJson(UsageJson(num_prompt, preamble ? 0 : run.completion_tokens(index)));
    }
    return write(SseEvent(chunk));
  };
  // Every choice's role chunk, then every choice's echo, sent with the run's first update (as
  // vLLM's first iteration sends them): a stream's first chunk marks its first token, which is
  // what clients time as TTFT, not its admission.
  auto preamble = [&] {
    for (int i = 0; i < job.sampling.n; ++i) {
      Json first = Chunk(job, i, {{"role", job.role}, {"content", ""}}, nullptr, nullptr, nullptr,
                         false);
      // vLLM: the prompt's ids on the first chunk (null unless return_token_ids).
      first["prompt_token_ids"] = job.return_token_ids ? Json(job.prompt) : Json(nullptr);
      if (!emit(std::move(first), i, true)) return false;
    }
    if (job.echo_prefix.empty()) return true;
    for (int i = 0; i < job.sampling.n; ++i) {
      if (!emit(Chunk(job, i, {{"content", job.echo_prefix}}, nullptr, nullptr, nullptr, false),
                i, true)) {
        return false;
      }
    }
    return true;
  };
  bool first_update = true;
  auto parsers = Parsers(job);
  auto tool_parsers = ToolParsers(job);
  const bool recover_newlines = ContentNewlinesAfterTools(job);
  std::vector<EscapedNewlineNormalizer> content_norms(job.sampling.n);
  std::vector<std::string> forced_text(job.sampling.n);  // forced calls: content held back
  std::vector<int> forced_calls(job.sampling.n, 0);
  std::vector<std::vector<int32_t>> generated(job.sampling.n);  // each choice's ids so far
  const bool hide_metadata = HidesReasoningMetadata(job);
  uint64_t id_state = std::hash<std::string>{}(job.id);
  ChoiceUpdate u;
  while (run.Next(&u)) {
    if (!u.error.ok()) {
      run.CancelAll();
      write(SseEvent(ErrorJson(ApiErrorFromStatus(u.error))));
      write(SseDone());
      return;
    }
    if (std::exchange(first_update, false) && !preamble()) {
      run.CancelAll();
      return;
    }
    bool ok = true;
    generated[u.index].insert(generated[u.index].end(), u.token_ids.begin(), u.token_ids.end());
    Json delta = DeltaJson(parsers[u.index].get(), u, job.include_reasoning);
    ToolCallParser* tools = tool_parsers[u.index].get();
    ParseToolDelta(tools, u.finished, &delta);
    if (recover_newlines) {
      std::string piece;
      if (auto it = delta.find("content"); it != delta.end()) {
        piece = it->get<std::string>();
        delta.erase(it);
      }
      std::string shown = content_norms[u.index].Feed(piece, u.finished);
      if (!shown.empty()) delta["content"] = std::move(shown);
    }
    if (job.forced && !job.forced->required()) {
      // A named function: its arguments as they come, the first piece with the call's id and
      // name (vLLM).
      if (auto it = delta.find("content"); it != delta.end()) {
        const std::string piece = it->get<std::string>();
        Json call = {{"index", 0}};
        if (forced_calls[u.index]++ == 0) {
          call["id"] = ToolCallId(&id_state, "chatcmpl-tool-", 32);  // vLLM's make_tool_call_id
          call["type"] = "function";
          call["function"] = {{"name", job.forced->named()}, {"arguments", piece}};
        } else {
          call["function"] = {{"arguments", piece}};
        }
        delta.erase(it);
        delta["tool_calls"] = Json::array({std::move(call)});
      }
    } else if (job.forced) {
      // "required": the calls go out whole once the reply ends; a reply cut short stays content.
      if (auto it = delta.find("content"); it != delta.end()) {
        forced_text[u.index] += it->get<std::string>();
        delta.erase(it);
      }
      if (u.finished) {
        auto calls = job.forced->Calls(forced_text[u.index], &id_state);
        if (calls) {
          delta["tool_calls"] = ToolCallsJson(*calls, 0);
          forced_calls[u.index] = static_cast<int>(calls->size());
        } else if (!forced_text[u.index].empty()) {
          delta["content"] = forced_text[u.index];
        }
      }
    }
    if (auto calls = delta.find("tool_calls"); calls != delta.end() && !job.parallel_tool_calls) {
      // The stream's side of vLLM's filter: the deltas of calls past the first are dropped.
      Json first = Json::array();
      for (Json& c : *calls) {
        if (c.value("index", 0) == 0) first.push_back(std::move(c));
      }
      if (first.empty()) delta.erase(calls);
      else *calls = std::move(first);
    }
    if (u.finished && delta.contains("tool_calls")) {
      // Calls first seen at the reply's end go out in a chunk of their own before the finishing
      // one, as vLLM's stream ends: the OpenAI SDKs' stream helpers record a call only from a
      // chunk without finish_reason (a call that came with it never got its "done" event).
      Json calls = {{"tool_calls", std::move(delta["tool_calls"])}};
      delta.erase("tool_calls");
      Json chunk = Chunk(job, u.index, std::move(calls), nullptr, nullptr, nullptr, false);
      chunk["choices"][0]["token_ids"] = nullptr;
      if (!emit(std::move(chunk), u.index)) {
        run.CancelAll();
        return;
      }
    }
    const bool with_logprobs = job.want_logprobs && !u.logprobs.empty() && !hide_metadata;
    // With return_token_ids vLLM sends every step's ids, even when the parsers hold its text.
    const bool with_ids = job.return_token_ids && !u.token_ids.empty() && !hide_metadata;
    // Without parsers vLLM sends a chunk for every step that produced tokens, its content ""
    // while the text is held back (a partial UTF-8 byte, a possible stop string); a parser
    // holding text sends none.
    const bool plain = parsers[u.index] == nullptr && tools == nullptr && !job.forced &&
                       !recover_newlines;
    const bool held_step = plain && !u.token_ids.empty();
    // A choice's last update goes out as one chunk with its finish_reason, as vLLM sends it: its
    // delta's content "" when it brings no text, or an empty delta where a parser held the
    // step's text (vLLM main's DeltaMessage() for a parser's None; 0.11's, whose validator sets
    // reasoning_content, serialises it as {"reasoning_content": null}).
    if (!delta.empty() || with_logprobs || u.finished || with_ids || held_step) {
      Json lp = nullptr;
      if (with_logprobs) {
        lp = {{"content", ChatLogprobEntries(*ctx.tokenizer, u.logprobs, job.top_logprobs,
                                             job.sampling.return_tokens_as_token_ids)}};
      }
      // Text held back: the logprobs (or ids) still go out.
      if (delta.empty() && plain) delta["content"] = "";
      Json finish = nullptr, stop_reason = nullptr;
      if (u.finished) {
        // vLLM's stream: "tool_calls" once calls were parsed out (or tool_choice "required"
        // made them), whatever ended the reply (a max_tokens cut too).
        const bool required_calls =
            job.forced && job.forced->required() && forced_calls[u.index] > 0;
        const bool calls = (tools && tools->calls_sent() > 0) || required_calls;
        finish = calls ? Json("tool_calls") : Json(u.finish_reason);
        stop_reason = StopReasonJson(u);
      }
      Json chunk = Chunk(job, u.index, std::move(delta), lp, std::move(finish),
                         std::move(stop_reason), u.finished);
      // vLLM sets token_ids on every chunk after the first: the step's ids (maybe none), or null.
      chunk["choices"][0]["token_ids"] =
          job.return_token_ids && !hide_metadata ? Json(u.token_ids) : Json(nullptr);
      ok = emit(std::move(chunk), u.index);
    }
    if (!ok) {
      run.CancelAll();
      return;
    }
  }
  if (job.include_usage) {
    Json c = ChunkBase(job);
    c["choices"] = Json::array();
    c["usage"] = StreamUsageJson(UsageJson(static_cast<int64_t>(job.prompt.size()),
                                           run.completion_tokens(),
                                           job.cached_tokens_details
                                               ? std::optional(run.cached_tokens(true))
                                               : std::nullopt));
    AddReasoningTokens(job, generated, &c["usage"]);
    if (!write(SseEvent(c))) return;
  }
  write(SseDone());
}

// The float as the decimal it was written as (its shortest round-trip digits): 0.8f reports
// as 0.8, not 0.800000011920929.
double ShortestDecimal(float f) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, f);
  return ec == std::errc() ? std::strtod(std::string(buf, end).c_str(), nullptr) : f;
}

// enable_thinking false among the template variables the prompt rendered with (vLLM's qwen3
// parser reads the request's kwargs).
bool ThinkingDisabled(const ServerContext& ctx, const protocol::ChatTemplateFields& chat) {
  const Json kwargs = EffectiveTemplateKwargs(ctx, chat.chat_template_kwargs);
  return kwargs.is_object() && kwargs.value("enable_thinking", Json(true)) == false;
}

HttpReply Complete(const ServerContext& ctx, const ChatJob& job, const ClientGoneFn& client_gone) {
  GenerationRun run(*ctx.engine, *ctx.tokenizer, *ctx.metrics, job.id, job.arrival);
  run.Start(Plans(job), job.sampling, ctx.eos_ids, ctx.request_log);
  run.WatchClient(client_gone);
  struct Out {
    std::string text;
    std::vector<int32_t> token_ids;
    Json logprobs = Json::array();
    Json finish_reason = nullptr;
    Json stop_reason = nullptr;
  };
  std::vector<Out> outs(job.sampling.n);
  // Every choice shares the prompt: the first to arrive gives the prompt log-probs.
  Json prompt_logprobs = job.sampling.prompt_logprobs >= 0 ? Json::array({nullptr}) : Json(nullptr);
  ChoiceUpdate u;
  while (run.Next(&u)) {
    if (!u.error.ok()) {
      run.CancelAll();
      return HttpReply::Error(u.error);
    }
    if (!u.prompt_logprobs.empty()) {
      prompt_logprobs = PromptLogprobsJson(*ctx.tokenizer, u.prompt_logprobs,
                                           job.sampling.prompt_logprobs);
    }
    Out& o = outs[u.index];
    o.text += u.text;
    o.token_ids.insert(o.token_ids.end(), u.token_ids.begin(), u.token_ids.end());
    if (job.want_logprobs) {
      for (const Json& e : ChatLogprobEntries(*ctx.tokenizer, u.logprobs, job.top_logprobs,
                                              job.sampling.return_tokens_as_token_ids)) {
        o.logprobs.push_back(e);
      }
    }
    if (u.finished) {
      o.finish_reason = u.finish_reason;
      o.stop_reason = StopReasonJson(u);
    }
  }
  if (run.client_left()) return ClientGoneReply();
  auto parsers = Parsers(job);
  auto tool_parsers = ToolParsers(job);
  const bool recover_newlines = ContentNewlinesAfterTools(job);
  uint64_t id_state = std::hash<std::string>{}(job.id);
  Json choices = Json::array();
  for (int i = 0; i < job.sampling.n; ++i) {
    // vLLM's ChatMessage.model_dump(): every field, those it never fills null; the reasoning in
    // both of vLLM's spellings, as clients read either (null without a parser).
    Json message = {{"role", job.role},        {"content", nullptr},
                    {"refusal", nullptr},      {"annotations", nullptr},
                    {"audio", nullptr},        {"function_call", nullptr},
                    {"tool_calls", Json::array()}, {"reasoning", nullptr},
                    {"reasoning_content", nullptr}};
    if (ReasoningParser* parser = parsers[i].get()) {
      ReasoningDelta d = parser->Feed(outs[i].text, true);
      const bool none = d.reasoning.empty() && !parser->reports_empty_reasoning();
      Json reasoning = !job.include_reasoning || none ? Json(nullptr) : Json(d.reasoning);
      // None when the parser finds no content (vLLM); with echo, vLLM's content is the echoed
      // text plus the reply's: a string, even if empty.
      const bool no_content = d.content.empty() && !job.echo;
      message["content"] = no_content ? Json(nullptr) : Json(job.echo_prefix + d.content);
      message["reasoning"] = reasoning;
      message["reasoning_content"] = reasoning;
    } else {
      message["content"] = job.echo_prefix + outs[i].text;
    }
    if (ToolCallParser* tools = tool_parsers[i].get()) {
      // The generated content (after any reasoning) is what the calls are parsed out of;
      // content before the first call stays, null when there is none (vLLM).
      const Json& content = message["content"];
      const std::string generated =
          content.is_string() ? content.get<std::string>().substr(job.echo_prefix.size()) : "";
      ToolCallParser::Extracted e = tools->Extract(generated);
      const auto shown = [&](const std::string& text) {
        return recover_newlines ? RecoverEscapedNewlines(text) : text;
      };
      if (!e.calls.empty()) {
        const std::string kept = job.echo_prefix + shown(e.content.value_or(""));
        message["content"] = kept.empty() ? Json(nullptr) : Json(kept);
        message["tool_calls"] = ToolCallsJson(e.calls, std::nullopt);
        outs[i].finish_reason = "tool_calls";  // vLLM: whatever ended the choice
      } else if (content.is_string()) {
        message["content"] = job.echo_prefix + shown(generated);
      }
    }
    if (job.forced && message["content"].is_string()) {
      // Forced calls: the content is the constrained JSON; vLLM answers with content "".
      const std::string generated =
          message["content"].get<std::string>().substr(job.echo_prefix.size());
      if (auto calls = job.forced->Calls(generated, &id_state)) {
        message["content"] = job.echo_prefix;
        message["tool_calls"] = ToolCallsJson(*calls, std::nullopt);
        if (job.forced->required() && outs[i].finish_reason == "stop") {
          outs[i].finish_reason = "tool_calls";
        }
      }
    }
    // vLLM's maybe_filter_parallel_tool_calls: parallel_tool_calls false keeps the first.
    if (!job.parallel_tool_calls && message["tool_calls"].size() > 1) {
      message["tool_calls"].erase(message["tool_calls"].begin() + 1, message["tool_calls"].end());
    }
    Json choice;
    choice["index"] = i;
    choice["message"] = std::move(message);
    const bool hide_metadata = HidesReasoningMetadata(job);
    choice["logprobs"] = job.want_logprobs && !hide_metadata
                             ? Json{{"content", std::move(outs[i].logprobs)}}
                             : Json(nullptr);
    choice["finish_reason"] = outs[i].finish_reason;
    choice["stop_reason"] = outs[i].stop_reason;
    choice["token_ids"] =
        job.return_token_ids && !hide_metadata ? Json(outs[i].token_ids) : Json(nullptr);
    choices.push_back(std::move(choice));
  }
  Json r = CompleteResponse(job.id, "chat.completion", job.created, job.model,
                            std::move(choices), static_cast<int64_t>(job.prompt.size()),
                            run.completion_tokens(),
                            job.cached_tokens_details ? std::optional(run.cached_tokens(false))
                                                      : std::nullopt);
  std::vector<std::vector<int32_t>> generated;
  for (Out& o : outs) generated.push_back(std::move(o.token_ids));
  AddReasoningTokens(job, generated, &r["usage"]);
  r["prompt_logprobs"] = std::move(prompt_logprobs);
  if (job.return_token_ids) r["prompt_token_ids"] = job.prompt;
  return HttpReply::Json(r);
}

}  // namespace

HttpReply HandleChatCompletions(const ServerContext& ctx, const std::string& body,
                                Clock::time_point arrival, const ClientGoneFn& client_gone,
                                const std::string& x_request_id, ChatApi api,
                                ChatResolved* resolved) {
  const bool responses = api == ChatApi::kResponses;
  std::vector<std::string> ignored;
  auto req = protocol::ParseChatCompletionRequest(body, &ignored, ctx.structured_compact_json);
  if (!req.ok()) return HttpReply::Error(req.status());
  LogIgnoredFields(ignored);
  if (Status s = ctx.CheckModel(req->sampling.model); !s.ok()) return HttpReply::Error(s);
  ReasoningMarkerIds reasoning_ids;
  if (!ctx.reasoning_parser.empty()) {
    reasoning_ids = FindReasoningMarkerIds(ctx.reasoning_parser, *ctx.tokenizer);
    if (Status s = CheckReasoningMarkerIds(ctx.reasoning_parser, reasoning_ids); !s.ok()) {
      return HttpReply::Error(s);
    }
  }
  // What vllm serve answers: "auto" needs a tool-call parser (its Responses API renders the
  // tools without one and answers in text).
  if (req->tool_choice == protocol::ToolChoice::kAuto && ctx.tool_call_parser.empty() &&
      !responses) {
    return HttpReply::Error(InvalidArgument(
        "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be "
        "set"));
  }
  // "required" and named functions are forced through structured outputs (ForcedToolChoice),
  // whose tool schema replaces any response_format or structured_outputs: the reply is a call
  // and nothing else, so vLLM's adjust_request drops the reply's own constraint rather than
  // refusing it.
  std::optional<ForcedToolChoice> forced;
  if (req->tool_choice == protocol::ToolChoice::kRequired ||
      req->tool_choice == protocol::ToolChoice::kNamed) {
    auto f = ForcedToolChoice::Make(
        *req->chat.tools, req->tool_choice == protocol::ToolChoice::kNamed ? req->tool_name : "");
    if (!f.ok()) return HttpReply::Error(f.status());
    forced = std::move(*f);
  }
  auto num_logprobs =
      ChatLogprobsCount(req->logprobs, req->top_logprobs, ctx.tokenizer->vocab_size());
  if (!num_logprobs.ok()) return HttpReply::Error(num_logprobs.status());
  auto sampling = ResolveSampling(req->sampling, ctx.generation_defaults, *num_logprobs,
                                  ctx.tokenizer->vocab_size(), ctx.tokenizer, ctx.max_logprobs);
  if (!sampling.ok()) return HttpReply::Error(sampling.status());
  if (Status s = ctx.ApplyServerSampling(req->sampling, &*sampling); !s.ok()) {
    return HttpReply::Error(s);
  }
  // echo scores the prompt too, at top_logprobs (0 by default) unless prompt_logprobs says
  // otherwise (vLLM's to_sampling_params); a stream carries no prompt log-probs.
  if (req->echo && !req->sampling.stream && sampling->prompt_logprobs < 0) {
    const int64_t k = req->top_logprobs.value_or(0);
    sampling->prompt_logprobs =
        static_cast<int32_t>(k < 0 ? ctx.tokenizer->vocab_size() : k);
  }

  // tool_choice "none" (given, or tools: [] with "required") keeps the tools out of the prompt
  // when the server says so (vLLM's exclude_tools_when_tool_choice_none).
  if (ctx.exclude_tools_when_tool_choice_none && req->tool_choice == protocol::ToolChoice::kNone) {
    req->chat.tools.reset();
  }
  std::vector<MediaRef> media;
  auto text = RenderChatPrompt(ctx, req->chat, &media, responses);
  if (!text.ok()) return HttpReply::Error(text.status());

  auto job = std::make_shared<ChatJob>();
  auto prompt =
      EncodeChatPrompt(ctx, *text, media, req->add_special_tokens, req->chat, &job->multimodal);
  if (!prompt.ok()) return HttpReply::Error(prompt.status());
  if (sampling->beam_search && job->multimodal) {
    // Each step of a search is a new request over the prompt: its images would be encoded
    // again every step.
    return HttpReply::Error(
        InvalidArgument("use_beam_search is not supported for prompts with images or videos"));
  }
  // What vLLM truncates and checks the request against: a prompt with images or videos as its
  // text tokens, each item the one placeholder the template wrote (LimitToExpandedPrompt).
  const int64_t text_tokens =
      job->multimodal
          ? static_cast<int64_t>(ctx.tokenizer->Encode(*text, req->add_special_tokens).size())
          : static_cast<int64_t>(prompt->size());
  if (Status s = TruncatePrompt(req->sampling.truncate_prompt_tokens,
                                req->sampling.truncation_side == "right", ctx.max_model_len,
                                job->multimodal != nullptr, &*prompt, {}, text_tokens);
      !s.ok()) {
    return HttpReply::Error(s);
  }
  job->prompt = std::move(*prompt);
  const int64_t prompt_tokens = static_cast<int64_t>(job->prompt.size());
  const int64_t checked_tokens = job->multimodal ? text_tokens : prompt_tokens;
  if (responses && sampling->max_tokens) {
    // vLLM's Responses: min(max_output_tokens, the room the prompt leaves), never its 400.
    const int64_t room = ctx.max_model_len - checked_tokens;
    if (room >= 1) sampling->max_tokens = std::min(*sampling->max_tokens, room);
  }
  auto asked = ResolveMaxTokens(checked_tokens, sampling->max_tokens, ctx.max_model_len,
                                sampling->max_tokens_cap, sampling->min_tokens);
  if (!asked.ok()) return HttpReply::Error(asked.status());
  auto max_tokens = job->multimodal
                        ? LimitToExpandedPrompt(*asked, prompt_tokens, ctx.max_model_len)
                        : asked;
  if (!max_tokens.ok()) return HttpReply::Error(max_tokens.status());
  if (resolved) {
    const SamplingParams& p = sampling->params;
    resolved->temperature = ShortestDecimal(p.temperature);
    resolved->top_p = p.temperature < 1e-5f ? 1.0 : ShortestDecimal(p.top_p);
    // The Responses object echoes max_output_tokens as vLLM resolved it: before an expanded
    // prompt's limit.
    resolved->max_tokens = *asked;
  }
  job->id = ctx.RequestId("chatcmpl", x_request_id, req->sampling.request_id);
  job->model = ctx.ReplyModel(req->sampling.model);
  job->created = UnixNow();
  job->sampling = *sampling;
  job->max_tokens = *max_tokens;
  job->want_logprobs = *num_logprobs >= 0;
  job->top_logprobs = static_cast<int>(std::max<int64_t>(*num_logprobs, 0));
  // --enable-force-include-usage: every stream ends with usage (vLLM's should_include_usage).
  job->include_usage = req->sampling.include_usage ||
                       (req->sampling.stream && ctx.enable_force_include_usage);
  job->continuous_usage = job->include_usage && req->sampling.continuous_usage_stats;
  job->cached_tokens_details = responses || ctx.enable_prompt_tokens_details;
  job->reasoning_parser = ctx.reasoning_parser;
  job->opens_in_reasoning =
      OutputStartsInReasoning(ctx.reasoning_parser, *text, ThinkingDisabled(ctx, req->chat));
  job->include_reasoning = req->include_reasoning;
  job->reasoning_ids = reasoning_ids;
  job->forced = std::move(forced);
  if (auto schema = job->forced ? job->forced->schema() : req->sampling.structured) {
    job->sampling.constraint = ctx.MakeConstraint(
        std::move(schema), !job->reasoning_parser.empty() && job->opens_in_reasoning);
  }
  job->responses = responses;
  // vLLM parses calls only where there are tools to call (`request.tools` truthy).
  job->parse_tools = req->tool_choice == protocol::ToolChoice::kAuto &&
                     !ctx.tool_call_parser.empty() && req->chat.tools && !req->chat.tools->empty();
  job->parallel_tool_calls = req->parallel_tool_calls;
  if (job->parse_tools) job->tools = *req->chat.tools;
  job->arrival = arrival;
  job->role = ctx.response_role;
  if (!req->chat.add_generation_prompt && !req->chat.messages.empty()) {
    const Json& last = req->chat.messages.back();
    if (auto r = last.find("role"); r != last.end() && r->is_string()) job->role = r->get<std::string>();
  }
  job->echo = req->echo;
  job->return_token_ids = req->return_token_ids;
  if (req->echo && !req->chat.messages.empty()) {
    job->echo_prefix = EchoedContent(req->chat.messages.back(), job->role);
  }
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
