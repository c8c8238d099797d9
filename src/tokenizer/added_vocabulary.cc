// Added-token matching (see added_vocabulary.h).
#include "tokenizer/added_vocabulary.h"

#include <algorithm>
#include <cstring>

#include "tokenizer/unicode_util.h"

namespace cpm {
namespace {

bool IsWordChar(char32_t cp) {
  return cp == '_' || (cp < 0x80 ? std::isalnum(static_cast<int>(cp)) != 0 : !IsUnicodeWhitespace(cp));
}

// Code point that ends at `end` (exclusive) in `s`.
char32_t LastCodePoint(std::string_view s, size_t end) {
  size_t b = end - 1;
  while (b > 0 && (static_cast<uint8_t>(s[b]) & 0xC0) == 0x80) --b;
  char32_t cp;
  DecodeUtf8(s, b, &cp);
  return cp;
}

}  // namespace

bool AddedVocabulary::Add(const AddedToken& token) {
  if (token.content.empty() || by_content_.count(token.content) != 0) return false;
  const size_t index = tokens_.size();
  tokens_.push_back(token);
  by_content_.emplace(token.content, index);
  by_id_.emplace(token.id, index);
  has_normalized_ = has_normalized_ || token.normalized;
  max_id_ = std::max(max_id_, token.id);
  auto& bucket = by_first_byte_[static_cast<uint8_t>(token.content[0])];
  bucket.push_back(index);
  std::stable_sort(bucket.begin(), bucket.end(), [&](size_t a, size_t b) {
    return tokens_[a].content.size() > tokens_[b].content.size();
  });
  return true;
}

const AddedToken* AddedVocabulary::FindById(int32_t id) const {
  const auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocabulary::FindByContent(std::string_view content) const {
  const auto it = by_content_.find(std::string(content));
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

void AddedVocabulary::Split(std::string_view text, bool normalized,
                            std::vector<Segment>* out) const {
  size_t emitted = 0;  // end of the last segment pushed
  size_t pos = 0;
  while (pos < text.size()) {
    const auto& bucket = by_first_byte_[static_cast<uint8_t>(text[pos])];
    const AddedToken* hit = nullptr;
    for (size_t index : bucket) {
      const AddedToken& t = tokens_[index];
      if (t.normalized == normalized && t.content.size() <= text.size() - pos &&
          std::memcmp(text.data() + pos, t.content.data(), t.content.size()) == 0) {
        hit = &t;
        break;
      }
    }
    if (hit == nullptr) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + hit->content.size();
    if (hit->single_word) {
      const bool left_ok = start == 0 || !IsWordChar(LastCodePoint(text, start));
      char32_t next = 0;
      if (stop < text.size()) DecodeUtf8(text, stop, &next);
      const bool right_ok = stop == text.size() || !IsWordChar(next);
      if (!left_ok || !right_ok) {
        pos = stop;  // HF's matcher resumes after the rejected match
        continue;
      }
    }
    if (hit->lstrip) {
      while (start > emitted && IsUnicodeWhitespace(LastCodePoint(text, start))) {
        do --start;
        while (start > emitted && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80);
      }
    }
    if (hit->rstrip) {
      char32_t cp;
      while (stop < text.size()) {
        const int n = DecodeUtf8(text, stop, &cp);
        if (!IsUnicodeWhitespace(cp)) break;
        stop += n;
      }
    }
    if (start > emitted) out->push_back({text.substr(emitted, start - emitted), -1});
    out->push_back({text.substr(start, stop - start), hit->id});
    emitted = pos = stop;
  }
  if (emitted < text.size()) out->push_back({text.substr(emitted), -1});
}

}  // namespace cpm
