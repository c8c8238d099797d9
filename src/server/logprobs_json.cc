// OpenAI log-probability shapes for chat and completions.
#include "server/logprobs_json.h"

#include <cmath>
#include <string>

namespace cpm {

using Json = nlohmann::ordered_json;

namespace {

Json Bytes(const std::string& s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// Code points in `s` (Python's len), counting each invalid byte as one.
int64_t CodePoints(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

}  // namespace

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
    for (size_t k = 0; k < lp.top.size() && static_cast<int>(k) < top; ++k) {
      const std::string t = LogprobToken(tok, lp.top[k].first, as_token_ids);
      Json te;
      te["token"] = t;
      te["logprob"] = ClampLogprob(lp.top[k].second);
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
    Json m = Json::object();
    m[std::to_string(lp.token)] = entry(lp.token, lp.logprob, lp.rank);
    for (size_t k = 0; k < lp.top.size() && static_cast<int>(k) < top; ++k) {
      const std::string key = std::to_string(lp.top[k].first);
      if (!m.contains(key)) m[key] = entry(lp.top[k].first, lp.top[k].second, k + 1);
    }
    out.push_back(std::move(m));
  }
  return out;
}

void CompletionLogprobs::AppendUnscored(int32_t token) {
  const std::string text = LogprobToken(tok_, token, as_token_ids_);
  tokens_.push_back(text);
  token_logprobs_.push_back(nullptr);
  top_logprobs_.push_back(nullptr);
  text_offset_.push_back(offset_);
  offset_ += CodePoints(text);
}

void CompletionLogprobs::Append(const std::vector<TokenLogprobs>& lps) {
  for (const TokenLogprobs& lp : lps) {
    const std::string text = LogprobToken(tok_, lp.token, as_token_ids_);
    tokens_.push_back(text);
    token_logprobs_.push_back(ClampLogprob(lp.logprob));
    text_offset_.push_back(offset_);
    offset_ += CodePoints(text);
    // vLLM's top_logprobs dict: the top k, plus the sampled token when it is not among them.
    Json tops = Json::object();
    for (size_t k = 0; k < lp.top.size() && static_cast<int>(k) < top_; ++k) {
      tops[LogprobToken(tok_, lp.top[k].first, as_token_ids_)] = ClampLogprob(lp.top[k].second);
    }
    if (!tops.contains(text)) tops[text] = ClampLogprob(lp.logprob);
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
