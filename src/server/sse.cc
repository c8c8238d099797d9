// SSE framing of JSON payloads.
#include "server/sse.h"

#include "server/api_error.h"

namespace cpm {

std::string SseEvent(const nlohmann::ordered_json& payload) {
  return "data: " + DumpJson(payload) + "\n\n";
}

std::string SseDone() { return "data: [DONE]\n\n"; }

}  // namespace cpm
