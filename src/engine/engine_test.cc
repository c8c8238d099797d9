// Engine tests over FakeModel: outputs are checked against an oracle computed independently
// from FakeModel::Logits, so a wrong block table, a bad prefix hit or a lost token shows up.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <thread>

#include "engine/fake_model.h"
#include "engine/engine_test_util.h"
#include "structured/constraint.h"

namespace cpm {
namespace {

// A reader of several streams sleeps on one signal: every event pushed after Listen raises it,
// from another thread too, and a wait for a count already passed returns at once.
TEST(RequestStreamTest, ListenersAreWokenByEveryLaterEvent) {
  auto signal = std::make_shared<StreamSignal>();
  RequestStream a, b;
  a.Push(TokenEvent());  // before Listen: queued for Next, no raise
  a.Listen(signal);
  b.Listen(signal);
  EXPECT_EQ(signal->count(), 0u);
  std::thread pusher([&] { b.Push(TokenEvent()); });
  signal->WaitPast(0, std::chrono::seconds(10));
  pusher.join();
  EXPECT_EQ(signal->count(), 1u);
  const auto start = std::chrono::steady_clock::now();
  signal->WaitPast(0, std::chrono::seconds(10));  // already past: no wait
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  TokenEvent ev;
  EXPECT_TRUE(a.Next(&ev, std::chrono::milliseconds(0)));
  EXPECT_TRUE(b.Next(&ev, std::chrono::milliseconds(0)));
}

TEST(EngineTest, SingleGreedyRequestMatchesOracle) {
  FakeModel* fake = nullptr;
  auto engine = MakeFakeEngine({}, {}, &fake);
  const std::vector<int32_t> prompt = {5, 6, 7, 8, 9};
  Result r = Collect(engine->Submit(Req("a", prompt, 12)));
  ASSERT_TRUE(r.error.ok()) << r.error.ToString();
  EXPECT_EQ(r.tokens, OracleGreedy(prompt, 12, 97));
  EXPECT_EQ(r.finish_reason, "length");
  EXPECT_EQ(r.num_events, 12);
  EXPECT_EQ(r.last.num_prompt_tokens, 5);
  const RequestTimes& t = r.last.times;
  EXPECT_LE(t.arrival, t.first_scheduled);
  EXPECT_LE(t.first_scheduled, t.first_token);
  EXPECT_LE(t.first_token, t.token_time);
  EXPECT_LE(t.token_time, t.finished);
  EngineStats s = engine->Stats();
  EXPECT_EQ(s.num_free_blocks, s.num_total_blocks);
  EXPECT_EQ(s.generation_tokens_total, 12);
  EXPECT_EQ(s.prompt_tokens_total, 5);
  EXPECT_EQ(s.num_requests_finished, 1);
  EXPECT_EQ(s.num_running + s.num_waiting, 0);
}

// Runs one greedy request (prompt 1..30, 3 tokens) on a fake engine under `c`, checks its
// tokens against the oracle, and returns each step's (num_computed, num_tokens): one sequence
// per step.
std::vector<std::pair<int64_t, int64_t>> StepsOfOneRequest(const EngineConfig& c) {
  FakeModel* fake = nullptr;
  auto engine = MakeFakeEngine(c, {}, &fake);
  const std::vector<int32_t> prompt = Range(1, 31);  // 30 tokens
  Result r = Collect(engine->Submit(Req("a", prompt, 3)));
  EXPECT_TRUE(r.error.ok());
  EXPECT_EQ(r.tokens, OracleGreedy(prompt, 3, 97));
  std::vector<std::pair<int64_t, int64_t>> steps;
  for (const FakeStep& s : fake->Steps()) {
    EXPECT_EQ(s.seqs.size(), 1u);
    if (!s.seqs.empty()) steps.emplace_back(s.seqs[0].num_computed, s.seqs[0].num_tokens);
  }
  return steps;
}

using Steps = std::vector<std::pair<int64_t, int64_t>>;

// The KV cache's pages are committed ahead of the blocks handed out, while the engine idles:
// two rows (a huge page of each K and V array) past the pool's high water, and no further.
TEST(EngineTest, CommitsKvPagesAheadWhileIdle) {
  EngineConfig config = SmallConfig();
  // FakeModel's K and V: one head of one f32 dim, 4 tokens a block: 16 bytes, so a row is
  // 131072 blocks.
  config.num_kv_blocks = 300000;
  auto engine = MakeFakeEngine(config, {}, nullptr);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (engine->Stats().num_committed_blocks < 2 * 131072 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(engine->Stats().num_committed_blocks, 2 * 131072);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(engine->Stats().num_committed_blocks, 2 * 131072);  // then it stops
  const std::vector<int32_t> prompt = {5, 6, 7};
  Result r = Collect(engine->Submit(Req("a", prompt, 4)));
  ASSERT_TRUE(r.error.ok()) << r.error.ToString();
  EXPECT_EQ(r.tokens, OracleGreedy(prompt, 4, 97));
  // The request raised the pool's high water, so idle time commits another row: here the
  // cache's last, partial one.
  while (engine->Stats().num_committed_blocks < 300000 &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  EXPECT_EQ(engine->Stats().num_committed_blocks, 300000);
}

TEST(EngineTest, ChunkedPrefillUnderTokenBudget) {
  EngineConfig c = SmallConfig();
  c.max_num_batched_tokens = 8;
  EXPECT_EQ(StepsOfOneRequest(c), (Steps{{0, 8}, {8, 8}, {16, 8}, {24, 6}, {30, 1}, {31, 1}}));
}

// vllm:iteration_tokens_total's observations: steps that made a token only (the prompt's first
// three chunks made none), the prompt counted whole at its first token.
TEST(EngineTest, IterationTokensCountStepsWithOutput) {
  EngineConfig c = SmallConfig();
  c.max_num_batched_tokens = 8;
  FakeModel* fake = nullptr;
  auto engine = MakeFakeEngine(c, {}, &fake);
  Result r = Collect(engine->Submit(Req("a", Range(1, 31), 3)));
  ASSERT_TRUE(r.error.ok());
  ASSERT_EQ(fake->Steps().size(), 6u);
  const IterationTokens& it = engine->Stats().iteration_tokens;
  EXPECT_EQ(it.sum, 30 + 3);
  std::array<int64_t, IterationTokens::kBounds.size() + 1> want{};
  want[0] = 2;  // ≤ 1: the two decode steps
  want[3] = 1;  // ≤ 32: the last chunk's step, 30 prompt tokens and the first generated
  EXPECT_EQ(it.counts, want);
}

TEST(EngineTest, WithoutChunkedPrefillAPromptRunsInOneStep) {
  EngineConfig c = SmallConfig();
  c.enable_chunked_prefill = false;
  c.max_num_batched_tokens = 40;
  c.max_model_len = 40;
  EXPECT_EQ(StepsOfOneRequest(c), (Steps{{0, 30}, {30, 1}, {31, 1}}));
  // A budget below max_model_len could never admit the longest prompt: refused at creation.
  c.max_num_batched_tokens = 39;
  auto refused = Engine::Create(std::make_unique<FakeModel>(FakeModelOptions{}), c, nullptr);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("max_num_batched_tokens (39) must be at least "
                                            "max_model_len (40)"),
            std::string::npos);
}

// Submits `reqs` so that the engine sees them all in one drain: a warm-up request holds the
// engine inside Forward while they are queued.
std::vector<std::shared_ptr<RequestStream>> SubmitTogether(Engine& engine, FakeModel& fake,
                                                           std::vector<EngineRequest> reqs) {
  fake.Pause();
  auto warm = engine.Submit(Req("warm-up", {1}, 1));
  fake.WaitUntilBlocked();
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (EngineRequest& r : reqs) streams.push_back(engine.Submit(std::move(r)));
  fake.Resume();
  Collect(warm);
  return streams;
}

TEST(EngineTest, MixedStepsRespectBudgetAndMaxNumSeqs) {
  EngineConfig c = SmallConfig();
  c.max_num_batched_tokens = 10;
  c.max_num_seqs = 3;
  FakeModel* fake = nullptr;
  auto engine = MakeFakeEngine(c, {}, &fake);
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < 6; ++i) reqs.push_back(Req("r" + std::to_string(i), Range(i + 1, i + 8 + 3 * i), 5));
  std::vector<std::vector<int32_t>> prompts;
  for (auto& r : reqs) prompts.push_back(r.prompt);
  auto streams = SubmitTogether(*engine, *fake, reqs);
  for (size_t i = 0; i < streams.size(); ++i) {
    Result r = Collect(streams[i]);
    ASSERT_TRUE(r.error.ok()) << r.error.ToString();
    EXPECT_EQ(r.tokens, OracleGreedy(prompts[i], 5, 97)) << i;
  }
  bool saw_mixed = false;
  for (const FakeStep& s : fake->Steps()) {
    EXPECT_LE(s.num_tokens, 10);
    EXPECT_LE(static_cast<int64_t>(s.seqs.size()), 3);
    bool decode = false, prefill = false;
    for (const SeqStep& q : s.seqs) (q.num_tokens == 1 && q.num_computed > 0 ? decode : prefill) = true;
    saw_mixed |= decode && prefill;
  }
  EXPECT_TRUE(saw_mixed) << "no step mixed a decode with a prefill chunk";
}

TEST(EngineTest, PriorityPolicyAdmitsLowerPriorityValuesFirst) {
  EngineConfig c = SmallConfig();
  c.max_num_seqs = 1;
  c.priority_policy = true;
  FakeModel* fake = nullptr;
  auto engine = MakeFakeEngine(c, {}, &fake);
  // Prompt lengths 3, 5, 7 name the requests in the model's steps.
  std::vector<EngineRequest> reqs = {Req("a", Range(10, 13), 2), Req("b", Range(20, 25), 2),
                                     Req("c", Range(30, 37), 2)};
  reqs[0].priority = 3;
  reqs[1].priority = -1;
  for (const auto& s : SubmitTogether(*engine, *fake, reqs)) ASSERT_TRUE(Collect(s).error.ok());
  std::vector<int64_t> prefills;
  for (const FakeStep& s : fake->Steps()) {
    if (s.seqs[0].num_computed == 0 && s.seqs[0].num_tokens > 1) prefills.push_back(s.seqs[0].num_tokens);
  }
  EXPECT_EQ(prefills, (std::vector<int64_t>{5, 7, 3}));  // b (-1), c (0), a (3)
}

TEST(EngineTest, PreemptionUnderTinyPoolKeepsOutputs) {
  EngineConfig c = SmallConfig();
  c.num_kv_blocks = 12;  // one request needs up to 8 blocks of 4
  FakeModel* fake = nullptr;
  auto engine = MakeFakeEngine(c, {}, &fake);
  std::vector<EngineRequest> reqs;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    reqs.push_back(Req("r" + std::to_string(i), Range(10 * i, 10 * i + 10), 20));
    prompts.push_back(reqs.back().prompt);
  }
  auto streams = SubmitTogether(*engine, *fake, reqs);
  int64_t preempted_requests = 0;
  for (size_t i = 0; i < streams.size(); ++i) {
    Result r = Collect(streams[i]);
    ASSERT_TRUE(r.error.ok()) << r.error.ToString();
    EXPECT_EQ(r.tokens, OracleGreedy(prompts[i], 20, 97)) << i;
    preempted_requests += r.last.num_preemptions > 0;
  }
  EngineStats s = engine->Stats();
  EXPECT_GT(s.num_preemptions, 0);
  EXPECT_GT(preempted_requests, 0);
  EXPECT_EQ(s.num_free_blocks, s.num_total_blocks);
}

TEST(EngineTest, CancelFreesBlocksAtOnce) {
  FakeModelOptions o;
  o.step_delay_us = 1000;
  FakeModel* fake = nullptr;
  auto engine = MakeFakeEngine(SmallConfig(), o, &fake);
  auto stream = engine->Submit(Req("long", Range(0, 40), 900));
  TokenEvent first;
  ASSERT_TRUE(stream->Next(&first, std::chrono::milliseconds(20000)));
  EXPECT_LT(engine->Stats().num_free_blocks, engine->Stats().num_total_blocks);
  engine->Cancel("long");
  Result r = Collect(stream);
  EXPECT_EQ(r.finish_reason, "abort");
  EXPECT_LT(r.tokens.size(), 800u);
  EngineStats s = engine->Stats();  // the abort event comes after the blocks are free
  EXPECT_EQ(s.num_free_blocks, s.num_total_blocks);
  EXPECT_EQ(s.num_running, 0);
  engine->Cancel("long");     // already gone: ignored
  engine->Cancel("unknown");  // never existed: ignored
  Result again = Collect(engine->Submit(Req("next", {3, 4}, 2)));
  EXPECT_TRUE(again.error.ok());
}

TEST(EngineTest, PrefixCacheHitsGiveIdenticalOutputs) {
  FakeModel* fake = nullptr;
  auto engine = MakeFakeEngine(SmallConfig(), {}, &fake);
  EngineRequest a = Req("a", Range(20, 40), 8);  // 20 tokens = 5 full blocks of 4
  a.logprobs = 3;
  EngineRequest b = a;
  b.request_id = "b";
  Result ra = Collect(engine->Submit(a));
  Result rb = Collect(engine->Submit(b));
  ASSERT_TRUE(ra.error.ok() && rb.error.ok());
  EXPECT_EQ(ra.tokens, rb.tokens);
  EXPECT_EQ(ra.last.num_cached_tokens, 0);
  // The last token is always recomputed, so 19 tokens can hit: 4 full blocks.
  EXPECT_EQ(rb.last.num_cached_tokens, 16);
  ASSERT_EQ(ra.logprobs.size(), rb.logprobs.size());
  for (size_t i = 0; i < ra.logprobs.size(); ++i) {
    EXPECT_EQ(ra.logprobs[i].logprob, rb.logprobs[i].logprob);
    EXPECT_EQ(ra.logprobs[i].top, rb.logprobs[i].top);
  }
  EngineStats s = engine->Stats();
  EXPECT_EQ(s.prefix_cache_queries, 40);
  EXPECT_EQ(s.prefix_cache_hits, 16);
  // The hit skipped computing: b's first step started at token 16.
  const std::vector<FakeStep> steps = fake->Steps();
  int64_t b_first = -1;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].seqs[0].num_computed == 16 && steps[i].seqs[0].num_tokens == 4) b_first = static_cast<int64_t>(i);
  }
  EXPECT_GE(b_first, 0);
  // A different prompt with the same first block shares only that block.
  Result rc = Collect(engine->Submit(Req("c", {20, 21, 22, 23, 0, 0, 0, 0, 0}, 2)));
  EXPECT_EQ(rc.last.num_cached_tokens, 4);
  EXPECT_EQ(rc.tokens, OracleGreedy({20, 21, 22, 23, 0, 0, 0, 0, 0}, 2, 97));
}

TEST(EngineTest, PrefixCachingOffMeansNoHits) {
  EngineConfig c = SmallConfig();
  c.enable_prefix_caching = false;
  auto engine = MakeFakeEngine(c, {}, nullptr);
  Collect(engine->Submit(Req("a", Range(20, 40), 2)));
  Result rb = Collect(engine->Submit(Req("b", Range(20, 40), 2)));
  EXPECT_EQ(rb.last.num_cached_tokens, 0);
  EXPECT_EQ(engine->Stats().prefix_cache_hits, 0);
  EXPECT_FALSE(engine->Stats().prefix_caching_enabled);
}

TEST(EngineTest, LruEvictionKeepsRecentPrefixes) {
  EngineConfig c = SmallConfig();
  c.num_kv_blocks = 10;
  auto engine = MakeFakeEngine(c, {}, nullptr);
  const std::vector<int32_t> p1 = Range(1, 10), p2 = Range(40, 49), p3 = Range(60, 85);
  Collect(engine->Submit(Req("p1", p1, 1)));  // caches 2 blocks, freed first
  Collect(engine->Submit(Req("p2", p2, 1)));  // caches 2 blocks, freed later
  EXPECT_EQ(engine->Stats().num_cached_free_blocks, 4);
  // 25 tokens take 7 of the 10 blocks: the least recently freed cached ones (p1's) go.
  Collect(engine->Submit(Req("p3", p3, 1)));
  Result r2 = Collect(engine->Submit(Req("p2b", p2, 3)));
  Result r1 = Collect(engine->Submit(Req("p1b", p1, 3)));
  EXPECT_EQ(r2.last.num_cached_tokens, 8);
  EXPECT_EQ(r1.last.num_cached_tokens, 0);
  EXPECT_EQ(r2.tokens, OracleGreedy(p2, 3, 97));
  EXPECT_EQ(r1.tokens, OracleGreedy(p1, 3, 97));
}

// An output index whose token did not occur before it (so a stop there is unambiguous).
int64_t FirstNewTokenAfter(const std::vector<int32_t>& out, int64_t from) {
  for (int64_t k = from; k < static_cast<int64_t>(out.size()); ++k) {
    if (std::find(out.begin(), out.begin() + k, out[k]) == out.begin() + k) return k;
  }
  return -1;
}

TEST(EngineTest, StopEosIgnoreEosAndMinTokens) {
  auto engine = MakeFakeEngine(SmallConfig(), {}, nullptr);
  const std::vector<int32_t> prompt = {7, 3, 9};
  const std::vector<int32_t> full = OracleGreedy(prompt, 12, 97);
  const int64_t k = FirstNewTokenAfter(full, 3);
  ASSERT_GE(k, 3);
  const int32_t t = full[k];

  EngineRequest stop = Req("stop", prompt, 12);
  stop.stop_token_ids = {t};
  Result rs = Collect(engine->Submit(stop));
  EXPECT_EQ(rs.tokens, std::vector<int32_t>(full.begin(), full.begin() + k + 1));
  EXPECT_EQ(rs.finish_reason, "stop");
  EXPECT_EQ(rs.stop_token, t);

  EngineRequest eos = Req("eos", prompt, 12);
  eos.eos_token_ids = {t};
  Result re = Collect(engine->Submit(eos));
  EXPECT_EQ(re.tokens.size(), static_cast<size_t>(k + 1));
  EXPECT_EQ(re.finish_reason, "stop");
  EXPECT_FALSE(re.stop_token.has_value());
  // An EOS id listed in stop_token_ids too ends as EOS (vLLM checks EOS first): no stop token.
  eos.request_id = "both";
  eos.stop_token_ids = {t};
  EXPECT_FALSE(Collect(engine->Submit(eos)).stop_token.has_value());
  eos.stop_token_ids.clear();

  eos.request_id = "ignore";
  eos.ignore_eos = true;
  Result ri = Collect(engine->Submit(eos));
  EXPECT_EQ(ri.tokens, full);
  EXPECT_EQ(ri.finish_reason, "length");

  // min_tokens beyond k: the stop token cannot be drawn at k, nor end the request early.
  EngineRequest min = Req("min", prompt, 12);
  min.stop_token_ids = {t};
  min.min_tokens = k + 1;
  Result rm = Collect(engine->Submit(min));
  ASSERT_GT(rm.tokens.size(), static_cast<size_t>(k));
  EXPECT_EQ(std::vector<int32_t>(rm.tokens.begin(), rm.tokens.begin() + k),
            std::vector<int32_t>(full.begin(), full.begin() + k));
  EXPECT_NE(rm.tokens[k], t);

  Result zero = Collect(engine->Submit(Req("zero", prompt, 0)));
  EXPECT_TRUE(zero.tokens.empty());
  EXPECT_EQ(zero.finish_reason, "length");
}

// Structured output over FakeModel's vocabulary (97 ids given JSON-ish bytes): the engine's
// greedy choice at each step is the oracle's best token among those whose bytes the matcher
// takes (tried one by one, not through the trie), EOS only once the text is complete; with
// starts_after, the tokens up to that one are the free greedy ones.
TEST(EngineTest, StructuredOutputMasksEachDraw) {
  const int64_t vocab = 97;
  const int32_t eos = 96;
  const char* pieces[] = {"{", "}", "\"", "a", "\":", "1", ",", " ", "\"a\"", "2", "[", "]",
                          "true", "b", "\"b\":", "0", "-", "x", ":", "null"};
  std::vector<std::string> bytes(vocab);
  for (int64_t id = 0; id < vocab; ++id) bytes[id] = pieces[id % std::size(pieces)];
  std::vector<bool> excluded(vocab, false);
  excluded[eos] = true;
  auto table = std::make_shared<const structured::TokenTable>(bytes, excluded);
  auto schema = structured::Schema::FromJsonSchema(nlohmann::ordered_json::parse(
      R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}},
          "required": ["a"]})"));
  ASSERT_TRUE(schema.ok());
  const std::vector<int32_t> prompt = {7, 3, 9};
  // The oracle: FakeModel's logits, masked by trying every token on a matcher; `lps` gets each
  // drawn token's log-prob in the masked distribution (vLLM's: its grammar bitmask comes
  // before its log-softmax).
  std::vector<double> lps;
  const auto oracle = [&](int32_t starts_after, int64_t n) {
    lps.clear();
    uint64_t h = 0;
    for (int32_t t : prompt) h = FoldToken(h, t);
    structured::Matcher m(*schema);
    bool active = starts_after < 0;
    std::vector<int32_t> out;
    std::vector<float> row(vocab);
    int64_t pos = static_cast<int64_t>(prompt.size()) - 1;
    for (int64_t i = 0; i < n; ++i, ++pos) {
      FakeModel::Logits(h, pos, vocab, row.data());
      int32_t best = -1;
      for (int32_t t = 0; t < vocab; ++t) {
        const bool ok = !active || (t == eos ? m.Complete() : !excluded[t] && m.Accepts(bytes[t]));
        if (ok && (best < 0 || row[t] > row[best])) best = t;
      }
      double z = 0;
      for (int32_t t = 0; t < vocab; ++t) {
        const bool ok = !active || (t == eos ? m.Complete() : !excluded[t] && m.Accepts(bytes[t]));
        if (ok) z += std::exp(static_cast<double>(row[t]) - row[best]);
      }
      lps.push_back(-std::log(z));
      out.push_back(best);
      if (best == eos) break;
      if (active) {
        EXPECT_TRUE(m.Advance(bytes[best]));
      }
      active = active || best == starts_after;
      h = FoldToken(h, best);
    }
    return out;
  };
  auto engine = MakeFakeEngine(SmallConfig(), {}, nullptr);
  EngineRequest req = Req("json", prompt, 40);
  req.eos_token_ids = {eos};
  req.constraint = std::make_shared<structured::Constraint>(
      structured::Constraint{*schema, table, -1});
  req.logprobs = 2;
  Result r = Collect(engine->Submit(req));
  ASSERT_TRUE(r.error.ok()) << r.error.ToString();
  EXPECT_EQ(r.tokens, oracle(-1, 40));
  ASSERT_EQ(r.logprobs.size(), r.tokens.size());
  for (size_t i = 0; i < r.tokens.size(); ++i) {
    EXPECT_NEAR(r.logprobs[i].logprob, lps[i], 1e-4) << i;
    // The top entries are tokens the constraint allows: finite, the drawn one first.
    ASSERT_FALSE(r.logprobs[i].top.empty());
    EXPECT_EQ(r.logprobs[i].top[0].first, r.tokens[i]);
  }
  req.logprobs = -1;
  if (r.finish_reason == "stop") {
    std::string text;
    for (int32_t t : r.tokens) text += t == eos ? "" : bytes[t];
    const auto v = nlohmann::json::parse(text, nullptr, false);
    ASSERT_TRUE(v.is_object()) << text;
    EXPECT_TRUE(v["a"].is_number_integer()) << text;
  }
  // Free until the third token the unconstrained model would draw, constrained after it.
  const std::vector<int32_t> free = OracleGreedy(prompt, 3, vocab);
  req.request_id = "thinking";
  req.constraint = std::make_shared<structured::Constraint>(
      structured::Constraint{*schema, table, free[2]});
  Result t = Collect(engine->Submit(req));
  const std::vector<int32_t> expected = oracle(free[2], 40);
  EXPECT_EQ(t.tokens, expected);
  ASSERT_GE(t.tokens.size(), 3u);
  EXPECT_EQ(std::vector<int32_t>(t.tokens.begin(), t.tokens.begin() + 3), free);
}

TEST(EngineTest, MaxModelLenEndsWithLength) {
  EngineConfig c = SmallConfig();
  c.max_model_len = 10;
  auto engine = MakeFakeEngine(c, {}, nullptr);
  Result r = Collect(engine->Submit(Req("a", {1, 2, 3, 4, 5, 6}, 50)));
  EXPECT_EQ(r.tokens.size(), 4u);
  EXPECT_EQ(r.finish_reason, "length");
}

TEST(EngineTest, BadRequestsGetErrorEventsAndTheEngineGoesOn) {
  EngineConfig c = SmallConfig();
  c.num_kv_blocks = 5;  // 20 tokens at most
  auto engine = MakeFakeEngine(c, {}, nullptr);
  Result too_big = Collect(engine->Submit(Req("big", Range(0, 15), 10)));
  EXPECT_EQ(too_big.error.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(too_big.finish_reason, "error");
  EXPECT_EQ(Collect(engine->Submit(Req("empty", {}, 3))).error.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Collect(engine->Submit(Req("oov", {1, 97}, 3))).error.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Collect(engine->Submit(Req("neg", {1}, -1))).error.code(), StatusCode::kInvalidArgument);
  EngineRequest mm = Req("mm", {1, 2, 3}, 2);
  mm.embed_rows = {5};
  mm.embeds.assign(4, 0.0f);
  EXPECT_EQ(Collect(engine->Submit(mm)).error.code(), StatusCode::kInvalidArgument);
  // Exactly full: 15 prompt + 6 output tokens keep 20 in the cache (the last is never fed).
  Result fits = Collect(engine->Submit(Req("fits", Range(0, 15), 6)));
  EXPECT_TRUE(fits.error.ok()) << fits.error.ToString();
  EXPECT_EQ(fits.tokens, OracleGreedy(Range(0, 15), 6, 97));
}

TEST(EngineTest, DuplicateLiveIdIsRejected) {
  FakeModel* fake = nullptr;
  auto engine = MakeFakeEngine(SmallConfig(), {}, &fake);
  auto streams = SubmitTogether(*engine, *fake, {Req("same", {1, 2}, 3), Req("same", {1, 2}, 3)});
  Result a = Collect(streams[0]), b = Collect(streams[1]);
  EXPECT_TRUE(a.error.ok());
  EXPECT_EQ(b.error.code(), StatusCode::kInvalidArgument);
  // An id is live while its request waits for its encoder job too.
  std::atomic<bool> release{false};
  auto encoded = [&](const std::string& id) {
    EngineRequest r = Req(id, Range(1, 14), 2);
    r.embed_rows = {2};
    r.encode = [&](ThreadPool&, std::vector<float>* embeds) -> StatusOr<bool> {
      if (!release) return false;
      embeds->assign(4, 0.25f);
      return true;
    };
    return r;
  };
  auto first = engine->Submit(encoded("img"));
  auto second = engine->Submit(encoded("img"));
  auto plain = engine->Submit(Req("img", {1, 2}, 3));
  EXPECT_EQ(Collect(second).error.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Collect(plain).error.code(), StatusCode::kInvalidArgument);
  release = true;
  EXPECT_TRUE(Collect(first).error.ok());
}

TEST(EngineTest, LogprobsAreTheModelsDistributionBeforePenalties) {
  auto engine = MakeFakeEngine(SmallConfig(), {}, nullptr);
  EngineRequest r = Req("lp", {4, 5, 6}, 1);
  r.logprobs = 2;
  r.sampling.repetition_penalty = 1.5f;
  r.sampling.presence_penalty = 0.5f;
  Result out = Collect(engine->Submit(r));
  ASSERT_EQ(out.logprobs.size(), 1u);
  uint64_t h = 0;
  for (int32_t t : {4, 5, 6}) h = FoldToken(h, t);
  std::vector<float> row(97);
  FakeModel::Logits(h, 2, 97, row.data());
  double z = 0;
  const float mx = *std::max_element(row.begin(), row.end());
  for (float v : row) z += std::exp(static_cast<double>(v - mx));
  const int32_t tok = out.logprobs[0].token;
  EXPECT_EQ(tok, out.tokens[0]);
  EXPECT_NEAR(out.logprobs[0].logprob, row[tok] - mx - std::log(z), 1e-4);
  ASSERT_EQ(out.logprobs[0].top.size(), 2u);
  const int32_t argmax = static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
  EXPECT_EQ(out.logprobs[0].top[0].first, argmax);
  EXPECT_NEAR(out.logprobs[0].top[0].second, mx - mx - std::log(z), 1e-4);
  EngineRequest none = Req("none", {4, 5, 6}, 2);
  EXPECT_TRUE(Collect(engine->Submit(none)).logprobs.empty());
  none.request_id = "zero";
  none.logprobs = 0;  // the chosen token only
  Result z0 = Collect(engine->Submit(none));
  ASSERT_EQ(z0.logprobs.size(), 2u);
  EXPECT_TRUE(z0.logprobs[0].top.empty());
}

// Greedy over FakeModel with `edit` applied to each row (given the output so far): the
// oracle for requests with logits rules, written out per rule rather than through
// ApplyLogitsRules.
std::vector<int32_t> OracleGreedyEdited(
    const std::vector<int32_t>& prompt, int64_t n,
    const std::function<void(const std::vector<int32_t>& out, std::vector<float>& row)>& edit) {
  uint64_t h = 0;
  for (int32_t t : prompt) h = FoldToken(h, t);
  std::vector<int32_t> out;
  std::vector<float> row(97);
  for (int64_t i = 0, pos = static_cast<int64_t>(prompt.size()) - 1; i < n; ++i, ++pos) {
    FakeModel::Logits(h, pos, 97, row.data());
    edit(out, row);
    out.push_back(static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin()));
    h = FoldToken(h, out.back());
  }
  return out;
}

TEST(EngineTest, LogitsRulesShapeEachDraw) {
  auto engine = MakeFakeEngine(SmallConfig(), {}, nullptr);
  const std::vector<int32_t> prompt = {3, 1, 4, 1, 5};
  const std::vector<int32_t> free = OracleGreedy(prompt, 8, 97);
  const auto run = [&](const std::string& id, LogitsRules rules, int32_t logprobs = -1) {
    EngineRequest r = Req(id, prompt, 8);
    r.logits_rules = std::make_shared<const LogitsRules>(std::move(rules));
    r.logprobs = logprobs;
    return Collect(engine->Submit(r));
  };

  // A token the free run never draws, pushed up by 100 (logits are O(1)): drawn every step.
  int32_t pushed = 0;
  while (std::count(free.begin(), free.end(), pushed)) ++pushed;
  LogitsRules bias;
  bias.logit_bias = {{pushed, 100.0f}, {free[0], -5.0f}};
  Result rb = run("bias", bias, 0);
  EXPECT_EQ(rb.tokens, std::vector<int32_t>(8, pushed));
  // The reported log-probs are the model's, before the bias (vLLM's raw log-probs).
  ASSERT_EQ(rb.logprobs.size(), 8u);
  EXPECT_LT(rb.logprobs[0].logprob, -1.0f);

  // Only three tokens allowed, none of them the free run's first.
  LogitsRules allowed;
  allowed.allowed_token_ids = {10, 20, 30};
  Result ra = run("allowed", allowed);
  EXPECT_EQ(ra.tokens, OracleGreedyEdited(prompt, 8, [](const auto&, std::vector<float>& row) {
              for (int t = 0; t < 97; ++t) {
                if (t != 10 && t != 20 && t != 30) row[t] = -1e30f;
              }
            }));

  // Bad words: the free run's first token alone, and its 2nd-3rd tokens as a pair (banned
  // only right after the 2nd).
  LogitsRules bad;
  bad.bad_words = {{free[0]}, {free[1], free[2]}};
  Result rw = run("bad", bad);
  const std::vector<int32_t> expect_bad =
      OracleGreedyEdited(prompt, 8, [&](const std::vector<int32_t>& out, std::vector<float>& row) {
        row[free[0]] = -1e30f;
        if (!out.empty() && out.back() == free[1]) row[free[2]] = -1e30f;
      });
  EXPECT_EQ(rw.tokens, expect_bad);
  EXPECT_NE(rw.tokens[0], free[0]);

  // Bad words are matched against the output only: a word that the prompt's last token and
  // the free run's first would spell bans nothing at the first draw.
  LogitsRules across;
  across.bad_words = {{prompt.back(), free[0]}};
  EXPECT_EQ(run("across", across).tokens, free);
}

TEST(EngineTest, ThinkingBudgetForcesTheEndMarkerAndTheModelReadsIt) {
  auto engine = MakeFakeEngine(SmallConfig(), {}, nullptr);
  constexpr int32_t kStart = 40, kEnd = 41;
  // The prompt opens a thinking section (its last tokens: the start marker and one more).
  const std::vector<int32_t> prompt = {3, 1, kStart, 7};
  const std::vector<int32_t> free = OracleGreedy(prompt, 3, 97);
  ASSERT_EQ(std::count(free.begin(), free.end(), kEnd), 0);
  EngineRequest r = Req("think", prompt, 7);
  r.thinking_budget = std::make_shared<const ThinkingBudget>(ThinkingBudget{3, {kStart}, {kEnd}});
  r.logprobs = 1;
  Result got = Collect(engine->Submit(r));

  // Three free tokens, the forced end marker, then what the model makes of it all: the
  // forced token went into the context as any drawn one.
  std::vector<int32_t> context = prompt;
  context.insert(context.end(), free.begin(), free.end());
  context.push_back(kEnd);
  std::vector<int32_t> expect = free;
  expect.push_back(kEnd);
  for (int32_t t : OracleGreedy(context, 3, 97)) expect.push_back(t);
  EXPECT_EQ(got.tokens, expect);
  // The forced token's log-prob is the model's, like every reported one (vLLM's raw
  // log-probs): below that of the token the model preferred at that step.
  ASSERT_EQ(got.logprobs.size(), 7u);
  const TokenLogprobs& forced = got.logprobs[3];
  EXPECT_EQ(forced.token, kEnd);
  ASSERT_EQ(forced.top.size(), 1u);
  EXPECT_NE(forced.top[0].first, kEnd);
  EXPECT_LT(forced.logprob, forced.top[0].second);

  // Sampled requests are forced the same way; a prompt without an open section never is.
  EngineRequest sampled = r;
  sampled.request_id = "think-sampled";
  sampled.sampling.temperature = 1.0f;
  sampled.sampling.seed = 7;
  EXPECT_EQ(Collect(engine->Submit(sampled)).tokens[3], kEnd);
  EngineRequest closed = r;
  closed.request_id = "closed";
  closed.prompt = {3, 1, kStart, 7, kEnd};
  EXPECT_EQ(Collect(engine->Submit(closed)).tokens, OracleGreedy(closed.prompt, 7, 97));
}

// n-gram speculative decoding never changes a token: every request gives the same tokens and
// log-probs with and without it, greedy or seeded, under rules that make outputs repeat (so
// drafts are proposed and accepted) and rules that end requests mid-draft (stop tokens,
// max_tokens, min_tokens). The fake model reads its history from the K/V slots, so a rejected
// draft token left in the cache would change every later token.
// SmallConfig with n-gram speculation: k draft tokens, lookup windows of min_n..max_n.
EngineConfig SpecConfig(int64_t k, int64_t min_n, int64_t max_n) {
  EngineConfig c = SmallConfig();
  c.speculative.num_speculative_tokens = k;
  c.speculative.prompt_lookup_min = min_n;
  c.speculative.prompt_lookup_max = max_n;
  return c;
}

// `state_slot_bytes` > 0: the fake model keeps a recurrent state (its history hash) and checks at
// every step that it summarises exactly the cached prefix, so a draft token left in the state
// after its rejection fails the step.
void ExpectSpeculationChangesNoToken(int64_t state_slot_bytes) {
  FakeModelOptions options;
  options.state_slot_bytes = state_slot_bytes;
  EngineConfig plain_config = SmallConfig();
  plain_config.enable_prefix_caching = false;  // so that both feed every prompt token
  EngineConfig spec_config = SpecConfig(3, 1, 3);
  spec_config.enable_prefix_caching = false;
  FakeModel *plain_model = nullptr, *spec_model = nullptr;
  auto plain = MakeFakeEngine(plain_config, options, &plain_model);
  auto spec = MakeFakeEngine(spec_config, options, &spec_model);
  const auto rules = [](std::vector<int32_t> allowed, std::vector<std::pair<int32_t, float>> bias) {
    LogitsRules r;
    r.allowed_token_ids = std::move(allowed);
    r.logit_bias = std::move(bias);
    return std::make_shared<const LogitsRules>(std::move(r));
  };
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < 8; ++i) {
    EngineRequest r = Req("r" + std::to_string(i), {3, 1, 4, 1, 5, 9, 2, 6}, 40);
    r.prompt.push_back(i);
    r.logprobs = 2;
    switch (i) {
      case 0: r.logits_rules = rules({7}, {}); break;                 // one token: every draft stands
      case 1: r.logits_rules = rules({7, 8}, {}); break;              // two: drafts half right
      case 2: r.logits_rules = rules({7, 8, 9}, {}); r.sampling.temperature = 1.0f;
              r.sampling.seed = 11; break;                            // sampled, seeded
      case 3: r.logits_rules = rules({7, 8}, {}); r.stop_token_ids = {8}; r.min_tokens = 5; break;
      case 4: r.logits_rules = rules({}, {{7, 100.0f}}); r.max_tokens = 6; break;
      case 5: r.logits_rules = rules({7, 8}, {}); r.sampling.repetition_penalty = 1.3f; break;
      case 6: break;                                                  // free: drafts rare
      default: r.logits_rules = rules({7}, {}); r.eos_token_ids = {7}; r.min_tokens = 9; break;
    }
    reqs.push_back(std::move(r));
  }
  // Accepted drafts are steps saved: one token allowed, so every draft stands, and each step
  // after the first few gives up to 3 drafts + 1 tokens.
  {
    const int64_t plain_steps = plain->Stats().num_steps, spec_steps = spec->Stats().num_steps;
    EXPECT_EQ(Collect(spec->Submit(reqs[0])).tokens, Collect(plain->Submit(reqs[0])).tokens);
    EXPECT_EQ(plain->Stats().num_steps - plain_steps, 40);
    EXPECT_LE(spec->Stats().num_steps - spec_steps, 14);  // every draft stood: no replay
    for (EngineRequest& r : reqs) r.request_id += "-again";
  }
  std::vector<std::shared_ptr<RequestStream>> a, b;
  for (const EngineRequest& r : reqs) {
    a.push_back(plain->Submit(r));
    b.push_back(spec->Submit(r));
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    Result x = Collect(a[i]), y = Collect(b[i]);
    ASSERT_TRUE(y.error.ok()) << y.error.ToString();
    EXPECT_EQ(y.tokens, x.tokens) << i;
    EXPECT_EQ(y.finish_reason, x.finish_reason) << i;
    EXPECT_EQ(y.stop_token, x.stop_token) << i;
    ASSERT_EQ(y.logprobs.size(), x.logprobs.size()) << i;
    for (size_t t = 0; t < x.logprobs.size(); ++t) {
      EXPECT_EQ(y.logprobs[t].logprob, x.logprobs[t].logprob) << i << " " << t;
      EXPECT_EQ(y.logprobs[t].top, x.logprobs[t].top) << i << " " << t;
    }
  }
  const EngineStats s = spec->Stats();
  EXPECT_GT(s.spec_num_drafts, 0);
  EXPECT_GT(s.spec_num_accepted_tokens, 0);
  EXPECT_LT(s.spec_num_accepted_tokens, s.spec_num_draft_tokens);
  EXPECT_EQ(s.generation_tokens_total, plain->Stats().generation_tokens_total);
  // Every token is fed once, plus the draft tokens that did not stand: accepted ones are never
  // computed again. With a recurrent state a step whose draft fell short is fed again.
  const auto fed = [](const FakeModel* m) {
    int64_t n = 0;
    for (const FakeStep& st : m->Steps()) n += st.num_tokens;
    return n;
  };
  const int64_t extra = s.spec_num_draft_tokens - s.spec_num_accepted_tokens;
  if (state_slot_bytes == 0) {
    EXPECT_EQ(fed(spec_model), fed(plain_model) + extra);
  } else {
    EXPECT_GT(fed(spec_model), fed(plain_model) + extra);
  }
}

TEST(EngineTest, NgramSpeculationChangesNoToken) { ExpectSpeculationChangesNoToken(0); }

TEST(EngineTest, NgramSpeculationWithRecurrentStateChangesNoToken) {
  ExpectSpeculationChangesNoToken(8);
}

// Speculation under a pool too small for every draft: drafts are dropped where their blocks do
// not fit, preempted requests lose theirs, and every output is still the oracle's.
TEST(EngineTest, SpeculationUnderTinyPoolKeepsOutputs) {
  EngineConfig c = SpecConfig(4, 1, 2);
  c.num_kv_blocks = 12;
  FakeModel* fake = nullptr;
  auto engine = MakeFakeEngine(c, {}, &fake);
  LogitsRules two;
  two.allowed_token_ids = {5, 6};  // outputs repeat: drafts are proposed and mostly stand
  const auto rules = std::make_shared<const LogitsRules>(two);
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < 6; ++i) {
    reqs.push_back(Req("r" + std::to_string(i), Range(10 * i, 10 * i + 10), 20));
    reqs.back().logits_rules = rules;
  }
  auto streams = SubmitTogether(*engine, *fake, reqs);
  for (size_t i = 0; i < streams.size(); ++i) {
    Result r = Collect(streams[i]);
    ASSERT_TRUE(r.error.ok()) << r.error.ToString();
    EXPECT_EQ(r.tokens, OracleGreedyEdited(reqs[i].prompt, 20, [](const auto&, std::vector<float>& row) {
                for (int t = 0; t < 97; ++t) {
                  if (t != 5 && t != 6) row[t] = -1e30f;
                }
              })) << i;
  }
  EngineStats s = engine->Stats();
  EXPECT_GT(s.num_preemptions, 0);
  EXPECT_GT(s.spec_num_accepted_tokens, 0);
  EXPECT_EQ(s.num_free_blocks, s.num_total_blocks);
}

// disable_by_batch_size: no drafts while more requests than that run; one alone gets them.
TEST(EngineTest, SpeculationStopsAboveTheBatchLimit) {
  EngineConfig c = SpecConfig(3, 1, 2);
  c.speculative.disable_by_batch_size = 2;
  FakeModel* fake = nullptr;
  auto engine = MakeFakeEngine(c, {}, &fake);
  LogitsRules one;
  one.allowed_token_ids = {5};
  const auto rules = std::make_shared<const LogitsRules>(one);
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < 4; ++i) {
    reqs.push_back(Req("r" + std::to_string(i), Range(10 * i, 10 * i + 10), 12));
    reqs.back().logits_rules = rules;
  }
  for (auto& s : SubmitTogether(*engine, *fake, reqs)) {
    EXPECT_EQ(Collect(s).tokens, std::vector<int32_t>(12, 5));
  }
  EXPECT_EQ(engine->Stats().spec_num_drafts, 0);
  EngineRequest alone = reqs[0];
  alone.request_id = "alone";
  EXPECT_EQ(Collect(engine->Submit(alone)).tokens, std::vector<int32_t>(12, 5));
  EXPECT_GT(engine->Stats().spec_num_drafts, 0);
}

TEST(EngineTest, SeededSamplingIgnoresBatchComposition) {
  FakeModel* fake = nullptr;
  ThreadPool pool(2);  // a step's rows are sampled on both threads
  auto engine = MakeFakeEngine(SmallConfig(), {}, &fake, &pool);
  EngineRequest s = Req("seeded", {11, 12, 13}, 16);
  s.sampling.temperature = 1.0f;
  s.sampling.seed = 1234;
  Result alone = Collect(engine->Submit(s));
  std::vector<EngineRequest> mix;
  for (int i = 0; i < 7; ++i) {
    EngineRequest o = Req("other" + std::to_string(i), Range(i, i + 5), 16);
    o.sampling.temperature = 1.0f;
    mix.push_back(o);
  }
  s.request_id = "seeded-again";
  mix.insert(mix.begin() + 3, s);
  auto streams = SubmitTogether(*engine, *fake, mix);
  std::vector<Result> results;
  for (auto& st : streams) results.push_back(Collect(st));
  EXPECT_EQ(results[3].tokens, alone.tokens);
  // Unseeded requests draw from their own generators: not all equal to the greedy path.
  EXPECT_NE(results[0].tokens, OracleGreedy(Range(0, 5), 16, 97));
}

TEST(EngineTest, MultimodalEmbeddingsTakePartInPrefixHashes) {
  FakeModel* fake = nullptr;
  auto engine = MakeFakeEngine(SmallConfig(), {}, &fake);
  auto mm = [](const std::string& id, float v) {
    EngineRequest r = Req(id, Range(1, 14), 3);
    r.embed_rows = {2, 3};
    r.embeds.assign(8, v);
    return r;
  };
  Result a = Collect(engine->Submit(mm("a", 0.5f)));
  Result same = Collect(engine->Submit(mm("same", 0.5f)));
  Result other = Collect(engine->Submit(mm("other", 0.25f)));
  Result text = Collect(engine->Submit(Req("text", Range(1, 14), 3)));
  EXPECT_EQ(same.tokens, a.tokens);
  EXPECT_EQ(same.last.num_cached_tokens, 12);
  EXPECT_EQ(other.last.num_cached_tokens, 0);  // the image sits in the first block
  EXPECT_EQ(text.last.num_cached_tokens, 0);
  EXPECT_EQ(text.tokens, OracleGreedy(Range(1, 14), 3, 97));
  EXPECT_NE(a.tokens, text.tokens);
}

TEST(EngineTest, EncoderJobsRunOnTheEngineThreadBeforeAdmission) {
  FakeModel* fake = nullptr;
  auto engine = MakeFakeEngine(SmallConfig(), {}, &fake);
  auto with_rows = [](const std::string& id, std::vector<float> embeds) {
    EngineRequest r = Req(id, Range(1, 14), 3);
    r.embed_rows = {2, 3};
    r.embeds = std::move(embeds);
    return r;
  };
  // Encoded by the engine in three pieces: the same tokens as embeddings given up front.
  const Result given = Collect(engine->Submit(with_rows("given", std::vector<float>(8, 0.5f))));
  int calls = 0;
  std::thread::id ran_on;
  EngineRequest lazy = with_rows("lazy", {});
  lazy.encode = [&](ThreadPool& pool, std::vector<float>* embeds) -> StatusOr<bool> {
    ran_on = std::this_thread::get_id();
    EXPECT_GE(pool.num_threads(), 1);
    if (++calls < 3) return false;
    embeds->assign(8, 0.5f);
    return true;
  };
  const Result encoded = Collect(engine->Submit(lazy));
  EXPECT_TRUE(encoded.error.ok()) << encoded.error.ToString();
  EXPECT_EQ(encoded.tokens, given.tokens);
  EXPECT_EQ(calls, 3);
  EXPECT_NE(ran_on, std::this_thread::get_id());
  // A failing encoder ends its request with that error; a wrong size is refused by validation.
  EngineRequest bad = with_rows("bad", {});
  bad.encode = [](ThreadPool&, std::vector<float>*) -> StatusOr<bool> { return Internal("encoder failed"); };
  const Result failed = Collect(engine->Submit(bad));
  EXPECT_EQ(failed.error.code(), StatusCode::kInternal);
  EXPECT_EQ(failed.finish_reason, "error");
  EngineRequest short_rows = with_rows("short", {});
  short_rows.encode = [](ThreadPool&, std::vector<float>* e) -> StatusOr<bool> {
    e->assign(3, 0.0f);
    return true;
  };
  EXPECT_EQ(Collect(engine->Submit(short_rows)).error.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Collect(engine->Submit(Req("after", {1, 2}, 2))).error.ok());
}

TEST(EngineTest, RunningStreamsStepBetweenEncoderPieces) {
  // A long encoder job (one piece per engine step) must not hold a decoding stream: forward
  // steps run between its pieces, and a cancel reaches it before it is admitted.
  FakeModel* fake = nullptr;
  FakeModelOptions slow_steps;
  slow_steps.step_delay_us = 1000;  // the running stream lasts ~300 ms: it outlives the job
  auto engine = MakeFakeEngine(SmallConfig(), slow_steps, &fake);
  auto running = engine->Submit(Req("running", {1, 2, 3}, 300));
  TokenEvent first;
  ASSERT_TRUE(running->Next(&first, std::chrono::seconds(10)));  // it is decoding now
  std::vector<int64_t> steps_seen;
  EngineRequest img = Req("img", Range(1, 14), 2);
  img.embed_rows = {2};
  Engine* e = engine.get();
  img.encode = [&, e](ThreadPool&, std::vector<float>* embeds) -> StatusOr<bool> {
    steps_seen.push_back(e->Stats().num_steps);
    if (steps_seen.size() < 6) return false;
    embeds->assign(4, 0.25f);
    return true;
  };
  const Result r = Collect(engine->Submit(img));
  EXPECT_TRUE(r.error.ok()) << r.error.ToString();
  ASSERT_EQ(steps_seen.size(), 6u);
  EXPECT_GT(steps_seen.back(), steps_seen.front()) << "no forward step ran between the pieces";
  Collect(running);
  // Cancelled while encoding: an "abort" with no error, and its job is not called again.
  std::atomic<int> pieces{0};
  EngineRequest slow = Req("slow", Range(1, 14), 2);
  slow.embed_rows = {2};
  slow.encode = [&](ThreadPool&, std::vector<float>*) -> StatusOr<bool> {
    ++pieces;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return false;  // never finishes by itself
  };
  auto stream = engine->Submit(slow);
  while (pieces == 0) std::this_thread::yield();
  engine->Cancel("slow");
  const Result aborted = Collect(stream);
  EXPECT_EQ(aborted.finish_reason, "abort");
  EXPECT_TRUE(aborted.error.ok());
  const int after = pieces.load();
  EXPECT_TRUE(Collect(engine->Submit(Req("next", {1, 2}, 2))).error.ok());
  EXPECT_EQ(pieces, after);
}

TEST(EngineTest, HybridModelUsesStateSlotsAndNoPrefixCache) {
  EngineConfig c = SmallConfig();
  c.num_kv_blocks = 12;
  c.max_num_seqs = 4;
  c.num_state_slots = 3;  // fewer than max_num_seqs: admission waits for a slot
  FakeModelOptions o;
  o.state_slot_bytes = 8;
  FakeModel* fake = nullptr;
  auto engine = MakeFakeEngine(c, o, &fake);
  EXPECT_FALSE(engine->Stats().prefix_caching_enabled);
  std::vector<EngineRequest> reqs;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 6; ++i) {
    // 6 prompt tokens take 2 blocks: four would be admitted at once but for the slots.
    reqs.push_back(Req("h" + std::to_string(i), Range(5 * i, 5 * i + 6), 20));
    prompts.push_back(reqs.back().prompt);
  }
  reqs.push_back(reqs[0]);  // same prompt again: must not hit a cache
  reqs.back().request_id = "repeat";
  prompts.push_back(prompts[0]);
  auto streams = SubmitTogether(*engine, *fake, reqs);
  for (size_t i = 0; i < streams.size(); ++i) {
    Result r = Collect(streams[i]);
    ASSERT_TRUE(r.error.ok()) << r.error.ToString();  // the fake checks its state per step
    EXPECT_EQ(r.tokens, OracleGreedy(prompts[i], 20, 97)) << i;
    EXPECT_EQ(r.last.num_cached_tokens, 0);
  }
  for (const FakeStep& s : fake->Steps()) EXPECT_LE(s.seqs.size(), 3u);
  EXPECT_GT(engine->Stats().num_preemptions, 0);
}

TEST(EngineTest, ShutdownAbortsInFlightAndRejectsLater) {
  FakeModelOptions o;
  o.step_delay_us = 1000;
  auto engine = MakeFakeEngine(SmallConfig(), o, nullptr);
  auto s1 = engine->Submit(Req("a", {1, 2}, 900));
  auto s2 = engine->Submit(Req("b", {3, 4}, 900));
  TokenEvent e;
  ASSERT_TRUE(s1->Next(&e, std::chrono::milliseconds(20000)));
  engine->Shutdown();
  EXPECT_EQ(Collect(s1).finish_reason, "abort");
  EXPECT_EQ(Collect(s2).finish_reason, "abort");
  Result late = Collect(engine->Submit(Req("late", {1}, 1)));
  EXPECT_EQ(late.error.code(), StatusCode::kUnavailable);
  engine->Shutdown();  // idempotent
}

TEST(EngineTest, FailedForwardEndsOnlyItsRequests) {
  FakeModelOptions o;
  o.fail_token = 66;
  auto engine = MakeFakeEngine(SmallConfig(), o, nullptr);
  Result bad = Collect(engine->Submit(Req("bad", {1, 66, 2}, 4)));
  EXPECT_EQ(bad.error.code(), StatusCode::kInternal);
  EXPECT_EQ(bad.finish_reason, "error");
  EngineStats s = engine->Stats();
  EXPECT_EQ(s.num_free_blocks, s.num_total_blocks);
  Result good = Collect(engine->Submit(Req("good", {1, 2}, 4)));
  EXPECT_TRUE(good.error.ok());
  EXPECT_EQ(good.tokens, OracleGreedy({1, 2}, 4, 97));
}

}  // namespace
}  // namespace cpm
