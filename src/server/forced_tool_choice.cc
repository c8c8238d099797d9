#include "server/forced_tool_choice.h"

#include "server/json_parse.h"

namespace cpm {

using Json = nlohmann::ordered_json;

namespace {

// A tool's parameters schema; a function without one (or with {}) takes an empty object: vLLM's
// _get_tool_schema for "required". For a named function vLLM leaves such a call unconstrained
// (get_json_schema_from_tools returns None, its arguments are then free text, vllm#45290); here
// it is the empty object too, so that the arguments are always JSON.
Json Parameters(const Json& function) {
  const auto p = function.find("parameters");
  if (p == function.end() || p->is_null() || (p->is_object() && p->empty())) {
    return {{"type", "object"}, {"properties", Json::object()}};
  }
  return *p;
}

}  // namespace

StatusOr<ForcedToolChoice> ForcedToolChoice::Make(const Json& tools, std::string named) {
  ForcedToolChoice f;
  f.named_ = std::move(named);
  // Each tool's function object, checked before anything reads it.
  std::vector<const Json*> functions;
  for (size_t i = 0; tools.is_array() && i < tools.size(); ++i) {
    const Json& t = tools[i];
    const auto fn = t.is_object() ? t.find("function") : t.end();
    if (fn == t.end() || !fn->is_object() || !fn->contains("name") || !(*fn)["name"].is_string()) {
      return InvalidArgument("tools[" + std::to_string(i) + "].function.name must be a string");
    }
    functions.push_back(&*fn);
  }
  Json schema;
  if (!f.named_.empty()) {
    for (const Json* fn : functions) {
      if ((*fn)["name"] == f.named_) schema = Parameters(*fn);
    }
  } else {
    // [{"name": tool, "parameters": its schema}, ...] at least one; the tools' $defs gathered
    // at the root, where their local $refs point.
    Json options = Json::array(), defs = Json::object();
    for (const Json* fn_ptr : functions) {
      const Json& fn = *fn_ptr;
      Json params = Parameters(fn);
      if (auto d = params.find("$defs"); d != params.end() && d->is_object()) {
        for (const auto& [k, v] : d->items()) {
          // One root $defs serves all tools, so a name two tools define differently has no
          // single meaning there (vLLM's _get_tool_schema_defs refuses it with this text).
          // Compared as unordered JSON: an ordered_json's equality depends on key order,
          // where vLLM compares Python dicts.
          auto it = defs.find(k);
          if (it != defs.end() && nlohmann::json(*it) != nlohmann::json(v)) {
            return InvalidArgument("Tool definition '" + k +
                                   "' has multiple schemas, which is not supported.");
          }
          defs[k] = v;
        }
      }
      options.push_back({{"type", "object"},
                         {"properties",
                          {{"name", {{"type", "string"}, {"enum", Json::array({fn["name"]})}}},
                           {"parameters", params}}},
                         {"required", Json::array({"name", "parameters"})}});
    }
    schema = {{"type", "array"}, {"minItems", 1}, {"items", {{"anyOf", options}}}};
    if (!defs.empty()) schema["$defs"] = defs;
  }
  auto compiled = structured::Schema::FromJsonSchema(schema);
  if (!compiled.ok()) {
    return InvalidArgument("tool_choice: the tools' parameters: " +
                           std::string(compiled.status().message()));
  }
  f.schema_ = *compiled;
  return f;
}

std::optional<std::vector<ToolCall>> ForcedToolChoice::Calls(const std::string& content,
                                                             uint64_t* id_state) const {
  const char* prefix = "chatcmpl-tool-";  // vLLM's make_tool_call_id
  const int hex = 32;
  if (!named_.empty()) {  // the text as it is, complete or not (vLLM)
    return std::vector<ToolCall>{{ToolCallId(id_state, prefix, hex), named_, content}};
  }
  const Json parsed = protocol::ParseOrderedJson(content);
  if (!parsed.is_array()) return std::nullopt;
  std::vector<ToolCall> calls;
  for (const Json& c : parsed) {
    if (!c.is_object() || !c.contains("name") || !c["name"].is_string()) return std::nullopt;
    calls.push_back({ToolCallId(id_state, prefix, hex), c["name"].get<std::string>(),
                     PyJsonDumps(c.value("parameters", Json::object()))});
  }
  return calls;
}

}  // namespace cpm
