// `cpmserve bench serve`'s pieces on synthetic input: the vLLM metric definitions on hand-made
// timings (every expected figure computed by hand in the comments), the SSE splitter on
// awkwardly cut streams, and the random dataset / arrival process.
#include "benchserve/serve_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "benchserve/random_requests.h"
#include "benchserve/report.h"
#include "benchserve/spec_decode_stats.h"
#include "benchserve/sse_reader.h"

namespace cpm::benchserve {
namespace {

RequestOutput Ok(double start, double ttft, std::vector<double> itl, int64_t out, int64_t in) {
  RequestOutput o;
  o.success = true;
  o.start_time = start;
  o.ttft = ttft;
  o.itl = std::move(itl);
  o.latency = ttft;
  for (double g : o.itl) o.latency += g;
  o.output_tokens = out;
  o.prompt_len = in;
  o.chunks = static_cast<int64_t>(o.itl.size()) + 1;
  return o;
}

// A: sent at 0.0, TTFT 0.1, gaps 0.02 0.03 0.05 → E2EL 0.2, 4 tokens, 10 in.
// B: sent at 0.5, TTFT 0.3, gap 0.1 → E2EL 0.4, 2 tokens, 20 in.
// C: sent at 1.0, TTFT 0.2, no gap → E2EL 0.2, 1 token (no TPOT), 5 in.
// D: failed. Duration 2 s.
std::vector<RequestOutput> Synthetic() {
  RequestOutput failed;
  failed.error = "HTTP 500";
  failed.prompt_len = 7;
  return {Ok(0.0, 0.1, {0.02, 0.03, 0.05}, 4, 10), Ok(0.5, 0.3, {0.1}, 2, 20),
          Ok(1.0, 0.2, {}, 1, 5), failed};
}

double Pct(const MetricStats& s, double p) {
  for (const auto& [q, v] : s.percentiles_ms) {
    if (q == p) return v;
  }
  ADD_FAILURE() << "no percentile " << p;
  return NAN;
}

TEST(BenchServeMetrics, CountsAndThroughputs) {
  const BenchmarkMetrics m = CalculateMetrics(Synthetic(), 2.0, {99});
  EXPECT_EQ(m.completed, 3);
  EXPECT_EQ(m.failed, 1);
  EXPECT_EQ(m.total_input, 35);  // 10 + 20 + 5; the failed request's input is not counted
  EXPECT_EQ(m.total_output, 7);  // 4 + 2 + 1
  EXPECT_EQ(m.output_lens, (std::vector<int64_t>{4, 2, 1, 0}));
  EXPECT_DOUBLE_EQ(m.request_throughput, 1.5);       // 3 / 2
  EXPECT_DOUBLE_EQ(m.output_throughput, 3.5);        // 7 / 2
  EXPECT_DOUBLE_EQ(m.total_token_throughput, 21.0);  // 42 / 2
  EXPECT_EQ(m.request_goodput, 0.0);                 // no SLO given
}

TEST(BenchServeMetrics, TtftTpotItlE2el) {
  const BenchmarkMetrics m = CalculateMetrics(Synthetic(), 2.0, {25, 50, 99});
  // TTFT {0.1, 0.3, 0.2}: mean 200, median 200, std √(0.02/3) s, p99 at rank 1.98 → 298.
  EXPECT_NEAR(m.ttft.mean_ms, 200.0, 1e-9);
  EXPECT_NEAR(m.ttft.median_ms, 200.0, 1e-9);
  EXPECT_NEAR(m.ttft.std_ms, 1000 * std::sqrt(0.02 / 3), 1e-9);
  EXPECT_NEAR(Pct(m.ttft, 99), 298.0, 1e-9);
  EXPECT_NEAR(Pct(m.ttft, 50), 200.0, 1e-9);
  // TPOT: A (0.2 − 0.1) / 3, B (0.4 − 0.3) / 1; C has one token and is left out.
  EXPECT_NEAR(m.tpot.mean_ms, (100.0 / 3 + 100.0) / 2, 1e-9);
  EXPECT_NEAR(m.tpot.median_ms, (100.0 / 3 + 100.0) / 2, 1e-9);
  EXPECT_NEAR(Pct(m.tpot, 25), 100.0 / 3 + (200.0 / 3) * 0.25, 1e-9);  // = 50
  EXPECT_NEAR(Pct(m.tpot, 99), 100.0 / 3 + (200.0 / 3) * 0.99, 1e-9);
  // ITL pooled {0.02, 0.03, 0.05, 0.1}: mean 50, median 40 (rank 1.5), p99 rank 2.97 → 98.5,
  // std √((9 + 4 + 0 + 25)e−4 / 4) s.
  EXPECT_NEAR(m.itl.mean_ms, 50.0, 1e-9);
  EXPECT_NEAR(m.itl.median_ms, 40.0, 1e-9);
  EXPECT_NEAR(Pct(m.itl, 99), 98.5, 1e-9);
  EXPECT_NEAR(m.itl.std_ms, 1000 * std::sqrt(38e-4 / 4), 1e-9);
  // E2EL {0.2, 0.4, 0.2}: mean 266.67, median 200, p99 rank 1.98 → 396.
  EXPECT_NEAR(m.e2el.mean_ms, 800.0 / 3, 1e-9);
  EXPECT_NEAR(m.e2el.median_ms, 200.0, 1e-9);
  EXPECT_NEAR(Pct(m.e2el, 99), 396.0, 1e-9);
}

TEST(BenchServeMetrics, GoodputCountsRequestsWithinEverySlo) {
  // ttft ≤ 250 ms and tpot ≤ 50 ms: A (100, 33.3) yes, B (300, 100) no, C (200, 0) yes → 2 / 2 s.
  const BenchmarkMetrics m =
      CalculateMetrics(Synthetic(), 2.0, {99}, {{"ttft", 250}, {"tpot", 50}});
  EXPECT_DOUBLE_EQ(m.request_goodput, 1.0);
  const BenchmarkMetrics e = CalculateMetrics(Synthetic(), 2.0, {99}, {{"e2el", 300}});
  EXPECT_DOUBLE_EQ(e.request_goodput, 1.0);  // A 200, C 200 within; B 400 not
}

TEST(BenchServeMetrics, PeakSecondAndPeakConcurrency) {
  // Chunks at 0.1 0.12 0.15 0.2 (A), 0.8 0.9 (B) in second 0 and 1.2 (C) in second 1.
  // A [0, 0.2), B [0.5, 0.9) and C [1.0, 1.2) never overlap: one in flight at a time, although
  // A and B share second 0.
  const BenchmarkMetrics m = CalculateMetrics(Synthetic(), 2.0, {99});
  EXPECT_DOUBLE_EQ(m.max_output_tokens_per_s, 6.0);
  EXPECT_EQ(m.max_concurrent_requests, 1);
  // [0, 0.3), [0.1, 0.2), [0.2, 0.5): two at once at most (the second ends as the third starts).
  const BenchmarkMetrics o =
      CalculateMetrics({Ok(0.0, 0.3, {}, 1, 1), Ok(0.1, 0.1, {}, 1, 1), Ok(0.2, 0.3, {}, 1, 1)},
                       1.0, {99});
  EXPECT_EQ(o.max_concurrent_requests, 2);
}

TEST(BenchServeMetrics, EmptyAndFallback) {
  RequestOutput failed;
  const BenchmarkMetrics none = CalculateMetrics({failed}, 1.0, {99});
  EXPECT_EQ(none.completed, 0);
  EXPECT_EQ(none.ttft.mean_ms, 0.0);
  EXPECT_EQ(none.itl.percentiles_ms.at(0).second, 0.0);
  // No usage from the server: the fallback counts (here: streamed chunks, 3).
  RequestOutput o = Ok(0, 0.1, {0.1, 0.1}, 0, 4);
  const BenchmarkMetrics m = CalculateMetrics({o}, 1.0, {99});
  EXPECT_EQ(m.total_output, 3);
  EXPECT_NEAR(m.tpot.mean_ms, 100.0, 1e-9);  // (0.3 − 0.1) / 2
  const BenchmarkMetrics f =
      CalculateMetrics({o}, 1.0, {99}, {}, [](size_t) { return int64_t{5}; });
  EXPECT_EQ(f.total_output, 5);
}

TEST(BenchServeMetrics, PercentileMatchesNumpyLinear) {
  // numpy.percentile([1, 2, 3, 4, 10], [0, 10, 37.5, 100]) = [1, 1.4, 2.5, 10]
  const std::vector<double> x = {4, 1, 10, 3, 2};
  EXPECT_DOUBLE_EQ(Percentile(x, 0), 1.0);
  EXPECT_NEAR(Percentile(x, 10), 1.4, 1e-12);
  EXPECT_NEAR(Percentile(x, 37.5), 2.5, 1e-12);
  EXPECT_DOUBLE_EQ(Percentile(x, 100), 10.0);
  EXPECT_DOUBLE_EQ(Percentile({7}, 99), 7.0);
}

TEST(BenchServeSse, SplitsEventsAcrossArbitraryCuts) {
  const std::string body =
      ": ping\n\ndata: {\"a\":1}\n\ndata: {\"b\":\r\ndata: 2}\r\n\r\nevent: x\ndata:[DONE]\n\n";
  for (size_t cut = 0; cut <= body.size(); ++cut) {
    SseReader r;
    std::vector<std::string> got = r.Feed(body.substr(0, cut));
    for (std::string& e : r.Feed(body.substr(cut))) got.push_back(e);
    ASSERT_EQ(got.size(), 3u) << cut;
    EXPECT_EQ(got[0], "{\"a\":1}");
    EXPECT_EQ(got[1], "{\"b\":\n2}");
    EXPECT_EQ(got[2], "[DONE]");
    EXPECT_TRUE(r.Finish().empty());
  }
}

TEST(BenchServeSse, FinishReturnsAnUnterminatedEvent) {
  SseReader r;
  EXPECT_EQ(r.Feed("data: {\"x\":1}\n\ndata: {\"y\":2}").size(), 1u);
  EXPECT_EQ(r.pending(), "data: {\"y\":2}");
  const std::vector<std::string> last = r.Finish();
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0], "{\"y\":2}");
}

TEST(BenchServeDataset, ExactLengthsAllowedIdsAndSeeds) {
  const std::vector<int32_t> allowed = {3, 5, 8, 13, 21};
  RandomDatasetOptions o{50, 17, 9, 0.0, 42};
  const std::vector<SampleRequest> a = SampleRandomRequests(o, allowed);
  ASSERT_EQ(a.size(), 50u);
  std::set<int32_t> seen;
  for (const SampleRequest& r : a) {
    EXPECT_EQ(r.prompt.size(), 17u);
    EXPECT_EQ(r.output_len, 9);
    seen.insert(r.prompt.begin(), r.prompt.end());
  }
  EXPECT_EQ(seen, std::set<int32_t>(allowed.begin(), allowed.end()));
  const std::vector<SampleRequest> again = SampleRandomRequests(o, allowed);
  EXPECT_EQ(again[7].prompt, a[7].prompt);
  o.seed = 43;
  EXPECT_NE(SampleRandomRequests(o, allowed)[7].prompt, a[7].prompt);
}

TEST(BenchServeDataset, RangeRatioBoundsLengths) {
  RandomDatasetOptions o{400, 100, 10, 0.5, 1};
  const std::vector<SampleRequest> a = SampleRandomRequests(o, {1, 2});
  int64_t lo = 1 << 30, hi = 0, out_lo = 1 << 30, out_hi = 0;
  for (const SampleRequest& r : a) {
    lo = std::min<int64_t>(lo, r.prompt.size());
    hi = std::max<int64_t>(hi, r.prompt.size());
    out_lo = std::min(out_lo, r.output_len);
    out_hi = std::max(out_hi, r.output_len);
  }
  EXPECT_GE(lo, 50);
  EXPECT_LE(hi, 150);
  EXPECT_LT(lo, 60);  // 400 draws reach near both ends
  EXPECT_GT(hi, 140);
  EXPECT_GE(out_lo, 5);
  EXPECT_LE(out_hi, 15);
  EXPECT_EQ(LengthRange(1, 0.9, 1), (std::pair<int64_t, int64_t>{1, 2}));  // never below 1
}

TEST(BenchServeArrivals, InfiniteRateAndPoissonSpan) {
  for (double t : ArrivalOffsets(5, INFINITY, 1.0, 0)) EXPECT_EQ(t, 0.0);
  const std::vector<double> t = ArrivalOffsets(200, 4.0, 1.0, 7);
  ASSERT_EQ(t.size(), 200u);
  EXPECT_NEAR(t.back(), 50.0, 1e-9);  // rescaled to num_prompts / rate
  for (size_t i = 1; i < t.size(); ++i) EXPECT_GE(t[i], t[i - 1]);
  EXPECT_GT(t.front(), 0.0);
  EXPECT_EQ(ArrivalOffsets(200, 4.0, 1.0, 7), t);  // seeded
  // Gamma with a large shape: nearly evenly spaced gaps of 1 / rate.
  const std::vector<double> even = ArrivalOffsets(100, 10.0, 1000.0, 3);
  for (size_t i = 1; i < even.size(); ++i) EXPECT_NEAR(even[i] - even[i - 1], 0.1, 0.02);
  // Infinite burstiness: exactly evenly spaced (a gamma of infinite shape was NaN: every
  // request went out at once).
  const std::vector<double> fixed = ArrivalOffsets(4, 2.0, INFINITY, 3);
  EXPECT_EQ(fixed, (std::vector<double>{0.5, 1.0, 1.5, 2.0}));
}

TEST(BenchServeReport, HeadingsFlagsAndNames) {
  // Python: "{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="=")
  EXPECT_EQ(Center(" Serving Benchmark Result ", '=', 50),
            "============ Serving Benchmark Result ============");
  EXPECT_EQ(Center("Time to First Token", '-', 50),
            "---------------Time to First Token----------------");
  EXPECT_EQ(ParsePercentiles("25,50,99.9"), (std::vector<double>{25, 50, 99.9}));
  EXPECT_FALSE(ParsePercentiles("99,"));
  EXPECT_FALSE(ParsePercentiles("101"));
  EXPECT_FALSE(ParsePercentiles("x"));
  EXPECT_EQ(ParseMetricNames("ttft,e2el"), (std::vector<std::string>{"ttft", "e2el"}));
  EXPECT_FALSE(ParseMetricNames("ttft,latency"));
  const auto slos = ParseGoodput({"ttft:500", "tpot:12.5"});
  ASSERT_TRUE(slos);
  EXPECT_EQ(*slos, (GoodputSlos{{"ttft", 500}, {"tpot", 12.5}}));
  EXPECT_FALSE(ParseGoodput({"itl:5"}));
  EXPECT_FALSE(ParseGoodput({"ttft=5"}));
  EXPECT_FALSE(ParseGoodput({"ttft:-1"}));
  EXPECT_EQ(PercentileWord(99), "99");
  EXPECT_EQ(PercentileWord(99.9), "99.9");
  EXPECT_EQ(RateText(INFINITY), "inf");
  EXPECT_EQ(RateText(2), "2.0");
  EXPECT_EQ(RateText(0.5), "0.5");
}

}  // namespace
}  // namespace cpm::benchserve

namespace cpm::benchserve {
namespace {

TEST(SpecDecodeStats, SumsCountersOverLabelsAndDiffersRuns) {
  const std::string before =
      "# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.\n"
      "# TYPE vllm:spec_decode_num_drafts counter\n"
      "vllm:spec_decode_num_drafts_total{engine=\"0\",model_name=\"m\"} 10.0\n"
      "vllm:spec_decode_num_drafts_total{engine=\"1\",model_name=\"m\"} 2\n"
      "vllm:spec_decode_num_draft_tokens_total{engine=\"0\"} 40\n"
      "vllm:spec_decode_num_draft_tokens_total_extra 999\n"
      "vllm:spec_decode_num_accepted_tokens_total 30\n"
      "vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\",position=\"0\"} 8\n"
      "vllm:spec_decode_num_accepted_tokens_per_pos_total{engine=\"0\",position=\"1\"} 4\n";
  const SpecDecodeCounters b = ReadSpecDecodeCounters(before);
  EXPECT_EQ(b.drafts, 12);
  EXPECT_EQ(b.draft_tokens, 40);
  EXPECT_EQ(b.accepted_tokens, 30);
  EXPECT_EQ(b.accepted_per_pos, (std::vector<double>{8, 4}));
  const SpecDecodeCounters a{22, 80, 50, {15, 9, 1}};
  const SpecDecodeSummary s = Summarize(b, a);
  EXPECT_EQ(s.drafts, 10);
  EXPECT_EQ(s.draft_tokens, 40);
  EXPECT_EQ(s.accepted_tokens, 20);
  EXPECT_DOUBLE_EQ(s.acceptance_rate, 50.0);
  EXPECT_DOUBLE_EQ(s.acceptance_length, 3.0);
  // Per position: the accepted count's increase over the drafts (a position new since).
  ASSERT_EQ(s.per_position_rates.size(), 3u);  // fractions, as vLLM's result file
  EXPECT_DOUBLE_EQ(s.per_position_rates[0], 0.7);
  EXPECT_DOUBLE_EQ(s.per_position_rates[1], 0.5);
  EXPECT_DOUBLE_EQ(s.per_position_rates[2], 0.1);
  // A server without the counters: nothing drafted.
  EXPECT_EQ(Summarize(ReadSpecDecodeCounters("vllm:num_requests_running 0\n"), {}).drafts, 0);
}

}  // namespace
}  // namespace cpm::benchserve
