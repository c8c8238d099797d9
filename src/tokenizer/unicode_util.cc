// UTF-8 helpers for the tokenizer (see unicode_util.h).
#include "tokenizer/unicode_util.h"

namespace cpm {
namespace {

// Length of the valid (possibly incomplete) sequence starting at `pos` and its expected length,
// following the Unicode table of well-formed byte sequences.
void ScanSequence(std::string_view s, size_t pos, int* valid_len, int* need_len) {
  const auto b0 = static_cast<uint8_t>(s[pos]);
  int need = 0;
  uint8_t lo = 0x80, hi = 0xBF;
  if (b0 < 0x80) {
    *valid_len = *need_len = 1;
    return;
  } else if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    *valid_len = 0;
    *need_len = 1;
    return;
  }
  int len = 1;
  while (len < need && pos + len < s.size()) {
    const auto b = static_cast<uint8_t>(s[pos + len]);
    const uint8_t l = len == 1 ? lo : 0x80, h = len == 1 ? hi : 0xBF;
    if (b < l || b > h) break;
    ++len;
  }
  *valid_len = len;
  *need_len = need;
}

}  // namespace

int DecodeUtf8(std::string_view s, size_t pos, char32_t* cp) {
  int valid = 0, need = 0;
  ScanSequence(s, pos, &valid, &need);
  if (valid != need) {
    *cp = 0xFFFD;
    return 1;
  }
  const auto* p = reinterpret_cast<const uint8_t*>(s.data() + pos);
  switch (need) {
    case 1: *cp = p[0]; break;
    case 2: *cp = (char32_t(p[0] & 0x1F) << 6) | (p[1] & 0x3F); break;
    case 3: *cp = (char32_t(p[0] & 0x0F) << 12) | (char32_t(p[1] & 0x3F) << 6) | (p[2] & 0x3F); break;
    default:
      *cp = (char32_t(p[0] & 0x07) << 18) | (char32_t(p[1] & 0x3F) << 12) |
            (char32_t(p[2] & 0x3F) << 6) | (p[3] & 0x3F);
  }
  return need;
}

void AppendUtf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool IsValidUtf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    if (static_cast<uint8_t>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    int valid = 0, need = 0;
    ScanSequence(s, i, &valid, &need);
    if (valid != need) return false;
    i += need;
  }
  return true;
}

std::string Utf8Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    int valid = 0, need = 0;
    ScanSequence(bytes, i, &valid, &need);
    if (valid == need) {
      out.append(bytes.substr(i, need));
      i += need;
    } else {
      out.append("\xEF\xBF\xBD");
      i += valid > 0 ? valid : 1;
    }
  }
  return out;
}

bool IsUnicodeWhitespace(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

ByteLevelAlphabet::ByteLevelAlphabet() {
  char_to_byte_.fill(-1);
  // Printable Latin-1 bytes map to themselves; the rest are shifted to 256.. in byte order.
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(next++);
    AppendUtf8(cp, &byte_to_utf8_[b]);
    char_to_byte_[cp] = static_cast<int16_t>(b);
  }
}

}  // namespace cpm
