// ScoreToken, the prompt_logprobs entry: its log-prob, its rank as vLLM counts it, its top k.
#include "engine/request_sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "structured/constraint.h"
#include "structured/json_matcher.h"
#include "structured/token_table.h"

namespace cpm {
namespace {

// vLLM's rank is the count of logits at or above the token's (its batched_count_greater_than is
// `x >= value`): 1 for the sole best, and tied tokens all get the worse rank of the tie.
TEST(RequestSamplerTest, ScoreTokenRanksAsVllm) {
  // 40 logits (past one SIMD step of 16, with a tail): 5.0 once, 3.0 three times, the rest lower.
  std::vector<float> row(40);
  for (int i = 0; i < 40; ++i) row[i] = -1.0f - 0.01f * static_cast<float>(i);
  row[7] = 5.0f;
  row[3] = row[20] = row[37] = 3.0f;
  std::vector<float> scratch;
  const TokenLogprobs best = ScoreToken(row.data(), 40, 7, 2, &scratch);
  EXPECT_EQ(best.rank, 1);
  for (int32_t tied : {3, 20, 37}) {
    const TokenLogprobs lp = ScoreToken(row.data(), 40, tied, 2, &scratch);
    EXPECT_EQ(lp.rank, 4) << "token " << tied;  // 5.0 and the three 3.0s
  }
  const TokenLogprobs low = ScoreToken(row.data(), 40, 39, 0, &scratch);
  EXPECT_EQ(low.rank, 40);
  EXPECT_TRUE(low.top.empty());
  // The log-prob is the raw logit minus logsumexp; the top k come best first.
  double z = 0;
  for (float v : row) z += std::exp(static_cast<double>(v));
  EXPECT_NEAR(best.logprob, 5.0 - std::log(z), 1e-5);
  ASSERT_EQ(best.top.size(), 2u);
  EXPECT_EQ(best.top[0].first, 7);
  EXPECT_EQ(best.top[1].first, 3);  // the lowest index of the tie
}

// A structured-output request's draft stops at the first token its grammar would not take (an
// end token only on a complete text), as vLLM's validate_tokens; the matcher is not advanced.
TEST(RequestSamplerTest, DraftsStopWhereTheGrammarDoes) {
  const char* pieces[] = {"{", "}", "\"a\"", ":", "1", "b", "x"};
  std::vector<std::string> bytes(std::begin(pieces), std::end(pieces));
  bytes.push_back("");  // 7: EOS
  std::vector<bool> excluded(bytes.size(), false);
  excluded[7] = true;
  auto schema = structured::Schema::FromJsonSchema(nlohmann::ordered_json::parse(
      R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})"));
  ASSERT_TRUE(schema.ok());
  RequestState r;
  r.req.eos_token_ids = {7};
  r.req.constraint = std::make_shared<structured::Constraint>(structured::Constraint{
      *schema, std::make_shared<const structured::TokenTable>(bytes, excluded), -1});
  const auto trimmed = [&](std::vector<int32_t> draft) {
    TrimDraftToConstraint(r, &draft);
    return draft;
  };
  EXPECT_EQ(trimmed({0, 2, 3, 4, 1, 7, 6}), (std::vector<int32_t>{0, 2, 3, 4, 1, 7}));
  EXPECT_EQ(trimmed({0, 2, 3, 5, 1}), (std::vector<int32_t>{0, 2, 3}));  // b is no integer
  EXPECT_EQ(trimmed({0, 7}), (std::vector<int32_t>{0}));  // EOS before the text is complete
  EXPECT_EQ(trimmed({6}), std::vector<int32_t>{});
  EXPECT_TRUE(r.matcher->Accepts("{"));  // still at the start
  r.req.constraint.reset();
  EXPECT_EQ(trimmed({6, 6}), (std::vector<int32_t>{6, 6}));  // no constraint: as proposed
}

}  // namespace
}  // namespace cpm
