#include "server/escaped_newline_normalizer.h"

namespace cpm {
namespace {

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// True if `rest` (what is left of the text) could still grow into `marker` with more text.
bool IsProperPrefixOf(std::string_view rest, std::string_view marker) {
  return rest.size() < marker.size() && StartsWith(marker, rest);
}

}  // namespace

std::string EscapedNewlineNormalizer::Feed(std::string_view chunk, bool final) {
  const std::string text = pending_ + std::string(chunk);
  pending_.clear();
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  auto hold = [&] { pending_ = text.substr(i); i = text.size(); };
  while (i < text.size()) {
    const std::string_view rest = std::string_view(text).substr(i);
    if (!closing_.empty()) {  // inside a protected span: copy up to and including its end
      if (StartsWith(rest, closing_)) {
        out += closing_;
        i += closing_.size();
        closing_.clear();
      } else if (!final && IsProperPrefixOf(rest, closing_)) {
        hold();
      } else {
        out += text[i++];
      }
      continue;
    }
    const char c = text[i];
    if (c == '`' || c == '$') {
      // ``` opens a fence, a single ` inline code; $$ display math, $ inline math.
      const std::string_view longer = c == '`' ? "```" : "$$";
      if (!final && IsProperPrefixOf(rest, longer)) {
        hold();
        continue;
      }
      closing_ = StartsWith(rest, longer) ? std::string(longer) : std::string(1, c);
      out += closing_;
      i += closing_.size();
      continue;
    }
    if (c != '\\') {
      out += text[i++];
      continue;
    }
    size_t run = 1;
    while (i + run < text.size() && text[i + run] == '\\') ++run;
    if (i + run == text.size() && !final) {  // the run may continue in the next chunk
      hold();
      continue;
    }
    if (run > 1) {  // an escaped backslash means what it says
      out.append(text, i, run);
      i += run;
      continue;
    }
    if (!final && (rest == "\\r" || rest == "\\r\\")) {  // maybe the start of \r\n
      hold();
      continue;
    }
    if (StartsWith(rest, "\\r\\n")) {
      out += '\n';
      i += 4;
    } else if (StartsWith(rest, "\\n") || StartsWith(rest, "\\r")) {
      out += '\n';
      i += 2;
    } else if (StartsWith(rest, "\\(") || StartsWith(rest, "\\[")) {
      out.append(rest.substr(0, 2));
      closing_ = rest[1] == '(' ? "\\)" : "\\]";
      i += 2;
    } else {
      out += text[i++];
    }
  }
  if (final) {
    out += pending_;
    pending_.clear();
  }
  return out;
}

std::string RecoverEscapedNewlines(std::string_view text) {
  if (text.find('\\') == std::string_view::npos) return std::string(text);
  EscapedNewlineNormalizer n;
  return n.Feed(text, true);
}

}  // namespace cpm
