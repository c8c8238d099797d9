// Chat messages -> prompt text through the chat template, as vLLM does it: text content parts
// are joined with newlines ("string" content format), chat_template_kwargs from the server
// default and the request (request wins), continue_final_message cuts the rendering after the
// last message's content. Template errors (raise_exception) come back as 400s.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "server/server_context.h"

namespace cpm {

struct ChatPromptInput {
  nlohmann::ordered_json messages;
  std::optional<nlohmann::ordered_json> tools;
  std::optional<nlohmann::ordered_json> documents;
  bool add_generation_prompt = true;
  bool continue_final_message = false;
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
  std::optional<std::string> request_chat_template;  // refused (untrusted)
};

StatusOr<std::string> RenderChatPrompt(const ServerContext& ctx, const ChatPromptInput& in);

}  // namespace cpm
