// tokenizer.json normalizers (see normalizer.h).
#include "tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>
#include <nlohmann/json.hpp>
#include <vector>

#include "tokenizer/regex.h"
#include "tokenizer/unicode_util.h"

namespace cpm {
namespace {

bool IsAscii(const std::string& s) {
  for (char c : s) {
    if (static_cast<uint8_t>(c) >= 0x80) return false;
  }
  return true;
}

void UnicodeMap(std::string* text, int options) {
  if (IsAscii(*text)) return;
  utf8proc_uint8_t* out = nullptr;
  const auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text->data()),
                              static_cast<utf8proc_ssize_t>(text->size()), &out,
                              static_cast<utf8proc_option_t>(options | UTF8PROC_STABLE));
  if (n >= 0) text->assign(reinterpret_cast<char*>(out), static_cast<size_t>(n));
  std::free(out);
}

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(int options) : options_(options) {}
  void Normalize(std::string* text) const override { UnicodeMap(text, options_); }

 private:
  int options_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> parts)
      : parts_(std::move(parts)) {}
  void Normalize(std::string* text) const override {
    for (const auto& p : parts_) p->Normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> parts_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  // HF prepends only to non-empty text.
  void Normalize(std::string* text) const override {
    if (!text->empty()) text->insert(0, prefix_);
  }

 private:
  std::string prefix_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(std::string literal, std::unique_ptr<Regex> regex, std::string content)
      : literal_(std::move(literal)), regex_(std::move(regex)), content_(std::move(content)) {}
  void Normalize(std::string* text) const override {
    std::string out;
    size_t last = 0;
    auto emit = [&](size_t b, size_t e) {
      out.append(*text, last, b - last);
      out.append(content_);
      last = e;
    };
    if (regex_ != nullptr) {
      regex_->ForEachMatch(*text, emit);
    } else if (!literal_.empty()) {
      for (size_t p = text->find(literal_); p != std::string::npos;
           p = text->find(literal_, p + literal_.size())) {
        emit(p, p + literal_.size());
      }
    }
    if (last == 0) return;
    out.append(*text, last, std::string::npos);
    *text = std::move(out);
  }

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
  std::string content_;
};

// HF lowercases char by char with Rust's char::to_lowercase: the simple mappings plus the one
// unconditional multi-char mapping, U+0130 -> "i\u0307" (no Final_Sigma rule, which only
// str::to_lowercase applies). utf8proc has the simple mappings.
class LowercaseNormalizer : public Normalizer {
 public:
  void Normalize(std::string* text) const override {
    std::string out;
    out.reserve(text->size());
    for (size_t i = 0; i < text->size();) {
      char32_t cp;
      i += DecodeUtf8(*text, i, &cp);
      if (cp == 0x130) {
        out.append("i\xCC\x87");
      } else {
        AppendUtf8(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))), &out);
      }
    }
    *text = std::move(out);
  }
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void Normalize(std::string* text) const override {
    size_t b = 0, e = text->size();
    char32_t cp;
    while (left_ && b < e) {
      const int n = DecodeUtf8(*text, b, &cp);
      if (!IsUnicodeWhitespace(cp)) break;
      b += n;
    }
    while (right_ && e > b) {
      size_t s = e - 1;
      while (s > b && (static_cast<uint8_t>((*text)[s]) & 0xC0) == 0x80) --s;
      DecodeUtf8(*text, s, &cp);
      if (!IsUnicodeWhitespace(cp)) break;
      e = s;
    }
    *text = text->substr(b, e - b);
  }

 private:
  bool left_, right_;
};

StatusOr<std::unique_ptr<Normalizer>> ParseNormalizerOrThrow(const nlohmann::json& j) {
  if (j.is_null()) return std::unique_ptr<Normalizer>();
  const std::string type = j.at("type").get<std::string>();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Normalizer>> parts;
    for (const auto& sub : j.at("normalizers")) {
      CPM_ASSIGN_OR_RETURN(auto p, ParseNormalizerOrThrow(sub));
      if (p != nullptr) parts.push_back(std::move(p));
    }
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(parts)));
  }
  if (type == "Prepend") {
    return std::unique_ptr<Normalizer>(new PrependNormalizer(j.at("prepend").get<std::string>()));
  }
  if (type == "Replace") {
    const auto& pat = j.at("pattern");
    std::unique_ptr<Regex> re;
    std::string literal;
    if (pat.contains("Regex")) {
      CPM_ASSIGN_OR_RETURN(re, Regex::Compile(pat.at("Regex").get<std::string>()));
    } else {
      literal = pat.at("String").get<std::string>();
    }
    return std::unique_ptr<Normalizer>(
        new ReplaceNormalizer(literal, std::move(re), j.at("content").get<std::string>()));
  }
  if (type == "NFC") return std::unique_ptr<Normalizer>(new UnicodeNormalizer(UTF8PROC_COMPOSE));
  if (type == "NFD") {
    return std::unique_ptr<Normalizer>(new UnicodeNormalizer(UTF8PROC_DECOMPOSE));
  }
  if (type == "NFKC") {
    return std::unique_ptr<Normalizer>(new UnicodeNormalizer(UTF8PROC_COMPOSE | UTF8PROC_COMPAT));
  }
  if (type == "NFKD") {
    return std::unique_ptr<Normalizer>(
        new UnicodeNormalizer(UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT));
  }
  if (type == "Lowercase") return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  if (type == "Strip") {
    return std::unique_ptr<Normalizer>(
        new StripNormalizer(j.value("strip_left", true), j.value("strip_right", true)));
  }
  if (type == "Precompiled" && j.value("precompiled_charsmap", nlohmann::json()).is_null()) {
    return std::unique_ptr<Normalizer>();
  }
  return Unimplemented("normalizer type '" + type + "'");
}

}  // namespace

StatusOr<std::unique_ptr<Normalizer>> ParseNormalizer(const nlohmann::json& j) {
  try {
    return ParseNormalizerOrThrow(j);
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("normalizer: ") + e.what());
  }
}

}  // namespace cpm
