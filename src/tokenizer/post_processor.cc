// tokenizer.json post-processors (see post_processor.h).
#include "tokenizer/post_processor.h"

#include <nlohmann/json.hpp>

namespace cpm {
namespace {

Status ParseInto(const nlohmann::json& j, std::vector<int32_t>* prefix,
                 std::vector<int32_t>* suffix) {
  if (j.is_null()) return OkStatus();
  const std::string type = j.at("type").get<std::string>();
  if (type == "ByteLevel") return OkStatus();
  if (type == "Sequence") {
    for (const auto& sub : j.at("processors")) CPM_RETURN_IF_ERROR(ParseInto(sub, prefix, suffix));
    return OkStatus();
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    prefix->push_back(j.at("cls").at(1).get<int32_t>());
    suffix->push_back(j.at("sep").at(1).get<int32_t>());
    return OkStatus();
  }
  if (type == "TemplateProcessing") {
    const auto& specials = j.at("special_tokens");
    bool seen_text = false;
    for (const auto& piece : j.at("single")) {
      if (piece.contains("Sequence")) {
        seen_text = true;
        continue;
      }
      const std::string name = piece.at("SpecialToken").at("id").get<std::string>();
      if (!specials.contains(name)) {
        return InvalidArgument("post_processor.single names '" + name +
                               "' missing from special_tokens");
      }
      for (const auto& id : specials.at(name).at("ids")) {
        (seen_text ? suffix : prefix)->push_back(id.get<int32_t>());
      }
    }
    return OkStatus();
  }
  return Unimplemented("post_processor type '" + type + "'");
}

}  // namespace

void PostProcessor::Apply(std::vector<int32_t>* ids) const {
  if (!prefix_.empty()) ids->insert(ids->begin(), prefix_.begin(), prefix_.end());
  ids->insert(ids->end(), suffix_.begin(), suffix_.end());
}

StatusOr<PostProcessor> ParsePostProcessor(const nlohmann::json& j) {
  std::vector<int32_t> prefix, suffix;
  try {
    CPM_RETURN_IF_ERROR(ParseInto(j, &prefix, &suffix));
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("post_processor: ") + e.what());
  }
  return PostProcessor(std::move(prefix), std::move(suffix));
}

}  // namespace cpm
