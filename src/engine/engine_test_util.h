// Helpers shared by the engine tests: request builders, a blocking event collector, and the
// greedy oracle for FakeModel computed independently of the engine.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/fake_model.h"

namespace cpm {

struct Result {
  std::vector<int32_t> tokens;
  std::vector<TokenLogprobs> logprobs;
  std::vector<TokenLogprobs> prompt_logprobs;
  int64_t num_prompt_logprob_events = 0;  // events that carried prompt log-probs
  std::string finish_reason;
  Status error;
  std::optional<int32_t> stop_token;
  int64_t num_events = 0;
  TokenEvent last;
};

// Reads events until the finished one (fails the test after 20 s without one).
inline Result Collect(const std::shared_ptr<RequestStream>& stream) {
  Result r;
  for (;;) {
    TokenEvent e;
    if (!stream->Next(&e, std::chrono::milliseconds(20000))) {
      ADD_FAILURE() << "no event within 20 s";
      return r;
    }
    ++r.num_events;
    r.tokens.insert(r.tokens.end(), e.tokens.begin(), e.tokens.end());
    r.logprobs.insert(r.logprobs.end(), e.logprobs.begin(), e.logprobs.end());
    if (!e.prompt_logprobs.empty()) {
      r.prompt_logprobs = e.prompt_logprobs;
      ++r.num_prompt_logprob_events;
    }
    if (e.finished) {
      r.finish_reason = e.finish_reason;
      r.error = e.error;
      r.stop_token = e.stop_token;
      r.last = std::move(e);
      return r;
    }
  }
}

inline EngineRequest Req(const std::string& id, std::vector<int32_t> prompt, int64_t max_tokens) {
  EngineRequest r;
  r.request_id = id;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  return r;
}

inline std::vector<int32_t> Range(int32_t begin, int32_t end) {
  std::vector<int32_t> v;
  for (int32_t i = begin; i < end; ++i) v.push_back(i);
  return v;
}

inline EngineConfig SmallConfig() {
  EngineConfig c;
  c.block_size = 4;
  c.num_kv_blocks = 256;
  c.max_num_seqs = 16;
  c.max_num_batched_tokens = 64;
  c.max_model_len = 1024;
  return c;
}

// `pool`: the engine's compute threads (null: one of its own); it samples a step's rows on them.
inline std::unique_ptr<Engine> MakeFakeEngine(const EngineConfig& config_in, const FakeModelOptions& options,
                                              FakeModel** fake_out, ThreadPool* pool = nullptr) {
  EngineConfig config = config_in;
  if (config.num_kv_blocks == 0) config = SmallConfig();
  auto fake = std::make_unique<FakeModel>(options);
  if (fake_out) *fake_out = fake.get();
  auto engine = Engine::Create(std::move(fake), config, pool);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return std::move(engine).value();
}

// FakeModel's history hash, as its Forward folds it (restated here on purpose).
inline uint64_t FoldToken(uint64_t h, int32_t token) { return h * 1000003ull + static_cast<uint64_t>(token) + 1; }

inline std::vector<int32_t> OracleGreedy(const std::vector<int32_t>& prompt, int64_t n, int64_t vocab) {
  uint64_t h = 0;
  for (int32_t t : prompt) h = FoldToken(h, t);
  std::vector<int32_t> out;
  std::vector<float> row(vocab);
  int64_t pos = static_cast<int64_t>(prompt.size()) - 1;
  for (int64_t i = 0; i < n; ++i, ++pos) {
    FakeModel::Logits(h, pos, vocab, row.data());
    const int32_t tok = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
    out.push_back(tok);
    h = FoldToken(h, tok);
  }
  return out;
}

}  // namespace cpm
