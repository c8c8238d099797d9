// vLLM's validate_json_request: the routes that read a JSON body (chat and text completions,
// responses, tokenize, detokenize, invocations) take only Content-Type application/json, and
// answer anything else, a missing header included, with a 400 before the body is parsed.
#pragma once

#include <optional>
#include <string_view>

#include "server/api_error.h"

namespace cpm {

// True when the header's media type (before any ';' parameter, in any case) is
// application/json.
bool IsJsonMediaType(std::string_view content_type);

// The 400 for a request whose Content-Type is not JSON; nothing when it is.
std::optional<ApiError> JsonMediaTypeError(std::string_view content_type);

}  // namespace cpm
