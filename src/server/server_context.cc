// Request ids, model-name checks and reply helpers shared by every handler.
#include "server/server_context.h"

#include <fmt/format.h>

namespace cpm {

std::string ServerContext::NewRequestId(const char* prefix) const {
  // splitmix64 of a counter under a start-up salt: unique, unpredictable enough for ids, and
  // without a lock or a shared generator.
  uint64_t z = id_salt + 0x9e3779b97f4a7c15ULL * (next_request.fetch_add(1) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return fmt::format("{}-{:016x}{:016x}", prefix, z, z * 0x2545f4914f6cdd1dULL);
}

Status ServerContext::CheckModel(const std::optional<std::string>& model) const {
  if (!model) return OkStatus();
  for (const std::string& name : model_names) {
    if (*model == name) return OkStatus();
  }
  return NotFound("The model `" + *model + "` does not exist.");
}

HttpReply HttpReply::Json(const nlohmann::ordered_json& j, int status) {
  HttpReply r;
  r.status = status;
  r.body = DumpJson(j);
  return r;
}

HttpReply HttpReply::Error(const ApiError& e) {
  HttpReply r;
  r.status = e.status;
  r.body = ErrorBody(e);
  return r;
}

}  // namespace cpm
