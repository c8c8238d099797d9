// POST /v1/responses: OpenAI's Responses API, served as vLLM serves it for chat models — over the
// chat pipeline. The request becomes the equivalent chat completion request (instructions and
// input items → messages, flat function tools → chat tools, text.format → response_format,
// max_output_tokens → max_tokens); its reply becomes a `response` object whose output items are
// the reasoning (when the reasoning parser split one off), the message, and the function calls;
// a stream's chat chunks become the Responses events (response.created, output_item.added,
// output_text.delta, ..., response.completed). Nothing is stored: a previous_response_id is
// vLLM's 404.
#include "server/responses.h"

#include <utility>

#include "benchserve/sse_reader.h"
#include "server/api_error.h"
#include "server/handlers.h"
#include "server/sse.h"
#include "server/json_parse.h"

namespace cpm {

using Json = nlohmann::ordered_json;

namespace {

// An output_text part; `logprobs`: the text's tokens' log-probs where include asked for them,
// else null (a finished part's) or [] (a part just opened), as vLLM writes them.
Json OutputText(const std::string& text, Json logprobs) {
  return {{"type", "output_text"}, {"text", text}, {"annotations", Json::array()},
          {"logprobs", std::move(logprobs)}};
}

// A chat choice's `logprobs.content` entries as the Responses API's logprobs: {token, bytes,
// logprob, top_logprobs: [{token, bytes, logprob}]} (an output_text's), or without the bytes
// (a text delta event's). [] where the choice has none.
Json ResponsesLogprobs(const Json& choice, bool with_bytes = true) {
  Json out = Json::array();
  auto lp = choice.find("logprobs");
  if (lp == choice.end() || !lp->is_object()) return out;
  auto content = lp->find("content");
  if (content == lp->end() || !content->is_array()) return out;
  const auto entry = [&](const Json& e) {
    Json out = {{"token", e.value("token", "")}};
    if (with_bytes) out["bytes"] = e.value("bytes", Json::array());
    out["logprob"] = e.value("logprob", 0.0);
    return out;
  };
  for (const Json& e : *content) {
    Json item = entry(e);
    item["top_logprobs"] = Json::array();
    if (auto top = e.find("top_logprobs"); top != e.end() && top->is_array()) {
      for (const Json& t : *top) item["top_logprobs"].push_back(entry(t));
    }
    out.push_back(std::move(item));
  }
  return out;
}

Json MessageItem(const std::string& id, const char* status, Json content) {
  return {{"type", "message"}, {"id", id}, {"status", status}, {"role", "assistant"},
          {"content", std::move(content)}};
}

// A reasoning item (openai's ResponseReasoningItem, every field): `status` null in a reply,
// "in_progress" / "completed" in a stream's events (with no content while in progress).
Json ReasoningItem(const std::string& id, const std::string& text, Json status = nullptr) {
  Json content = nullptr;
  if (status != "in_progress") {
    content = Json::array();
    if (!text.empty()) content.push_back({{"type", "reasoning_text"}, {"text", text}});
  }
  return {{"type", "reasoning"}, {"id", id}, {"summary", Json::array()},
          {"content", std::move(content)}, {"encrypted_content", nullptr},
          {"status", std::move(status)}};
}

Json FunctionCallItem(const std::string& id, const std::string& call_id, const std::string& name,
                      const std::string& arguments, const char* status) {
  return {{"type", "function_call"}, {"id", id}, {"call_id", call_id}, {"name", name},
          {"arguments", arguments}, {"status", status}};
}

// The chat usage's prompt_tokens_details.cached_tokens (the internal chat call always asks for
// it, so it is there, 0 when the prefix cache served none of the prompt), else 0.
int64_t CachedTokensOf(const Json& usage) {
  auto d = usage.find("prompt_tokens_details");
  if (d == usage.end() || !d->is_object()) return 0;
  return d->value("cached_tokens", int64_t{0});
}

// The chat usage's completion_tokens_details.reasoning_tokens (with a reasoning parser), else 0.
int64_t ReasoningTokensOf(const Json& usage) {
  auto d = usage.find("completion_tokens_details");
  if (d == usage.end() || !d->is_object()) return 0;
  return d->value("reasoning_tokens", int64_t{0});
}

// vLLM's ResponseUsage: OpenAI's fields and its per-turn lists (empty: one turn, no tools).
Json UsageOf(int64_t input, int64_t output, int64_t cached, int64_t reasoning) {
  return {{"input_tokens", input},
          {"input_tokens_details",
           {{"cached_tokens", cached},
            {"input_tokens_per_turn", Json::array()},
            {"cached_tokens_per_turn", Json::array()}}},
          {"output_tokens", output},
          {"output_tokens_details",
           {{"reasoning_tokens", reasoning},
            {"tool_output_tokens", 0},
            {"output_tokens_per_turn", Json::array()},
            {"tool_output_tokens_per_turn", Json::array()}}},
          {"total_tokens", input + output}};
}

// The parts of a finished choice: its reasoning, content and tool calls.
struct Outcome {
  std::string reasoning, content;
  std::vector<Json> calls;  // chat tool_calls entries
  std::string finish_reason;
  Json logprobs = Json::array();  // ResponsesLogprobs of the tokens, when include asked
};

// A finished choice's output items: its reasoning, its message, its function calls. An empty
// answer is vLLM's: no message where a reasoning parser reads the reply (its parser adds one
// only for content), a message without content parts otherwise.
Json OutputItems(const ResponsesJob& job, const Outcome& o) {
  Json output = Json::array();
  if (!o.reasoning.empty()) output.push_back(ReasoningItem(job.NewItemId("rs"), o.reasoning));
  // A message cut by max_output_tokens is "completed" too: the response's status and
  // incomplete_details carry the cut (vLLM).
  if (!o.content.empty()) {
    Json text = OutputText(o.content, job.logprobs ? o.logprobs : Json());
    output.push_back(MessageItem(job.NewItemId("msg"), "completed", Json::array({text})));
  } else if (o.calls.empty() && o.reasoning.empty() && job.ctx->reasoning_parser.empty()) {
    output.push_back(MessageItem(job.NewItemId("msg"), "completed", Json::array()));
  }
  for (const Json& c : o.calls) {
    output.push_back(FunctionCallItem(job.NewItemId("fc"), c.value("id", ""), c["function"].value("name", ""),
                                      c["function"].value("arguments", ""), "completed"));
  }
  return output;
}

// The response object: as created (in progress, no output yet) or finished. vLLM's
// ResponsesResponse.from_request, its fields in their order: the request's values where it
// gave them (its tools as openai's dump), the sampling actually used (temperature, top_p,
// max_output_tokens), OpenAI's defaults otherwise; `error` (null unless failed) as OpenAI's
// SDKs expect it.
Json ResponseObject(const ResponsesJob& job, const char* status, Json output, Json usage,
                    Json incomplete) {
  const auto echo = [&](const char* key, Json fallback) {
    auto it = job.echo.find(key);
    return it == job.echo.end() || it->is_null() ? fallback : *it;
  };
  Json r = {{"id", job.id},
            {"created_at", job.created},
            {"incomplete_details", std::move(incomplete)},
            {"instructions", echo("instructions", nullptr)},
            {"metadata", echo("metadata", nullptr)},
            {"model", job.model},
            {"object", "response"},
            {"output", std::move(output)},
            {"parallel_tool_calls", echo("parallel_tool_calls", true)},
            {"temperature", job.resolved.temperature},
            {"tool_choice", echo("tool_choice", "auto")},
            {"tools", echo("tools", Json::array())},
            {"top_p", job.resolved.top_p},
            {"background", false},
            {"max_output_tokens", job.resolved.max_tokens},
            {"max_tool_calls", echo("max_tool_calls", nullptr)},
            {"previous_response_id", nullptr},
            {"prompt", nullptr},
            {"reasoning", echo("reasoning", nullptr)},
            {"service_tier", echo("service_tier", "auto")},
            {"status", status},
            {"text", echo("text", nullptr)},
            {"top_logprobs", job.logprobs ? Json(job.top_logprobs) : Json(nullptr)},
            {"truncation", echo("truncation", "disabled")},
            {"usage", std::move(usage)},
            {"user", echo("user", nullptr)},
            {"error", nullptr}};
  return r;
}

Json Incomplete(const std::string& finish_reason) {
  if (finish_reason == "length") return {{"reason", "max_output_tokens"}};
  return nullptr;
}

// "event: <type>\ndata: <json>\n\n", the payload numbered in order.
class EventWriter {
 public:
  explicit EventWriter(const std::function<bool(const std::string&)>& write) : write_(write) {}
  bool Emit(Json event) {
    const std::string type = event["type"];
    Json ordered = {{"type", type}, {"sequence_number", sequence_++}};
    for (auto it = event.begin(); it != event.end(); ++it) {
      if (it.key() != "type") ordered[it.key()] = it.value();
    }
    return write_("event: " + type + "\ndata: " + DumpJson(ordered) + "\n\n");
  }

 private:
  const std::function<bool(const std::string&)>& write_;
  int64_t sequence_ = 0;
};

// The Responses events of one streamed choice, made from its chat chunks as they come: items
// open when their first text arrives (reasoning, then the message, then each function call
// with its first delta) and close when the next begins or the choice ends.
class StreamTranslator {
 public:
  StreamTranslator(const ResponsesJob& job, EventWriter* out) : job_(job), out_(out) {}

  bool Start() {
    Json r = ResponseObject(job_, "in_progress", Json::array(), nullptr, nullptr);
    return out_->Emit({{"type", "response.created"}, {"response", r}}) &&
           out_->Emit({{"type", "response.in_progress"}, {"response", r}});
  }

  // One chat chunk (choices[0].delta, finish_reason; or the usage chunk).
  bool Chunk(const Json& chunk) {
    if (auto u = chunk.find("usage"); u != chunk.end() && u->is_object()) {
      input_tokens_ = u->value("prompt_tokens", int64_t{0});
      output_tokens_ = u->value("completion_tokens", int64_t{0});
      cached_tokens_ = CachedTokensOf(*u);
      reasoning_tokens_ = ReasoningTokensOf(*u);
    }
    auto choices = chunk.find("choices");
    if (choices == chunk.end() || !choices->is_array() || choices->empty()) return true;
    const Json& c = (*choices)[0];
    // The chunk's tokens' log-probs go with its text; a chunk with neither text nor reasoning
    // (its text held back) keeps them for the next text; a reasoning delta's are not reported
    // (vLLM's). The final message has every token's, as the reply without streaming.
    Json logprobs = job_.logprobs ? ResponsesLogprobs(c, false) : Json::array();
    if (job_.logprobs) {
      for (Json& l : ResponsesLogprobs(c)) outcome_.logprobs.push_back(std::move(l));
    }
    bool said = false;
    if (auto d = c.find("delta"); d != c.end() && d->is_object()) {
      if (auto r = d->find("reasoning"); r != d->end() && r->is_string() &&
                                          !r->get_ref<const std::string&>().empty()) {
        said = true;
        if (!Reasoning(r->get<std::string>())) return false;
      }
      if (auto t = d->find("content"); t != d->end() && t->is_string() &&
                                        !t->get_ref<const std::string&>().empty()) {
        said = true;
        for (Json& l : logprobs) pending_logprobs_.push_back(std::move(l));
        if (!Text(t->get<std::string>(), std::exchange(pending_logprobs_, Json::array()))) {
          return false;
        }
      }
      if (auto calls = d->find("tool_calls"); calls != d->end() && calls->is_array()) {
        for (const Json& call : *calls) {
          if (!CallDelta(call)) return false;
        }
      }
    }
    if (!said) {
      for (Json& l : logprobs) pending_logprobs_.push_back(std::move(l));
    }
    if (auto f = c.find("finish_reason"); f != c.end() && f->is_string()) {
      outcome_.finish_reason = f->get<std::string>();
    }
    return true;
  }

  // The generation failed mid-stream: OpenAI's error event, then response.failed.
  bool Fail(const Json& error) {
    const std::string message = error.value("message", "");
    const Json code = error.value("type", Json(nullptr));
    Json r = ResponseObject(job_, "failed", items_, Usage(), nullptr);
    r["error"] = {{"code", code}, {"message", message}};
    return out_->Emit({{"type", "error"}, {"code", code}, {"message", message}, {"param", nullptr}}) &&
           out_->Emit({{"type", "response.failed"}, {"response", std::move(r)}});
  }

  bool Finish() {
    // An empty answer sends no item (vLLM's stream): the final output holds none either.
    if (!CloseReasoning() || !CloseMessage() || !CloseCall()) return false;
    const bool incomplete = outcome_.finish_reason == "length";
    Json r = ResponseObject(job_, incomplete ? "incomplete" : "completed", items_,
                            Usage(), Incomplete(outcome_.finish_reason));
    // vLLM ends every stream with response.completed, an incomplete response's status inside
    // it (OpenAI's SDKs take their final response from that event only).
    return out_->Emit({{"type", "response.completed"}, {"response", std::move(r)}});
  }

 private:
  // Reasoning text opens a reasoning item (closing a message or call before it, and opening a
  // new item if its own closed before: reasoning after a call is an item of its own).
  bool Reasoning(const std::string& delta) {
    if (reasoning_index_ < 0 || reasoning_closed_) {
      if (!CloseMessage() || !CloseCall()) return false;
      reasoning_closed_ = false;
      reasoning_text_.clear();
      reasoning_id_ = job_.NewItemId("rs");
      reasoning_index_ = next_index_++;
      if (!out_->Emit({{"type", "response.output_item.added"},
                       {"output_index", reasoning_index_},
                       {"item", ReasoningItem(reasoning_id_, "", "in_progress")}}) ||
          !out_->Emit({{"type", "response.reasoning_part.added"}, {"item_id", reasoning_id_},
                       {"output_index", reasoning_index_}, {"content_index", 0},
                       {"part", {{"type", "reasoning_text"}, {"text", ""}}}})) {
        return false;
      }
    }
    outcome_.reasoning += delta;
    reasoning_text_ += delta;
    return out_->Emit({{"type", "response.reasoning_text.delta"}, {"item_id", reasoning_id_},
                       {"output_index", reasoning_index_}, {"content_index", 0}, {"delta", delta}});
  }

  bool CloseReasoning() {
    if (reasoning_index_ < 0 || reasoning_closed_) return true;
    reasoning_closed_ = true;
    Json item = ReasoningItem(reasoning_id_, reasoning_text_, "completed");
    items_.push_back(item);
    return out_->Emit({{"type", "response.reasoning_text.done"}, {"item_id", reasoning_id_},
                       {"output_index", reasoning_index_}, {"content_index", 0},
                       {"text", reasoning_text_}}) &&
           out_->Emit({{"type", "response.reasoning_part.done"}, {"item_id", reasoning_id_},
                       {"output_index", reasoning_index_}, {"content_index", 0},
                       {"part", {{"type", "reasoning_text"}, {"text", reasoning_text_}}}}) &&
           out_->Emit({{"type", "response.output_item.done"},
                       {"output_index", reasoning_index_}, {"item", std::move(item)}});
  }

  bool OpenMessage() {
    message_closed_ = false;
    message_text_.clear();
    message_id_ = job_.NewItemId("msg");
    message_index_ = next_index_++;
    return out_->Emit({{"type", "response.output_item.added"},
                       {"output_index", message_index_},
                       {"item", MessageItem(message_id_, "in_progress", Json::array())}}) &&
           out_->Emit({{"type", "response.content_part.added"}, {"item_id", message_id_},
                       {"output_index", message_index_}, {"content_index", 0},
                       {"part", OutputText("", Json::array())}});
  }

  // Text opens a message item (closing reasoning or a call before it; text after a call is a
  // message of its own).
  bool Text(const std::string& delta, const Json& logprobs) {
    if (message_index_ < 0 || message_closed_) {
      if (!CloseReasoning() || !CloseCall() || !OpenMessage()) return false;
    }
    outcome_.content += delta;
    message_text_ += delta;
    return out_->Emit({{"type", "response.output_text.delta"}, {"item_id", message_id_},
                       {"output_index", message_index_}, {"content_index", 0},
                       {"delta", delta}, {"logprobs", logprobs}});
  }

  bool CloseMessage() {
    if (message_index_ < 0 || message_closed_) return true;
    message_closed_ = true;
    const Json logprobs = job_.logprobs ? outcome_.logprobs : Json();
    Json item = MessageItem(message_id_, "completed",
                            Json::array({OutputText(message_text_, logprobs)}));
    items_.push_back(item);
    return out_->Emit({{"type", "response.output_text.done"}, {"item_id", message_id_},
                       {"output_index", message_index_}, {"content_index", 0},
                       {"text", message_text_}, {"logprobs", Json::array()}}) &&
           out_->Emit({{"type", "response.content_part.done"}, {"item_id", message_id_},
                       {"output_index", message_index_}, {"content_index", 0},
                       {"part", OutputText(message_text_, logprobs)}}) &&
           out_->Emit({{"type", "response.output_item.done"},
                       {"output_index", message_index_}, {"item", std::move(item)}});
  }

  // Chat streams a call as its first delta (index, id, name, perhaps arguments) and argument
  // pieces after it: the first opens a function_call item (closing what was open), each piece
  // is an arguments delta.
  bool CallDelta(const Json& delta) {
    const int index = delta.value("index", 0);
    const auto f = delta.find("function");
    const Json fn = f != delta.end() && f->is_object() ? *f : Json::object();
    if (calls_.empty() || calls_.back().chat_index != index) {
      if (!CloseReasoning() || !CloseMessage() || !CloseCall()) return false;
      Call c;
      c.chat_index = index;
      c.item_id = job_.NewItemId("fc");
      c.output_index = next_index_++;
      c.call_id = delta.value("id", "");
      c.name = fn.value("name", "");
      calls_.push_back(std::move(c));
      const Call& call = calls_.back();
      if (!out_->Emit({{"type", "response.output_item.added"},
                       {"output_index", call.output_index},
                       {"item", FunctionCallItem(call.item_id, call.call_id, call.name, "",
                                                 "in_progress")}})) {
        return false;
      }
    }
    Call& call = calls_.back();
    const std::string piece = fn.value("arguments", "");
    if (piece.empty()) return true;
    call.arguments += piece;
    call.deltas_sent = true;
    return out_->Emit({{"type", "response.function_call_arguments.delta"},
                       {"item_id", call.item_id}, {"output_index", call.output_index},
                       {"delta", piece}});
  }

  // The open call's arguments are whole (their done event, when any delta went out, as vLLM's)
  // and its item is done.
  bool CloseCall() {
    if (calls_.empty() || calls_.back().closed) return true;
    Call& call = calls_.back();
    call.closed = true;
    Json item = FunctionCallItem(call.item_id, call.call_id, call.name, call.arguments,
                                 "completed");
    items_.push_back(item);
    if (call.deltas_sent &&
        !out_->Emit({{"type", "response.function_call_arguments.done"},
                     {"item_id", call.item_id}, {"output_index", call.output_index},
                     {"arguments", call.arguments}, {"name", call.name}})) {
      return false;
    }
    return out_->Emit({{"type", "response.output_item.done"},
                       {"output_index", call.output_index}, {"item", std::move(item)}});
  }

  struct Call {
    int chat_index = 0;  // the chat delta's tool call index
    std::string item_id, call_id, name, arguments;
    int output_index = 0;
    bool deltas_sent = false, closed = false;
  };

  const ResponsesJob& job_;
  EventWriter* out_;
  Outcome outcome_;
  Json items_ = Json::array();
  int next_index_ = 0;
  int reasoning_index_ = -1, message_index_ = -1;
  bool reasoning_closed_ = false, message_closed_ = false;
  std::string reasoning_id_, message_id_;
  std::string reasoning_text_, message_text_;  // the open (or last) item's text
  std::vector<Call> calls_;
  int64_t input_tokens_ = 0, output_tokens_ = 0, cached_tokens_ = 0, reasoning_tokens_ = 0;
  Json Usage() const {
    return UsageOf(input_tokens_, output_tokens_, cached_tokens_, reasoning_tokens_);
  }
  Json pending_logprobs_ = Json::array();  // of tokens whose text has not come yet
};

HttpReply Complete(const ServerContext& ctx, ResponsesJob& job, const std::string& chat_body,
                   Clock::time_point arrival, const ClientGoneFn& client_gone) {
  HttpReply chat = HandleChatCompletions(ctx, chat_body, arrival, client_gone, {},
                                         ChatApi::kResponses, &job.resolved);
  if (chat.status != 200) return chat;
  const Json j = protocol::ParseOrderedJson(chat.body);
  if (j.is_discarded() || !j.contains("choices") || j["choices"].empty()) {
    // The chat pipeline always answers 200 with a choice: anything else is our bug, never a
    // chat completion passed off as a response.
    return HttpReply::Error(Internal("the chat pipeline's reply has no choice"));
  }
  const Json& choice = j["choices"][0];
  const Json& message = choice["message"];
  Outcome o;
  if (message.contains("reasoning") && message["reasoning"].is_string()) o.reasoning = message["reasoning"];
  if (message.contains("content") && message["content"].is_string()) o.content = message["content"];
  if (message.contains("tool_calls") && message["tool_calls"].is_array()) {
    for (const Json& c : message["tool_calls"]) o.calls.push_back(c);
  }
  if (choice.contains("finish_reason") && choice["finish_reason"].is_string()) {
    o.finish_reason = choice["finish_reason"];
  }
  if (job.logprobs) o.logprobs = ResponsesLogprobs(choice);
  const Json& usage = j["usage"];
  Json r = ResponseObject(job, o.finish_reason == "length" ? "incomplete" : "completed",
                          OutputItems(job, o),
                          UsageOf(usage.value("prompt_tokens", int64_t{0}),
                                  usage.value("completion_tokens", int64_t{0}),
                                  CachedTokensOf(usage), ReasoningTokensOf(usage)),
                          Incomplete(o.finish_reason));
  return HttpReply::Json(r);
}

}  // namespace

HttpReply HandleResponses(const ServerContext& ctx, const std::string& body,
                          Clock::time_point arrival, const ClientGoneFn& client_gone) {
  const Json request = protocol::ParseOrderedJson(body);
  std::vector<std::string> ignored;
  auto chat = ChatRequestFromResponses(request, &ignored);
  if (!chat.ok() && chat.status().code() == StatusCode::kNotFound) {
    ApiError e = ApiErrorFromStatus(chat.status());
    e.type = "invalid_request_error";  // vLLM's _make_not_found_error
    return HttpReply::Error(e);
  }
  if (!chat.ok()) return HttpReply::Error(chat.status());
  LogIgnoredFields(ignored);
  auto job = std::make_shared<ResponsesJob>();
  job->ctx = &ctx;
  // The client's request_id names the response, as vLLM's ResponsesRequest.request_id does.
  if (auto id = request.find("request_id"); id != request.end() && id->is_string() &&
      !id->get_ref<const std::string&>().empty()) {
    job->id = id->get<std::string>();
  } else {
    job->id = ctx.NewRequestId("resp", '_');
  }
  job->created = UnixNow();
  std::optional<std::string> model;
  if (auto m = chat->find("model"); m != chat->end() && m->is_string()) model = m->get<std::string>();
  job->model = ctx.ReplyModel(model);
  job->logprobs = chat->value("logprobs", false);
  if (job->logprobs) job->top_logprobs = chat->value("top_logprobs", Json(0));
  for (const char* key : {"instructions", "parallel_tool_calls", "reasoning", "text",
                          "tool_choice", "tools", "truncation", "user", "metadata",
                          "max_tool_calls", "service_tier"}) {
    if (auto it = request.find(key); it != request.end()) job->echo[key] = *it;
  }
  // The tools as openai's FunctionTool dumps them (validated by ChatRequestFromResponses).
  if (auto t = job->echo.find("tools"); t != job->echo.end() && t->is_array()) {
    Json tools = Json::array();
    for (const Json& tool : *t) tools.push_back(FunctionToolDump(tool));
    *t = std::move(tools);
  }
  if (!chat->contains("stream")) return Complete(ctx, *job, chat->dump(), arrival, client_gone);
  HttpReply inner = HandleChatCompletions(ctx, chat->dump(), arrival, client_gone, {},
                                          ChatApi::kResponses, &job->resolved);
  if (!inner.stream) return inner;  // refused before generating: the chat error as it is
  HttpReply reply;
  reply.content_type = kSseContentType;
  reply.stream = [job, inner = std::move(inner)](const std::function<bool(const std::string&)>& write) {
    EventWriter out(write);
    StreamTranslator t(*job, &out);
    if (!t.Start()) return;
    benchserve::SseReader events;
    bool ok = true, failed = false;
    inner.stream([&](const std::string& bytes) {
      for (const std::string& data : events.Feed(bytes)) {
        if (!ok || failed || data == "[DONE]") continue;
        const Json chunk = Json::parse(data, nullptr, false);
        if (chunk.is_discarded()) continue;
        if (auto e = chunk.find("error"); e != chunk.end() && e->is_object()) {
          failed = true;
          ok = t.Fail(*e);
        } else {
          ok = t.Chunk(chunk);
        }
      }
      return ok;
    });
    if (ok && !failed) t.Finish();
  };
  return reply;
}

}  // namespace cpm
