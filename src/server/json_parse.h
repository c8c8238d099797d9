// Parsing request JSON into nlohmann::ordered_json (key order kept, as Python's dicts keep it)
// in time linear in the text.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace cpm::protocol {

// Deepest nesting of arrays and objects a request may have: pydantic-core's JSON parser (vLLM's
// request models) stops at 200 too. Deeper values would overflow the stack of the recursive
// walks after parsing (a chat_template_kwargs value nested 100k deep crashed the server).
constexpr int kMaxJsonDepth = 200;

// `text` as ordered_json, or a discarded value when it is not valid JSON or nests deeper than
// kMaxJsonDepth (then `error`, if given, says which, as a predicate: "is not valid JSON"): what ordered_json::parse(text, nullptr,
// false) returns, a repeated key included (its last value, at its first place). That parse
// looks every new key up linearly among the object's keys before it, so an object of n keys
// took O(n²): a 100k-key logit_bias held an HTTP thread for 10-16 s. Here objects of more than
// a few keys find repeats through a hash index.
nlohmann::ordered_json ParseOrderedJson(std::string_view text, std::string* error = nullptr);

}  // namespace cpm::protocol
