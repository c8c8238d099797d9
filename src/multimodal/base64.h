// Standard base64 (RFC 4648 alphabet with '+' and '/', '=' padding) for data: URLs.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace cpm {

// Strict, as vLLM's b64decode(validate=True): only alphabet characters, length a multiple of
// 4, padding only at the end. Errors say what is wrong and where.
StatusOr<std::string> DecodeBase64(std::string_view text);

// As Python's b64decode without validate (what vLLM decodes videos with): characters outside
// the alphabet and '=' (the line breaks of a wrapped encoding) are skipped, the rest decoded
// as DecodeBase64 does.
StatusOr<std::string> DecodeBase64SkippingOthers(std::string_view text);

// `bytes` in base64 with '=' padding (data: URLs that cpmserve sends: validate's image smoke).
std::string EncodeBase64(std::string_view bytes);

}  // namespace cpm
