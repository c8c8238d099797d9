#include "engine/offline_generator.h"

#include <algorithm>
#include <memory>

#include "kv/block_pool.h"
#include "kv/kv_cache.h"
#include "kv/state_slots.h"
#include "sampling/sampler.h"

namespace cpm {
namespace {

struct SeqState {
  const GenerateRequest* req = nullptr;
  GenerateResult result;
  std::vector<int32_t> tokens;  // prompt then generated
  std::vector<int32_t> blocks;
  int64_t computed = 0;  // tokens whose K/V are in the cache
  int32_t state_slot = -1;  // hybrid models: this sequence's recurrent state
  int64_t max_tokens = 0;   // the request's, within what the context leaves
  bool done = false;
  Rng rng;
};

// Records the full row and/or the top log-probs for one logits row of `s`.
void RecordRow(SeqState& s, const std::vector<float>& logprobs, float logsumexp,
               int64_t prompt_pos) {
  if (s.req->record_logprob_rows) {
    s.result.logprob_rows.push_back(logprobs);
    s.result.row_logsumexps.push_back(logsumexp);
    if (prompt_pos >= 0) s.result.row_positions.push_back(prompt_pos);
  }
}

// The multimodal rows of `r` among its tokens [computed, computed + n), placed at batch rows
// from `first_row` on.
void AddEmbedRows(const GenerateRequest& r, int64_t computed, int64_t n, int64_t first_row,
                  int64_t hidden, std::vector<int64_t>* rows, std::vector<float>* embeds) {
  for (size_t j = 0; j < r.embed_rows.size(); ++j) {
    const int64_t row = r.embed_rows[j];
    if (row < computed || row >= computed + n) continue;
    rows->push_back(first_row + row - computed);
    const float* e = r.embeds.data() + static_cast<int64_t>(j) * hidden;
    embeds->insert(embeds->end(), e, e + hidden);
  }
}

}  // namespace

StatusOr<std::vector<GenerateResult>> OfflineGenerator::Run(
    const std::vector<GenerateRequest>& requests) {
  const ModelInfo& info = model_.info();
  const int64_t bs = options_.block_size, vocab = info.vocab_size;
  int64_t total_blocks = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerateRequest& r = requests[i];
    if (r.prompt.empty()) return InvalidArgument("a prompt needs at least one token");
    if (info.max_positions > 0 && static_cast<int64_t>(r.prompt.size()) > info.max_positions) {
      return InvalidArgument("prompt " + std::to_string(i) + " has " +
                             std::to_string(r.prompt.size()) + " tokens, beyond the model's " +
                             std::to_string(info.max_positions) + " positions (--max-model-len)");
    }
    if (r.embeds.size() != r.embed_rows.size() * static_cast<size_t>(info.hidden_size))
      return InvalidArgument("embeds must hold embed_rows.size() x hidden_size floats");
    total_blocks += BlocksForTokens(static_cast<int64_t>(r.prompt.size()) + r.max_tokens, bs);
  }
  KvCache kv(info.kv, std::max<int64_t>(1, total_blocks), bs, info.dtype);
  BlockPool blocks(kv.num_blocks());
  // Hybrid models keep a recurrent state per sequence beside its KV blocks.
  std::unique_ptr<StateSlots> states;
  if (info.state_slot_bytes > 0) {
    states = std::make_unique<StateSlots>(static_cast<int64_t>(requests.size()), info.state_slot_bytes);
  }

  std::vector<SeqState> seqs(requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    seqs[i].req = &requests[i];
    seqs[i].tokens = requests[i].prompt;
    // Generation stops where the context ends ("length"), as the server's does.
    const int64_t room = info.max_positions - static_cast<int64_t>(requests[i].prompt.size());
    seqs[i].max_tokens = info.max_positions > 0 ? std::min(requests[i].max_tokens, room)
                                                : requests[i].max_tokens;
    seqs[i].rng.seed(requests[i].sampling.seed.value_or(options_.seed + i));
    if (states) seqs[i].state_slot = *states->Allocate();
    if (requests[i].max_tokens == 0) {
      seqs[i].done = true;
      seqs[i].result.finish_reason = "length";
    }
  }
  // A request with max_tokens 0 still gets its prompt log-prob rows if asked for.
  for (SeqState& s : seqs) {
    if (s.done && s.req->record_logprob_rows) s.done = false;
  }

  std::vector<int32_t> tokens;
  std::vector<SeqStep> steps;
  std::vector<int64_t> logit_rows;
  std::vector<std::pair<size_t, int64_t>> row_owner;  // (seq, prompt position or -1 if last)
  std::vector<float> logits, logprobs(vocab);
  std::vector<int64_t> embed_rows;  // this step's multimodal rows and their embeddings
  std::vector<float> embeds;
  const int64_t hidden = model_.info().hidden_size;
  for (;;) {
    tokens.clear();
    steps.clear();
    logit_rows.clear();
    row_owner.clear();
    embed_rows.clear();
    embeds.clear();
    std::vector<size_t> in_step;
    for (size_t i = 0; i < seqs.size(); ++i) {
      SeqState& s = seqs[i];
      if (s.done) continue;
      const int64_t total = static_cast<int64_t>(s.tokens.size());
      const int64_t prompt_len = static_cast<int64_t>(s.req->prompt.size());
      int64_t n = total - s.computed;
      if (s.computed < prompt_len && options_.prefill_chunk > 0) {
        // A multiple of a hybrid model's prompt chunks (when it reaches one), as the server's
        // scheduler stops a prefill, so that both compute the same.
        const int64_t pc = model_.info().prompt_chunk_tokens;
        const int64_t chunk = options_.prefill_chunk >= pc ? options_.prefill_chunk / pc * pc
                                                           : options_.prefill_chunk;
        n = std::min(n, chunk);
      }
      const int64_t need = BlocksForTokens(s.computed + n, bs) - static_cast<int64_t>(s.blocks.size());
      if (!blocks.AllocateN(need, &s.blocks)) return Internal("KV blocks ran out");
      const int64_t first_row = static_cast<int64_t>(tokens.size());
      tokens.insert(tokens.end(), s.tokens.begin() + s.computed, s.tokens.begin() + s.computed + n);
      AddEmbedRows(*s.req, s.computed, n, first_row, hidden, &embed_rows, &embeds);
      steps.push_back({s.computed, n, s.blocks, s.state_slot, prompt_len});
      const bool reaches_end = s.computed + n == total;
      if (s.req->record_logprob_rows && s.req->all_prompt_positions) {
        for (int64_t j = 0; j < n; ++j) {
          const int64_t pos = s.computed + j;
          if (pos < prompt_len - 1) {
            logit_rows.push_back(first_row + j);
            row_owner.emplace_back(i, pos);
          }
        }
      }
      if (reaches_end) {
        logit_rows.push_back(first_row + n - 1);
        row_owner.emplace_back(i, -1);
      }
      in_step.push_back(i);
      s.computed += n;
    }
    if (steps.empty()) break;
    logits.resize(logit_rows.size() * vocab);
    ForwardBatch batch;
    batch.tokens = tokens;
    batch.seqs = steps;
    batch.logit_rows = logit_rows;
    batch.embed_rows = embed_rows;
    batch.embeds = embeds.empty() ? nullptr : embeds.data();
    CPM_RETURN_IF_ERROR(model_.Forward(batch, kv, states.get(), logits.data(), pool_));

    for (size_t r = 0; r < row_owner.size(); ++r) {
      SeqState& s = seqs[row_owner[r].first];
      float* row = logits.data() + r * vocab;
      const float logsumexp = LogSoftmax(row, vocab, logprobs.data());
      const int64_t prompt_len = static_cast<int64_t>(s.req->prompt.size());
      if (row_owner[r].second >= 0) {  // an intermediate prompt position
        RecordRow(s, logprobs, logsumexp, row_owner[r].second);
        continue;
      }
      const bool is_prompt_end = static_cast<int64_t>(s.tokens.size()) == prompt_len;
      RecordRow(s, logprobs, logsumexp, is_prompt_end ? prompt_len - 1 : -1);
      if (static_cast<int64_t>(s.result.output.size()) >= s.max_tokens) {
        s.done = true;  // max_tokens 0 with recorded rows
        s.result.finish_reason = "length";
        continue;
      }
      ApplyPenalties(row, vocab, s.req->sampling, s.req->prompt, s.result.output);
      const int32_t tok = SampleToken(row, vocab, s.req->sampling, s.rng);
      if (s.req->top_logprobs > 0) {
        TokenLogprobs tl{tok, logprobs[tok], TopK(logprobs.data(), vocab, s.req->top_logprobs)};
        s.result.logprobs.push_back(std::move(tl));
      }
      s.result.output.push_back(tok);
      s.tokens.push_back(tok);
      const bool stop = !s.req->ignore_eos && std::count(s.req->stop_token_ids.begin(),
                                                        s.req->stop_token_ids.end(), tok) > 0;
      if (stop || static_cast<int64_t>(s.result.output.size()) >= s.max_tokens) {
        s.done = true;
        s.result.finish_reason = stop ? "stop" : "length";
      }
    }
    for (size_t i : in_step) {
      if (seqs[i].done) blocks.ReleaseAll(seqs[i].blocks), seqs[i].blocks.clear();
    }
  }
  std::vector<GenerateResult> out;
  for (SeqState& s : seqs) out.push_back(std::move(s.result));
  return out;
}

}  // namespace cpm
