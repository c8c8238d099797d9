// The metric code on hand-made distributions with known answers (KL, overlaps, relative
// error, greedy prefix accuracy), the dump format's round trip and strictness, and the
// figure parsers of the validate gates.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "eval/eval_report.h"
#include "eval/greedy_metrics.h"
#include "eval/logit_metrics.h"
#include "eval/prompt_set.h"
#include "eval/reference_dump.h"
#include "eval/server_figures.h"

namespace cpm {
namespace {

// log-probs of a distribution given by (unnormalised) weights.
std::vector<float> LogProbs(const std::vector<double>& w) {
  const double sum = std::accumulate(w.begin(), w.end(), 0.0);
  std::vector<float> lp;
  for (double x : w) lp.push_back(static_cast<float>(std::log(x / sum)));
  return lp;
}

// The top-k of a row as a reference dump holds it (double log-probs, best first).
std::vector<std::pair<int32_t, double>> Top(const std::vector<float>& lp, size_t k) {
  std::vector<int32_t> idx(lp.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return lp[a] > lp[b]; });
  std::vector<std::pair<int32_t, double>> top;
  for (size_t i = 0; i < k && i < idx.size(); ++i) top.emplace_back(idx[i], lp[idx[i]]);
  return top;
}

double FullKl(const std::vector<float>& p, const std::vector<float>& q) {
  double kl = 0;
  for (size_t i = 0; i < p.size(); ++i) kl += std::exp(double(p[i])) * (double(p[i]) - double(q[i]));
  return kl;
}

std::vector<double> Ramp(int n) {
  std::vector<double> w;
  for (int i = 0; i < n; ++i) w.push_back(1.0 + (n - i) * 0.37 + (i % 3) * 0.05);
  return w;
}

TEST(LogitMetrics, IdenticalRowsAgreeCompletely) {
  const auto lp = LogProbs(Ramp(40));
  const RowMetrics m = ComputeRowMetrics(Top(lp, 20), lp);
  EXPECT_TRUE(m.top1);
  EXPECT_EQ(m.top5_overlap, 1.0);
  EXPECT_EQ(m.top20_overlap, 1.0);
  ASSERT_EQ(m.rel.size(), 20u);
  for (double r : m.rel) EXPECT_LT(r, 1e-6);
  EXPECT_LT(m.kl, 1e-9);
}

TEST(LogitMetrics, TwoPointKlIsExact) {
  // p = (0.75, 0.25), q = (0.5, 0.5): KL = 0.75 ln 1.5 + 0.25 ln 0.5.
  const auto p = LogProbs({3, 1}), q = LogProbs({1, 1});
  const RowMetrics m = ComputeRowMetrics(Top(p, 2), q);
  EXPECT_NEAR(m.kl, 0.75 * std::log(1.5) + 0.25 * std::log(0.5), 1e-6);
  EXPECT_TRUE(m.top1);  // argmax of q is id 0 (tie to the lower id)
  // rel over both ids: |0.5-0.75|/0.75 and |0.5-0.25|/0.25.
  ASSERT_EQ(m.rel.size(), 2u);
  EXPECT_NEAR(m.rel[0], 1.0 / 3.0, 1e-6);
  EXPECT_NEAR(m.rel[1], 1.0, 1e-6);
}

TEST(LogitMetrics, FullTopKGivesFullVocabularyKl) {
  std::vector<double> wp = Ramp(30), wq = Ramp(30);
  for (size_t i = 0; i < wq.size(); ++i) wq[i] *= 1.0 + 0.2 * std::sin(double(i));
  const auto p = LogProbs(wp), q = LogProbs(wq);
  const RowMetrics m = ComputeRowMetrics(Top(p, 30), q);
  EXPECT_NEAR(m.kl, FullKl(p, q), 1e-6);
  EXPECT_GT(m.kl, 1e-3);
}

// Float32 log-softmax rows sum to 1 only within rounding; whole rows are renormalised in double,
// so the same distribution written a few ulps off (here both rows shifted, by −3e-6 and +4e-6,
// as much as 7e-6 of probability mass) reads as a KL of rounding size, not of the shift.
TEST(LogitMetrics, WholeRowsAreRenormalisedBeforeTheKl) {
  const auto p = LogProbs(Ramp(3000));
  std::vector<float> ref = p, eng = p;
  for (float& x : ref) x += 4e-6f;
  for (float& x : eng) x -= 3e-6f;
  const RowMetrics m = ComputeRowMetrics(Top(ref, ref.size()), eng);
  EXPECT_LT(m.kl, 1e-10);
  for (double r : m.rel) EXPECT_LT(r, 2e-6);
}

TEST(LogitMetrics, TruncatedKlIsTheBucketedKlAndALowerBound) {
  std::vector<double> wp = Ramp(50), wq = Ramp(50);
  for (size_t i = 0; i < wq.size(); ++i) wq[i] *= 1.0 + 0.3 * std::cos(0.7 * double(i));
  const auto p = LogProbs(wp), q = LogProbs(wq);
  const auto top = Top(p, 20);
  const RowMetrics m = ComputeRowMetrics(top, q);
  double kl = 0, ps = 0, qs = 0;
  for (const auto& [id, lp] : top) {
    kl += std::exp(lp) * (lp - q[id]);
    ps += std::exp(lp);
    qs += std::exp(double(q[id]));
  }
  kl += (1 - ps) * std::log((1 - ps) / (1 - qs));
  EXPECT_NEAR(m.kl, kl, 1e-6);
  EXPECT_LE(m.kl, FullKl(p, q) + 1e-9);
  EXPECT_GT(m.kl, 0.0);
}

TEST(LogitMetrics, OverlapCountsSharedIds) {
  // Reference order 0..24; the engine promotes ids 30, 31 (from outside the reference top-20)
  // to the front and demotes 0 and 1 to the bottom.
  std::vector<double> wr(40), we(40);
  for (int i = 0; i < 40; ++i) wr[i] = we[i] = 100.0 - i;
  we[30] = 500, we[31] = 400, we[0] = 0.5, we[1] = 0.4;
  const auto r = LogProbs(wr), e = LogProbs(we);
  const RowMetrics m = ComputeRowMetrics(Top(r, 20), e);
  EXPECT_FALSE(m.top1);
  EXPECT_EQ(m.ref_top1, 0);
  EXPECT_EQ(m.eng_top1, 30);
  EXPECT_DOUBLE_EQ(m.top5_overlap, 3.0 / 5.0);     // engine top-5: 30 31 2 3 4
  EXPECT_DOUBLE_EQ(m.top20_overlap, 18.0 / 20.0);  // 30, 31 in; 0, 1 out
}

TEST(LogitMetrics, EngineTiesGoToTheLowerId) {
  const auto r = LogProbs({1, 2, 2, 1});  // reference top-1 is id 1 (lower of the tie)
  const RowMetrics m = ComputeRowMetrics(Top(r, 4), r);
  EXPECT_EQ(m.eng_top1, 1);
  EXPECT_TRUE(m.top1);
}

TEST(LogitMetrics, SummaryAveragesAndBoundsFail) {
  RowMetrics a, b;
  a.top1 = true, a.top5_overlap = 1, a.top20_overlap = 1, a.rel = {0.0, 0.02}, a.kl = 1e-4;
  b.top1 = false, b.top5_overlap = 0.6, b.top20_overlap = 0.9, b.rel = {0.1, 0.0}, b.kl = 3e-4;
  const std::vector<RowMetrics> rows = {a, b};
  const LogitsSummary s = SummarizeRows(rows);
  EXPECT_EQ(s.rows, 2);
  EXPECT_DOUBLE_EQ(s.top1, 0.5);
  EXPECT_DOUBLE_EQ(s.top5_overlap, 0.8);
  EXPECT_DOUBLE_EQ(s.top20_overlap, 0.95);
  EXPECT_DOUBLE_EQ(s.max_rel_err, 0.1);
  EXPECT_DOUBLE_EQ(s.mean_rel_err, 0.03);  // over all four (prompt, id) pairs
  EXPECT_DOUBLE_EQ(s.kl_mean, 2e-4);
  EXPECT_DOUBLE_EQ(s.kl_max, 3e-4);
  LogitsBounds none;
  EXPECT_TRUE(CheckLogitsBounds(s, none).empty());
  LogitsBounds b1;
  b1.min_top1 = 1.0, b1.max_rel_err = 0.01, b1.max_kl = 1e-3;
  EXPECT_EQ(CheckLogitsBounds(s, b1).size(), 2u);  // top-1 and rel, KL holds
  LogitsBounds loose;
  loose.min_top1 = 0.5, loose.max_rel_err = 0.2;
  EXPECT_TRUE(CheckLogitsBounds(s, loose).empty());
  LogitsBounds top5;  // the seed's Top-5 row: 0.8 here
  top5.min_top5_overlap = 0.9;
  ASSERT_EQ(CheckLogitsBounds(s, top5).size(), 1u);
  EXPECT_EQ(CheckLogitsBounds(s, top5)[0], "top-5 overlap 0.8000 < 0.9");
  top5.min_top5_overlap = 0.8;
  EXPECT_TRUE(CheckLogitsBounds(s, top5).empty());
}

// Raw logits whose log-softmax and log-sum-exp each side reports; the figures must be those of
// the porting guide's step 3 computed on the raw rows directly, over the reference's top-K ids.
TEST(LogitMetrics, LogitDiffIsTheRawLogitsDifferenceOverTheReferenceTopK) {
  std::vector<double> ref_logits, eng_logits;
  for (int i = 0; i < 30; ++i) {
    ref_logits.push_back(10.0 - 0.4 * i + 0.03 * (i % 4));
    eng_logits.push_back(ref_logits.back() + 0.01 * ((i % 3) - 1) + 0.5);  // + a shift of 0.5
  }
  const auto split = [](const std::vector<double>& x, double* lse) {
    const double mx = *std::max_element(x.begin(), x.end());
    double sum = 0;
    for (double v : x) sum += std::exp(v - mx);
    *lse = mx + std::log(sum);
    std::vector<float> lp;
    for (double v : x) lp.push_back(static_cast<float>(v - *lse));
    return lp;
  };
  double ref_lse = 0, eng_lse = 0;
  const std::vector<float> ref_lp = split(ref_logits, &ref_lse), eng_lp = split(eng_logits, &eng_lse);
  const auto ref_top = Top(ref_lp, 25);
  const RowMetrics m = ComputeRowMetrics(ref_top, eng_lp, ref_lse, eng_lse);
  ASSERT_TRUE(m.logit_diff.has_value());
  double max_abs = 0, sum_abs = 0, sum_ref = 0;
  for (const auto& [id, lp] : ref_top) {
    const double d = std::abs(eng_logits[id] - ref_logits[id]);
    max_abs = std::max(max_abs, d), sum_abs += d, sum_ref += std::abs(ref_logits[id]);
  }
  EXPECT_EQ(m.logit_diff->ids, 25);
  EXPECT_NEAR(m.logit_diff->max_abs, 0.51, 1e-5);  // the shift is a logit difference too
  EXPECT_NEAR(m.logit_diff->max_abs, max_abs, 1e-5);
  EXPECT_NEAR(m.logit_diff->sum_abs, sum_abs, 1e-4);
  EXPECT_NEAR(m.logit_diff->sum_abs_ref, sum_ref, 1e-4);
  // ...which log-probs cannot see: their difference is only the ±0.01 wiggle (and rounding).
  EXPECT_LT(m.max_abs_logprob, 0.03);

  RowMetrics other = m;
  other.logit_diff->max_abs = 0.2, other.logit_diff->sum_abs = 1.0, other.logit_diff->ids = 5;
  other.logit_diff->sum_abs_ref = 10.0;
  LogitsSummary s = SummarizeRows(std::vector<RowMetrics>{m, other});
  ASSERT_TRUE(s.max_abs_logit_diff && s.mean_abs_logit_diff && s.logit_rel_err);
  EXPECT_NEAR(*s.max_abs_logit_diff, max_abs, 1e-5);
  EXPECT_NEAR(*s.mean_abs_logit_diff, (sum_abs + 1.0) / 30, 1e-5);  // over all (prompt, id) pairs
  EXPECT_NEAR(*s.logit_rel_err, (sum_abs + 1.0) / (sum_ref + 10.0), 1e-6);
  LogitsBounds b;
  b.max_logit_diff = 0.6;
  EXPECT_TRUE(CheckLogitsBounds(s, b).empty());
  b.max_logit_diff = 0.5;
  ASSERT_EQ(CheckLogitsBounds(s, b).size(), 1u);
  EXPECT_EQ(CheckLogitsBounds(s, b)[0].rfind("max logit diff 0.51 > 0.5", 0), 0u) << CheckLogitsBounds(s, b)[0];

  // One row without a log-sum-exp (a reference without `logsumexp`): no figures, and a bound on
  // them fails rather than passing unchecked.
  const RowMetrics bare = ComputeRowMetrics(ref_top, eng_lp, std::nullopt, eng_lse);
  EXPECT_FALSE(bare.logit_diff.has_value());
  s = SummarizeRows(std::vector<RowMetrics>{m, bare});
  EXPECT_FALSE(s.max_abs_logit_diff || s.mean_abs_logit_diff || s.logit_rel_err);
  ASSERT_EQ(CheckLogitsBounds(s, b).size(), 1u);
  EXPECT_NE(CheckLogitsBounds(s, b)[0].find("the reference has no logsumexp"), std::string::npos);
}

TEST(GreedyMetrics, SeedRowDivergingAtTwentyOfThirtyTwo) {
  std::vector<int32_t> ref(32), eng(32);
  std::iota(ref.begin(), ref.end(), 100);
  eng = ref;
  eng[20] = 7;
  eng[25] = 8;  // a later agreement elsewhere does not count back
  const GreedyComparison c = CompareGreedy(ref, eng);
  EXPECT_FALSE(c.exact);
  ASSERT_TRUE(c.first_divergence.has_value());
  EXPECT_EQ(*c.first_divergence, 20);
  EXPECT_DOUBLE_EQ(c.token_accuracy, 0.625);
  const GreedyComparison same = CompareGreedy(ref, ref);
  EXPECT_TRUE(same.exact);
  EXPECT_FALSE(same.first_divergence.has_value());
  EXPECT_DOUBLE_EQ(same.token_accuracy, 1.0);
  // The seed's summary: two exact rows and the 62.5% row -> 66.7% exact, 87.5% accuracy.
  const std::vector<GreedyComparison> rows = {same, c, same};
  const GreedySummary s = SummarizeGreedy(rows);
  EXPECT_EQ(s.exact, 2);
  EXPECT_NEAR(s.exact_rate, 2.0 / 3.0, 1e-12);
  EXPECT_NEAR(s.mean_token_accuracy, 0.875, 1e-12);
  GreedyBounds b;
  b.min_exact_rate = 1.0;
  EXPECT_EQ(CheckGreedyBounds(s, b).size(), 1u);
}

TEST(GreedyMetrics, EarlyStopIsADivergence) {
  const std::vector<int32_t> ref = {5, 6, 7, 2}, eng = {5, 6};
  const GreedyComparison c = CompareGreedy(ref, eng);
  EXPECT_FALSE(c.exact);
  EXPECT_EQ(*c.first_divergence, 2);
  EXPECT_DOUBLE_EQ(c.token_accuracy, 0.5);
}

class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("eval_metrics_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
  std::filesystem::path dir_;
};

using ReferenceDumpTest = TempDir;

TEST_F(ReferenceDumpTest, RoundTripKeepsEveryField) {
  ReferenceRecord r;
  r.id = "p0";
  r.prompt = "你好 | world\n";
  r.prompt_ids = {1, 5, 9};
  r.chat = true;
  r.top_logprobs = {{7, -0.1234567890123}, {3, -2.5}, {4, -2.5}};
  r.logsumexp = 12.75;
  r.greedy_ids = std::vector<int32_t>{7, 2};
  r.greedy_text = "ok";
  r.meta = {{"producer", "test"}, {"dtype", "bfloat16"}};
  ReferenceRecord bare;
  bare.id = "p1";
  bare.prompt_ids = {1};
  bare.top_logprobs = {{0, 0.0}};
  const std::string path = (dir_ / "ref.jsonl").string();
  ASSERT_TRUE(WriteReferenceDump(path, {r, bare}).ok());
  auto back = ReadReferenceDump(path);
  ASSERT_TRUE(back.ok()) << back.status().message();
  ASSERT_EQ(back->size(), 2u);
  const ReferenceRecord& a = (*back)[0];
  EXPECT_EQ(a.id, "p0");
  EXPECT_EQ(*a.prompt, *r.prompt);
  EXPECT_EQ(a.prompt_ids, r.prompt_ids);
  EXPECT_TRUE(a.chat);
  EXPECT_EQ(a.top_logprobs, r.top_logprobs);  // doubles survive exactly
  EXPECT_EQ(*a.logsumexp, 12.75);
  EXPECT_EQ(*a.greedy_ids, *r.greedy_ids);
  EXPECT_EQ(*a.greedy_text, "ok");
  EXPECT_EQ(a.meta["producer"], "test");
  const ReferenceRecord& b = (*back)[1];
  EXPECT_FALSE(b.prompt || b.logsumexp || b.greedy_ids || b.greedy_text || b.chat);
}

TEST_F(ReferenceDumpTest, BadLinesNameTheLineAndField) {
  const std::string ok = R"({"id":"a","prompt_ids":[1],"top_logprobs":[[1,-0.5]]})";
  struct Case {
    std::string line;
    std::string expect;
  } cases[] = {
      {R"({"id":"b","prompt_ids":[],"top_logprobs":[[1,-0.5]]})", "prompt_ids"},
      {R"({"id":"b","prompt_ids":[1],"top_logprobs":[[1,-2],[2,-1]]})", "sorted"},
      {R"({"id":"b","prompt_ids":[1],"top_logprobs":[[1,0.5]]})", "log-probability"},
      {R"({"id":"b","prompt_ids":[-3],"top_logprobs":[[1,-0.5]]})", "prompt_ids"},
      {R"({"prompt_ids":[1],"top_logprobs":[[1,-0.5]]})", "id"},
      {R"({"id":"a","prompt_ids":[1],"top_logprobs":[[1,-0.5]]})", "repeats"},
      {"not json", "JSON"},
  };
  for (const Case& c : cases) {
    const std::string path = Write("bad.jsonl", ok + "\n\n" + c.line + "\n");
    auto r = ReadReferenceDump(path);
    ASSERT_FALSE(r.ok()) << c.line;
    EXPECT_NE(r.status().message().find(":3"), std::string::npos) << r.status().message();
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos) << r.status().message();
  }
  EXPECT_FALSE(ReadReferenceDump((dir_ / "missing.jsonl").string()).ok());
}

using PromptSetTest = TempDir;

TEST_F(PromptSetTest, TextAndJsonLines) {
  const std::string path = Write("p.txt",
                                 "你好\n\n{\"id\": \"x\", \"prompt_ids\": [1, 2]}\n"
                                 "{\"prompt\": \"a\\nb\", \"chat\": true}\r\n");
  auto specs = ReadPromptsFile(path);
  ASSERT_TRUE(specs.ok()) << specs.status().message();
  ASSERT_EQ(specs->size(), 3u);
  EXPECT_EQ((*specs)[0].id, "p0");
  EXPECT_EQ(*(*specs)[0].text, "你好");
  EXPECT_EQ((*specs)[1].id, "x");
  EXPECT_EQ(*(*specs)[1].ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(*(*specs)[2].text, "a\nb");
  EXPECT_TRUE(*(*specs)[2].chat);
  // Ids need no tokenizer; text does.
  auto prepared = PreparePrompts({(*specs)[1]}, nullptr, false);
  ASSERT_TRUE(prepared.ok());
  EXPECT_EQ((*prepared)[0].ids, (std::vector<int32_t>{1, 2}));
  EXPECT_FALSE(PreparePrompts(*specs, nullptr, false).ok());
  EXPECT_FALSE(ReadPromptsFile(Write("bad.txt", "{\"id\": 1}\n")).ok());
}

TEST(ServerFigures, StartupLogLines) {
  const std::string log =
      "I 11-30 12:00:00.000 Model loading took 0.9123 GiB and 1.250000 seconds\n"
      "I 11-30 12:00:00.100 Available KV cache memory: 3.98 GiB\n"
      "I 11-30 12:00:00.100 KV cache size: 1,234,567 tokens\n"
      "I 11-30 12:00:00.100 Maximum concurrency for 512 tokens per request: 2411.26x\n"
      "I 11-30 12:00:00.100 Using max model len 512\n"
      "I 11-30 12:00:00.200 Application startup complete.\n";
  const StartupFigures f = ParseStartupLog(log);
  EXPECT_DOUBLE_EQ(*f.model_gib, 0.9123);
  EXPECT_DOUBLE_EQ(*f.load_seconds, 1.25);
  EXPECT_DOUBLE_EQ(*f.kv_cache_gib, 3.98);
  EXPECT_EQ(*f.kv_cache_tokens, 1234567);
  EXPECT_DOUBLE_EQ(*f.max_concurrency, 2411.26);
  EXPECT_EQ(*f.max_model_len, 512);
  ASSERT_EQ(f.lines.size(), 5u);
  EXPECT_EQ(f.lines[1], "Available KV cache memory: 3.98 GiB");
  EXPECT_FALSE(ParseStartupLog("nothing here\n").kv_cache_gib.has_value());
}

TEST(ServerFigures, PrometheusSumsLabelSets) {
  const auto m = ParsePrometheus(
      "# HELP x y\nvllm:prompt_tokens_total{model_name=\"m\"} 12\n"
      "vllm:request_success_total{finished_reason=\"stop\",model_name=\"m\"} 2\n"
      "vllm:request_success_total{finished_reason=\"length\",model_name=\"m\"} 3\n"
      "plain 1.5e-3\ngarbage\n");
  EXPECT_EQ(m.at("vllm:prompt_tokens_total"), 12);
  EXPECT_EQ(m.at("vllm:request_success_total"), 5);
  EXPECT_DOUBLE_EQ(m.at("plain"), 1.5e-3);
  EXPECT_EQ(m.count("garbage"), 0u);
}

TEST(EvalReport, MarkdownHasTheSeedRowsAndEscapesCells) {
  LogitsEval e;
  LogitsPromptResult p;
  p.id = "p0";
  p.label = "a|b";
  const auto lp = LogProbs(Ramp(30));
  p.metrics = ComputeRowMetrics(Top(lp, 20), lp);
  e.prompts.push_back(p);
  e.summary = SummarizeRows(std::vector<RowMetrics>{p.metrics});
  ReportContext ctx{"ref.jsonl", "transformers 4.57.6 (bfloat16)", "cpmserve 0.1.0 (bfloat16, 2 threads)", {}, true};
  const std::string md = RenderLogits(e, ctx, ReportFormat::kMarkdown);
  for (const char* s : {"Top-1 token 一致性", "Top-20 重叠率", "最大相对误差", "KL 散度", "100.00% (1/1)",
                        "`a\\|b`", "PASS"}) {
    EXPECT_NE(md.find(s), std::string::npos) << s << "\n" << md;
  }
  const auto j = nlohmann::json::parse(RenderLogits(e, ctx, ReportFormat::kJson));
  EXPECT_EQ(j["summary"]["top1"], 1.0);
  EXPECT_EQ(j["bounds"]["pass"], true);
  EXPECT_TRUE(j["summary"]["max_abs_logit_diff"].is_null());  // no log-sum-exps given
  EXPECT_NE(md.find("| Logit diff, max / mean (reference's top-K ids) | — (the reference has no logsumexp) |"),
            std::string::npos) << md;
  ctx.failures = {"max relative error 0.5 > 0.01"};
  EXPECT_NE(RenderLogits(e, ctx, ReportFormat::kText).find("FAIL max relative error"), std::string::npos);
}

}  // namespace
}  // namespace cpm
