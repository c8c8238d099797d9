// OpenAI / vLLM request types of the HTTP API as typed structs, and their parsers. Parsing
// checks JSON types only (a wrong type is a 400 naming the field); value ranges and defaults
// are resolved in sampling_request.h. Unknown fields are collected, not rejected (vLLM logs
// and ignores them). nlohmann exceptions never leave these functions.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "structured/json_schema.h"

namespace cpm::protocol {

using Json = nlohmann::ordered_json;

// Fields shared by /v1/chat/completions and /v1/completions. Absent optional fields take the
// server defaults (generation_config.json under --generation-config auto, else vLLM's).
struct SamplingFields {
  std::optional<std::string> model;
  int64_t n = 1;
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<int64_t> top_k;
  std::optional<double> min_p;
  std::optional<double> presence_penalty;
  std::optional<double> frequency_penalty;
  std::optional<double> repetition_penalty;
  std::optional<int64_t> seed;
  std::vector<std::string> stop;
  std::vector<int64_t> stop_token_ids;
  std::optional<int64_t> max_tokens;  // chat: max_completion_tokens, else max_tokens
  int64_t min_tokens = 0;
  bool ignore_eos = false;
  bool include_stop_str_in_output = false;
  bool skip_special_tokens = true;
  bool spaces_between_special_tokens = true;  // accepted; decoding always joins tokens as HF
  bool stream = false;
  bool include_usage = false;             // stream_options.include_usage
  bool continuous_usage_stats = false;    // stream_options.continuous_usage_stats
  std::optional<int64_t> prompt_logprobs;  // vLLM extra: per prompt token, with top-k
  // OpenAI's logit_bias (token ids as the object's keys, as sent), vLLM's allowed_token_ids
  // (absent: any token) and bad_words; ResolveSampling checks and resolves them.
  std::vector<std::pair<std::string, double>> logit_bias;
  std::optional<std::vector<int64_t>> allowed_token_ids;
  std::vector<std::string> bad_words;
  // vLLM extras: keep only k of the prompt's tokens (-1: max_model_len), its last ones
  // (truncation_side "left") or its first ("right"); TruncatePrompt.
  std::optional<int64_t> truncate_prompt_tokens;
  std::string truncation_side = "left";
  // vLLM extra: log-probs name tokens "token_id:<id>"; absent: --return-tokens-as-token-ids.
  std::optional<bool> return_tokens_as_token_ids;
  // vLLM extra: generated tokens a thinking section may hold before its end is forced.
  std::optional<int64_t> thinking_token_budget;
  int64_t priority = 0;  // vLLM's: lower runs first under --scheduling-policy priority
  std::optional<std::string> request_id;  // vLLM's: the response id's part after "chatcmpl-"
  // vLLM extra: salts the prompt's prefix-cache hashes, so that only requests with the same
  // salt share cached blocks (tenants cannot time each other's prompts); "" for none.
  std::string cache_salt;
  // vLLM extras: beam search of width n instead of sampling (server/beam_search.h), its
  // length penalty.
  bool use_beam_search = false;
  std::optional<double> length_penalty;  // absent: 1.0
  // response_format json_object / json_schema, or vLLM's structured_outputs json / choice /
  // json_object: what the output must be; null: free text.
  std::shared_ptr<const structured::Schema> structured;
};

// What the chat template renders: shared by /v1/chat/completions and /tokenize's chat form.
struct ChatTemplateFields {
  Json messages = Json::array();  // objects with a string `role`
  std::optional<Json> tools;
  std::optional<Json> documents;
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  Json chat_template_kwargs = Json::object();
  // vLLM's per-request mm_processor_kwargs (the image slicing) and media_io_kwargs (video
  // frames), as JSON text; empty: none.
  std::string mm_processor_kwargs;
  std::string media_io_kwargs;
  std::optional<std::string> chat_template;  // used only with --trust-request-chat-template
};

// tool_choice after vLLM's validation: "none" (or no tools), "auto" (tools without a choice
// too), or a choice that forces calls: "required", or a named function.
enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

struct ChatCompletionRequest {
  SamplingFields sampling;
  ChatTemplateFields chat;
  ToolChoice tool_choice = ToolChoice::kNone;
  std::string tool_name;  // kNamed: the function (one of `tools`)
  bool parallel_tool_calls = true;  // false: only a reply's first call (vLLM's filter)
  bool logprobs = false;
  std::optional<int64_t> top_logprobs;
  bool add_special_tokens = false;
  bool echo = false;  // vLLM extra: prefix the last message's content when continuing it
  // vLLM extra: false leaves the reasoning parser's reasoning out of the reply (the content
  // is still what follows it).
  bool include_reasoning = true;
  // vLLM extra: the prompt's token ids (prompt_token_ids) and each choice's generated ones
  // (token_ids) in the reply, as RL and agent frameworks read them.
  bool return_token_ids = false;
};

// One prompt of /v1/completions: text or token ids.
struct CompletionPrompt {
  bool is_text = true;
  std::string text;
  std::vector<int64_t> ids;
};

struct CompletionRequest {
  SamplingFields sampling;
  std::vector<CompletionPrompt> prompts;
  std::optional<int64_t> logprobs;  // top-k per token (0..--max-logprobs)
  bool echo = false;
  bool add_special_tokens = true;
  std::optional<std::string> suffix;  // rejected: vLLM does not support it
  bool return_token_ids = false;      // as ChatCompletionRequest's, per choice
};

// POST /tokenize: completion form {prompt} or chat form {messages}.
struct TokenizeRequest {
  std::optional<std::string> model;
  bool is_chat = false;
  std::string prompt;
  ChatTemplateFields chat;  // the chat form (is_chat)
  std::optional<bool> add_special_tokens;  // default: true for prompt, false for chat
  bool return_token_strs = false;
};

struct DetokenizeRequest {
  std::optional<std::string> model;
  std::vector<int64_t> tokens;
};

// Each parser fills `ignored` (optional) with the names of fields it does not know.
// `compact_json`: JSON constraints allow no whitespace (the server's disable_any_whitespace).
StatusOr<ChatCompletionRequest> ParseChatCompletionRequest(std::string_view body,
                                                           std::vector<std::string>* ignored,
                                                           bool compact_json = false);
StatusOr<CompletionRequest> ParseCompletionRequest(std::string_view body,
                                                   std::vector<std::string>* ignored,
                                                   bool compact_json = false);
StatusOr<TokenizeRequest> ParseTokenizeRequest(std::string_view body,
                                               std::vector<std::string>* ignored);
StatusOr<DetokenizeRequest> ParseDetokenizeRequest(std::string_view body,
                                                   std::vector<std::string>* ignored);

}  // namespace cpm::protocol
