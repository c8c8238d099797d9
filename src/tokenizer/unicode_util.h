// UTF-8 helpers shared by the tokenizer pipeline: decoding code points, lossy repair of byte
// strings (Rust's from_utf8_lossy rules, which HF decoders use), whitespace tests and the GPT-2
// byte <-> printable-char map of byte-level BPE. No dependency beyond the standard library.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace cpm {

// Decodes the code point at `s[pos]`. Returns its length in bytes (>= 1) and stores the code
// point in `*cp`; an invalid or truncated sequence yields length 1 and U+FFFD.
int DecodeUtf8(std::string_view s, size_t pos, char32_t* cp);

// Appends the UTF-8 encoding of `cp`.
void AppendUtf8(char32_t cp, std::string* out);

// True when `s` is well-formed UTF-8.
bool IsValidUtf8(std::string_view s);

// Replaces each maximal invalid subsequence with U+FFFD, exactly as Rust's
// `String::from_utf8_lossy` (the WHATWG "maximal subpart" practice).
std::string Utf8Lossy(std::string_view bytes);

// Rust's `char::is_whitespace` (Unicode White_Space), used by added-token lstrip/rstrip.
bool IsUnicodeWhitespace(char32_t cp);

// GPT-2 byte-level alphabet: every byte maps to one printable code point.
class ByteLevelAlphabet {
 public:
  ByteLevelAlphabet();
  // UTF-8 of the printable char for byte `b`.
  const std::string& Encode(uint8_t b) const { return byte_to_utf8_[b]; }
  // The byte for code point `cp`, or -1 when `cp` is not in the alphabet.
  int Decode(char32_t cp) const { return cp < char_to_byte_.size() ? char_to_byte_[cp] : -1; }

 private:
  std::array<std::string, 256> byte_to_utf8_;
  std::array<int16_t, 324> char_to_byte_;  // the alphabet's code points are all below 324
};

}  // namespace cpm
