// Server-sent events as OpenAI and vLLM frame them: every event is one `data: <json>` line and
// a blank line; the stream ends with the literal `data: [DONE]`.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace cpm {

// A stream's Content-Type, as vLLM's StreamingResponse sends it (Starlette adds the charset to
// text/ media types).
inline constexpr const char* kSseContentType = "text/event-stream; charset=utf-8";

// "data: {...}\n\n" (invalid UTF-8 replaced, never thrown on).
std::string SseEvent(const nlohmann::ordered_json& payload);
// "data: [DONE]\n\n".
std::string SseDone();

}  // namespace cpm
