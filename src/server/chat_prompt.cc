// Rendering chat messages to prompt text (vLLM's "string" content format).
#include "server/chat_prompt.h"

namespace cpm {

using Json = nlohmann::ordered_json;

namespace {

// OpenAI content parts -> one string; anything but text is refused (text-only models).
StatusOr<Json> NormalizeMessages(const Json& messages) {
  Json out = Json::array();
  for (const Json& m : messages) {
    Json msg = m;
    auto it = m.find("content");
    if (it != m.end() && it->is_array()) {
      std::string text;
      bool first = true;
      for (const Json& part : *it) {
        if (part.is_string()) {
          text += (first ? "" : "\n") + part.get<std::string>();
          first = false;
          continue;
        }
        if (!part.is_object()) return InvalidArgument("messages: content parts must be objects");
        auto type = part.find("type");
        const std::string t = type != part.end() && type->is_string() ? type->get<std::string>()
                                                                       : std::string();
        if (t != "text") {
          return InvalidArgument("messages: content part type '" + t +
                                 "' is not supported by this model");
        }
        auto txt = part.find("text");
        if (txt == part.end() || !txt->is_string()) {
          return InvalidArgument("messages: a text content part needs a string 'text'");
        }
        text += (first ? "" : "\n") + txt->get<std::string>();
        first = false;
      }
      msg["content"] = text;
    } else if (it != m.end() && !it->is_string() && !it->is_null()) {
      return InvalidArgument("messages: 'content' must be a string, a list of parts or null");
    }
    out.push_back(std::move(msg));
  }
  return out;
}

}  // namespace

StatusOr<std::string> RenderChatPrompt(const ServerContext& ctx,
                                       const protocol::ChatTemplateFields& in) {
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
  CPM_ASSIGN_OR_RETURN(r.messages, NormalizeMessages(in.messages));
  r.tools = in.tools;
  r.documents = in.documents;
  r.add_generation_prompt = in.add_generation_prompt;
  r.bos_token = ctx.tokenizer->bos_token();
  r.eos_token = ctx.tokenizer->eos_token();
  r.chat_template_kwargs = ctx.default_chat_template_kwargs;
  for (auto it = in.chat_template_kwargs.begin(); it != in.chat_template_kwargs.end(); ++it) {
    r.chat_template_kwargs[it.key()] = it.value();
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

}  // namespace cpm
