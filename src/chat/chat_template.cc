// ChatTemplate, RenderChat and LoadChatTemplateArg: the chat module's public face over the
// lexer, parser and interpreter.
#include "chat/chat_template.h"

#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "chat/ast.h"
#include "chat/json_merge.h"
#include "chat/interpreter.h"
#include "chat/parser.h"

namespace cpm {

ChatTemplate::Program::~Program() = default;

StatusOr<ChatTemplate> ChatTemplate::Parse(std::string source) {
  auto program = std::make_shared<Program>();
  try {
    CPM_ASSIGN_OR_RETURN(program->body, jinja::ParseTemplate(source));
  } catch (const std::exception& e) {
    // Defensive: nothing in the parser is meant to throw, but no input may crash the server.
    return Internal(std::string("chat template parser failed: ") + e.what());
  }
  program->source = std::move(source);
  program->content_format = jinja::DetectContentFormat(program->body);
  return ChatTemplate(std::move(program));
}

StatusOr<std::string> ChatTemplate::Render(const nlohmann::ordered_json& context) const {
  if (!context.is_object()) return InvalidArgument("chat template context must be a JSON object");
  try {
    jinja::Value ctx = jinja::Value::FromJson(context);
    jinja::Interpreter interp{jinja::RenderLimits{}};
    return interp.Render(program_->body, ctx.AsDict());
  } catch (const std::exception& e) {
    return Internal(std::string("chat template rendering failed: ") + e.what());
  }
}

StatusOr<std::string> RenderChat(const ChatTemplate& tmpl, const ChatRenderInput& input) {
  if (!input.messages.is_array()) return InvalidArgument("messages must be an array");
  if (!input.chat_template_kwargs.is_null() && !input.chat_template_kwargs.is_object()) {
    return InvalidArgument("chat_template_kwargs must be an object");
  }
  // transformers: render(messages=..., tools=..., documents=..., add_generation_prompt=...,
  // **special_tokens, **kwargs).
  nlohmann::ordered_json ctx = nlohmann::ordered_json::object();
  ctx["messages"] = input.messages;
  ctx["tools"] = input.tools ? *input.tools : nlohmann::ordered_json(nullptr);
  ctx["documents"] = input.documents ? *input.documents : nlohmann::ordered_json(nullptr);
  ctx["add_generation_prompt"] = input.add_generation_prompt;
  if (input.bos_token) ctx["bos_token"] = *input.bos_token;
  if (input.eos_token) ctx["eos_token"] = *input.eos_token;
  if (input.chat_template_kwargs.is_object()) {
    MergeObject(&ctx, input.chat_template_kwargs, [](const std::string& key) {
      return key != "messages" && key != "tools" && key != "documents";
    });
  }
  return tmpl.Render(ctx);
}

StatusOr<std::string> LoadChatTemplateArg(const std::string& arg) {
  std::error_code ec;
  if (std::filesystem::is_regular_file(arg, ec)) {
    std::ifstream in(arg, std::ios::binary);
    if (!in) return NotFound("cannot read chat template file " + arg);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }
  if (arg.find("{%") != std::string::npos || arg.find("{{") != std::string::npos) return arg;
  return InvalidArgument("'" + arg + "' is neither a readable file nor an inline Jinja template");
}

}  // namespace cpm
