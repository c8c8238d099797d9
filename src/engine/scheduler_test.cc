// Scheduler tests without a model or an engine thread: each step is planned, then "run" by
// advancing num_computed and appending a token where the sequence reached its end.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace cpm {
namespace {

class SchedulerTest : public ::testing::Test {
 protected:
  void Init(int64_t num_blocks, int64_t block_size, SchedulerConfig config, bool prefix = true,
            int64_t num_slots = 0) {
    pool_ = std::make_unique<BlockPool>(num_blocks);
    kv_ = std::make_unique<KvCacheManager>(*pool_, block_size, prefix, 99);
    if (num_slots > 0) slots_ = std::make_unique<StateSlots>(num_slots, 16);
    sched_ = std::make_unique<Scheduler>(config, *kv_, slots_.get());
  }

  RequestState* Add(const std::string& id, int64_t prompt_len, int64_t max_tokens, int32_t first = 0,
                    int64_t priority = 0) {
    auto r = std::make_unique<RequestState>();
    r->req.request_id = id;
    r->req.max_tokens = max_tokens;
    r->req.priority = priority;
    r->seq_no = next_seq_no_++;
    for (int64_t i = 0; i < prompt_len; ++i) r->tokens.push_back(first + static_cast<int32_t>(i));
    r->num_prompt_tokens = prompt_len;
    RequestState* p = r.get();
    EXPECT_TRUE(sched_->CheckFits(*p).ok());
    sched_->Add(std::move(r));
    return p;
  }

  // Plans a step and applies it; returns (id, tokens) per scheduled sequence.
  std::vector<std::pair<std::string, int64_t>> Step(SchedulerOutput* plan_out = nullptr) {
    SchedulerOutput plan = sched_->Schedule();
    std::vector<std::pair<std::string, int64_t>> got;
    std::vector<RequestState*> done;
    for (const ScheduledSeq& s : plan.seqs) {
      got.emplace_back(s.req->req.request_id, s.num_tokens);
      EXPECT_GE(static_cast<int64_t>(s.req->blocks.size()) * kv_->block_size(), s.req->num_computed + s.num_tokens);
      s.req->num_computed += s.num_tokens;
      kv_->CacheFullBlocks(*s.req);
      if (s.req->num_computed == s.req->num_tokens()) {
        s.req->tokens.push_back(7);
        if (s.req->num_output_tokens() >= s.req->req.max_tokens) done.push_back(s.req);
      }
    }
    for (RequestState* r : done) sched_->Remove(r);
    if (plan_out) *plan_out = plan;
    return got;
  }

  using Plan = std::vector<std::pair<std::string, int64_t>>;
  int64_t next_seq_no_ = 0;
  std::unique_ptr<BlockPool> pool_;
  std::unique_ptr<KvCacheManager> kv_;
  std::unique_ptr<StateSlots> slots_;
  std::unique_ptr<Scheduler> sched_;
};

TEST_F(SchedulerTest, RunningFirstThenChunksOfWaiting) {
  Init(100, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 16});
  Add("a", 40, 3);
  EXPECT_EQ(Step(), (Plan{{"a", 16}}));
  EXPECT_EQ(Step(), (Plan{{"a", 16}}));
  Add("b", 10, 2, 50);
  EXPECT_EQ(Step(), (Plan{{"a", 8}, {"b", 8}}));  // a finishes its prompt, b starts
  EXPECT_EQ(Step(), (Plan{{"a", 1}, {"b", 2}}));  // a decodes, b finishes its prompt
  EXPECT_EQ(Step(), (Plan{{"a", 1}, {"b", 1}}));
  EXPECT_EQ(sched_->num_running(), 0);
  EXPECT_TRUE(sched_->empty());
  EXPECT_EQ(pool_->num_free(), 100);
}

// A hybrid model's prompt chunks (prompt_chunk_tokens 8 here): a step that stops inside a
// prompt stops on a multiple of 8, whatever budget the decodes leave; a step whose budget does
// not reach the next multiple leaves the prefill for later; past the prompt, no rule.
TEST_F(SchedulerTest, PromptChunksStopOnTheModelsChunkBoundaries) {
  Init(100, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 13, .prompt_chunk_tokens = 8});
  Add("a", 3, 4);
  EXPECT_EQ(Step(), (Plan{{"a", 3}}));  // the whole prompt: no boundary needed
  Add("b", 30, 2, 50);
  EXPECT_EQ(Step(), (Plan{{"a", 1}, {"b", 8}}));  // 12 left: b stops at 8, not 12
  EXPECT_EQ(Step(), (Plan{{"a", 1}, {"b", 8}}));  // 8 to 16
  Add("c", 5, 1, 80);
  EXPECT_EQ(Step(), (Plan{{"a", 1}, {"b", 8}}));  // 16 to 24; the 4 left stop short of c's 8
  EXPECT_EQ(Step(), (Plan{{"b", 6}, {"c", 5}}));  // b's and c's prompts end: no boundary needed
  EXPECT_EQ(Step(), (Plan{{"b", 1}}));
  Add("d", 20, 1, 90);
  Add("e", 2, 1, 95);
  EXPECT_EQ(Step(), (Plan{{"d", 8}, {"e", 2}}));
  EXPECT_EQ(Step(), (Plan{{"d", 12}}));
  EXPECT_TRUE(sched_->empty());
}

// vLLM's --long-prefill-token-threshold: a request takes at most that many tokens a step, so
// long prompts leave the rest of the budget to others; rounded up to the prompt chunks.
TEST_F(SchedulerTest, LongPrefillThresholdCapsEachRequestsShare) {
  Init(100, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 16, .long_prefill_token_threshold = 6});
  Add("a", 20, 1);
  Add("b", 5, 1, 50);
  EXPECT_EQ(Step(), (Plan{{"a", 6}, {"b", 5}}));  // without the cap: a 16, b only 0
  EXPECT_EQ(Step(), (Plan{{"a", 6}}));
  EXPECT_EQ(Step(), (Plan{{"a", 6}}));
  EXPECT_EQ(Step(), (Plan{{"a", 2}}));
  EXPECT_TRUE(sched_->empty());
  // Hybrid chunks of 8: the cap 6 becomes 8, so prefills still stop on chunk boundaries.
  Init(100, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 32, .prompt_chunk_tokens = 8,
                .long_prefill_token_threshold = 6});
  Add("c", 20, 1);
  EXPECT_EQ(Step(), (Plan{{"c", 8}}));
  EXPECT_EQ(Step(), (Plan{{"c", 8}}));
  EXPECT_EQ(Step(), (Plan{{"c", 4}}));
  // A decode's draft counts against the cap too (vLLM's num_new_tokens holds it).
  Init(100, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 32, .long_prefill_token_threshold = 6});
  RequestState* d = Add("d", 3, 10);
  Step();
  d->draft.assign(16, 5);
  SchedulerOutput plan;
  Step(&plan);
  ASSERT_EQ(plan.seqs.size(), 1u);
  EXPECT_EQ(plan.seqs[0].num_tokens + plan.seqs[0].num_draft, 6);
}

// Prompt log-prob rows (a vocab-wide logits row each) are bounded per step over all requests,
// not per request: the logits buffer stays within kPromptLogprobsChunk rows.
TEST_F(SchedulerTest, PromptLogprobRowsAreBoundedPerStep) {
  ASSERT_EQ(kPromptLogprobsChunk, 256);
  Init(400, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 1024});
  Add("a", 300, 1)->req.prompt_logprobs = 0;
  Add("b", 300, 1, 50)->req.prompt_logprobs = 0;
  Add("c", 10, 1, 90);  // needs no rows: not held back by b
  EXPECT_EQ(Step(), (Plan{{"a", 256}, {"c", 10}}));  // b waits: no rows left
  // A prompt's last position has no row (its next token is no prompt token): a's 44 tokens
  // take 43 of the 256.
  EXPECT_EQ(Step(), (Plan{{"a", 44}, {"b", 213}}));
  EXPECT_EQ(Step(), (Plan{{"b", 87}}));
  EXPECT_TRUE(sched_->empty());
}

// Priority preemption of a request met earlier in the step but left out of the plan (a prefill
// short of its chunk boundary) takes nothing else out of the plan (it read past the plan).
TEST_F(SchedulerTest, PriorityPreemptionOfARequestLeftOutOfThePlan) {
  Init(15, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 24, .priority_policy = true,
               .prompt_chunk_tokens = 8});
  RequestState* x = Add("x", 4, 30, 0, /*priority=*/0);
  EXPECT_EQ(Step(), (Plan{{"x", 4}}));
  Add("a", 40, 5, 30, /*priority=*/9);  // the lowest priority: the victim
  EXPECT_EQ(Step(), (Plan{{"x", 1}, {"a", 16}}));
  Add("b", 4, 30, 60, /*priority=*/1);
  EXPECT_EQ(Step(), (Plan{{"x", 1}, {"a", 16}, {"b", 4}}));  // blocks: x 2, a 8, b 1 of 15
  // x's draft of 16 takes 17 of the 24 tokens and the 4 blocks left: a's 7 stop short of its
  // next boundary, so it is left out of the plan; b's next token needs a block, and a, met
  // before b but not planned, is preempted for it.
  x->draft.assign(16, 5);
  SchedulerOutput plan;
  const Plan got = Step(&plan);
  ASSERT_EQ(plan.preempted.size(), 1u);
  EXPECT_EQ(plan.preempted[0]->req.request_id, "a");
  EXPECT_EQ(got, (Plan{{"x", 1}, {"b", 1}}));
  ASSERT_EQ(plan.seqs.size(), 2u);
  EXPECT_EQ(plan.seqs[0].num_draft, 16);
}

TEST_F(SchedulerTest, WithoutChunkedPrefillPromptsWaitForRoomForAllOfThem) {
  Init(100, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 16, .enable_chunked_prefill = false});
  Add("a", 10, 3);
  Add("b", 10, 2, 50);  // 10 more do not fit beside a's 10: b waits, whole
  Add("c", 2, 1, 80);   // would fit, but FCFS keeps it behind b
  EXPECT_EQ(Step(), (Plan{{"a", 10}}));
  EXPECT_EQ(Step(), (Plan{{"a", 1}, {"b", 10}, {"c", 2}}));
  EXPECT_EQ(Step(), (Plan{{"a", 1}, {"b", 1}}));
  EXPECT_TRUE(sched_->empty());
  // What counts is the prompt less its cached prefix: 24 tokens, 8 of them a's cached blocks.
  Add("d", 24, 1);
  EXPECT_EQ(Step(), (Plan{{"d", 16}}));
  EXPECT_TRUE(sched_->empty());
}

TEST_F(SchedulerTest, PriorityPolicyOrdersTheWaitingQueue) {
  Init(100, 4, {.max_num_seqs = 1, .max_num_batched_tokens = 100, .priority_policy = true});
  Add("a", 3, 1, 0, 0);
  Add("b", 3, 1, 10, 5);
  Add("c", 3, 1, 20, -1);
  Add("d", 3, 1, 30, 0);  // same priority as a: after it (arrival)
  EXPECT_EQ(Step(), (Plan{{"c", 3}}));
  EXPECT_EQ(Step(), (Plan{{"a", 3}}));
  EXPECT_EQ(Step(), (Plan{{"d", 3}}));
  EXPECT_EQ(Step(), (Plan{{"b", 3}}));
  EXPECT_TRUE(sched_->empty());
}

// Five blocks of 4. low (running first) holds three after its first decode, high's prompt the
// other two; high's first decode then needs a sixth.
TEST_F(SchedulerTest, PriorityPolicyPreemptsTheLowestPriorityEvenIfScheduled) {
  for (bool priority : {false, true}) {
    Init(5, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 100, .priority_policy = priority},
         /*prefix=*/false);
    next_seq_no_ = 0;
    RequestState* low = Add("low", 8, 4, 0, 9);
    EXPECT_EQ(Step(), (Plan{{"low", 8}}));
    Add("high", 8, 4, 100, 0);
    EXPECT_EQ(Step(), (Plan{{"low", 1}, {"high", 8}}));
    EXPECT_EQ(pool_->num_free(), 0);
    SchedulerOutput plan;
    const Plan got = Step(&plan);
    ASSERT_EQ(plan.preempted.size(), 1u);
    if (priority) {
      // low was planned first; high's need takes low out of the plan and frees its blocks.
      EXPECT_EQ(got, (Plan{{"high", 1}}));
      EXPECT_EQ(plan.preempted[0], low);
      EXPECT_EQ(plan.num_tokens, 1);
    } else {
      EXPECT_EQ(got, (Plan{{"low", 1}}));  // FCFS: the newest goes
      EXPECT_EQ(plan.preempted[0]->req.request_id, "high");
    }
    while (!sched_->empty()) Step();  // both finish, the preempted one recomputed
    EXPECT_EQ(pool_->num_free(), 5);
  }
}

TEST_F(SchedulerTest, MaxNumSeqsHoldsBackAdmissions) {
  Init(100, 4, {.max_num_seqs = 2, .max_num_batched_tokens = 100});
  Add("a", 3, 1);
  Add("b", 3, 2);
  Add("c", 3, 1);
  EXPECT_EQ(Step(), (Plan{{"a", 3}, {"b", 3}}));  // a is done
  EXPECT_EQ(sched_->num_waiting(), 1);
  EXPECT_EQ(Step(), (Plan{{"b", 1}, {"c", 3}}));
  EXPECT_TRUE(sched_->empty());
}

TEST_F(SchedulerTest, PreemptsNewestAndRequeuesItFirst) {
  // 6 blocks of 2 tokens. a and b take 2 blocks each for their prompts; decoding needs more.
  Init(6, 2, {.max_num_seqs = 8, .max_num_batched_tokens = 100}, /*prefix=*/false, /*num_slots=*/4);
  RequestState* a = Add("a", 4, 8);
  RequestState* b = Add("b", 4, 8, 50);
  Add("c", 2, 1, 80);
  EXPECT_EQ(Step(), (Plan{{"a", 4}, {"b", 4}, {"c", 2}}));  // 5 blocks; c finishes
  EXPECT_EQ(slots_->num_free(), 2);
  EXPECT_EQ(Step(), (Plan{{"a", 1}, {"b", 1}}));  // position 4: 3 blocks each, pool full
  EXPECT_EQ(Step(), (Plan{{"a", 1}, {"b", 1}}));  // position 5 fits
  SchedulerOutput plan;
  // Position 6: a needs a 4th block, so b (newest) is preempted: 3 blocks and its slot back.
  EXPECT_EQ(Step(&plan), (Plan{{"a", 1}}));
  ASSERT_EQ(plan.preempted.size(), 1u);
  EXPECT_EQ(plan.preempted[0], b);
  EXPECT_EQ(sched_->waiting().front(), b);
  EXPECT_EQ(b->num_computed, 0);
  EXPECT_TRUE(b->blocks.empty());
  EXPECT_EQ(b->state_slot, -1);
  EXPECT_EQ(slots_->num_free(), 3);
  EXPECT_EQ(b->num_tokens(), 7);  // its three outputs are kept and will be recomputed
  EXPECT_EQ(b->num_preemptions, 1);
  EXPECT_EQ(sched_->num_preemptions(), 1);
  EXPECT_EQ(a->blocks.size(), 4u);
  // a grows to the whole pool; b comes back afterwards with its history as the prompt.
  bool b_recomputed = false;
  for (int i = 0; i < 50 && !sched_->empty(); ++i) {
    for (const auto& [id, n] : Step()) b_recomputed |= id == "b" && n == 7;
  }
  EXPECT_TRUE(sched_->empty());
  EXPECT_TRUE(b_recomputed);
  EXPECT_EQ(pool_->num_free(), 6);
  EXPECT_EQ(slots_->num_free(), 4);
}

TEST_F(SchedulerTest, PreemptedInFrontOfOlderWaitingRequests) {
  Init(4, 2, {.max_num_seqs = 8, .max_num_batched_tokens = 100}, false);
  Add("a", 2, 4);
  RequestState* b = Add("b", 2, 4, 10);
  EXPECT_EQ(Step(), (Plan{{"a", 2}, {"b", 2}}));
  Add("c", 5, 1, 20);  // needs 3 blocks: waits
  SchedulerOutput plan;
  for (int i = 0; i < 5 && plan.preempted.empty(); ++i) Step(&plan);
  ASSERT_EQ(plan.preempted.size(), 1u);
  EXPECT_EQ(plan.preempted[0], b);
  ASSERT_EQ(sched_->num_waiting(), 2);
  EXPECT_EQ(sched_->waiting().front(), b);
  EXPECT_EQ(sched_->waiting().back()->req.request_id, "c");
}

TEST_F(SchedulerTest, PrefixHitCountsAndSharedBlocks) {
  Init(20, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 100});
  RequestState* a = Add("a", 10, 3);
  Step();
  RequestState* b = Add("b", 10, 3);
  EXPECT_EQ(Step(), (Plan{{"a", 1}, {"b", 2}}));  // 8 of b's 10 tokens were cached
  EXPECT_EQ(b->num_cached_tokens, 8);
  EXPECT_EQ(a->blocks[0], b->blocks[0]);
  EXPECT_EQ(a->blocks[1], b->blocks[1]);
  EXPECT_NE(a->blocks[2], b->blocks[2]);  // the partial block is never shared
  EXPECT_EQ(pool_->RefCount(a->blocks[0]), 2);
  EXPECT_EQ(sched_->prefix_cache_queries(), 20);
  EXPECT_EQ(sched_->prefix_cache_hits(), 8);
}

// Blocks are cached when the step that computes them is planned, as vLLM caches them when it
// allocates them: a request admitted later in the same step (an n > 1 request's other choice,
// a shared system prompt) hits them and computes only the rest.
TEST_F(SchedulerTest, SameStepRequestsShareTheBlocksBeingComputed) {
  Init(20, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 100});
  RequestState* a = Add("a", 10, 2);
  RequestState* b = Add("b", 10, 2);
  EXPECT_EQ(Step(), (Plan{{"a", 10}, {"b", 2}}));
  EXPECT_EQ(b->num_cached_tokens, 8);
  EXPECT_EQ(a->blocks[1], b->blocks[1]);
  EXPECT_EQ(sched_->prefix_cache_hits(), 8);
  // A block cached for a step that never ran (its request preempted while planning, or the
  // forward failed) leaves the cache with the request: its K/V was never written.
  Init(20, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 100});
  auto r = std::make_unique<RequestState>();
  r->tokens.assign(10, 3);
  r->num_prompt_tokens = 10;
  ASSERT_TRUE(kv_->AllocateSlots(*r, 10, nullptr));
  kv_->CacheBlocksThrough(*r, 10);
  EXPECT_EQ(kv_->GetComputedBlocks(*r).num_tokens, 8);  // findable while planned
  kv_->Free(*r);
  EXPECT_EQ(kv_->GetComputedBlocks(*r).num_tokens, 0);
  EXPECT_EQ(pool_->num_cached_free(), 0);
}

// vLLM's cache_salt: equal prompts share cached blocks only under equal salts (the salt is in
// block 0's hash, and the chain carries it on).
TEST_F(SchedulerTest, CacheSaltSeparatesPrefixes) {
  Init(40, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 100});
  const auto run = [&](const std::string& id, const std::string& salt) {
    auto r = std::make_unique<RequestState>();
    r->req.request_id = id;
    r->req.max_tokens = 2;  // still running (not freed) after its first step
    r->req.cache_salt = salt;
    r->seq_no = next_seq_no_++;
    r->tokens.assign(10, 5);
    r->num_prompt_tokens = 10;
    RequestState* p = r.get();
    sched_->Add(std::move(r));
    Step();
    return p->num_cached_tokens;
  };
  EXPECT_EQ(run("a", "tenant-1"), 0);
  EXPECT_EQ(run("b", "tenant-1"), 8);
  EXPECT_EQ(run("c", "tenant-2"), 0);
  EXPECT_EQ(run("d", ""), 0);
  EXPECT_EQ(run("e", ""), 8);
  EXPECT_EQ(run("f", "tenant-2"), 8);
}

// Requests that skip the lookup (prompt_logprobs, or caching off) are no prefix-cache queries.
TEST_F(SchedulerTest, OnlyLookupsArePrefixCacheQueries) {
  Init(40, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 100});
  RequestState* a = Add("a", 10, 1);
  a->req.prompt_logprobs = 0;
  Step();
  EXPECT_EQ(sched_->prefix_cache_queries(), 0);
  Add("b", 10, 1);
  Step();
  EXPECT_EQ(sched_->prefix_cache_queries(), 10);
  Init(40, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 100}, /*prefix=*/false);
  Add("c", 10, 1);
  Step();
  EXPECT_EQ(sched_->prefix_cache_queries(), 0);
}

TEST_F(SchedulerTest, CheckFitsRejectsRequestsLargerThanTheCache) {
  Init(4, 4, {.max_num_seqs = 8, .max_num_batched_tokens = 100, .max_model_len = 100});
  RequestState r;
  r.tokens.assign(10, 1);
  r.num_prompt_tokens = 10;
  r.req.max_tokens = 7;  // 16 tokens in the cache at most: fits exactly
  EXPECT_TRUE(sched_->CheckFits(r).ok());
  r.req.max_tokens = 8;
  EXPECT_EQ(sched_->CheckFits(r).code(), StatusCode::kResourceExhausted);
  // max_tokens 0 (prompt log-probs only): every prompt token is fed, the last one too.
  r.tokens.assign(16, 1);
  r.num_prompt_tokens = 16;
  r.req.max_tokens = 0;
  r.req.prompt_logprobs = 0;
  EXPECT_TRUE(sched_->CheckFits(r).ok());
  r.tokens.assign(17, 1);
  r.num_prompt_tokens = 17;
  EXPECT_EQ(sched_->CheckFits(r).code(), StatusCode::kResourceExhausted);
}

}  // namespace
}  // namespace cpm
