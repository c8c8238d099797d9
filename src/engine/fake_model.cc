#include "engine/fake_model.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "kv/state_slots.h"

namespace cpm {
namespace {

uint64_t Fold(uint64_t h, float v) { return h * 1000003ull + static_cast<uint64_t>(static_cast<int64_t>(v)) + 1; }

// The K value of a row: its token id, or a stand-in for an embedding (outside the vocab).
float RowValue(const ForwardBatch& b, int64_t row, int64_t hidden, int64_t vocab) {
  for (size_t i = 0; i < b.embed_rows.size(); ++i) {
    if (b.embed_rows[i] != row) continue;
    uint64_t h = 1469598103934665603ull;
    const float* e = b.embeds + static_cast<int64_t>(i) * hidden;
    for (int64_t j = 0; j < hidden; ++j) {
      uint32_t w;
      std::memcpy(&w, e + j, 4);
      h = (h ^ w) * 1099511628211ull;
    }
    return static_cast<float>(vocab + static_cast<int64_t>(h % (1u << 20)));
  }
  return static_cast<float>(b.tokens[row]);
}

}  // namespace

FakeModel::FakeModel(const FakeModelOptions& options) : options_(options) {
  info_.architecture = "FakeModel";
  info_.vocab_size = options.vocab_size;
  info_.hidden_size = 4;
  info_.max_position_embeddings = options.max_position_embeddings;
  info_.dtype = DType::kF32;
  info_.kv = {1, 1, 1};
  info_.state_slot_bytes = options.state_slot_bytes;
}

void FakeModel::Logits(uint64_t history, int64_t pos, int64_t vocab, float* out) {
  for (int64_t v = 0; v < vocab; ++v) {
    const uint64_t x = (history ^ (static_cast<uint64_t>(pos) << 40)) * 0x9E3779B97F4A7C15ull + v * 0xBF58476D1CE4E5B9ull;
    out[v] = static_cast<float>((x >> 40) % 1000) / 100.0f;  // [0, 10), distinct enough
  }
}

Status FakeModel::Forward(const ForwardBatch& batch, KvCache& kv, StateSlots* states, float* logits,
                          ThreadPool& pool) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (paused_) {
      blocked_ = true;
      cv_.notify_all();
      cv_.wait(lock, [&] { return !paused_; });
      blocked_ = false;
    }
    FakeStep step;
    step.seqs.assign(batch.seqs.begin(), batch.seqs.end());
    for (SeqStep& s : step.seqs) s.block_table = {};
    step.num_tokens = static_cast<int64_t>(batch.tokens.size());
    step.num_logit_rows = static_cast<int64_t>(batch.logit_rows.size());
    steps_.push_back(std::move(step));
  }
  if (options_.step_delay_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(options_.step_delay_us));
  for (int32_t t : batch.tokens) {
    if (t == options_.fail_token) return Internal("fake model: asked to fail");
  }
  float* k = static_cast<float*>(kv.Layer(0).k);
  const int64_t bs = kv.block_size();
  auto slot = [&](const SeqStep& s, int64_t pos) { return s.block_table[pos / bs] * bs + pos % bs; };
  int64_t row = 0, out_row = 0;
  for (const SeqStep& s : batch.seqs) {
    uint64_t h = 0;
    for (int64_t p = 0; p < s.num_computed; ++p) h = Fold(h, k[slot(s, p)]);
    if (states && s.num_computed > 0) {
      // The recurrent state must summarise exactly the computed prefix (a first step starts
      // from the zero state, whatever the slot held: the Model contract).
      uint64_t st;
      std::memcpy(&st, states->Data(s.state_slot), 8);
      if (st != h) return Internal("fake model: recurrent state does not match the cached prefix");
    }
    for (int64_t i = 0; i < s.num_tokens; ++i, ++row) {
      const int64_t pos = s.num_computed + i;
      k[slot(s, pos)] = RowValue(batch, row, info_.hidden_size, info_.vocab_size);
      h = Fold(h, k[slot(s, pos)]);
      if (out_row < static_cast<int64_t>(batch.logit_rows.size()) && batch.logit_rows[out_row] == row) {
        Logits(h, pos, info_.vocab_size, logits + out_row * info_.vocab_size);
        ++out_row;
      }
    }
    if (states) std::memcpy(states->Data(s.state_slot), &h, 8);
  }
  if (out_row != static_cast<int64_t>(batch.logit_rows.size())) return Internal("fake model: unsorted logit rows");
  return OkStatus();
}

std::vector<FakeStep> FakeModel::Steps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return steps_;
}

void FakeModel::Pause() {
  std::lock_guard<std::mutex> lock(mu_);
  paused_ = true;
}

void FakeModel::WaitUntilBlocked() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return blocked_; });
}

void FakeModel::Resume() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    paused_ = false;
  }
  cv_.notify_all();
}

}  // namespace cpm
