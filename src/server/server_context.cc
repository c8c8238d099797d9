// Request ids, model-name checks, structured-output constraints and reply helpers shared by
// every handler.
#include "server/server_context.h"

#include <utility>

#include <fmt/format.h>

#include "base/log.h"
#include "server/reasoning_parser.h"

namespace cpm {

std::string ServerContext::NewRequestId(const char* prefix, char separator) const {
  // splitmix64 of a counter under a start-up salt: unique, unpredictable enough for ids, and
  // without a lock or a shared generator.
  uint64_t z = id_salt + 0x9e3779b97f4a7c15ULL * (next_request.fetch_add(1) + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return fmt::format("{}{}{:016x}{:016x}", prefix, separator, z, z * 0x2545f4914f6cdd1dULL);
}

std::string ServerContext::RequestId(const char* prefix, const std::string& x_request_id,
                                     const std::optional<std::string>& body_request_id) const {
  if (!x_request_id.empty()) return std::string(prefix) + "-" + x_request_id;
  // An empty one is Python-falsy in vLLM's `default or random_uuid()`: a fresh id.
  if (body_request_id && !body_request_id->empty()) {
    return std::string(prefix) + "-" + *body_request_id;
  }
  return NewRequestId(prefix);
}

Status ServerContext::CheckModel(const std::optional<std::string>& model) const {
  // Absent or "" (Python-falsy in vLLM's check): the served model.
  if (!model || model->empty()) return OkStatus();
  for (const std::string& name : model_names) {
    if (*model == name) return OkStatus();
  }
  return NotFound("The model `" + *model + "` does not exist.").WithParam("model");
}

std::shared_ptr<const structured::Constraint> ServerContext::MakeConstraint(
    std::shared_ptr<const structured::Schema> schema, bool opens_in_reasoning) const {
  std::call_once(structured_tokens_once, [&] {
    // Each token as the bytes it adds to the text; added tokens (special or not: <think>,
    // <|im_end|>, ...) are never text of a structured output (EOS is allowed at its end).
    std::vector<std::string> bytes(static_cast<size_t>(tokenizer->vocab_size()));
    std::vector<bool> excluded(bytes.size());
    for (int32_t id = 0; id < tokenizer->vocab_size(); ++id) {
      bytes[id] = tokenizer->TokenBytes(id);
      excluded[id] = tokenizer->IsAdded(id);
    }
    structured_tokens =
        std::make_shared<const structured::TokenTable>(std::move(bytes), excluded);
  });
  auto c = std::make_shared<structured::Constraint>();
  c->schema = std::move(schema);
  c->tokens = structured_tokens;
  if (opens_in_reasoning && !structured_in_reasoning) {
    if (auto end = tokenizer->TokenToId("</think>")) c->starts_after = *end;
  }
  return c;
}

Status ServerContext::ApplyServerSampling(const protocol::SamplingFields& fields,
                                          ResolvedSampling* s) const {
  if (s->n > max_n_sequences) {  // vLLM's _verify_num_sequences
    return InvalidArgument(fmt::format(
        "n must be at most {}, got {}. To increase this limit, set the VLLM_MAX_N_SEQUENCES "
        "environment variable.", max_n_sequences, s->n));
  }
  if (s->priority != 0 && !priority_scheduling) {  // vLLM's check under its default fcfs
    return InvalidArgument(
        fmt::format("Got priority {} but Priority scheduling is not enabled.", s->priority));
  }
  s->return_tokens_as_token_ids =
      fields.return_tokens_as_token_ids.value_or(return_tokens_as_token_ids);
  if (!s->thinking_token_budget) return OkStatus();
  // The texts: --reasoning-config's, else the markers of its parser or of the reasoning parser.
  const ReasoningConfig& rc = reasoning_config;
  const std::string& parser = rc.reasoning_parser.empty() || rc.reasoning_parser == "none"
                                  ? reasoning_parser
                                  : rc.reasoning_parser;
  ReasoningMarkers m;
  if (!parser.empty()) m = ReasoningParserMarkers(parser);
  if (!rc.start.empty()) m.start = rc.start;
  if (!rc.end.empty()) m.end = rc.end;
  if (m.start.empty() || m.end.empty()) {
    CPM_LOG_WARN("thinking_token_budget ignored: the server has no reasoning parser "
                 "(--reasoning-parser) or --reasoning-config to name the thinking markers");
    return OkStatus();
  }
  s->thinking_budget = std::make_shared<const ThinkingBudget>(
      ThinkingBudget{*s->thinking_token_budget, tokenizer->Encode(m.start, false),
                     tokenizer->Encode(m.end, false)});
  return OkStatus();
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
