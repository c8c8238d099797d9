// Prompts file parsing and tokenization for the dump producer.
#include "eval/prompt_set.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "chat/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace cpm {
namespace {

using json = nlohmann::json;

StatusOr<PromptSpec> SpecFromJson(const json& j) {
  PromptSpec s;
  if (auto id = j.find("id"); id != j.end() && !id->is_null()) {
    if (id->is_string()) s.id = id->get<std::string>();
    else if (id->is_number_integer()) s.id = std::to_string(id->get<int64_t>());
    else return InvalidArgument("id: must be a string or an integer");
  }
  if (auto p = j.find("prompt"); p != j.end() && !p->is_null()) {
    if (!p->is_string()) return InvalidArgument("prompt: must be a string");
    s.text = p->get<std::string>();
  }
  if (auto p = j.find("prompt_ids"); p != j.end() && !p->is_null()) {
    if (!p->is_array() || p->empty()) return InvalidArgument("prompt_ids: must be a non-empty array");
    std::vector<int32_t> ids;
    for (const json& v : *p) {
      if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
        return InvalidArgument("prompt_ids: " + v.dump() + " is not a token id");
      ids.push_back(v.get<int32_t>());
    }
    s.ids = std::move(ids);
  }
  if (auto c = j.find("chat"); c != j.end() && !c->is_null()) {
    if (!c->is_boolean()) return InvalidArgument("chat: must be true or false");
    s.chat = c->get<bool>();
  }
  if (!s.text && !s.ids) return InvalidArgument("needs \"prompt\" or \"prompt_ids\"");
  return s;
}

}  // namespace

StatusOr<std::vector<PromptSpec>> ReadPromptsFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound(path + ": cannot open the prompts file");
  std::vector<PromptSpec> out;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    PromptSpec s;
    if (line[first] == '{') {
      json j = json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object())
        return InvalidArgument(path + ":" + std::to_string(n) + ": not a JSON object");
      auto spec = SpecFromJson(j);
      if (!spec.ok()) return spec.status().WithPrefix(path + ":" + std::to_string(n));
      s = std::move(*spec);
    } else {
      s.text = line;
    }
    if (s.id.empty()) s.id = "p" + std::to_string(out.size());
    out.push_back(std::move(s));
  }
  if (out.empty()) return InvalidArgument(path + ": no prompts");
  return out;
}

StatusOr<std::vector<PreparedPrompt>> PreparePrompts(const std::vector<PromptSpec>& specs,
                                                     const Tokenizer* tokenizer, bool chat) {
  std::optional<ChatTemplate> tmpl;
  std::vector<PreparedPrompt> out;
  for (const PromptSpec& s : specs) {
    PreparedPrompt p;
    p.id = s.id;
    p.text = s.text;
    p.chat = s.chat.value_or(chat);
    if (s.ids) {
      p.ids = *s.ids;
      out.push_back(std::move(p));
      continue;
    }
    if (!tokenizer) return InvalidArgument("prompt '" + s.id + "' is text but no tokenizer loaded");
    std::string text = *s.text;
    if (p.chat) {
      if (!tmpl) {
        if (tokenizer->chat_template().empty())
          return InvalidArgument("--chat: the tokenizer has no chat template");
        auto parsed = ChatTemplate::Parse(tokenizer->chat_template());
        if (!parsed.ok()) return parsed.status().WithPrefix("chat template");
        tmpl = std::move(*parsed);
      }
      ChatRenderInput in;
      in.messages.push_back({{"role", "user"}, {"content", text}});
      in.add_generation_prompt = true;
      in.bos_token = tokenizer->bos_token();
      in.eos_token = tokenizer->eos_token();
      auto rendered = RenderChat(*tmpl, in);
      if (!rendered.ok()) return rendered.status().WithPrefix("prompt '" + s.id + "'");
      text = *rendered;
    }
    p.ids = tokenizer->Encode(text, /*add_special_tokens=*/!p.chat);
    if (p.ids.empty()) return InvalidArgument("prompt '" + s.id + "' encodes to no tokens");
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace cpm
