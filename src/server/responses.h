// OpenAI's Responses API (POST /v1/responses) over the chat pipeline, as vLLM serves it for chat
// models: the request's translation to a chat completion request, and the handler that turns
// the chat reply (or stream) into a `response` object (or Responses events).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "server/generation_run.h"
#include "server/handlers.h"
#include "server/server_context.h"

namespace cpm {

// The chat completion request a Responses request stands for:
//   instructions                  → a system message first
//   input (string)                → one user message
//   input items                   → messages: {role, content} (developer → system; parts
//                                   input_text / output_text → text, input_image → image_url),
//                                   function_call → an assistant message's tool_calls,
//                                   function_call_output → a tool message; reasoning items are
//                                   left out (the template drops past reasoning anyway)
//   tools [{type: function, ...}] → chat tools {type: function, function: {...}}
//   tool_choice {type: function}  → {type: function, function: {name}}
//   text.format                   → response_format (text, json_object, json_schema)
//   max_output_tokens             → max_tokens
//   include ["message.output_text.logprobs"], top_logprobs
//                                 → logprobs, top_logprobs (top_logprobs alone asks nothing)
//   temperature, top_p, parallel_tool_calls, and vLLM's sampling extras (top_k, min_p,
//   repetition_penalty, seed, stop, ...) as they are.
// Built-in tools (web_search, file_search, ...), file inputs, item references and background
// runs are 400s; previous_response_id is vLLM's 404 for a response it does not hold (nothing is
// stored). Fields only echoed (store, metadata,
// user, truncation, reasoning, service_tier; include's other values) go nowhere; unknown ones
// are appended to `ignored` (logged, as vLLM does).
StatusOr<nlohmann::ordered_json> ChatRequestFromResponses(const nlohmann::ordered_json& request,
                                                          std::vector<std::string>* ignored);

// What the reply echoes besides the generated output.
struct ResponsesJob {
  const ServerContext* ctx = nullptr;  // the server's ids (NewRequestId)
  std::string id;  // resp_...
  int64_t created = 0;
  std::string model;
  // The request's fields the reply repeats (instructions, text, ...), those it has; its tools
  // as openai's FunctionTool dumps them.
  nlohmann::ordered_json echo = nlohmann::ordered_json::object();
  // include asked for message.output_text.logprobs: the output text carries them, with
  // top_logprobs alternatives each (echoed as the response's top_logprobs).
  bool logprobs = false;
  nlohmann::ordered_json top_logprobs = 0;
  // The sampling the chat pipeline resolved (the response reports what was used).
  ChatResolved resolved;

  // An output item's id: "msg_…", "rs_…", "fc_…".
  std::string NewItemId(const char* prefix) const { return ctx->NewRequestId(prefix, '_'); }
};

// A function tool as openai's FunctionTool model dumps it (vLLM's pydantic round trip): its
// fields in their declared order (name, parameters, strict, type, description), null when
// absent, other keys after. The template sees it so, and the response echoes it so.
nlohmann::ordered_json FunctionToolDump(const nlohmann::ordered_json& tool);

HttpReply HandleResponses(const ServerContext& ctx, const std::string& body,
                          Clock::time_point arrival, const ClientGoneFn& client_gone = nullptr);

}  // namespace cpm
