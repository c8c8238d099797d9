// qwen3_coder tool calls: the XML blocks found and taken apart as vLLM's parser does (its
// regular expressions spelled out as searches), values typed by the tools' parameter schemas.
#include "server/tool_call_parser.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "chat/builtins.h"
#include "chat/text_util.h"
#include "chat/value.h"
#include "server/json_parse.h"

namespace cpm {

using Json = nlohmann::ordered_json;

namespace {

constexpr std::string_view kCallStart = "<tool_call>", kCallEnd = "</tool_call>";
constexpr std::string_view kFunctionStart = "<function=", kFunctionEnd = "</function>";
constexpr std::string_view kParamStart = "<parameter=", kParamEnd = "</parameter>";

// Python's str.lower() and str.strip(), as vLLM's parser calls them (and int()/float() strip).
std::string Lower(std::string_view s) { return jinja::PyLower(s); }
std::string Trim(std::string_view s) { return jinja::PyStrip(s, std::nullopt, true, true); }

// Python's int()/float() text: digits may be grouped by single underscores. The digits without
// them, or nullopt where an underscore is misplaced.
std::optional<std::string> WithoutUnderscores(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '_') {
      out += s[i];
      continue;
    }
    const auto digit = [&](size_t j) {
      return j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]));
    };
    if (i == 0 || !digit(i - 1) || !digit(i + 1)) return std::nullopt;
  }
  return out;
}

// int(text) as Python reads it, within int64 (a longer integer stays text).
std::optional<int64_t> PyInt(std::string_view text) {
  auto s = WithoutUnderscores(Trim(text));
  if (!s || s->empty()) return std::nullopt;
  size_t i = (*s)[0] == '+' || (*s)[0] == '-' ? 1 : 0;
  if (i == s->size()) return std::nullopt;
  for (size_t j = i; j < s->size(); ++j) {
    if (!std::isdigit(static_cast<unsigned char>((*s)[j]))) return std::nullopt;
  }
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(s->c_str(), &end, 10);
  if (errno == ERANGE || end != s->c_str() + s->size()) return std::nullopt;
  return v;
}

// float(text) as Python reads it (decimal or exponent forms, inf, nan).
std::optional<double> PyFloat(std::string_view text) {
  auto s = WithoutUnderscores(Trim(text));
  if (!s || s->empty()) return std::nullopt;
  const std::string l = Lower(*s);
  const std::string_view body = l[0] == '+' || l[0] == '-' ? std::string_view(l).substr(1) : l;
  const bool word = body == "inf" || body == "infinity" || body == "nan";
  if (!word) {  // strtod also takes hex and "infinite" prefixes Python does not
    for (char c : body) {
      if (!std::isdigit(static_cast<unsigned char>(c)) && c != '.' && c != 'e' && c != '+' &&
          c != '-') {
        return std::nullopt;
      }
    }
  }
  char* end = nullptr;
  const double v = std::strtod(s->c_str(), &end);
  if (end != s->c_str() + s->size()) return std::nullopt;
  return v;
}

// The longest proper prefix of `tag` that `text` ends with, not reaching before `from`.
size_t PartialTagAtEnd(const std::string& text, size_t from, std::string_view tag) {
  for (size_t k = std::min(tag.size() - 1, text.size() - from); k > 0; --k) {
    if (std::string_view(text).substr(text.size() - k) == tag.substr(0, k)) return k;
  }
  return 0;
}

// Finds `open` ... `close` pieces as the regex `open(.*?)close|open(.*)$` does: each piece's
// text, the last one running to the end when it is not closed.
std::vector<std::string_view> Pieces(std::string_view s, std::string_view open,
                                     std::string_view close) {
  std::vector<std::string_view> out;
  for (size_t pos = s.find(open); pos != std::string_view::npos; pos = s.find(open, pos)) {
    const size_t body = pos + open.size(), end = s.find(close, body);
    if (end == std::string_view::npos) {
      out.push_back(s.substr(body));
      break;
    }
    out.push_back(s.substr(body, end - body));
    pos = end + close.size();
  }
  return out;
}

}  // namespace

std::string PyJsonDumps(const Json& j) {
  auto s = jinja::JsonDumps(jinja::Value::FromJson(j), jinja::JsonDumpOptions{});
  return s.ok() ? *s : j.dump();
}

std::string ToolCallId(uint64_t* state, const char* prefix, int hex_digits) {
  // splitmix64 steps: ids unique within the request, unpredictable enough across requests.
  std::string hex;
  while (static_cast<int>(hex.size()) < hex_digits) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    hex += fmt::format("{:016x}", z ^ (z >> 31));
  }
  return prefix + hex.substr(0, hex_digits);
}

Status ValidateToolCallParserName(const std::string& name) {
  // vLLM's "minicpmv" parser reads the same Qwen3-Coder XML (MiniCPMVEngineToolParser).
  if (name == "qwen3_coder" || name == "qwen3_xml" || name == "minicpmv") return OkStatus();
  return InvalidArgument("unknown tool call parser '" + name +
                         "': cpmserve has qwen3_coder (and qwen3_xml and minicpmv, the same "
                         "format), which MiniCPM-V-4.6's chat template writes");
}

ToolCallParser::ToolCallParser(Json tools, uint64_t id_seed, bool stream_text_after_calls)
    : tools_(std::move(tools)), id_state_(id_seed), text_after_calls_(stream_text_after_calls) {}

std::string ToolCallParser::NewId(const char* prefix, int hex_digits) {
  return ToolCallId(&id_state_, prefix, hex_digits);
}

// vLLM's _convert_param_value: "null" is null whatever the type; a parameter the tool does not
// declare stays text; else by the declared type's name. Where vLLM falls back on Python's
// ast.literal_eval (object/array text that is not JSON, unusual type names), JSON is read
// instead (and True/False/None), so Python-only literals such as {'a': 1} stay text.
Json ToolCallParser::ConvertValue(const std::string& function, const std::string& param,
                                  const std::string& value) const {
  if (Lower(value) == "null") return nullptr;
  Json properties = Json::object();
  if (tools_.is_array()) {
    for (const Json& tool : tools_) {
      // A tool without "type" is a function: vLLM's ChatCompletionToolsParam defaults it.
      if (!tool.is_object() || tool.value("type", Json("function")) != "function") continue;
      const Json f = tool.value("function", Json());
      if (!f.is_object() || f.value("name", Json()) != function) continue;
      const Json params = f.value("parameters", Json());
      if (params.is_object()) {
        properties = params.contains("properties") ? params["properties"] : params;
      }
      break;
    }
  }
  if (!properties.is_object() || !properties.contains(param)) return value;
  const Json& spec = properties[param];
  std::string type = "string";
  if (spec.is_object() && spec.contains("type")) {
    type = Lower(Trim(spec["type"].is_string() ? spec["type"].get<std::string>()
                                               : spec["type"].dump()));
  }
  const auto starts = [&](const char* p) { return type.rfind(p, 0) == 0; };
  if (type == "string" || type == "str" || type == "text" || type == "varchar" ||
      type == "char" || type == "enum") {
    return value;
  }
  if (starts("int") || starts("uint") || starts("long") || starts("short") ||
      starts("unsigned")) {
    if (auto v = PyInt(value)) return *v;
    return value;
  }
  if (starts("num") || starts("float")) {
    const auto v = PyFloat(value);
    if (!v || !std::isfinite(*v)) return value;  // Python's int(inf or nan) fails: text
    if (*v == std::trunc(*v) && std::abs(*v) < 9.2e18) return static_cast<int64_t>(*v);
    return *v;
  }
  if (type == "boolean" || type == "bool" || type == "binary") return Lower(value) == "true";
  Json parsed = protocol::ParseOrderedJson(value);
  if (!parsed.is_discarded()) return parsed;
  if (value == "True" || value == "False") return value == "True";
  if (value == "None") return nullptr;
  return value;
}

std::optional<ToolCall> ToolCallParser::ParseFunction(std::string_view f, const char* id_prefix,
                                                      int id_hex) {
  const size_t gt = f.find('>');
  if (gt == std::string_view::npos) return std::nullopt;
  ToolCall call{NewId(id_prefix, id_hex), std::string(f.substr(0, gt)), ""};
  const std::string_view params = f.substr(gt + 1);
  Json args = Json::object();
  // <parameter=(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|$): a value ends at the
  // first of its closing tag, the next parameter, the function's end, or the text's end (`$`
  // also matches before a final newline).
  for (size_t pos = params.find(kParamStart); pos != std::string_view::npos;
       pos = params.find(kParamStart, pos)) {
    const size_t body = pos + kParamStart.size();
    size_t end = params.size(), resume = params.size();
    if (!params.empty() && params.back() == '\n' && params.size() - 1 >= body) {
      end = resume = params.size() - 1;
    }
    for (std::string_view stop : {kParamStart, kFunctionEnd}) {
      const size_t at = params.find(stop, body);
      if (at < end) end = resume = at;
    }
    if (const size_t at = params.find(kParamEnd, body); at <= end) {
      end = at;
      resume = at + kParamEnd.size();
    }
    std::string_view m = params.substr(body, end - body);
    const size_t name_end = m.find('>');
    if (name_end == std::string_view::npos) return std::nullopt;
    const std::string name(m.substr(0, name_end));
    std::string_view v = m.substr(name_end + 1);
    if (!v.empty() && v.front() == '\n') v.remove_prefix(1);
    if (!v.empty() && v.back() == '\n') v.remove_suffix(1);
    args[name] = ConvertValue(call.name, name, std::string(v));
    pos = resume;
  }
  call.arguments = PyJsonDumps(args);
  return call;
}

std::optional<std::vector<ToolCall>> ToolCallParser::ParseBlock(std::string_view block,
                                                                const char* id_prefix,
                                                                int id_hex) {
  std::vector<ToolCall> calls;
  for (std::string_view f : Pieces(block, kFunctionStart, kFunctionEnd)) {
    auto call = ParseFunction(f, id_prefix, id_hex);
    if (!call) return std::nullopt;
    calls.push_back(std::move(*call));
  }
  return calls;
}

ToolCallParser::Extracted ToolCallParser::Extract(const std::string& text) {
  Extracted out{text, {}};
  if (text.find(kFunctionStart) == std::string::npos) return out;
  std::vector<std::string_view> blocks = Pieces(text, kCallStart, kCallEnd);
  if (blocks.empty()) blocks.push_back(text);  // no <tool_call> tags: bare <function=...>
  std::vector<ToolCall> calls;
  for (std::string_view b : blocks) {
    auto block_calls = ParseBlock(b, "chatcmpl-tool-", 32);
    if (!block_calls) return out;  // broken XML: all of it is content
    for (ToolCall& c : *block_calls) calls.push_back(std::move(c));
  }
  if (calls.empty()) return out;
  size_t first = text.find(kCallStart);
  if (first == std::string::npos) first = text.find(kFunctionStart);
  out.content = first > 0 ? std::optional<std::string>(text.substr(0, first)) : std::nullopt;
  out.calls = std::move(calls);
  return out;
}

ToolCallParser::Delta ToolCallParser::Feed(std::string_view piece, bool final) {
  text_ += piece;
  Delta d;
  if (!in_calls_) {
    const size_t start = text_.find(kCallStart, settled_);
    if (start == std::string::npos) {
      const size_t keep = final ? 0 : PartialTagAtEnd(text_, settled_, kCallStart);
      d.content = text_.substr(settled_, text_.size() - keep - settled_);
      settled_ = text_.size() - keep;
      return d;
    }
    d.content = text_.substr(settled_, start - settled_);
    settled_ = start;
    in_calls_ = true;
  }
  for (;;) {
    if (after_call_) {
      // The whitespace right after a </tool_call> is not content (vLLM skips whitespace-only
      // deltas there).
      while (settled_ < text_.size() &&
             std::isspace(static_cast<unsigned char>(text_[settled_]))) {
        ++settled_;
      }
      if (settled_ == text_.size() && !final) break;
      after_call_ = false;
    }
    const size_t start = text_.find(kCallStart, settled_);
    if (start == std::string::npos) {  // after the calls: content, as vLLM streams it
      const size_t keep = final ? 0 : PartialTagAtEnd(text_, settled_, kCallStart);
      if (text_after_calls_) d.content += text_.substr(settled_, text_.size() - keep - settled_);
      settled_ = text_.size() - keep;
      break;
    }
    if (text_after_calls_) d.content += text_.substr(settled_, start - settled_);  // between
    settled_ = start;
    const size_t body = start + kCallStart.size(), end = text_.find(kCallEnd, body);
    if (end == std::string::npos && !final) {
      settled_ = start;  // the block is not complete yet
      break;
    }
    const std::string_view block = end == std::string::npos
                                       ? std::string_view(text_).substr(body)
                                       : std::string_view(text_).substr(body, end - body);
    if (auto calls = ParseBlock(block, "call_", 24)) {
      for (ToolCall& c : *calls) d.calls.push_back(std::move(c));
    }
    settled_ = end == std::string::npos ? text_.size() : end + kCallEnd.size();
    after_call_ = true;
  }
  calls_sent_ += static_cast<int>(d.calls.size());
  return d;
}

}  // namespace cpm
