// Parsing request JSON into nlohmann::ordered_json (key order kept, as Python's dicts keep it)
// in time linear in the text.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

namespace cpm::protocol {

// `text` as ordered_json, or a discarded value when it is not valid JSON: what
// ordered_json::parse(text, nullptr, false) returns, a repeated key included (its last value, at
// its first place). That parse looks every new key up linearly among the object's keys before
// it, so an object of n keys took O(n²): a 100k-key logit_bias held an HTTP thread for 10-16 s.
// Here objects of more than a few keys find repeats through a hash index.
nlohmann::ordered_json ParseOrderedJson(std::string_view text);

}  // namespace cpm::protocol
