// OpenAI log-probability shapes for chat and completions.
#include "server/logprobs_json.h"

#include <cmath>
#include <string>

#include "tokenizer/unicode_util.h"

namespace cpm {

using Json = nlohmann::ordered_json;

namespace {

Json Bytes(const std::string& s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// A position's alternatives as vLLM lists them: its logprobs dict holds the sampled token first,
// then the top k in order (one already there keeps its first place), and chat's top_logprobs are
// that dict's first k entries (a sampled token outside the top k takes the k-th's place);
// completions' are all of them (limit < 0).
std::vector<std::pair<int32_t, float>> SampledThenTop(const TokenLogprobs& lp, int top,
                                                      int limit) {
  std::vector<std::pair<int32_t, float>> out;
  out.emplace_back(lp.token, lp.logprob);
  for (size_t k = 0; k < lp.top.size() && static_cast<int>(k) < top; ++k) {
    if (lp.top[k].first != lp.token) out.push_back(lp.top[k]);
  }
  if (limit >= 0 && out.size() > static_cast<size_t>(limit)) out.resize(limit);
  return out;
}

}  // namespace

int64_t PythonLen(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

std::string CompletionTokenText(const Tokenizer& tok, int32_t id, bool as_token_ids) {
  return Utf8Lossy(LogprobToken(tok, id, as_token_ids));
}

double ClampLogprob(float lp) { return std::isfinite(lp) ? lp : -9999.0; }

std::string LogprobToken(const Tokenizer& tok, int32_t id, bool as_token_ids) {
  return as_token_ids ? "token_id:" + std::to_string(id) : tok.TokenBytes(id);
}

Json ChatLogprobEntries(const Tokenizer& tok, const std::vector<TokenLogprobs>& lps, int top,
                        bool as_token_ids) {
  Json out = Json::array();
  for (const TokenLogprobs& lp : lps) {
    const std::string text = LogprobToken(tok, lp.token, as_token_ids);
    Json e;
    e["token"] = text;
    e["logprob"] = ClampLogprob(lp.logprob);
    e["bytes"] = Bytes(text);
    Json tops = Json::array();
    for (const auto& [id, logprob] : SampledThenTop(lp, top, top)) {
      const std::string t = LogprobToken(tok, id, as_token_ids);
      Json te;
      te["token"] = t;
      te["logprob"] = ClampLogprob(logprob);
      te["bytes"] = Bytes(t);
      tops.push_back(std::move(te));
    }
    e["top_logprobs"] = std::move(tops);
    out.push_back(std::move(e));
  }
  return out;
}

Json PromptLogprobsJson(const Tokenizer& tok, const std::vector<TokenLogprobs>& lps, int top) {
  Json out = Json::array({nullptr});
  for (const TokenLogprobs& lp : lps) {
    auto entry = [&](int32_t id, float logprob, int64_t rank) {
      Json e;
      e["logprob"] = ClampLogprob(logprob);
      e["rank"] = rank;
      e["decoded_token"] = tok.TokenBytes(id);
      return e;
    };
    // vLLM's dict of the token, then the top k: a token among the top k keeps its first place
    // and takes the top-k entry's rank, better than its own (the worst of its tie) where tokens
    // tied with it are listed after it.
    Json m = Json::object();
    m[std::to_string(lp.token)] = entry(lp.token, lp.logprob, lp.rank);
    for (size_t k = 0; k < lp.top.size() && static_cast<int>(k) < top; ++k) {
      const std::string key = std::to_string(lp.top[k].first);
      m[key] = entry(lp.top[k].first, lp.top[k].second, static_cast<int64_t>(k) + 1);
    }
    out.push_back(std::move(m));
  }
  return out;
}

void CompletionLogprobs::AppendUnscored(int32_t token) {
  const std::string text = CompletionTokenText(tok_, token, as_token_ids_);
  tokens_.push_back(text);
  token_logprobs_.push_back(nullptr);
  top_logprobs_.push_back(nullptr);
  text_offset_.push_back(offset_);
  offset_ += PythonLen(text);
}

void CompletionLogprobs::Append(const std::vector<TokenLogprobs>& lps, int top, int limit) {
  for (const TokenLogprobs& lp : lps) {
    const std::string text = CompletionTokenText(tok_, lp.token, as_token_ids_);
    tokens_.push_back(text);
    token_logprobs_.push_back(ClampLogprob(lp.logprob));
    text_offset_.push_back(offset_);
    offset_ += PythonLen(text);
    // vLLM's top_logprobs dict: the sampled token, then the top k, the first `limit` entries.
    Json tops = Json::object();
    for (const auto& [id, logprob] : SampledThenTop(lp, top < 0 ? top_ : top, limit)) {
      const std::string t = CompletionTokenText(tok_, id, as_token_ids_);
      tops[t] = ClampLogprob(logprob);  // a text seen before keeps its place, as in a dict
    }
    top_logprobs_.push_back(std::move(tops));
  }
}

Json CompletionLogprobs::ToJson() const {
  Json j;
  j["text_offset"] = text_offset_;
  j["token_logprobs"] = token_logprobs_;
  j["tokens"] = tokens_;
  j["top_logprobs"] = top_logprobs_;
  return j;
}

Json CompletionLogprobs::TakeDelta() {
  Json j;
  auto slice = [&](const Json& a) {
    Json out = Json::array();
    for (size_t i = taken_; i < a.size(); ++i) out.push_back(a[i]);
    return out;
  };
  j["text_offset"] = slice(text_offset_);
  j["token_logprobs"] = slice(token_logprobs_);
  j["tokens"] = slice(tokens_);
  j["top_logprobs"] = slice(top_logprobs_);
  taken_ = tokens_.size();
  return j;
}

}  // namespace cpm
