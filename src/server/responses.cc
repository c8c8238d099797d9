// A Responses API request as the chat completion request it stands for (see responses.h).
#include "server/responses.h"

#include <algorithm>
#include <iterator>
#include <optional>

#include "server/api_error.h"
#include "server/json_reader.h"

namespace cpm {

using Json = nlohmann::ordered_json;

namespace {

// `key` of object `j` if it holds a string, else `fallback` (a client's wrong type then fails
// the check that reads it, as a 400, never as an exception).
std::string StringField(const Json& j, const char* key, const std::string& fallback = "") {
  if (!j.is_object()) return fallback;
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
}

// A content part of an input message as a chat content part.
StatusOr<Json> ChatPart(const Json& part) {
  if (part.is_string()) return Json{{"type", "text"}, {"text", part}};
  if (!part.is_object()) return InvalidArgument("input: content parts must be objects");
  const std::string type = StringField(part, "type");
  if (type == "input_text" || type == "output_text" || type == "text" || type == "refusal") {
    const char* key = type == "refusal" ? "refusal" : "text";
    if (!part.contains(key) || !part[key].is_string())
      return InvalidArgument("input: a " + type + " part needs a string '" + key + "'");
    return Json{{"type", "text"}, {"text", part[key]}};
  }
  if (type == "input_image") {
    auto url = part.find("image_url");
    if (url == part.end() || !url->is_string())
      return InvalidArgument("input: an input_image part needs 'image_url' (file_id is not supported)");
    return Json{{"type", "image_url"}, {"image_url", {{"url", *url}}}};
  }
  return InvalidArgument("input: content part type '" + type + "' is not supported");
}

// A message item ({role, content}) as a chat message.
StatusOr<Json> ChatMessage(const Json& item) {
  // developer stays developer here; rendering makes it system where the template never names
  // the role (DeveloperAsSystem, as vLLM's renderer), so MiniCPM-V-4.6's template takes it.
  const std::string role = StringField(item, "role");
  if (role != "user" && role != "system" && role != "assistant" && role != "developer")
    return InvalidArgument("input: message role '" + role + "' is not one of user, system, developer, assistant");
  auto content = item.find("content");
  if (content == item.end()) return InvalidArgument("input: a message needs 'content'");
  if (content->is_string()) return Json{{"role", role}, {"content", *content}};
  if (!content->is_array()) return InvalidArgument("input: a message's content must be a string or a list of parts");
  Json parts = Json::array();
  for (const Json& p : *content) {
    CPM_ASSIGN_OR_RETURN(Json part, ChatPart(p));
    parts.push_back(std::move(part));
  }
  return Json{{"role", role}, {"content", std::move(parts)}};
}

// The assistant message `messages` ends with, if it does (vLLM's prev_assistant_msg).
Json* LastAssistant(Json* messages) {
  if (messages->empty() || (*messages)[messages->size() - 1].value("role", "") != "assistant") {
    return nullptr;
  }
  return &(*messages)[messages->size() - 1];
}

// Sets `key` of the trailing assistant message when that has none yet, else starts a new
// assistant message with it: vLLM's construct_chat_messages_with_tool_call, which folds an
// assistant turn's items (reasoning, text, calls) back into one chat message.
void MergeIntoAssistant(Json* messages, const char* key, Json value) {
  Json* last = LastAssistant(messages);
  if (last && (!last->contains(key) || (*last)[key].is_null())) {
    (*last)[key] = std::move(value);
    return;
  }
  messages->push_back({{"role", "assistant"}, {key, std::move(value)}});
}

// An assistant message item's text as vLLM takes it: the string, or its first part's text.
std::optional<std::string> AssistantText(const Json& item) {
  const auto content = item.find("content");
  if (content == item.end()) return std::nullopt;
  if (content->is_string()) return content->get<std::string>();
  if (content->is_array() && !content->empty() && (*content)[0].is_object()) {
    const auto text = (*content)[0].find("text");
    if (text != (*content)[0].end() && text->is_string()) return text->get<std::string>();
  }
  return std::nullopt;
}

// A reasoning item's text: its first content part's, else its first summary's (vLLM's order).
StatusOr<std::string> ReasoningText(const Json& item) {
  for (const char* key : {"content", "summary"}) {
    const auto list = item.find(key);
    if (list != item.end() && list->is_array() && !list->empty()) {
      const Json& part = (*list)[0];
      if (!part.is_object() || !part.contains("text") || !part["text"].is_string()) {
        return InvalidArgument(std::string("input: a reasoning item's ") + key +
                               " parts need a string 'text'");
      }
      return part["text"].get<std::string>();
    }
  }
  if (auto e = item.find("encrypted_content"); e != item.end() && !e->is_null()) {
    return InvalidArgument("Encrypted content is not supported.");
  }
  return std::string();
}

// The input items as chat messages (after `messages`' system message, if any).
Status AppendInput(const Json& input, Json* messages) {
  if (input.is_string()) {
    messages->push_back({{"role", "user"}, {"content", input}});
    return OkStatus();
  }
  if (!input.is_array()) return InvalidArgument("input: must be a string or a list of items");
  for (const Json& item : input) {
    if (!item.is_object()) return InvalidArgument("input: items must be objects");
    const std::string type = StringField(item, "type", item.contains("role") ? "message" : "");
    if (type == "message" && StringField(item, "role") == "assistant") {
      if (std::optional<std::string> text = AssistantText(item)) {
        MergeIntoAssistant(messages, "content", *text);
      } else {
        CPM_ASSIGN_OR_RETURN(Json m, ChatMessage(item));
        messages->push_back(std::move(m));
      }
    } else if (type == "message") {
      CPM_ASSIGN_OR_RETURN(Json m, ChatMessage(item));
      messages->push_back(std::move(m));
    } else if (type == "function_call") {
      const std::string call_id = StringField(item, "call_id"), name = StringField(item, "name");
      if (call_id.empty() || name.empty())
        return InvalidArgument("input: a function_call item needs 'call_id' and 'name'");
      Json call = {{"id", call_id}, {"type", "function"},
                   {"function", {{"name", name}, {"arguments", StringField(item, "arguments")}}}};
      // A call joins the assistant turn before it (its text, reasoning or other calls).
      if (Json* last = LastAssistant(messages); last && last->contains("tool_calls") &&
                                                (*last)["tool_calls"].is_array()) {
        (*last)["tool_calls"].push_back(std::move(call));
      } else {
        MergeIntoAssistant(messages, "tool_calls", Json::array({std::move(call)}));
      }
    } else if (type == "function_call_output") {
      const std::string call_id = StringField(item, "call_id");
      auto output = item.find("output");
      if (call_id.empty() || output == item.end())
        return InvalidArgument("input: a function_call_output item needs 'call_id' and 'output'");
      messages->push_back({{"role", "tool"}, {"tool_call_id", call_id},
                           {"content", output->is_string() ? output->get<std::string>() : output->dump()}});
    } else if (type == "reasoning") {
      // Past reasoning goes back as the assistant turn's `reasoning` (templates that keep
      // thinking for the turns after the last user message render it).
      CPM_ASSIGN_OR_RETURN(std::string text, ReasoningText(item));
      MergeIntoAssistant(messages, "reasoning", std::move(text));
    } else {
      return InvalidArgument("input: item type '" + type + "' is not supported");
    }
  }
  return OkStatus();
}

StatusOr<Json> ChatTools(const Json& tools) {
  if (!tools.is_array()) return InvalidArgument("tools: must be a list");
  Json out = Json::array();
  for (const Json& t : tools) {
    const std::string type = StringField(t, "type");
    if (type != "function")
      return InvalidArgument("tools: tool type '" + type + "' is not supported (function tools are)");
    // vLLM's construct_tool_dicts: the tool's own dump under "function".
    out.push_back({{"type", "function"}, {"function", FunctionToolDump(t)}});
  }
  return out;
}

StatusOr<Json> ChatToolChoice(const Json& choice) {
  if (choice.is_string()) return choice;
  if (StringField(choice, "type") == "function" && !StringField(choice, "name").empty())
    return Json{{"type", "function"}, {"function", {{"name", choice["name"]}}}};
  return InvalidArgument("tool_choice: must be \"auto\", \"none\", \"required\" or {\"type\": \"function\", \"name\": ...}");
}

StatusOr<Json> ResponseFormat(const Json& text) {
  if (!text.is_object()) return InvalidArgument("text: must be an object");
  auto format = text.find("format");
  if (format == text.end() || format->is_null()) return Json(nullptr);
  const std::string type = StringField(*format, "type");
  if (type == "text") return Json(nullptr);
  if (type == "json_object") return Json{{"type", "json_object"}};
  if (type == "json_schema") {
    Json schema = {{"name", StringField(*format, "name", "response")}};
    for (const char* key : {"schema", "strict", "description"}) {
      if (format->contains(key)) schema[key] = (*format)[key];
    }
    return Json{{"type", "json_schema"}, {"json_schema", std::move(schema)}};
  }
  return InvalidArgument("text.format: type '" + type + "' is not supported (text, json_object, json_schema are)");
}

// `include`: OpenAI's includable values; whether it asks for the output text's logprobs (the
// only one that means anything without stored files, tools or encrypted reasoning).
StatusOr<bool> IncludesOutputLogprobs(const Json& include) {
  static const char* const kIncludable[] = {
      "code_interpreter_call.outputs", "computer_call_output.output.image_url",
      "file_search_call.results",      "message.input_image.image_url",
      "message.output_text.logprobs",  "reasoning.encrypted_content",
      "web_search_call.action.sources"};
  if (!include.is_array()) return InvalidArgument("include: Input should be a valid list");
  bool logprobs = false;
  for (const Json& v : include) {
    const bool known = v.is_string() && std::any_of(std::begin(kIncludable), std::end(kIncludable),
                                                    [&](const char* k) { return v == k; });
    if (!known) {
      std::string allowed;
      for (const char* k : kIncludable) allowed += (allowed.empty() ? "'" : ", '") + std::string(k) + "'";
      return InvalidArgument("include: Input should be " + allowed + ", got " + v.dump());
    }
    logprobs = logprobs || v == "message.output_text.logprobs";
  }
  return logprobs;
}

}  // namespace

Json FunctionToolDump(const Json& tool) {
  Json fn = {{"name", StringField(tool, "name")},
             {"parameters", tool.value("parameters", Json())},
             {"strict", tool.value("strict", Json())},
             {"type", "function"},
             {"description", tool.value("description", Json())}};
  for (const auto& [key, value] : tool.items()) {
    if (!fn.contains(key)) fn[key] = value;
  }
  return fn;
}

StatusOr<Json> ChatRequestFromResponses(const Json& request, std::vector<std::string>* ignored) {
  if (request.is_discarded()) {
    return RequestValidationError("JSON decode error: the request body is not valid JSON");
  }
  if (!request.is_object()) return RequestValidationError("The request body must be a JSON object");
  protocol::JsonReader r(request);
  // Sampling fields the chat request takes as they are (OpenAI's and vLLM's extras).
  static const char* const kSame[] = {
      "model", "temperature", "top_p", "parallel_tool_calls", "top_k", "min_p", "seed", "stop",
      "repetition_penalty", "presence_penalty", "frequency_penalty", "ignore_eos", "min_tokens",
      "logit_bias", "chat_template_kwargs", "structured_outputs", "priority",
      "cache_salt", "include_stop_str_in_output", "skip_special_tokens", "include_reasoning",
      "mm_processor_kwargs", "media_io_kwargs", "vllm_xargs"};
  // Read below, echoed in the reply, or meaningless without storage.
  static const char* const kOthers[] = {"store", "metadata", "user", "truncation", "reasoning",
                                        "include", "service_tier", "input", "tools",
                                        "tool_choice", "text", "max_output_tokens",
                                        "previous_response_id", "top_logprobs", "request_id",
                                        "prompt", "max_tool_calls"};
  // Nothing is stored (vLLM's default, its store off): an earlier response is one it does not
  // hold, vLLM's 404 (the handler gives it vLLM's error type).
  if (r.Has("previous_response_id")) {
    std::optional<std::string> previous;
    CPM_RETURN_IF_ERROR(r.OptString("previous_response_id", &previous));
    return NotFound("Response with id '" + *previous + "' not found.").WithParam("response_id");
  }
  if (r.Has("prompt")) return InvalidArgument("prompt template is not supported");
  bool background = false, stream = false;
  CPM_RETURN_IF_ERROR(r.Bool("background", &background));
  if (background) return InvalidArgument("background: background responses are not supported");
  CPM_RETURN_IF_ERROR(r.Bool("stream", &stream));
  auto input = request.find("input");
  if (input == request.end()) return InvalidArgument("input: field required");
  Json chat = Json::object();
  Json messages = Json::array();
  std::optional<std::string> instructions;
  CPM_RETURN_IF_ERROR(r.OptString("instructions", &instructions));
  // Empty instructions add nothing (vLLM tests them for truth).
  if (instructions && !instructions->empty()) {
    messages.push_back({{"role", "system"}, {"content", *instructions}});
  }
  CPM_RETURN_IF_ERROR(AppendInput(*input, &messages));
  for (const char* key : kSame) {
    std::optional<Json> value;
    CPM_RETURN_IF_ERROR(r.Any(key, &value));
    if (value) chat[key] = std::move(*value);
  }
  for (const char* key : kOthers) r.Known(key);
  for (std::string& key : r.Unknown()) ignored->push_back(std::move(key));
  chat["messages"] = std::move(messages);
  if (auto m = request.find("max_output_tokens"); m != request.end() && !m->is_null()) {
    chat["max_tokens"] = *m;
  }
  // reasoning.effort is the chat's reasoning_effort (vLLM's build_chat_params: enable_thinking
  // unless the effort is "none", where the template kwargs do not say otherwise).
  if (auto rs = request.find("reasoning"); rs != request.end() && rs->is_object()) {
    if (auto effort = rs->find("effort"); effort != rs->end() && !effort->is_null()) {
      chat["reasoning_effort"] = *effort;
    }
  }
  // truncation "auto": the prompt is cut from the left to what max_output_tokens leaves room
  // for (vLLM's truncate_prompt_tokens -1), where "disabled" refuses it.
  if (auto t = request.find("truncation"); t != request.end() && *t == "auto") {
    chat["truncate_prompt_tokens"] = -1;
  }
  // An assistant message (or reasoning) left in_progress or incomplete is continued, not closed
  // (vLLM's should_continue_final_message).
  if (input->is_array() && !input->empty()) {
    const Json& last = input->back();
    const bool object = last.is_object();
    const std::string status = object ? StringField(last, "status") : "";
    const std::string type =
        object ? StringField(last, "type", last.contains("role") ? "message" : "") : "";
    const bool assistant =
        (type == "message" && StringField(last, "role") == "assistant") || type == "reasoning";
    if (assistant && (status == "in_progress" || status == "incomplete")) {
      chat["continue_final_message"] = true;
      chat["add_generation_prompt"] = false;
    }
  }
  // tool_choice "none": vLLM leaves the tools out of the prompt altogether (they are still
  // validated: the reply echoes them).
  const auto choice = request.find("tool_choice");
  const bool none = choice != request.end() && *choice == "none";
  if (auto t = request.find("tools"); t != request.end() && !t->is_null()) {
    CPM_ASSIGN_OR_RETURN(Json tools, ChatTools(*t));
    if (!tools.empty() && !none) chat["tools"] = std::move(tools);
  }
  // Without tools, "auto" and "none" ask nothing (clients send "auto" by default).
  if (auto c = request.find("tool_choice"); c != request.end() && !c->is_null() &&
      (chat.contains("tools") || (*c != "auto" && *c != "none"))) {
    CPM_ASSIGN_OR_RETURN(chat["tool_choice"], ChatToolChoice(*c));
  }
  if (auto t = request.find("text"); t != request.end() && !t->is_null()) {
    CPM_ASSIGN_OR_RETURN(Json format, ResponseFormat(*t));
    if (!format.is_null()) chat["response_format"] = std::move(format);
  }
  if (auto inc = request.find("include"); inc != request.end() && !inc->is_null()) {
    CPM_ASSIGN_OR_RETURN(const bool logprobs, IncludesOutputLogprobs(*inc));
    if (logprobs) {
      // vLLM's: logprobs for every generated token, top_logprobs (default 0) alternatives each.
      chat["logprobs"] = true;
      chat["top_logprobs"] = request.value("top_logprobs", Json(0));
      if (chat["top_logprobs"].is_null()) chat["top_logprobs"] = 0;
    }
  }
  if (stream) {
    chat["stream"] = true;
    chat["stream_options"] = {{"include_usage", true}};
  }
  return chat;
}

}  // namespace cpm
