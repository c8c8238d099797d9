// Chat messages -> prompt text through the chat template, as vLLM does it: text content parts
// are joined with newlines ("string" content format), chat_template_kwargs from the server
// default and the request (request wins), continue_final_message cuts the rendering after the
// last message's content. Template errors (raise_exception) come back as 400s.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "server/protocol.h"
#include "server/server_context.h"

namespace cpm {

// `image_urls`: null refuses image parts (text-only models); otherwise they are rendered as
// image items and their URLs collected in prompt order.
StatusOr<std::string> RenderChatPrompt(const ServerContext& ctx,
                                       const protocol::ChatTemplateFields& in,
                                       std::vector<std::string>* image_urls = nullptr);

}  // namespace cpm
