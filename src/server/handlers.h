// The endpoint handlers: request body in, HttpReply out. Validation, templating and
// tokenization run here on the HTTP thread, before anything reaches the engine; streamed
// replies carry a producer that the transport runs. No exception leaves a handler.
#pragma once

#include <optional>
#include <string>

#include "server/generation_run.h"
#include "server/server_context.h"

namespace cpm {

// `client_gone` (optional) tells a reply, streamed or not, that its client hung up, so that the
// generation is cancelled instead of finished for nobody (a stream's failed write tells too).
// `x_request_id`: the X-Request-Id header, which names the reply ("chatcmpl-<it>") before the
// body's request_id and a fresh random id, as vLLM's _base_request_id. `api`: the endpoint
// whose rules apply (the Responses API runs as a chat request: see ChatApi).
enum class ChatApi {
  kChatCompletions,
  // vLLM's Responses rules where they differ from chat: usage always reports cached tokens;
  // tools come already as the template sees them (responses.cc) and need no tool parser
  // (without one the reply is text); max_output_tokens is held to the room the prompt leaves.
  kResponses,
};
// What the chat pipeline resolved for a request that it accepted: its sampling after the
// server's defaults (vLLM's SamplingParams: a greedy request's top_p 1) and the tokens it may
// generate at most after the context and caps. The Responses object reports them.
struct ChatResolved {
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t max_tokens = 0;
};
HttpReply HandleChatCompletions(const ServerContext& ctx, const std::string& body,
                                Clock::time_point arrival,
                                const ClientGoneFn& client_gone = nullptr,
                                const std::string& x_request_id = {},
                                ChatApi api = ChatApi::kChatCompletions,
                                ChatResolved* resolved = nullptr);
HttpReply HandleCompletions(const ServerContext& ctx, const std::string& body,
                            Clock::time_point arrival, const ClientGoneFn& client_gone = nullptr,
                            const std::string& x_request_id = {});
// The reply of a non-streaming request whose client is gone (nobody reads it; logs do).
HttpReply ClientGoneReply();
HttpReply HandleTokenize(const ServerContext& ctx, const std::string& body);
HttpReply HandleDetokenize(const ServerContext& ctx, const std::string& body);
HttpReply HandleModels(const ServerContext& ctx);
// GET /v1/models/{model} (OpenAI's models.retrieve, newer vLLM's route): the served name's card,
// or vLLM's 404 naming it.
HttpReply HandleModel(const ServerContext& ctx, const std::string& name);
HttpReply HandleVersion();
// GET /tokenizer_info (--enable-tokenizer-info-endpoint), else FastAPI's 404.
HttpReply HandleTokenizerInfo(const ServerContext& ctx);

// vLLM's TokenizerInfo: the tokenizer's init kwargs (its folder's tokenizer_config.json) without
// the vocab_file and merges_file paths, each added token object as its content, the fast
// tokenizer's class name, and `chat_template` when --chat-template gave one. Errors name the file.
StatusOr<nlohmann::ordered_json> TokenizerInfo(const std::string& tokenizer_dir,
                                               const std::string& served_chat_template);

// Shared by chat and completions. prompt_tokens_details is {"cached_tokens": n} when a count
// is given (--enable-prompt-tokens-details; 0 too, as vLLM's `is not None`), else null.
nlohmann::ordered_json UsageJson(int64_t prompt_tokens, int64_t completion_tokens,
                                 std::optional<int64_t> cached_tokens = std::nullopt);
// A stream's usage as vLLM writes it (exclude_none): without a null prompt_tokens_details.
nlohmann::ordered_json StreamUsageJson(nlohmann::ordered_json usage);
// The prompt tokens a run found in the prefix cache, where --enable-prompt-tokens-details asks
// for them in usage; else none.
std::optional<int64_t> ReportedCachedTokens(const ServerContext& ctx, const GenerationRun& run,
                                            bool streamed);
// The head every response and chunk object starts with: {id, object, created, model}.
nlohmann::ordered_json ResponseHead(const std::string& id, const char* object, int64_t created,
                                    const std::string& model);
// A whole non-streamed response: head, choices, usage and system_fingerprint (null).
nlohmann::ordered_json CompleteResponse(const std::string& id, const char* object,
                                        int64_t created, const std::string& model,
                                        nlohmann::ordered_json choices, int64_t prompt_tokens,
                                        int64_t completion_tokens,
                                        std::optional<int64_t> cached_tokens = std::nullopt);
// stop_reason: the matched stop string, the stop token id, or null.
nlohmann::ordered_json StopReasonJson(const ChoiceUpdate& u);
int64_t UnixNow();
// Logs "The following fields were present in the request but ignored: {...}".
void LogIgnoredFields(const std::vector<std::string>& fields);

}  // namespace cpm
