// Setting many members of an nlohmann::ordered_json object at once, in linear time.
#pragma once

#include <cstddef>

#include <nlohmann/json.hpp>

namespace cpm {

// base[key] = value for each member of the object `over` that `keep(key)` accepts, in over's
// order: a key base already had keeps its place, new keys are appended. ordered_json's own
// operator[] looks each key up linearly among all of base's, the ones just added included, so
// n new keys cost O(n²) (a request's 32k chat_template_kwargs: seconds of an HTTP thread);
// here only base's original keys are searched (over's keys are unique, as parsed JSON's are).
template <typename Keep>
void MergeObject(nlohmann::ordered_json* base, const nlohmann::ordered_json& over, Keep keep) {
  auto& members = static_cast<nlohmann::ordered_json::object_t::Container&>(
      base->get_ref<nlohmann::ordered_json::object_t&>());
  const std::size_t original = members.size();
  for (const auto& [key, value] : over.items()) {
    if (!keep(key)) continue;
    std::size_t at = 0;
    while (at < original && members[at].first != key) ++at;
    if (at < original) {
      members[at].second = value;
    } else {
      members.emplace_back(key, value);
    }
  }
}

inline void MergeObject(nlohmann::ordered_json* base, const nlohmann::ordered_json& over) {
  MergeObject(base, over, [](const auto&) { return true; });
}

}  // namespace cpm
