// Everything a request handler needs, built once at start-up and read-only afterwards (the
// engine client and metrics are thread-safe themselves). Plus HttpReply, the transport-neutral
// result of a handler, so handlers are testable without sockets.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "multimodal/image_processor.h"
#include "server/api_error.h"
#include "server/engine_client.h"
#include "server/generation_defaults.h"
#include "server/metrics.h"
#include "server/protocol.h"
#include "server/reasoning_parser.h"
#include "server/request_log.h"
#include "server/sampling_request.h"
#include "structured/constraint.h"
#include "tokenizer/tokenizer.h"

namespace cpm {

struct ServerContext {
  std::vector<std::string> model_names;  // the first is echoed in responses
  std::string model_root;                // the model directory (ModelCard.root)
  int64_t max_model_len = 0;
  const Tokenizer* tokenizer = nullptr;
  std::optional<ChatTemplate> chat_template;  // absent: chat requests get a 400
  std::string chat_template_error;  // why the model's template did not parse (that 400's text)
  // --trust-request-chat-template: a request's own `chat_template` renders its prompt (parsed
  // per request, under the same step and output limits); without it, vLLM's 400.
  bool trust_request_chat_template = false;
  // --enable-tokenizer-info-endpoint: GET /tokenizer_info's body (null: the route answers 404).
  nlohmann::ordered_json tokenizer_info;
  nlohmann::ordered_json default_chat_template_kwargs = nlohmann::ordered_json::object();
  GenerationDefaults generation_defaults;
  std::vector<int32_t> eos_ids;
  EngineClient* engine = nullptr;
  const ImageProcessor* images = nullptr;  // null: the model takes no images
  int64_t image_limit = -1;                // --limit-mm-per-prompt's image count (999 unless given)
  int64_t video_limit = -1;                // ... and its video count
  ServerMetrics* metrics = nullptr;
  std::string reasoning_parser;  // "" for none; else splits `reasoning` out of chat content
  // --chat-template-content-format string or openai; none (auto): each template's detected one.
  std::optional<jinja::ContentFormat> content_format;
  ReasoningConfig reasoning_config;  // --reasoning-config: thinking_token_budget's texts
  bool structured_in_reasoning = false;  // structured outputs constrain the thinking too
  bool enable_force_include_usage = false;  // --enable-force-include-usage: usage in every stream
  // --structured-outputs-config's disable_any_whitespace: every JSON constraint compact.
  bool structured_compact_json = false;
  bool return_tokens_as_token_ids = false;  // --return-tokens-as-token-ids: the default
  std::string tool_call_parser;  // "" unless --enable-auto-tool-choice: tool_choice "auto" served
  bool exclude_tools_when_tool_choice_none = false;  // tool_choice "none" renders no tools
  int64_t max_n_sequences = kDefaultMaxNSequences;  // $VLLM_MAX_N_SEQUENCES: bound on n
  int64_t max_completion_prompts = kMaxCompletionPrompts;  // $VLLM_MAX_COMPLETION_PROMPTS
  int64_t max_logprobs = kMaxLogprobs;  // --max-logprobs (-1 resolved to the vocabulary)
  std::string response_role = "assistant";  // --response-role
  RequestLogOptions request_log;            // --enable-log-requests, --max-log-len
  bool enable_prompt_tokens_details = false;  // usage.prompt_tokens_details.cached_tokens
  bool priority_scheduling = false;           // --scheduling-policy priority
  int64_t created = 0;           // unix time of start-up (ModelCard.created)
  uint64_t id_salt = 0;          // random at start-up, so ids differ between runs
  mutable std::atomic<uint64_t> next_request{0};
  mutable std::once_flag structured_tokens_once;
  mutable std::shared_ptr<const structured::TokenTable> structured_tokens;

  const std::string& served_name() const { return model_names.front(); }
  // A structured output's constraint over this tokenizer's vocabulary (its token table built
  // on first use). `opens_in_reasoning`: the prompt opens the model's thinking, which the
  // constraint then leaves free until </think>.
  std::shared_ptr<const structured::Constraint> MakeConstraint(
      std::shared_ptr<const structured::Schema> schema, bool opens_in_reasoning) const;
  // What a request's resolved sampling takes from the server: log-probs naming tokens by id
  // (the request's return_tokens_as_token_ids, else --return-tokens-as-token-ids) and the
  // thinking budget's markers, as the reasoning parser names them and this tokenizer encodes
  // them. Without a reasoning parser vLLM's budget processor is off, and so it is here (the
  // field is logged as ignored).
  // A priority other than 0 without --scheduling-policy priority is vLLM's 400.
  Status ApplyServerSampling(const protocol::SamplingFields& fields, ResolvedSampling* s) const;
  // A fresh id: "<prefix><separator>" and 32 hex digits: "chatcmpl-…" (vLLM), "resp_…" (OpenAI).
  std::string NewRequestId(const char* prefix, char separator = '-') const;
  // A reply's id as vLLM names it: "<prefix>-" and the X-Request-Id header, else the body's
  // request_id, else a fresh NewRequestId. Client-chosen ids may repeat: engine requests get
  // ids of their own (GenerationRun).
  std::string RequestId(const char* prefix, const std::string& x_request_id,
                        const std::optional<std::string>& body_request_id) const;
  // 404 "The model `X` does not exist." unless absent, "" or one of the served names.
  Status CheckModel(const std::optional<std::string>& model) const;
  // The model a reply names, as vLLM's _get_model_name: the request's (one of the served names,
  // CheckModel has made sure), or the first served name where it gave none or "".
  const std::string& ReplyModel(const std::optional<std::string>& model) const {
    return model && !model->empty() ? *model : served_name();
  }
};

// A handler's answer: a status and body, or for streams a producer that writes SSE text.
struct HttpReply {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  // Streaming: writes chunks through `write` until done; `write` returns false once the
  // client is gone, after which the producer cancels its work and returns.
  std::function<void(const std::function<bool(const std::string&)>& write)> stream;

  static HttpReply Json(const nlohmann::ordered_json& j, int status = 200);
  static HttpReply Error(const ApiError& e);
  static HttpReply Error(const Status& s) { return Error(ApiErrorFromStatus(s)); }
};

}  // namespace cpm
