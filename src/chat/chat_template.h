// Chat templates: parse a model's Jinja chat template once, render it per request exactly as
// transformers' apply_chat_template would (jinja2 ImmutableSandboxedEnvironment with
// trim_blocks and lstrip_blocks, tojson without ASCII escaping, raise_exception, strftime_now).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "chat/content_format.h"

namespace cpm {

class ChatTemplate {
 public:
  // Syntax errors (and unsupported tags, unknown filters or tests) are kInvalidArgument with
  // "chat template line L, column C: ...".
  static StatusOr<ChatTemplate> Parse(std::string source);

  // Renders with `context` as the template's variables. raise_exception() inside the
  // template gives kInvalidArgument with exactly its message; other runtime errors are
  // kInvalidArgument prefixed with the template line; runaway templates hit output, step and
  // recursion limits (kResourceExhausted). Thread-safe: the parsed template is immutable.
  StatusOr<std::string> Render(const nlohmann::ordered_json& context) const;

  const std::string& source() const { return program_->source; }
  // The content format vLLM detects for this template (content_format.h).
  jinja::ContentFormat content_format() const { return program_->content_format; }

 private:
  struct Program {
    std::string source;
    std::vector<std::unique_ptr<jinja::Stmt>> body;
    jinja::ContentFormat content_format = jinja::ContentFormat::kString;
    ~Program();
  };
  explicit ChatTemplate(std::shared_ptr<const Program> program) : program_(std::move(program)) {}

  std::shared_ptr<const Program> program_;
};

// What a chat completion request contributes to the template, as vLLM passes it through
// transformers: messages, tools, documents, add_generation_prompt, the tokenizer's special
// tokens, and chat_template_kwargs (e.g. enable_thinking) merged into the top level.
struct ChatRenderInput {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  std::optional<nlohmann::ordered_json> tools;      // absent: the template sees None
  std::optional<nlohmann::ordered_json> documents;  // absent: the template sees None
  bool add_generation_prompt = false;
  std::optional<std::string> bos_token;  // absent: undefined in the template
  std::optional<std::string> eos_token;
  nlohmann::ordered_json chat_template_kwargs = nlohmann::ordered_json::object();
};

// Builds the context transformers builds and renders it. chat_template_kwargs may override
// add_generation_prompt and the special tokens but not messages, tools or documents.
StatusOr<std::string> RenderChat(const ChatTemplate& tmpl, const ChatRenderInput& input);

// `--chat-template ARG`: the contents of the file ARG, or ARG itself when it is not an
// existing file but looks like Jinja (contains "{%" or "{{"), as vLLM does.
StatusOr<std::string> LoadChatTemplateArg(const std::string& arg);

}  // namespace cpm
