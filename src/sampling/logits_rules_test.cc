#include "sampling/logits_rules.h"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

namespace cpm {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> Row(int n) {
  std::vector<float> row(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) row[static_cast<size_t>(i)] = 0.5f * static_cast<float>(i);
  return row;
}

TEST(LogitsRules, AllowedTokensKeepTheirLogitsAndBanTheRest) {
  LogitsRules rules;
  rules.allowed_token_ids = {3, 1, 3, 99};  // a duplicate and an id past the row are harmless
  std::vector<float> row = Row(6);
  ApplyLogitsRules(rules, {}, row.data(), 6);
  EXPECT_EQ(row, (std::vector<float>{-kInf, 0.5f, -kInf, 1.5f, -kInf, -kInf}));
}

TEST(LogitsRules, BadWordsBanTheirLastTokenAfterTheirPrefix) {
  LogitsRules rules;
  rules.bad_words = {{4}, {1, 2}, {0, 1, 5}};
  const std::vector<int32_t> ends_in_1 = {7, 0, 1};
  std::vector<float> row = Row(8);
  ApplyLogitsRules(rules, ends_in_1, row.data(), 8);
  // {4}: always; {1, 2}: the output ends in 1; {0, 1, 5}: it ends in 0, 1.
  EXPECT_EQ(row[4], -kInf);
  EXPECT_EQ(row[2], -kInf);
  EXPECT_EQ(row[5], -kInf);
  EXPECT_EQ(row[3], 1.5f);

  // A prefix that does not match, or is longer than the output, bans nothing.
  row = Row(8);
  const std::vector<int32_t> short_output = {1};
  rules.bad_words = {{0, 2}, {0, 1, 3}, {9, 9, 9, 6}};
  ApplyLogitsRules(rules, short_output, row.data(), 8);
  EXPECT_EQ(row, Row(8));
}

TEST(LogitsRules, BiasAddsToTheLogitAfterTheMasks) {
  LogitsRules rules;
  rules.allowed_token_ids = {0, 1, 2};
  rules.logit_bias = {{2, -100.0f}, {1, 3.0f}, {4, 100.0f}};  // 4 is not allowed: stays banned
  std::vector<float> row = Row(5);
  ApplyLogitsRules(rules, {}, row.data(), 5);
  EXPECT_EQ(row, (std::vector<float>{0.0f, 3.5f, -99.0f, -kInf, -kInf}));
}

TEST(LogitsRules, NoRulesChangeNothing) {
  const LogitsRules rules;
  EXPECT_TRUE(rules.empty());
  std::vector<float> row = Row(4);
  ApplyLogitsRules(rules, std::vector<int32_t>{1, 2}, row.data(), 4);
  EXPECT_EQ(row, Row(4));
}

}  // namespace
}  // namespace cpm
