// Rendering chat messages to prompt text: content parts in the template's content format
// (vLLM's "string" or "openai"), image and video parts for models with a vision encoder.
#include "server/chat_prompt.h"

#include <algorithm>

#include "chat/json_merge.h"
#include "chat/text_util.h"
#include "server/json_parse.h"
#include "server/json_reader.h"

namespace cpm {

using Json = nlohmann::ordered_json;

namespace {

// The URL of an image_url or video_url part (`type`): {"image_url": {"url": "..."}}, or
// {"image_url": "..."} where the part names no type, has a uuid or is the Responses API's
// input_image, as vLLM takes them (a part typed image_url or video_url goes through pydantic's
// TypedDict, which wants the object). `typed`: the part's type is image_url or video_url.
StatusOr<std::string> PartUrl(const Json& part, const std::string& type, bool typed) {
  const bool has_uuid = part.contains("uuid") && !part["uuid"].is_null();
  const Json* url = nullptr;
  if (auto u = part.find(type); u != part.end()) {
    if (u->is_string()) {
      if (typed && !has_uuid) {
        const std::string param = type == "video_url" ? "ChatCompletionContentPartVideoParam"
                                                      : "ChatCompletionContentPartImageParam";
        return InvalidArgument("1 validation error for " + param + "\n" + type +
                               "\n  Input should be a valid dictionary [type=dict_type, "
                               "input_type=str]");
      }
      url = &*u;
    } else if (u->is_object()) {
      if (auto v = u->find("url"); v != u->end()) url = &*v;
    }
  }
  const bool no_url = url == nullptr || url->is_null();
  if (has_uuid && no_url) {
    // vLLM ≥ 0.11 serves such a part from its processor cache when the uuid was seen before.
    return InvalidArgument("messages: an " + type + " part with a uuid and no URL refers to "
                           "media sent earlier, which this server does not keep: send its URL "
                           "with the uuid");
  }
  if (url == nullptr || !url->is_string() || url->get_ref<const std::string&>().empty())
    return InvalidArgument("messages: " + std::string(type == "video_url" ? "a " : "an ") + type +
                           " content part needs '" + type + "': {'url': <string>}");
  return url->get<std::string>();
}

// The tools as vLLM hands them to the template: each one's pydantic dump
// (ChatCompletionToolsParam.model_dump()), so that `tool | tojson` prints what vLLM prints.
// The declared fields come first, in their declaration order, with their defaults when absent
// (type "function"; the function's name, description null, parameters null), and the other
// keys after them in the client's order.
std::optional<Json> ToolsAsVllmDumps(const std::optional<Json>& tools) {
  if (!tools || !tools->is_array()) return tools;
  const auto dump = [](const Json& in, const Json& declared) {
    Json out = declared;
    for (const auto& [key, value] : in.items()) {
      if (!out.contains(key)) out[key] = value;
    }
    return out;
  };
  Json out = Json::array();
  for (const Json& tool : *tools) {
    const auto fn = tool.is_object() ? tool.find("function") : tool.end();
    if (fn == tool.end() || !fn->is_object()) {  // not a tool vLLM validates; left as sent
      out.push_back(tool);
      continue;
    }
    const Json function = dump(*fn, {{"name", fn->value("name", Json())},
                                     {"description", fn->value("description", Json())},
                                     {"parameters", fn->value("parameters", Json())}});
    out.push_back(dump(tool, {{"type", "function"}, {"function", function}}));
  }
  return out;
}

// The key holding a text-like content part's text, by its type; null for other types. vLLM
// takes the Responses API's input_text / output_text, refusals and thinking parts as text too.
const char* TextKeyOf(const std::string& type) {
  if (type == "text" || type == "input_text" || type == "output_text") return "text";
  if (type == "refusal") return "refusal";
  if (type == "thinking") return "thinking";
  return nullptr;
}

// A content part as the template sees it: a text, or an image or video (its URL appended to
// the request's media).
struct ContentPart {
  enum class Kind { kText, kImage, kVideo } kind = Kind::kText;
  std::string text;
};

// A message's list of OpenAI content parts, read as vLLM reads them (text-like parts by their
// type, image_url / video_url parts when `media` is given, i.e. the model has a vision encoder;
// their URLs appended to `media` in order).
StatusOr<std::vector<ContentPart>> ParseParts(const Json& parts, std::vector<MediaRef>* media) {
  std::vector<ContentPart> out;
  for (const Json& part : parts) {
    std::string t = "text";
    if (part.is_string()) {
      out.push_back({ContentPart::Kind::kText, part.get<std::string>()});
      continue;
    }
    if (!part.is_object()) return InvalidArgument("messages: content parts must be objects");
    auto type = part.find("type");
    if (type == part.end() || type->is_null()) {
      // vLLM's parts without a type: named by the URL field they carry (a form OpenAI's
      // API takes though it does not document it); anything else is refused.
      if (part.contains("image_url")) {
        t = "image_url";
      } else if (part.contains("video_url")) {
        t = "video_url";
      } else {
        return InvalidArgument("Missing 'type' field in multimodal part.");
      }
    } else {
      t = type->is_string() ? type->get<std::string>() : std::string();
      if (t == "input_image") t = "image_url";  // the Responses API's name, as vLLM maps it
    }
    if ((t == "image_url" || t == "video_url") && media != nullptr) {
      const bool typed = type != part.end() && (*type == "image_url" || *type == "video_url");
      CPM_ASSIGN_OR_RETURN(std::string url, PartUrl(part, t, typed));
      const bool video = t == "video_url";
      media->push_back({video ? MediaKind::kVideo : MediaKind::kImage, std::move(url)});
      out.push_back({video ? ContentPart::Kind::kVideo : ContentPart::Kind::kImage, {}});
      continue;
    }
    const char* key = TextKeyOf(t);
    if (key == nullptr) {
      return InvalidArgument("messages: content part type '" + t +
                             "' is not supported by this model");
    }
    auto txt = part.find(key);
    // A text-like part without its text is skipped, as vLLM's parsers give None for it.
    if (txt == part.end() || txt->is_null()) continue;
    if (!txt->is_string()) {
      return InvalidArgument("messages: a " + t + " content part needs a string '" + key + "'");
    }
    out.push_back({ContentPart::Kind::kText, txt->get<std::string>()});
  }
  return out;
}

size_t Occurrences(const std::string& text, const std::string& needle) {
  size_t n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

// The parts in vLLM's "string" content format: the non-empty texts joined by newlines, and
// before them, one per line, the pads of the images and videos the text does not already hold
// (_get_full_multimodal_text_prompt: the MiniCPM-V-4.6 pads, in the order their modality first
// came).
StatusOr<std::string> AsStringContent(const std::vector<ContentPart>& parts) {
  std::string text;
  std::vector<std::pair<std::string, size_t>> pads;  // (pad, items), first modality first
  for (const ContentPart& p : parts) {
    if (p.kind == ContentPart::Kind::kText) {
      if (!p.text.empty()) text += (text.empty() ? "" : "\n") + p.text;
      continue;
    }
    const std::string pad = p.kind == ContentPart::Kind::kImage ? ImageProcessor::kPadText
                                                                : ImageProcessor::kVideoPadText;
    auto it = std::find_if(pads.begin(), pads.end(), [&](const auto& e) { return e.first == pad; });
    if (it == pads.end()) {
      pads.emplace_back(pad, 1);
    } else {
      ++it->second;
    }
  }
  std::string prompt;
  for (const auto& [pad, items] : pads) {
    const size_t present = Occurrences(text, pad);
    if (present > items) {
      return InvalidArgument("Found more '" + pad +
                             "' placeholders in input prompt than actual multimodal data items.");
    }
    for (size_t i = present; i < items; ++i) prompt += pad + "\n";
  }
  return prompt + text;
}

// The parts in vLLM's "openai" content format: a list of {"type": "text", "text": ...},
// {"type": "image"} and {"type": "video"} items (the MiniCPM-V template renders them as text,
// <|image_pad|> and <|video_pad|> joined by newlines).
Json AsOpenAiContent(const std::vector<ContentPart>& parts) {
  Json items = Json::array();
  for (const ContentPart& p : parts) {
    switch (p.kind) {
      case ContentPart::Kind::kText: items.push_back({{"type", "text"}, {"text", p.text}}); break;
      case ContentPart::Kind::kImage: items.push_back({{"type", "image"}}); break;
      case ContentPart::Kind::kVideo: items.push_back({{"type", "video"}}); break;
    }
  }
  return items;
}

// A message's content for a template taking `format`, as vLLM's _parse_chat_message_content
// gives it: a string is one text part and null none, then the parts in that format.
StatusOr<Json> NormalizeContent(const Json& content, std::vector<MediaRef>* media,
                                jinja::ContentFormat format) {
  std::vector<ContentPart> parts;
  if (content.is_string()) {
    parts.push_back({ContentPart::Kind::kText, content.get<std::string>()});
  } else if (content.is_array()) {
    CPM_ASSIGN_OR_RETURN(parts, ParseParts(content, media));
  } else if (!content.is_null()) {
    return InvalidArgument("messages: 'content' must be a string, a list of parts or null");
  }
  if (format == jinja::ContentFormat::kOpenAi) return AsOpenAiContent(parts);
  CPM_ASSIGN_OR_RETURN(std::string text, AsStringContent(parts));
  return Json(std::move(text));
}

// An assistant message's tool_calls as chat templates take them (vLLM's _postprocess_messages):
// each function's `arguments`, a JSON string in the OpenAI format, parsed into the object that
// templates iterate (MiniCPM-V-4.6's: `tool_call.arguments|items`); absent, null, empty,
// malformed or not an object: {} (vLLM coerces a malformed string rather than fail every later
// turn of the conversation). An empty list is dropped, so the template takes the plain path.
Status NormalizeToolCalls(Json* msg) {
  auto calls = msg->find("tool_calls");
  if (calls == msg->end() || !calls->is_array()) return OkStatus();
  if (calls->empty()) {
    msg->erase("tool_calls");
    return OkStatus();
  }
  for (Json& call : *calls) {
    if (!call.is_object()) {
      return InvalidArgument("assistant tool_calls entries must be objects.");
    }
    auto type = call.find("type");
    auto fn = call.find("function");
    const bool function_type = type == call.end() || *type == "function";
    if (!function_type || fn == call.end() || !fn->is_object()) {
      return InvalidArgument("chat completions only support assistant tool_calls of type "
                             "'function'.");
    }
    Json& args = (*fn)["arguments"];
    // Parsed as request bodies are: in linear time, at most kMaxJsonDepth deep.
    if (args.is_string()) args = protocol::ParseOrderedJson(args.get<std::string>());
    if (!args.is_object()) args = Json::object();
  }
  return OkStatus();
}

// The conversation as the template takes it, vLLM's way: content as NormalizeContent makes it
// for the template's format (null or absent: "" as a string, no parts as a list: the system
// message of some clients, an assistant turn that only calls tools); an assistant's `reasoning`
// (vLLM's reply field, which clients send back for interleaved thinking) also as
// `reasoning_content`, which the templates read.
StatusOr<Json> NormalizeMessages(const Json& messages, std::vector<MediaRef>* media,
                                 jinja::ContentFormat format) {
  Json out = Json::array();
  for (const Json& m : messages) {
    Json msg = m;
    auto it = m.find("content");
    CPM_ASSIGN_OR_RETURN(msg["content"],
                         NormalizeContent(it == m.end() ? Json() : *it, media, format));
    if (msg.value("role", "") == "assistant") {
      CPM_RETURN_IF_ERROR(NormalizeToolCalls(&msg));
      if (auto r = msg.find("reasoning"); r != msg.end() && r->is_string()) {
        msg["reasoning_content"] = *r;
      }
    }
    out.push_back(std::move(msg));
  }
  return out;
}

// A normalized message's content (NormalizeContent's) as one text: a string as it is, the text
// items of a list joined by newlines.
std::string ContentText(const Json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string text;
  bool first = true;
  for (const Json& item : content) {
    if (item.value("type", "") != "text") continue;
    text += (first ? "" : "\n") + item["text"].get<std::string>();
    first = false;
  }
  return text;
}

// vLLM's renderer for a template that never names the developer role ('developer' or
// "developer" nowhere in its source): each developer message becomes a system message without
// its tools, and then, where a system message is not the only first one, all system messages
// become one at the front, their non-empty texts joined by blank lines (newer OpenAI clients
// send developer messages, which MiniCPM-V-4.6's template would refuse).
// The merged message is text: an image or video among its parts is refused (vLLM's merge
// drops the part and then fails on the unmatched image).
Status DeveloperAsSystem(const std::string& template_source, Json* messages) {
  const auto is_developer = [](const Json& m) { return m.value("role", "") == "developer"; };
  if (std::none_of(messages->begin(), messages->end(), is_developer) ||
      template_source.find("\"developer\"") != std::string::npos ||
      template_source.find("'developer'") != std::string::npos) {
    return OkStatus();
  }
  std::vector<std::string> system_texts;
  Json others = Json::array();
  bool consolidate = false;
  for (size_t i = 0; i < messages->size(); ++i) {
    Json& m = (*messages)[i];
    if (is_developer(m)) {
      m["role"] = "system";
      m.erase("tools");
    }
    if (m.value("role", "") != "system") {
      others.push_back(m);
      continue;
    }
    consolidate = consolidate || i > 0 || !system_texts.empty();
    const Json content = m.value("content", Json(""));
    for (const Json& part : content.is_array() ? content : Json::array()) {
      if (part.is_object() && part.value("type", "") != "text") {
        return InvalidArgument("messages: a system or developer message cannot hold images or "
                               "videos");
      }
    }
    if (std::string text = ContentText(content); !text.empty()) {
      system_texts.push_back(std::move(text));
    }
  }
  if (!consolidate) return OkStatus();
  std::string joined;
  for (const std::string& t : system_texts) joined += (joined.empty() ? "" : "\n\n") + t;
  others.insert(others.begin(), Json{{"role", "system"}, {"content", joined}});
  *messages = std::move(others);
  return OkStatus();
}

// The text the reply continues with continue_final_message: the final message's content, or
// its last text part (transformers' apply_chat_template takes the same).
StatusOr<std::string> FinalMessageText(const Json& last) {
  auto content = last.find("content");
  if (content != last.end() && content->is_array()) {
    for (auto part = content->rbegin(); part != content->rend(); ++part) {
      if (part->is_object() && part->contains("text") && (*part)["text"].is_string()) {
        return (*part)["text"].get<std::string>();
      }
    }
  } else if (content != last.end() && content->is_string()) {
    return content->get<std::string>();  // "" too: the whole rendering is then the prompt
  }
  return InvalidArgument("continue_final_message: the final message needs text content");
}

// The rendered chat cut right after the final message's text, so the reply continues it, as
// transformers does: the last occurrence of the text stripped of surrounding whitespace (many
// templates trim messages: MiniCPM-V-4.6's renders `content|trim`), ending after its trailing
// whitespace where the rendering holds the text exactly as sent there (so never for a text with
// leading whitespace: transformers compares the rendering with the unstripped text). A
// whitespace-only or empty text is found at the very end: the whole rendering.
StatusOr<std::string> CutAfterFinalMessage(const std::string& rendered,
                                           const std::string& final_text) {
  // Python's str.strip(): Unicode whitespace (an ideographic space too).
  const std::string lstripped = jinja::PyStrip(final_text, std::nullopt, true, false);
  const std::string stripped = jinja::PyStrip(final_text, std::nullopt, true, true);
  const size_t pos = rendered.rfind(stripped);
  if (pos == std::string::npos) {
    return InvalidArgument(
        "continue_final_message: the chat template does not contain the final message content");
  }
  const bool kept_trailing = rendered.compare(pos, lstripped.size(), final_text) == 0;
  return rendered.substr(0, pos + (kept_trailing ? lstripped : stripped).size());
}

}  // namespace

std::string EchoedContent(const Json& last, const std::string& role) {
  auto r = last.find("role");
  if (r == last.end() || !r->is_string() || r->get_ref<const std::string&>() != role) return "";
  auto c = last.find("content");
  if (c == last.end() || !c->is_array()) return c != last.end() && c->is_string() ? c->get<std::string>() : "";
  std::vector<MediaRef> media;  // images and videos are items without text here
  StatusOr<std::vector<ContentPart>> parts = ParseParts(*c, &media);
  if (!parts.ok()) return "";  // the prompt's rendering has refused it already
  std::string text;
  bool first = true;
  for (const ContentPart& p : *parts) {
    if (p.kind != ContentPart::Kind::kText) continue;
    text += (first ? "" : "\n") + p.text;
    first = false;
  }
  return text;
}

Json EffectiveTemplateKwargs(const ServerContext& ctx, const Json& request_kwargs) {
  Json kwargs = ctx.default_chat_template_kwargs;
  if (!request_kwargs.is_object()) return kwargs;
  if (!kwargs.is_object()) kwargs = Json::object();
  Json request = request_kwargs;
  request.erase("chat_template");  // an argument of the rendering, not a template variable
  MergeObject(&kwargs, request);
  return kwargs;
}

StatusOr<std::string> RenderChatPrompt(const ServerContext& ctx,
                                       const protocol::ChatTemplateFields& in,
                                       std::vector<MediaRef>* media, bool tools_as_given) {
  std::optional<ChatTemplate> request_template;
  // A template may also come as chat_template_kwargs.chat_template (vLLM checks both places;
  // the kwargs' one wins, as vLLM lays the kwargs over its own arguments).
  std::optional<std::string> template_source = in.chat_template;
  if (const Json& kwargs = in.chat_template_kwargs; kwargs.is_object()) {
    // vLLM's resolve_chat_template_kwargs: tokenize is apply_chat_template's own argument.
    if (kwargs.contains("tokenize")) {
      return InvalidArgument("Found unexpected chat template kwargs from request: {'tokenize'}");
    }
    if (auto kw = kwargs.find("chat_template"); kw != kwargs.end() && !kw->is_null()) {
      if (!kw->is_string()) {
        return InvalidArgument("chat_template_kwargs.chat_template must be a string");
      }
      template_source = kw->get<std::string>();
    }
  }
  if (template_source && !ctx.trust_request_chat_template) {
    return InvalidArgument(
        "Chat template is passed with request, but --trust-request-chat-template is not set. "
        "Refused request with untrusted chat template.");
  }
  if (template_source) {
    StatusOr<ChatTemplate> parsed = ChatTemplate::Parse(*template_source);
    if (!parsed.ok()) return InvalidArgument("chat_template: " + parsed.status().message());
    request_template = std::move(*parsed);
  }
  const ChatTemplate* chat_template =
      request_template ? &*request_template : ctx.chat_template ? &*ctx.chat_template : nullptr;
  if (chat_template == nullptr && !ctx.chat_template_error.empty()) {
    // vLLM renders the model's template per request and answers its Jinja error with a 400.
    return InvalidArgument("the model's chat template: " + ctx.chat_template_error);
  }
  if (chat_template == nullptr) {
    return InvalidArgument(
        "As of transformers v4.44, default chat template is no longer allowed, so you must "
        "provide a chat template if the tokenizer does not define one.");
  }
  // An empty list is the template's to judge, as in vLLM (ChatML renders the generation prompt
  // alone; a template that needs a user message raises its own 400).
  if (in.messages.empty() && in.continue_final_message) {
    return InvalidArgument("continue_final_message: there is no final message to continue");
  }
  if (in.continue_final_message && in.add_generation_prompt) {
    return protocol::ModelValidatorError(
        "Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
  }
  ChatRenderInput r;
  const jinja::ContentFormat format =
      ctx.content_format ? *ctx.content_format : chat_template->content_format();
  CPM_ASSIGN_OR_RETURN(r.messages,
                       NormalizeMessages(in.messages, ctx.images ? media : nullptr, format));
  CPM_RETURN_IF_ERROR(DeveloperAsSystem(chat_template->source(), &r.messages));
  r.tools = tools_as_given ? in.tools : ToolsAsVllmDumps(in.tools);
  r.documents = in.documents;
  r.add_generation_prompt = in.add_generation_prompt;
  r.bos_token = ctx.tokenizer->bos_token();
  r.eos_token = ctx.tokenizer->eos_token();
  r.chat_template_kwargs = EffectiveTemplateKwargs(ctx, in.chat_template_kwargs);
  StatusOr<std::string> text = RenderChat(*chat_template, r);
  if (!text.ok()) {
    // Whatever the template does with client input is the client's problem: always a 400.
    return InvalidArgument(text.status().message());
  }
  if (!in.continue_final_message) return text;
  CPM_ASSIGN_OR_RETURN(const std::string final_text, FinalMessageText(r.messages.back()));
  return CutAfterFinalMessage(*text, final_text);
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
  // A prompt to generate from must fit max_model_len: images whose placeholders alone do not
  // are refused before their pixels are resized. /tokenize (no `multimodal`) only counts.
  const int64_t max_model_len = multimodal ? ctx.max_model_len : 0;
  CPM_ASSIGN_OR_RETURN(MultimodalPrompt p, processor->Tokenize(*ctx.tokenizer, text, media,
                                                                add_special_tokens, max_model_len));
  if (multimodal) *multimodal = std::make_shared<const MultimodalInputs>(std::move(p.inputs));
  return std::move(p.ids);
}

}  // namespace cpm
