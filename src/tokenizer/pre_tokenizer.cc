// tokenizer.json pre-tokenizers (see pre_tokenizer.h).
#include "tokenizer/pre_tokenizer.h"

#include <nlohmann/json.hpp>

#include "tokenizer/regex.h"
#include "tokenizer/unicode_util.h"

namespace cpm {
namespace {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Cuts `text` at the matches of `re` and appends the pieces per `behavior` (HF's
// SplitDelimiterBehavior); with `invert` the matches are the content and the gaps delimiters.
void SplitByRegex(const Regex& re, const std::string& text, SplitBehavior behavior, bool invert,
                  std::vector<std::string>* out) {
  struct Span {
    size_t b, e;
    bool delim;
  };
  std::vector<Span> spans;
  size_t last = 0;
  re.ForEachMatch(text, [&](size_t b, size_t e) {
    if (b > last) spans.push_back({last, b, invert});
    spans.push_back({b, e, !invert});
    last = e;
  });
  if (last < text.size()) spans.push_back({last, text.size(), invert});
  bool merge_next = false;
  for (size_t i = 0; i < spans.size(); ++i) {
    const Span& s = spans[i];
    std::string_view piece(text.data() + s.b, s.e - s.b);
    switch (behavior) {
      case SplitBehavior::kIsolated:
        out->emplace_back(piece);
        break;
      case SplitBehavior::kRemoved:
        if (!s.delim) out->emplace_back(piece);
        break;
      case SplitBehavior::kContiguous:
        if (s.delim && i > 0 && spans[i - 1].delim) {
          out->back().append(piece);
        } else {
          out->emplace_back(piece);
        }
        break;
      case SplitBehavior::kMergedWithPrevious:
        if (s.delim && i > 0 && !spans[i - 1].delim) {
          out->back().append(piece);
        } else {
          out->emplace_back(piece);
        }
        break;
      case SplitBehavior::kMergedWithNext:
        if (merge_next) {
          out->back().append(piece);
        } else {
          out->emplace_back(piece);
        }
        merge_next = s.delim;
        break;
    }
  }
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(std::unique_ptr<Regex> re, SplitBehavior behavior, bool invert)
      : re_(std::move(re)), behavior_(behavior), invert_(invert) {}
  void PreTokenize(std::vector<std::string>* pieces, bool) const override {
    std::vector<std::string> out;
    out.reserve(pieces->size() * 4);
    for (const auto& p : *pieces) SplitByRegex(*re_, p, behavior_, invert_, &out);
    *pieces = std::move(out);
  }

 private:
  std::unique_ptr<Regex> re_;
  SplitBehavior behavior_;
  bool invert_;
};

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, std::unique_ptr<Regex> gpt2_re)
      : add_prefix_space_(add_prefix_space), re_(std::move(gpt2_re)) {}
  void PreTokenize(std::vector<std::string>* pieces, bool) const override {
    if (add_prefix_space_) {
      for (auto& p : *pieces) {
        if (p.empty() || p[0] != ' ') p.insert(0, " ");
      }
    }
    if (re_ != nullptr) {
      std::vector<std::string> out;
      for (const auto& p : *pieces) SplitByRegex(*re_, p, SplitBehavior::kIsolated, false, &out);
      *pieces = std::move(out);
    }
    for (auto& p : *pieces) {
      std::string mapped;
      mapped.reserve(p.size() * 2);
      for (char c : p) mapped.append(alphabet_.Encode(static_cast<uint8_t>(c)));
      p = std::move(mapped);
    }
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> re_;
  ByteLevelAlphabet alphabet_;
};

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  enum class Prepend { kAlways, kFirst, kNever };
  MetaspacePreTokenizer(std::string replacement, Prepend prepend, bool split)
      : replacement_(std::move(replacement)), prepend_(prepend), split_(split) {}
  void PreTokenize(std::vector<std::string>* pieces, bool at_start) const override {
    std::vector<std::string> out;
    for (size_t i = 0; i < pieces->size(); ++i) {
      std::string s;
      for (char c : (*pieces)[i]) {
        if (c == ' ') {
          s.append(replacement_);
        } else {
          s.push_back(c);
        }
      }
      const bool prepend = prepend_ == Prepend::kAlways ||
                           (prepend_ == Prepend::kFirst && i == 0 && at_start);
      if (prepend && s.compare(0, replacement_.size(), replacement_) != 0) s.insert(0, replacement_);
      if (!split_) {
        out.push_back(std::move(s));
        continue;
      }
      // Split before each replacement char (MergedWithNext).
      size_t start = 0;
      for (size_t p = s.find(replacement_, 1); p != std::string::npos;
           p = s.find(replacement_, p + replacement_.size())) {
        if (p > start) out.push_back(s.substr(start, p - start));
        start = p;
      }
      if (start < s.size()) out.push_back(s.substr(start));
    }
    *pieces = std::move(out);
  }

 private:
  std::string replacement_;
  Prepend prepend_;
  bool split_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> parts)
      : parts_(std::move(parts)) {}
  void PreTokenize(std::vector<std::string>* pieces, bool at_start) const override {
    for (const auto& p : parts_) p->PreTokenize(pieces, at_start);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> parts_;
};

StatusOr<SplitBehavior> ParseBehavior(const std::string& s) {
  if (s == "Removed") return SplitBehavior::kRemoved;
  if (s == "Isolated") return SplitBehavior::kIsolated;
  if (s == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (s == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (s == "Contiguous") return SplitBehavior::kContiguous;
  return InvalidArgument("unknown split behavior '" + s + "'");
}

StatusOr<std::unique_ptr<PreTokenizer>> Build(const std::string& pattern, SplitBehavior behavior,
                                              bool invert) {
  CPM_ASSIGN_OR_RETURN(auto re, Regex::Compile(pattern));
  return std::unique_ptr<PreTokenizer>(new SplitPreTokenizer(std::move(re), behavior, invert));
}

StatusOr<std::unique_ptr<PreTokenizer>> ParseOrThrow(const nlohmann::json& j,
                                                     const std::optional<std::string>& override_re) {
  if (j.is_null()) return std::unique_ptr<PreTokenizer>();
  const std::string type = j.at("type").get<std::string>();
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PreTokenizer>> parts;
    for (const auto& sub : j.at("pretokenizers")) {
      CPM_ASSIGN_OR_RETURN(auto p, ParseOrThrow(sub, override_re));
      if (p != nullptr) parts.push_back(std::move(p));
    }
    return std::unique_ptr<PreTokenizer>(new SequencePreTokenizer(std::move(parts)));
  }
  if (type == "Split") {
    CPM_ASSIGN_OR_RETURN(auto behavior, ParseBehavior(j.at("behavior").get<std::string>()));
    const auto& pat = j.at("pattern");
    std::string pattern;
    if (pat.contains("Regex")) {
      pattern = override_re.has_value() ? *override_re : pat.at("Regex").get<std::string>();
    } else {
      pattern = "\\Q" + pat.at("String").get<std::string>() + "\\E";
    }
    return Build(pattern, behavior, j.value("invert", false));
  }
  if (type == "ByteLevel") {
    std::unique_ptr<Regex> re;
    if (j.value("use_regex", true)) {
      // GPT-2's pattern, which HF's ByteLevel uses when `use_regex` is set.
      CPM_ASSIGN_OR_RETURN(re, Regex::Compile("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| "
                                              "?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"));
    }
    return std::unique_ptr<PreTokenizer>(
        new ByteLevelPreTokenizer(j.value("add_prefix_space", true), std::move(re)));
  }
  if (type == "Metaspace") {
    auto prepend = MetaspacePreTokenizer::Prepend::kAlways;
    const std::string scheme = j.value("prepend_scheme", std::string());
    if (scheme == "first") prepend = MetaspacePreTokenizer::Prepend::kFirst;
    if (scheme == "never") prepend = MetaspacePreTokenizer::Prepend::kNever;
    if (scheme.empty() && !j.value("add_prefix_space", true)) {
      prepend = MetaspacePreTokenizer::Prepend::kNever;  // pre-0.15 serialization
    }
    return std::unique_ptr<PreTokenizer>(new MetaspacePreTokenizer(
        j.value("replacement", std::string("\xE2\x96\x81")), prepend, j.value("split", true)));
  }
  if (type == "Digits") {
    return Build(j.value("individual_digits", false) ? "\\p{N}" : "\\p{N}+",
                 SplitBehavior::kIsolated, false);
  }
  if (type == "WhitespaceSplit") return Build("\\s+", SplitBehavior::kRemoved, false);
  if (type == "Whitespace") return Build("\\w+|[^\\w\\s]+", SplitBehavior::kRemoved, true);
  return Unimplemented("pre_tokenizer type '" + type + "'");
}

}  // namespace

StatusOr<std::unique_ptr<PreTokenizer>> ParsePreTokenizer(
    const nlohmann::json& j, const std::optional<std::string>& split_regex_override) {
  try {
    return ParseOrThrow(j, split_regex_override);
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("pre_tokenizer: ") + e.what());
  }
}

}  // namespace cpm
