// Rendering chat messages to prompt text (vLLM's "string" content format; image and video parts
// as "openai" content items for models with a vision encoder).
#include "server/chat_prompt.h"

#include <algorithm>

#include "chat/json_merge.h"

namespace cpm {

using Json = nlohmann::ordered_json;

namespace {

// The URL of an image_url or video_url part (`type`): {"image_url": {"url": "..."}} or
// {"image_url": "..."}.
StatusOr<std::string> PartUrl(const Json& part, const std::string& type) {
  const Json* url = nullptr;
  if (auto u = part.find(type); u != part.end()) {
    if (u->is_string()) {
      url = &*u;
    } else if (u->is_object()) {
      if (auto v = u->find("url"); v != u->end()) url = &*v;
    }
  }
  if (url == nullptr || !url->is_string() || url->get_ref<const std::string&>().empty())
    return InvalidArgument("messages: " + std::string(type == "video_url" ? "a " : "an ") + type +
                           " content part needs '" + type + "': {'url': <string>}");
  return url->get<std::string>();
}

// One list of OpenAI content parts for the template. Text only: the texts joined by newlines
// (vLLM's "string" content format). With images or videos (when `media` is given, i.e. the
// model has a vision encoder): a list of {"type": "image"}, {"type": "video"} and {"type":
// "text"} items, which the MiniCPM-V template renders as <|image_pad|>, <|video_pad|> and text
// joined by newlines; the URLs are appended to `media` in order.
StatusOr<Json> NormalizeContent(const Json& parts, std::vector<MediaRef>* media) {
  Json items = Json::array();
  std::string text;
  bool has_media = false;
  for (const Json& part : parts) {
    std::string t = "text", value;
    if (part.is_string()) {
      value = part.get<std::string>();
    } else {
      if (!part.is_object()) return InvalidArgument("messages: content parts must be objects");
      auto type = part.find("type");
      t = type != part.end() && type->is_string() ? type->get<std::string>() : std::string();
      if ((t == "image_url" || t == "video_url") && media != nullptr) {
        CPM_ASSIGN_OR_RETURN(std::string url, PartUrl(part, t));
        const bool video = t == "video_url";
        media->push_back({video ? MediaKind::kVideo : MediaKind::kImage, std::move(url)});
        items.push_back(Json{{"type", video ? "video" : "image"}});
        has_media = true;
        continue;
      }
      if (t != "text")
        return InvalidArgument("messages: content part type '" + t + "' is not supported by this model");
      auto txt = part.find("text");
      if (txt == part.end() || !txt->is_string())
        return InvalidArgument("messages: a text content part needs a string 'text'");
      value = txt->get<std::string>();
    }
    text += (items.empty() ? "" : "\n") + value;
    items.push_back(Json{{"type", "text"}, {"text", value}});
  }
  if (has_media) return items;
  return Json(text);
}

StatusOr<Json> NormalizeMessages(const Json& messages, std::vector<MediaRef>* media) {
  Json out = Json::array();
  for (const Json& m : messages) {
    Json msg = m;
    auto it = m.find("content");
    if (it != m.end() && it->is_array()) {
      CPM_ASSIGN_OR_RETURN(msg["content"], NormalizeContent(*it, media));
    } else if (it != m.end() && !it->is_string() && !it->is_null()) {
      return InvalidArgument("messages: 'content' must be a string, a list of parts or null");
    }
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace

StatusOr<std::string> RenderChatPrompt(const ServerContext& ctx,
                                       const protocol::ChatTemplateFields& in,
                                       std::vector<MediaRef>* media) {
  if (in.chat_template) {
    return InvalidArgument(
        "Chat template is passed with request, but --trust-request-chat-template is not set. "
        "Refused request with untrusted chat template.");
  }
  if (!ctx.chat_template) {
    return InvalidArgument(
        "As of transformers v4.44, default chat template is no longer allowed, so you must "
        "provide a chat template if the tokenizer does not define one.");
  }
  if (in.messages.empty()) return InvalidArgument("messages: the list must not be empty");
  if (in.continue_final_message && in.add_generation_prompt) {
    return InvalidArgument(
        "Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
  }
  ChatRenderInput r;
  CPM_ASSIGN_OR_RETURN(r.messages, NormalizeMessages(in.messages, ctx.images ? media : nullptr));
  r.tools = in.tools;
  r.documents = in.documents;
  r.add_generation_prompt = in.add_generation_prompt;
  r.bos_token = ctx.tokenizer->bos_token();
  r.eos_token = ctx.tokenizer->eos_token();
  r.chat_template_kwargs = ctx.default_chat_template_kwargs;
  if (in.chat_template_kwargs.is_object()) {
    if (!r.chat_template_kwargs.is_object()) r.chat_template_kwargs = Json::object();
    MergeObject(&r.chat_template_kwargs, in.chat_template_kwargs);
  }
  StatusOr<std::string> text = RenderChat(*ctx.chat_template, r);
  if (!text.ok()) {
    // Whatever the template does with client input is the client's problem: always a 400.
    return InvalidArgument(text.status().message());
  }
  if (!in.continue_final_message) return text;
  const Json& last = r.messages.back();
  auto content = last.find("content");
  if (content == last.end() || !content->is_string() || content->get<std::string>().empty()) {
    return InvalidArgument("continue_final_message: the final message needs text content");
  }
  const std::string& final_text = content->get_ref<const std::string&>();
  const size_t pos = text->rfind(final_text);
  if (pos == std::string::npos) {
    return InvalidArgument(
        "continue_final_message: the chat template does not contain the final message content");
  }
  return text->substr(0, pos + final_text.size());
}

StatusOr<std::vector<int32_t>> EncodeChatPrompt(const ServerContext& ctx, const std::string& text,
                                                const std::vector<MediaRef>& media,
                                                bool add_special_tokens,
                                                const protocol::ChatTemplateFields& chat,
                                                std::shared_ptr<const MultimodalInputs>* multimodal) {
  if (media.empty()) return ctx.tokenizer->Encode(text, add_special_tokens);
  for (MediaKind kind : {MediaKind::kImage, MediaKind::kVideo}) {
    const int64_t limit = kind == MediaKind::kImage ? ctx.image_limit : ctx.video_limit;
    const auto count = std::count_if(media.begin(), media.end(),
                                     [&](const MediaRef& m) { return m.kind == kind; });
    if (limit >= 0 && count > limit)
      return InvalidArgument("At most " + std::to_string(limit) +
                             (kind == MediaKind::kImage ? " image(s)" : " video(s)") +
                             " may be provided in one prompt.");
  }
  const ImageProcessor* processor = ctx.images;
  std::unique_ptr<ImageProcessor> overridden;
  if (!chat.mm_processor_kwargs.empty() || !chat.media_io_kwargs.empty()) {
    CPM_ASSIGN_OR_RETURN(overridden,
                         ctx.images->WithKwargs(chat.mm_processor_kwargs, chat.media_io_kwargs));
    processor = overridden.get();
  }
  CPM_ASSIGN_OR_RETURN(MultimodalPrompt p, processor->Tokenize(*ctx.tokenizer, text, media,
                                                                add_special_tokens));
  if (multimodal) *multimodal = std::make_shared<const MultimodalInputs>(std::move(p.inputs));
  return std::move(p.ids);
}

}  // namespace cpm
