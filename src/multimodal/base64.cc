#include "multimodal/base64.h"

#include <algorithm>
#include <array>

namespace cpm {
namespace {

constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// Value of each alphabet character, -1 for everything else.
constexpr std::array<int8_t, 256> MakeTable() {
  std::array<int8_t, 256> table{};
  for (auto& v : table) v = -1;
  for (size_t i = 0; i < kAlphabet.size(); ++i) {
    table[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int8_t>(i);
  }
  return table;
}
constexpr std::array<int8_t, 256> kValues = MakeTable();

}  // namespace

StatusOr<std::string> DecodeBase64(std::string_view text) {
  if (text.size() % 4 != 0) {
    return InvalidArgument("invalid base64: length " + std::to_string(text.size()) +
                           " is not a multiple of 4 (missing '=' padding?)");
  }
  size_t padding = 0;
  while (padding < 2 && padding < text.size() && text[text.size() - 1 - padding] == '=') ++padding;
  const size_t data_chars = text.size() - padding;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  uint32_t bits = 0;
  int nbits = 0;
  for (size_t i = 0; i < data_chars; ++i) {
    const int v = kValues[static_cast<uint8_t>(text[i])];
    if (v < 0) return InvalidArgument("invalid base64: unexpected character at offset " + std::to_string(i));
    bits = (bits << 6) | static_cast<uint32_t>(v);
    nbits += 6;
    if (nbits >= 8) {
      nbits -= 8;
      out.push_back(static_cast<char>((bits >> nbits) & 0xFF));
    }
  }
  return out;
}

StatusOr<std::string> DecodeBase64SkippingOthers(std::string_view text) {
  std::string kept;
  kept.reserve(text.size());
  for (char c : text) {
    if (kValues[static_cast<uint8_t>(c)] >= 0 || c == '=') kept.push_back(c);
  }
  return DecodeBase64(kept);
}

std::string EncodeBase64(std::string_view bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);  // bytes in this group of 3
    uint32_t v = 0;
    for (size_t k = 0; k < 3; ++k) v = v << 8 | (k < n ? static_cast<uint8_t>(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(v >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

}  // namespace cpm
