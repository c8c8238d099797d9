// JSON -> typed requests for the OpenAI / vLLM endpoints (types only; ranges are checked when
// the sampling parameters are resolved).
#include "server/protocol.h"

#include <algorithm>

#include "server/json_parse.h"
#include "server/json_reader.h"

namespace cpm::protocol {
namespace {

#define CPM_TRY(expr)                   \
  do {                                  \
    ::cpm::Status s_ = (expr);          \
    if (!s_.ok()) return s_;            \
  } while (0)

Status ParseStreamOptions(JsonReader& r, SamplingFields* f) {
  Json opts = Json::object();
  CPM_TRY(r.Object("stream_options", &opts));
  if (!r.Has("stream_options")) return OkStatus();
  // vLLM's validate_stream_options: non-empty options on a request that does not stream.
  if (!opts.empty() && !f->stream) {
    return ModelValidatorError("Stream options can only be defined when `stream=True`.")
        .WithParam("stream_options");
  }
  // vLLM's StreamOptions: include_usage defaults to true once the options are given.
  f->include_usage = f->stream;
  JsonReader o(opts);
  CPM_TRY(o.Bool("include_usage", &f->include_usage));
  CPM_TRY(o.Bool("continuous_usage_stats", &f->continuous_usage_stats));
  return OkStatus();
}

// logit_bias: an object of numbers (its keys are checked as token ids when resolved).
Status ParseLogitBias(JsonReader& r, SamplingFields* f) {
  Json bias = Json::object();
  CPM_TRY(r.Object("logit_bias", &bias));
  for (const auto& [key, value] : bias.items()) {
    if (!value.is_number()) return TypeError("logit_bias." + key, "a valid number");
    f->logit_bias.emplace_back(key, value.get<double>());
  }
  return OkStatus();
}

// Fields common to chat and completions. `max_tokens` is read by the caller (chat has two).
Status ParseSampling(JsonReader& r, SamplingFields* f) {
  CPM_TRY(r.OptString("model", &f->model));
  CPM_TRY(r.Int("n", &f->n));
  CPM_TRY(r.OptNumber("temperature", &f->temperature));
  CPM_TRY(r.OptNumber("top_p", &f->top_p));
  CPM_TRY(r.OptInt("top_k", &f->top_k));
  CPM_TRY(r.OptNumber("min_p", &f->min_p));
  CPM_TRY(r.OptNumber("presence_penalty", &f->presence_penalty));
  CPM_TRY(r.OptNumber("frequency_penalty", &f->frequency_penalty));
  CPM_TRY(r.OptNumber("repetition_penalty", &f->repetition_penalty));
  CPM_TRY(r.OptInt("seed", &f->seed));
  CPM_TRY(r.StringOrList("stop", &f->stop));
  CPM_TRY(r.IntList("stop_token_ids", &f->stop_token_ids));
  CPM_TRY(r.Int("min_tokens", &f->min_tokens));
  CPM_TRY(r.OptInt("prompt_logprobs", &f->prompt_logprobs, JsonReader::IntForm::kNoStrings));
  CPM_TRY(ParseLogitBias(r, f));
  r.Known("allowed_token_ids");  // null is absent: any token
  if (r.Has("allowed_token_ids")) {
    CPM_TRY(r.IntList("allowed_token_ids", &f->allowed_token_ids.emplace()));
  }
  CPM_TRY(r.StringList("bad_words", &f->bad_words));
  CPM_TRY(r.OptInt("truncate_prompt_tokens", &f->truncate_prompt_tokens));
  CPM_TRY(r.String("truncation_side", &f->truncation_side));
  if (f->truncation_side != "left" && f->truncation_side != "right") {
    return TypeError("truncation_side", "'left' or 'right'");
  }
  CPM_TRY(r.OptBool("return_tokens_as_token_ids", &f->return_tokens_as_token_ids));
  CPM_TRY(r.OptInt("thinking_token_budget", &f->thinking_token_budget));
  CPM_TRY(r.Bool("use_beam_search", &f->use_beam_search));
  CPM_TRY(r.OptNumber("length_penalty", &f->length_penalty));
  CPM_TRY(r.Bool("ignore_eos", &f->ignore_eos));
  CPM_TRY(r.Bool("include_stop_str_in_output", &f->include_stop_str_in_output));
  CPM_TRY(r.Bool("skip_special_tokens", &f->skip_special_tokens));
  CPM_TRY(r.Bool("spaces_between_special_tokens", &f->spaces_between_special_tokens));
  CPM_TRY(r.Bool("stream", &f->stream));
  CPM_TRY(ParseStreamOptions(r, f));
  CPM_TRY(r.Int("priority", &f->priority));
  std::optional<Json> salt;
  CPM_TRY(r.Any("cache_salt", &salt));
  if (salt && !salt->is_null()) {
    // vLLM's check_cache_salt_support (a pydantic model validator).
    if (!salt->is_string() || salt->get<std::string>().empty()) {
      return ModelValidatorError("Parameter 'cache_salt' must be a non-empty string if provided.")
          .WithParam("cache_salt");
    }
    f->cache_salt = salt->get<std::string>();
  }
  // Accepted and without effect here, typed as vLLM's models type them: OpenAI's bookkeeping
  // `user`, and vLLM's disaggregation and extension dictionaries.
  std::optional<std::string> user;
  CPM_TRY(r.OptString("user", &user));
  for (const char* dict : {"kv_transfer_params", "vllm_xargs"}) {
    std::optional<Json> value;
    CPM_TRY(r.Any(dict, &value));
    if (value && !value->is_null() && !value->is_object()) {
      return TypeError(dict, "a valid dictionary");
    }
  }
  CPM_TRY(r.OptString("request_id", &f->request_id));
  return OkStatus();
}

void ReportUnknown(const JsonReader& r, std::vector<std::string>* ignored) {
  if (ignored) *ignored = r.Unknown();
}

}  // namespace

namespace {

// Each tool as vLLM's ChatCompletionToolsParam: type "function" (the default), a function
// object with a string name (chat completions and /tokenize alike).
Status ValidateTools(const Json& tools) {
  if (!tools.is_array()) return TypeError("tools", "a valid list");
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& t = tools[i];
    const std::string at = "tools." + std::to_string(i);
    if (!t.is_object()) return TypeError(at, "a valid dictionary");
    if (auto type = t.find("type"); type != t.end() && *type != "function") {
      return TypeError(at + ".type", "'function'");
    }
    const auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) return TypeError(at + ".function", "a valid dictionary");
    if (auto n = fn->find("name"); n == fn->end() || !n->is_string()) {
      return TypeError(at + ".function.name", "a valid string");
    }
    // FunctionDefinition: description str | None, parameters dict[str, Any] | None.
    if (auto d = fn->find("description"); d != fn->end() && !d->is_null() && !d->is_string()) {
      return TypeError(at + ".function.description", "a valid string");
    }
    if (auto p = fn->find("parameters"); p != fn->end() && !p->is_null() && !p->is_object()) {
      return TypeError(at + ".function.parameters", "a valid dictionary");
    }
  }
  return OkStatus();
}

// The chat-template fields; `messages` is required and must hold objects with a string role.
Status ParseChatTemplateFields(JsonReader& r, const Json& j, ChatTemplateFields* f) {
  r.Known("messages");
  if (!r.Has("messages")) return TypeError("messages", "a valid list (field required)");
  const Json& messages = j["messages"];
  if (!messages.is_array()) return TypeError("messages", "a valid list");
  for (const Json& m : messages) {
    if (!m.is_object()) return TypeError("messages", "a list of message objects");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) {
      return TypeError("messages.role", "a valid string (field required)");
    }
  }
  f->messages = messages;
  CPM_TRY(r.Bool("add_generation_prompt", &f->add_generation_prompt));
  CPM_TRY(r.Bool("continue_final_message", &f->continue_final_message));
  CPM_TRY(r.Object("chat_template_kwargs", &f->chat_template_kwargs));
  for (auto [name, out] : {std::pair{"mm_processor_kwargs", &f->mm_processor_kwargs},
                           std::pair{"media_io_kwargs", &f->media_io_kwargs}}) {
    Json kwargs = Json::object();
    CPM_TRY(r.Object(name, &kwargs));
    if (!kwargs.empty()) *out = kwargs.dump();
  }
  CPM_TRY(r.Any("tools", &f->tools));
  if (f->tools) CPM_TRY(ValidateTools(*f->tools));
  CPM_TRY(r.Any("documents", &f->documents));
  if (f->documents) {
    // vLLM's type: a list of objects whose values are strings (title, text, ...).
    if (!f->documents->is_array()) return TypeError("documents", "a valid list");
    for (size_t i = 0; i < f->documents->size(); ++i) {
      const Json& doc = (*f->documents)[i];
      const std::string at = "documents." + std::to_string(i);
      if (!doc.is_object()) return TypeError(at, "a valid dictionary");
      for (const auto& [key, value] : doc.items()) {
        if (!value.is_string()) return TypeError(at + "." + key, "a valid string");
      }
    }
  }
  CPM_TRY(r.OptString("chat_template", &f->chat_template));
  return OkStatus();
}

// vLLM's check_structured_outputs_count: one of structured_outputs' json, regex and choice at
// most, and none beside a named function (whose call the tool's schema constrains; a
// response_format gives way to it instead, and "required" replaces the constraint).
Status CheckStructuredOutputsCount(const Json& j, ToolChoice tool_choice) {
  const auto so = j.find("structured_outputs");
  if (so == j.end() || !so->is_object()) return OkStatus();
  int count = 0;
  for (const char* k : {"json", "regex", "choice"}) {
    count += so->contains(k) && !so->at(k).is_null();
  }
  if (count > 1) {
    return ModelValidatorError(
        "You can only use one kind of constraints for structured outputs ('json', 'regex' or "
        "'choice').");
  }
  if (count > 0 && tool_choice == ToolChoice::kNamed) {
    return ModelValidatorError(
        "You can only either use constraints for structured outputs or tools, not both.");
  }
  return OkStatus();
}

// vLLM's validation of tool_choice against tools (with tools and no tool_choice the choice is
// "auto"). Whether the server can honour the choice is the handler's to say.
StatusOr<ToolChoice> ParseToolChoice(const Json& j, std::string* name) {
  const auto tools = j.find("tools");
  const bool has_tools = tools != j.end() && !tools->is_null();  // validated: ValidateTools
  auto choice_it = j.find("tool_choice");
  Json choice = choice_it != j.end() ? *choice_it : Json();
  if (choice_it == j.end() && has_tools && !tools->empty()) choice = "auto";
  if (choice.is_null() || choice == "none") return ToolChoice::kNone;
  if (!has_tools) return ModelValidatorError("When using `tool_choice`, `tools` must be set.");
  if (choice != "auto" && choice != "required" && !choice.is_object()) {
    return ModelValidatorError(
        "Invalid value for `tool_choice`: " +
        (choice.is_string() ? choice.get<std::string>() : choice.dump()) +
        "! Only named tools, \"none\", \"auto\" or \"required\" are supported.");
  }
  if (choice == "required" && tools->is_array() && tools->empty()) return ToolChoice::kNone;
  if (choice == "auto") return ToolChoice::kAuto;
  if (choice == "required") return ToolChoice::kRequired;
  // {"type": "function", "function": {"name": ...}}, naming one of the tools (vLLM's
  // check_tool_usage and its texts).
  const std::string usage =
      "! Correct usage: `{\"type\": \"function\", \"function\": {\"name\": \"my_function\"}}`";
  // ChatCompletionNamedToolChoiceParam: type Literal["function"], "function" when left out.
  if (auto type = choice.find("type"); type != choice.end() && *type != "function") {
    return TypeError("tool_choice.type", "'function'");
  }
  const auto fn = choice.find("function");
  if (fn == choice.end() || !fn->is_object()) {
    return ModelValidatorError("Invalid value for `function`: `" +
                               (fn == choice.end() ? std::string("None") : fn->dump()) +
                               "` in `tool_choice`" + usage);
  }
  const auto fn_name = fn->find("name");
  if (fn_name == fn->end()) {
    return ModelValidatorError("Expected field `name` in `function` in `tool_choice`" + usage);
  }
  if (!fn_name->is_string() || fn_name->get_ref<const std::string&>().empty()) {
    return ModelValidatorError(
        "Invalid `name` in `function`: `" +
        (fn_name->is_string() ? fn_name->get<std::string>() : fn_name->dump()) +
        "` in `tool_choice`" + usage);
  }
  *name = fn_name->get<std::string>();
  for (const Json& t : *tools) {
    if (t["function"]["name"] == *name) return ToolChoice::kNamed;
  }
  return ModelValidatorError(
      "The tool specified in `tool_choice` does not match any of the specified `tools`");
}

// response_format (OpenAI) or structured_outputs (vLLM) -> the schema the output must match.
// Supported: json_object, json_schema / json, choice, regex, grammar (without recursion);
// structural tags are a 400, never ignored, so that a client never takes free text for a
// guaranteed format. The
// legacy guided_* fields are ignored, as vLLM >= 0.12 does.
Status ParseStructuredOutputs(JsonReader& r, const Json& j, bool compact_json,
                              std::shared_ptr<const structured::Schema>* out) {
  const int server_ws = compact_json ? 0 : structured::kMaxWhitespace;
  r.Known("response_format");
  r.Known("structured_outputs");
  const auto rf = j.find("response_format");
  const auto so = j.find("structured_outputs");
  const bool has_rf = rf != j.end() && !rf->is_null();
  const bool has_so = so != j.end() && !so->is_null();
  Json merged;  // structured_outputs with the response_format's constraint laid over it
  if (has_rf) {
    const auto type = rf->is_object() ? rf->find("type") : rf->end();
    if (!rf->is_object() || type == rf->end() || !type->is_string()) {
      return TypeError("response_format.type",
                       "'text', 'json_object', 'json_schema' or 'structural_tag'");
    }
    const std::string t = type->get<std::string>();
    // The format as the structured_outputs constraint it stands for.
    Json constraint;
    if (t == "json_object") {
      constraint = {{"json_object", true}};
    } else if (t == "json_schema") {
      const auto js = rf->find("json_schema");
      if (js == rf->end() || !js->is_object()) {
        return TypeError("response_format.json_schema", "an object with a 'schema'");
      }
      if (auto n = js->find("name"); n == js->end() || !n->is_string()) {
        return TypeError("response_format.json_schema.name", "a valid string");  // required
      }
      const auto schema = js->find("schema");
      if (schema == js->end() || schema->is_null()) {
        return InvalidArgument("response_format.json_schema.schema is required");
      }
      constraint = {{"json", *schema}};
    } else if (t != "text") {
      return InvalidArgument("response_format of type '" + t +
                             "' is not supported by cpmserve (text, json_object, json_schema are)");
    }
    if (!constraint.is_null() && !has_so) {
      if (t == "json_object") {
        *out = structured::Schema::AnyObject(server_ws);
      } else {
        CPM_ASSIGN_OR_RETURN(*out,
                             structured::Schema::FromJsonSchema(constraint["json"], server_ws));
      }
      return OkStatus();
    }
    if (!constraint.is_null() && so->is_object()) {
      // vLLM's structured_outputs_from_response_format: the format's constraint replaces
      // structured_outputs' own of that kind and keeps its options (disable_any_whitespace);
      // a constraint of another kind left beside it makes two, a 400 below.
      merged = *so;
      merged.update(constraint);
    }
  }
  if (!has_so) return OkStatus();
  const Json* so_json = merged.is_null() ? &*so : &merged;
  if (!so_json->is_object()) return TypeError("structured_outputs", "an object");
  // One constraint kind; of the options beside it, disable_any_whitespace is followed, the
  // others (backend fallbacks, whitespace patterns) do not change what the output may be and
  // are ignored.
  std::vector<std::string> kinds;
  for (const char* k : {"json", "regex", "choice", "grammar", "json_object", "structural_tag"}) {
    const auto it = so_json->find(k);
    if (it != so_json->end() && !it->is_null() && *it != false) kinds.push_back(k);
  }
  if (kinds.size() != 1) {  // vLLM's StructuredOutputsParams.__post_init__
    return InvalidArgument(
        std::string(kinds.empty() ? "You must use one kind of structured outputs constraint but "
                                    "none are specified: "
                                  : "You can only use one kind of structured outputs constraint "
                                    "but multiple are specified: ") +
        so_json->dump());
  }
  const Json& v = so_json->at(kinds[0]);
  // disable_any_whitespace: compact JSON, as vLLM's option.
  const auto compact = so_json->find("disable_any_whitespace");
  if (compact != so_json->end() && !compact->is_null() && !compact->is_boolean()) {
    return TypeError("structured_outputs.disable_any_whitespace", "a boolean");
  }
  const int ws = compact != so_json->end() && compact->is_boolean() && compact->get<bool>()
                     ? 0
                     : server_ws;
  if (kinds[0] == "json") {
    if (v.is_string()) {
      const Json parsed = ParseOrderedJson(v.get<std::string>());
      if (parsed.is_discarded()) {
        return InvalidArgument(
            "Invalid JSON grammar specification. structured_outputs.json is not JSON");
      }
      CPM_ASSIGN_OR_RETURN(*out, structured::Schema::FromJsonSchema(parsed, ws));
    } else {
      CPM_ASSIGN_OR_RETURN(*out, structured::Schema::FromJsonSchema(v, ws));
    }
  } else if (kinds[0] == "json_object") {
    *out = structured::Schema::AnyObject(ws);
  } else if (kinds[0] == "choice") {
    if (!v.is_array()) return TypeError("structured_outputs.choice", "a list of strings");
    std::vector<std::string> choices;
    for (const Json& c : v) {
      if (!c.is_string()) return TypeError("structured_outputs.choice", "a list of strings");
      choices.push_back(c.get<std::string>());
    }
    CPM_ASSIGN_OR_RETURN(*out, structured::Schema::Choice(choices));
  } else if (kinds[0] == "regex") {
    if (!v.is_string()) return TypeError("structured_outputs.regex", "a string");
    CPM_ASSIGN_OR_RETURN(*out, structured::Schema::FromRegex(v.get<std::string>()));
  } else if (kinds[0] == "grammar") {
    if (!v.is_string()) return TypeError("structured_outputs.grammar", "a string");
    CPM_ASSIGN_OR_RETURN(*out, structured::Schema::FromGrammar(v.get<std::string>()));
  } else {
    return InvalidArgument("structured_outputs." + kinds[0] + " is not supported by cpmserve " +
                           "(json, regex, grammar, choice and json_object are)");
  }
  return OkStatus();
}

}  // namespace

namespace {

// OpenAI's reasoning_effort as vLLM serves it (build_chat_params): the template gets it as
// `reasoning_effort`, and, unless the request's chat_template_kwargs set enable_thinking,
// enable_thinking = (effort != "none"), which switches MiniCPM-V-4.6's thinking.
Status ApplyReasoningEffort(JsonReader& r, ChatTemplateFields* chat) {
  std::optional<std::string> effort;
  CPM_TRY(r.OptString("reasoning_effort", &effort));
  if (!effort) return OkStatus();
  static constexpr const char* kEfforts[] = {"none", "minimal", "low", "medium",
                                             "high", "xhigh",   "max"};
  if (std::find(std::begin(kEfforts), std::end(kEfforts), *effort) == std::end(kEfforts)) {
    return TypeError("reasoning_effort",
                     "'none', 'minimal', 'low', 'medium', 'high', 'xhigh' or 'max'");
  }
  Json& kwargs = chat->chat_template_kwargs;
  if (!kwargs.is_object()) kwargs = Json::object();
  kwargs["reasoning_effort"] = *effort;
  if (!kwargs.contains("enable_thinking")) kwargs["enable_thinking"] = *effort != "none";
  return OkStatus();
}

}  // namespace

StatusOr<ChatCompletionRequest> ParseChatCompletionRequest(std::string_view body,
                                                           std::vector<std::string>* ignored,
                                                           bool compact_json) {
  CPM_ASSIGN_OR_RETURN(Json j, ParseJsonObject(body));
  JsonReader r(j);
  ChatCompletionRequest req;
  CPM_TRY(ParseSampling(r, &req.sampling));
  std::optional<int64_t> max_tokens, max_completion_tokens;
  CPM_TRY(r.OptInt("max_tokens", &max_tokens));
  CPM_TRY(r.OptInt("max_completion_tokens", &max_completion_tokens));
  // vLLM: max_completion_tokens wins; max_tokens is the deprecated spelling.
  req.sampling.max_tokens = max_completion_tokens ? max_completion_tokens : max_tokens;
  CPM_TRY(ParseChatTemplateFields(r, j, &req.chat));
  CPM_TRY(r.Bool("logprobs", &req.logprobs));
  CPM_TRY(r.OptInt("top_logprobs", &req.top_logprobs, JsonReader::IntForm::kNoStrings));
  CPM_TRY(r.Bool("add_special_tokens", &req.add_special_tokens));
  CPM_TRY(r.Bool("echo", &req.echo));
  CPM_TRY(r.Bool("include_reasoning", &req.include_reasoning));
  CPM_TRY(r.Bool("return_token_ids", &req.return_token_ids));
  CPM_TRY(ApplyReasoningEffort(r, &req.chat));
  r.Known("tool_choice");
  CPM_TRY(r.Bool("parallel_tool_calls", &req.parallel_tool_calls));
  CPM_ASSIGN_OR_RETURN(req.tool_choice, ParseToolChoice(j, &req.tool_name));
  CPM_TRY(CheckStructuredOutputsCount(j, req.tool_choice));
  CPM_TRY(ParseStructuredOutputs(r, j, compact_json, &req.sampling.structured));
  ReportUnknown(r, ignored);
  return req;
}

namespace {

// OpenAI's prompt: "text", ["a", "b"], [1, 2, 3] or [[1, 2], [3]].
Status ParsePrompts(const Json& p, std::vector<CompletionPrompt>* out) {
  const char* expected = "a string, a list of strings, a list of token ids or a list of lists";
  if (p.is_string()) {
    out->push_back({true, p.get<std::string>(), {}});
    return OkStatus();
  }
  if (!p.is_array()) return TypeError("prompt", expected);
  if (p.empty()) {  // vLLM's newer check covers [] as it does "" (its test_empty_prompt_list)
    return ModelValidatorError("Either prompt or prompt_embeds must be provided and non-empty.");
  }
  if (p[0].is_string()) {
    for (const Json& e : p) {
      if (!e.is_string()) return TypeError("prompt", expected);
      out->push_back({true, e.get<std::string>(), {}});
    }
    return OkStatus();
  }
  // pydantic's lax list[int]: 300.0 is token 300 too (a numpy or JavaScript client's ids).
  auto parse_ids = [&](const Json& list, std::vector<int64_t>* ids) -> Status {
    for (const Json& e : list) {
      const std::optional<int64_t> id = e.is_number() ? LaxInt(e) : std::nullopt;
      if (!id) return TypeError("prompt", expected);
      ids->push_back(*id);
    }
    return OkStatus();
  };
  if (p[0].is_array()) {
    for (const Json& e : p) {
      if (!e.is_array()) return TypeError("prompt", expected);
      CompletionPrompt cp{false, {}, {}};
      CPM_TRY(parse_ids(e, &cp.ids));
      out->push_back(std::move(cp));
    }
    return OkStatus();
  }
  CompletionPrompt cp{false, {}, {}};
  CPM_TRY(parse_ids(p, &cp.ids));
  out->push_back(std::move(cp));
  return OkStatus();
}

}  // namespace

StatusOr<CompletionRequest> ParseCompletionRequest(std::string_view body,
                                                   std::vector<std::string>* ignored,
                                                   bool compact_json) {
  CPM_ASSIGN_OR_RETURN(Json j, ParseJsonObject(body));
  JsonReader r(j);
  CompletionRequest req;
  CPM_TRY(ParseSampling(r, &req.sampling));
  // OpenAI's documented default for completions, also for an explicit null (vLLM's
  // normalize_null_max_tokens).
  CPM_TRY(r.OptInt("max_tokens", &req.sampling.max_tokens));
  if (!req.sampling.max_tokens) req.sampling.max_tokens = 16;
  r.Known("prompt");
  // prompt_embeds need vLLM's --enable-prompt-embeds, which this server does not take: its
  // refusal, rather than a reply to the prompt alone.
  r.Known("prompt_embeds");
  if (r.Has("prompt_embeds") && !j["prompt_embeds"].is_null()) {
    return InvalidArgument("You must set `--enable-prompt-embeds` to input `prompt_embeds`. "
                           "(cpmserve does not take prompt embeddings.)")
        .WithParam("prompt_embeds");
  }
  // vLLM's validate_prompt_and_prompt_embeds.
  if (!r.Has("prompt") || j["prompt"] == "") {
    return ModelValidatorError("Either prompt or prompt_embeds must be provided and non-empty.");
  }
  CPM_TRY(ParsePrompts(j["prompt"], &req.prompts));
  CPM_TRY(r.OptInt("logprobs", &req.logprobs, JsonReader::IntForm::kNoStrings));
  CPM_TRY(r.Bool("echo", &req.echo));
  CPM_TRY(r.Bool("return_token_ids", &req.return_token_ids));
  CPM_TRY(r.Bool("add_special_tokens", &req.add_special_tokens));
  CPM_TRY(r.OptString("suffix", &req.suffix));
  r.Known("best_of");
  CPM_TRY(ParseStructuredOutputs(r, j, compact_json, &req.sampling.structured));
  ReportUnknown(r, ignored);
  return req;
}

StatusOr<TokenizeRequest> ParseTokenizeRequest(std::string_view body,
                                               std::vector<std::string>* ignored) {
  CPM_ASSIGN_OR_RETURN(Json j, ParseJsonObject(body));
  JsonReader r(j);
  TokenizeRequest req;
  CPM_TRY(r.OptString("model", &req.model));
  CPM_TRY(r.OptBool("add_special_tokens", &req.add_special_tokens));
  CPM_TRY(r.Bool("return_token_strs", &req.return_token_strs));
  if (r.Has("messages")) {
    req.is_chat = true;
    CPM_TRY(ParseChatTemplateFields(r, j, &req.chat));
  } else {
    r.Known("prompt");
    if (!r.Has("prompt")) return TypeError("prompt", "a valid string (field required)");
    CPM_TRY(r.String("prompt", &req.prompt));
  }
  ReportUnknown(r, ignored);
  return req;
}

StatusOr<DetokenizeRequest> ParseDetokenizeRequest(std::string_view body,
                                                   std::vector<std::string>* ignored) {
  CPM_ASSIGN_OR_RETURN(Json j, ParseJsonObject(body));
  JsonReader r(j);
  DetokenizeRequest req;
  CPM_TRY(r.OptString("model", &req.model));
  if (!r.Has("tokens")) {
    r.Known("tokens");
    return TypeError("tokens", "a valid list of integers (field required)");
  }
  CPM_TRY(r.IntList("tokens", &req.tokens));
  ReportUnknown(r, ignored);
  return req;
}

}  // namespace cpm::protocol
