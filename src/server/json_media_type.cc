#include "server/json_media_type.h"

#include <cctype>

namespace cpm {

bool IsJsonMediaType(std::string_view content_type) {
  // As vLLM compares it: the part before the first ';', in any case, nothing trimmed (the
  // HTTP parser has already trimmed the header's value).
  const std::string_view media = content_type.substr(0, content_type.find(';'));
  constexpr std::string_view kJson = "application/json";
  if (media.size() != kJson.size()) return false;
  for (size_t i = 0; i < kJson.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(media[i])) != kJson[i]) return false;
  }
  return true;
}

std::optional<ApiError> JsonMediaTypeError(std::string_view content_type) {
  if (IsJsonMediaType(content_type)) return std::nullopt;
  // vLLM raises it as a RequestValidationError.
  ApiError e;
  e.type = kRequestValidationType;
  e.message = "Unsupported Media Type: Only 'application/json' is allowed";
  return e;
}

}  // namespace cpm
