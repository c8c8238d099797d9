// tokenizer.json decoders (see decoder.h).
#include "tokenizer/decoder.h"

#include <nlohmann/json.hpp>

#include "tokenizer/unicode_util.h"

namespace cpm {
namespace {

const char kFffd[] = "\xEF\xBF\xBD";

void ReplaceAll(std::string* s, const std::string& from, const std::string& to) {
  if (from.empty()) return;
  for (size_t p = s->find(from); p != std::string::npos; p = s->find(from, p + to.size())) {
    s->replace(p, from.size(), to);
  }
}

// "<0xNN>" -> NN, or -1.
int ByteTokenValue(const std::string& t) {
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
  auto hex = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(std::string from, std::string to) : from_(std::move(from)), to_(std::move(to)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (auto& t : *tokens) ReplaceAll(&t, from_, to_);
  }
  void RawBytes(std::string* token) const override { ReplaceAll(token, from_, to_); }

 private:
  std::string from_, to_;
};

class ByteFallbackDecoder : public Decoder {
 public:
  // Consecutive byte tokens become their UTF-8 text, or one U+FFFD per byte when invalid.
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    size_t n_bytes = 0;
    auto flush = [&]() {
      if (n_bytes == 0) return;
      if (IsValidUtf8(bytes)) {
        out.push_back(bytes);
      } else {
        for (size_t i = 0; i < n_bytes; ++i) out.emplace_back(kFffd);
      }
      bytes.clear();
      n_bytes = 0;
    };
    for (auto& t : *tokens) {
      const int b = ByteTokenValue(t);
      if (b >= 0) {
        bytes.push_back(static_cast<char>(b));
        ++n_bytes;
        continue;
      }
      flush();
      out.push_back(std::move(t));
    }
    flush();
    *tokens = std::move(out);
  }
  void RawBytes(std::string* token) const override {
    const int b = ByteTokenValue(*token);
    if (b >= 0) *token = std::string(1, static_cast<char>(b));
  }
};

class FuseDecoder : public Decoder {
 public:
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::string all;
    for (const auto& t : *tokens) all.append(t);
    tokens->assign(1, std::move(all));
  }
  void RawBytes(std::string*) const override {}
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(std::string content, int start, int stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    const size_t w = content_.size();
    for (auto& t : *tokens) {
      size_t b = 0, e = t.size();
      for (int i = 0; i < start_ && e - b >= w && t.compare(b, w, content_) == 0; ++i) b += w;
      for (int i = 0; i < stop_ && e - b >= w && t.compare(e - w, w, content_) == 0; ++i) e -= w;
      t = t.substr(b, e - b);
    }
  }
  void RawBytes(std::string*) const override {}

 private:
  std::string content_;
  int start_, stop_;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool strip_first)
      : replacement_(std::move(replacement)), strip_first_(strip_first) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& t = (*tokens)[i];
      ReplaceAll(&t, replacement_, " ");
      if (i == 0 && strip_first_ && !t.empty() && t[0] == ' ') t.erase(0, 1);
    }
  }
  void RawBytes(std::string* token) const override { ReplaceAll(token, replacement_, " "); }

 private:
  std::string replacement_;
  bool strip_first_;
};

class ByteLevelDecoder : public Decoder {
 public:
  // All tokens map back to bytes (a token with a char outside the alphabet keeps its UTF-8),
  // then the whole byte string is repaired once, as HF does.
  void DecodeChain(std::vector<std::string>* tokens) const override {
    std::string bytes;
    for (auto& t : *tokens) {
      RawBytes(&t);
      bytes.append(t);
    }
    tokens->assign(1, Utf8Lossy(bytes));
  }
  void RawBytes(std::string* token) const override {
    std::string bytes;
    bytes.reserve(token->size());
    for (size_t i = 0; i < token->size();) {
      char32_t cp;
      i += DecodeUtf8(*token, i, &cp);
      const int b = alphabet_.Decode(cp);
      if (b < 0) return;  // not a byte-level token: its text is used as is
      bytes.push_back(static_cast<char>(b));
    }
    *token = std::move(bytes);
  }

 private:
  ByteLevelAlphabet alphabet_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts) : parts_(std::move(parts)) {}
  void DecodeChain(std::vector<std::string>* tokens) const override {
    for (const auto& p : parts_) p->DecodeChain(tokens);
  }
  void RawBytes(std::string* token) const override {
    for (const auto& p : parts_) p->RawBytes(token);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

StatusOr<std::unique_ptr<Decoder>> ParseOrThrow(const nlohmann::json& j) {
  if (j.is_null()) return std::unique_ptr<Decoder>();
  const std::string type = j.at("type").get<std::string>();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<Decoder>> parts;
    for (const auto& sub : j.at("decoders")) {
      CPM_ASSIGN_OR_RETURN(auto d, ParseOrThrow(sub));
      if (d != nullptr) parts.push_back(std::move(d));
    }
    return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(parts)));
  }
  if (type == "Replace") {
    const auto& pat = j.at("pattern");
    if (!pat.contains("String")) return Unimplemented("decoder Replace with a Regex pattern");
    return std::unique_ptr<Decoder>(
        new ReplaceDecoder(pat.at("String").get<std::string>(), j.at("content").get<std::string>()));
  }
  if (type == "ByteFallback") return std::unique_ptr<Decoder>(new ByteFallbackDecoder());
  if (type == "Fuse") return std::unique_ptr<Decoder>(new FuseDecoder());
  if (type == "Strip") {
    return std::unique_ptr<Decoder>(new StripDecoder(
        j.at("content").get<std::string>(), j.value("start", 0), j.value("stop", 0)));
  }
  if (type == "Metaspace") {
    const std::string scheme = j.value("prepend_scheme", std::string());
    const bool strip = scheme.empty() ? j.value("add_prefix_space", true) : scheme != "never";
    return std::unique_ptr<Decoder>(
        new MetaspaceDecoder(j.value("replacement", std::string("\xE2\x96\x81")), strip));
  }
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(new ByteLevelDecoder());
  return Unimplemented("decoder type '" + type + "'");
}

}  // namespace

StatusOr<std::unique_ptr<Decoder>> ParseDecoder(const nlohmann::json& j) {
  try {
    return ParseOrThrow(j);
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("decoder: ") + e.what());
  }
}

std::unique_ptr<Decoder> MakeSentencePieceDecoder(bool strip_leading_space) {
  std::vector<std::unique_ptr<Decoder>> parts;
  parts.emplace_back(new ReplaceDecoder("\xE2\x96\x81", " "));
  parts.emplace_back(new ByteFallbackDecoder());
  parts.emplace_back(new FuseDecoder());
  if (strip_leading_space) parts.emplace_back(new StripDecoder(" ", 1, 0));
  return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(parts)));
}

std::string RunDecoder(const Decoder* decoder, std::vector<std::string> tokens) {
  // HF joins with spaces when a tokenizer has no decoder.
  const char* sep = decoder == nullptr ? " " : "";
  if (decoder != nullptr) decoder->DecodeChain(&tokens);
  std::string out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0) out.append(sep);
    out.append(tokens[i]);
  }
  return out;
}

}  // namespace cpm
