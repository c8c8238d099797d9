// tool_choice "required" or a named function: calls the reply must make, which vLLM serves by
// structured outputs and cpmserve does the same way. The reply is constrained to a JSON text —
// a named function's arguments (its `parameters` schema), or for "required" a non-empty array
// of {"name": one of the tools, "parameters": its arguments} — and read back as tool calls:
// a named call's `arguments` is the generated text itself (streamed as it comes), a required
// call's is Python's json.dumps of its parameters (vLLM's serving_chat).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "server/tool_call_parser.h"
#include "structured/json_schema.h"

namespace cpm {

class ForcedToolChoice {
 public:
  // `tools`: the request's tools; `named`: the function tool_choice names, "" for "required".
  // A tool's parameters that the schema subset cannot enforce make a 400 naming them.
  static StatusOr<ForcedToolChoice> Make(const nlohmann::ordered_json& tools, std::string named);

  const std::shared_ptr<const structured::Schema>& schema() const { return schema_; }
  bool required() const { return named_.empty(); }
  const std::string& named() const { return named_; }
  // The calls of a whole reply's content: a named function's call whatever the text (as vLLM),
  // for "required" nullopt when it is not the complete JSON (cut by max_tokens). Ids from
  // *id_state: chatcmpl-tool-<32 hex> (vLLM's make_tool_call_id), streamed or not.
  std::optional<std::vector<ToolCall>> Calls(const std::string& content,
                                             uint64_t* id_state) const;

 private:
  std::string named_;
  std::shared_ptr<const structured::Schema> schema_;
};

}  // namespace cpm
