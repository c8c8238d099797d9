// Chat messages -> prompt text through the chat template, as vLLM does it: content in the
// template's content format (chat/content_format.h: a list of parts, or the texts joined with
// newlines), developer messages as system ones where the template knows no developer role,
// chat_template_kwargs from the server default and the request (request wins),
// continue_final_message cuts the rendering after the last message's content. Template errors
// (raise_exception) come back as 400s.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "server/protocol.h"
#include "server/server_context.h"

namespace cpm {

// The template variables a chat request renders with: the server's
// --default-chat-template-kwargs with the request's chat_template_kwargs laid over them (the
// request's win, as vLLM merges them), less the request's `chat_template`, which names a
// template rather than a variable.
nlohmann::ordered_json EffectiveTemplateKwargs(const ServerContext& ctx,
                                               const nlohmann::ordered_json& request_kwargs);

// Image and video parts are rendered as image and video items, their URLs collected into `media`
// in prompt order, when the model takes images (ctx.images) and `media` is given; else refused.
// Tools reach the template as vLLM's pydantic dump of chat tools, or as given with
// `tools_as_given` (the Responses API's, already in vLLM's form for it).
StatusOr<std::string> RenderChatPrompt(const ServerContext& ctx,
                                       const protocol::ChatTemplateFields& in,
                                       std::vector<MediaRef>* media = nullptr,
                                       bool tools_as_given = false);

// The rendered prompt's tokens. With images or videos, each one's pad first becomes its
// placeholder layout (they are fetched, decoded and sliced here, on the HTTP thread: a bad URL,
// image or video is the client's 400), and `multimodal` (if given) gets the pad rows and the
// encoder job. --limit-mm-per-prompt's counts are checked first. The request's
// mm_processor_kwargs and media_io_kwargs (in `chat`) override the server's for this prompt.
StatusOr<std::vector<int32_t>> EncodeChatPrompt(const ServerContext& ctx, const std::string& text,
                                                const std::vector<MediaRef>& media,
                                                bool add_special_tokens,
                                                const protocol::ChatTemplateFields& chat,
                                                std::shared_ptr<const MultimodalInputs>* multimodal);

// What `echo` puts before each choice's content, as vLLM's serving_chat: the last message's
// content as the template saw it (its parts normalized as for the prompt: text, input_text,
// output_text, refusal and thinking parts, null texts skipped), a list's text items joined by
// newlines (images and videos add nothing), when the message's role is the reply's (a continued
// message, or a turn that add_generation_prompt does not end); "" otherwise.
std::string EchoedContent(const nlohmann::ordered_json& last, const std::string& role);

}  // namespace cpm
