// The Qwen3.5 hybrid model against the numpy float64 reference (tests/reference/qwen35_ref.py)
// on tiny checkpoints written by WriteTinyQwen35: one-shot prefill, chunked prefill of odd
// sizes, token-by-token decode and mixed batches with different state slots, all positions'
// log-probs compared. Also loading (vision validation, mtp skipping), the config of the real
// model, the input-embedding hook and the bf16 path.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include <unistd.h>

#include "io/mmap_file.h"
#include "io/safetensors.h"
#include "kv/kv_cache.h"
#include "kv/state_slots.h"
#include "model/qwen35_config.h"
#include "model/registry.h"
#include "model/tiny_minicpmv46.h"

namespace cpm {
namespace {

namespace fs = std::filesystem;
using Rows = std::vector<std::vector<double>>;  // [position, vocab] log-probs

constexpr int64_t kVocab = 300;

std::string TempDir(const std::string& name) {
  const fs::path p = fs::path(::testing::TempDir()) / ("qwen35_test_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::vector<int32_t> RandomIds(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, kVocab - 1);
  std::vector<int32_t> ids(n);
  for (int32_t& t : ids) t = d(rng);
  return ids;
}

std::string Join(const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s;
}

// Runs the reference CLI on every prompt; returns each prompt's all-position log-probs.
std::vector<Rows> Reference(const std::string& dir, const std::vector<std::vector<int32_t>>& prompts) {
  const std::string out = dir + "/ref.json";
  std::string cmd = std::string(CPM_PYTHON3) + " " + CPM_SOURCE_DIR +
                    "/tests/reference/qwen35_ref.py --model " + dir + " --out " + out;
  for (const auto& p : prompts) cmd += " --prompt-ids " + Join(p);
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto text = ReadTextFile(out);
  EXPECT_TRUE(text.ok());
  std::vector<Rows> rows;
  if (!text.ok()) return rows;
  const nlohmann::json j = nlohmann::json::parse(*text);
  for (const auto& s : j["sequences"]) rows.push_back(s["logprobs"].get<Rows>());
  return rows;
}

std::unique_ptr<Model> Load(const std::string& dir, DTypeChoice dtype, ThreadPool& pool) {
  LoadOptions o;
  o.model_dir = dir;
  o.dtype = dtype;
  auto m = LoadModel(o, pool);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return m.ok() ? std::move(*m) : nullptr;
}

// Drives Model::Forward directly: each sequence owns blocks and a state slot; a schedule is a
// list of steps, each a list of (sequence, new tokens). Every row's log-probs are kept.
class Driver {
 public:
  static constexpr int64_t kBlockSize = 4, kBlocksPerSeq = 64;
  Driver(Model& model, std::vector<std::vector<int32_t>> prompts, ThreadPool& pool)
      : model_(model), prompts_(std::move(prompts)), pool_(pool),
        kv_(model.info().kv, kBlocksPerSeq * static_cast<int64_t>(prompts_.size()), kBlockSize,
            model.info().dtype),
        slots_(static_cast<int64_t>(prompts_.size()) + 2, model.info().state_slot_bytes) {
    for (size_t i = 0; i < prompts_.size(); ++i) {
      // Interleaved block ids (seq i gets i, i+n, ...) and slots handed out in reverse.
      blocks_.emplace_back();
      for (int64_t b = 0; b < kBlocksPerSeq; ++b)
        blocks_.back().push_back(static_cast<int32_t>(b * prompts_.size() + i));
      done_.push_back(0);
      rows_.emplace_back();
    }
    for (size_t i = 0; i < prompts_.size() + 2; ++i) free_slots_.push_back(*slots_.Allocate());
    for (size_t i = 0; i < prompts_.size(); ++i) slot_.push_back(free_slots_[free_slots_.size() - 1 - i]);
  }

  Status Step(const std::vector<std::pair<int, int64_t>>& parts) {
    std::vector<int32_t> tokens;
    std::vector<SeqStep> steps;
    std::vector<int64_t> logit_rows;
    for (auto [s, n] : parts) {
      const int64_t begin = done_[s];
      for (int64_t i = 0; i < n; ++i) {
        logit_rows.push_back(static_cast<int64_t>(tokens.size()));
        tokens.push_back(prompts_[s][begin + i]);
      }
      steps.push_back({begin, n, blocks_[s], slot_[s], static_cast<int64_t>(prompts_[s].size())});
    }
    const int64_t V = model_.info().vocab_size;
    std::vector<float> logits(logit_rows.size() * V);
    ForwardBatch b;
    b.tokens = tokens;
    b.seqs = steps;
    b.logit_rows = logit_rows;
    b.embed_rows = embed_rows;
    b.embeds = embeds.empty() ? nullptr : embeds.data();
    CPM_RETURN_IF_ERROR(model_.Forward(b, kv_, &slots_, logits.data(), pool_));
    int64_t r = 0;
    for (auto [s, n] : parts) {
      for (int64_t i = 0; i < n; ++i, ++r) rows_[s].push_back(LogSoftmax(logits.data() + r * V, V));
      done_[s] += n;
    }
    return OkStatus();
  }

  // Runs each sequence alone in pieces of the given sizes (cycled) until its prompt is done.
  Status RunAlone(int s, const std::vector<int64_t>& pieces) {
    for (size_t k = 0; done_[s] < static_cast<int64_t>(prompts_[s].size()); ++k) {
      const int64_t n = std::min<int64_t>(pieces[k % pieces.size()], prompts_[s].size() - done_[s]);
      CPM_RETURN_IF_ERROR(Step({{s, n}}));
    }
    return OkStatus();
  }

  const Rows& rows(int s) const { return rows_[s]; }
  // Makes sequence `s` use sequence `other`'s state slot (a reused, non-zero slot).
  void ShareSlot(int s, int other) { slot_[s] = slot_[other]; }
  std::vector<int64_t> embed_rows;
  std::vector<float> embeds;

 private:
  static std::vector<double> LogSoftmax(const float* x, int64_t n) {
    const double mx = *std::max_element(x, x + n);
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - mx);
    std::vector<double> out(n);
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] - mx - std::log(sum);
    return out;
  }

  Model& model_;
  std::vector<std::vector<int32_t>> prompts_;
  ThreadPool& pool_;
  KvCache kv_;
  StateSlots slots_;
  std::vector<std::vector<int32_t>> blocks_;
  std::vector<int32_t> free_slots_, slot_;
  std::vector<int64_t> done_;
  std::vector<Rows> rows_;
};

struct Agreement {
  double top1 = 0;       // fraction of rows with the same argmax
  double max_abs = 0;    // max |Δ log-prob| over the reference's top-20 of every row
  double mean_kl = 0;    // mean KL(ref || engine)
};

Agreement Compare(const Rows& engine, const Rows& ref) {
  Agreement a;
  EXPECT_EQ(engine.size(), ref.size());
  const size_t n = std::min(engine.size(), ref.size());
  for (size_t r = 0; r < n; ++r) {
    const auto& e = engine[r];
    const auto& f = ref[r];
    std::vector<int> order(f.size());
    for (size_t i = 0; i < f.size(); ++i) order[i] = static_cast<int>(i);
    std::partial_sort(order.begin(), order.begin() + 20, order.end(), [&](int x, int y) { return f[x] > f[y]; });
    a.top1 += std::max_element(e.begin(), e.end()) - e.begin() == order[0];
    for (int k = 0; k < 20; ++k) a.max_abs = std::max(a.max_abs, std::abs(e[order[k]] - f[order[k]]));
    for (size_t i = 0; i < f.size(); ++i) a.mean_kl += std::exp(f[i]) * (f[i] - e[i]);
  }
  a.top1 /= std::max<size_t>(1, n);
  a.mean_kl /= std::max<size_t>(1, n);
  return a;
}

#define EXPECT_MATCHES_REFERENCE(engine_rows, ref_rows)          \
  do {                                                           \
    const Agreement ag = Compare(engine_rows, ref_rows);         \
    EXPECT_EQ(ag.top1, 1.0);                                     \
    EXPECT_LE(ag.max_abs, 2e-3);                                 \
    std::printf("  top1 %.4f  max|dlogprob| %.3g  kl %.3g\n", ag.top1, ag.max_abs, ag.mean_kl); \
  } while (0)

// One float32 MiniCPM-V-4.6 tiny checkpoint and its reference log-probs, shared by the suite.
class Qwen35Test : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(TempDir("minicpmv46"));
    TinyCheckpointOptions o;
    o.out_dir = *dir_;
    o.seed = 7;
    o.vocab_size = kVocab;
    o.storage = DType::kF32;
    o.eos_token_id = {2};
    ASSERT_TRUE(WriteTinyMiniCpmV46(o).ok());
    prompts_ = new std::vector<std::vector<int32_t>>{RandomIds(150, 1), RandomIds(37, 2), RandomIds(90, 3)};
    ref_ = new std::vector<Rows>(Reference(*dir_, *prompts_));
    ASSERT_EQ(ref_->size(), 3u);
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
    delete prompts_;
    delete ref_;
  }
  void SetUp() override { model_ = Load(*dir_, DTypeChoice::kFloat32, pool_); }

  ThreadPool pool_{2};
  std::unique_ptr<Model> model_;
  static std::string* dir_;
  static std::vector<std::vector<int32_t>>* prompts_;
  static std::vector<Rows>* ref_;
};
std::string* Qwen35Test::dir_ = nullptr;
std::vector<std::vector<int32_t>>* Qwen35Test::prompts_ = nullptr;
std::vector<Rows>* Qwen35Test::ref_ = nullptr;

TEST_F(Qwen35Test, InfoCountsOnlyFullAttentionLayers) {
  ASSERT_TRUE(model_);
  const ModelInfo& info = model_->info();
  EXPECT_EQ(info.architecture, "MiniCPMV4_6ForConditionalGeneration");
  EXPECT_EQ(info.dtype, DType::kF32);
  EXPECT_EQ(info.kv.num_attention_layers, 2);  // layers 3 and 7 of 8
  EXPECT_EQ(info.kv.num_kv_heads, 2);
  EXPECT_EQ(info.kv.head_dim, 32);
  // 6 linear layers × (conv state [3, 3·64] + S [4, 16, 16]) f32.
  EXPECT_EQ(info.state_slot_bytes, 6 * (3 * 192 + 4 * 16 * 16) * 4);
  EXPECT_EQ(info.eos_token_ids, std::vector<int32_t>{2});
}

TEST_F(Qwen35Test, OneShotPrefillMatchesReference) {
  ASSERT_TRUE(model_);
  Driver d(*model_, *prompts_, pool_);
  for (int s = 0; s < 3; ++s) {
    ASSERT_TRUE(d.RunAlone(s, {1000}).ok());  // 150 and 90 tokens: chunked rule; 37: recurrent
    EXPECT_MATCHES_REFERENCE(d.rows(s), (*ref_)[s]);
  }
}

TEST_F(Qwen35Test, ChunkedPrefillMatchesReference) {
  ASSERT_TRUE(model_);
  Driver d(*model_, *prompts_, pool_);
  ASSERT_TRUE(d.RunAlone(0, {1, 5, 64, 7, 70, 3}).ok());
  ASSERT_TRUE(d.RunAlone(1, {13}).ok());
  ASSERT_TRUE(d.RunAlone(2, {65, 2}).ok());
  for (int s = 0; s < 3; ++s) EXPECT_MATCHES_REFERENCE(d.rows(s), (*ref_)[s]);
}

TEST_F(Qwen35Test, TokenByTokenDecodeMatchesReference) {
  ASSERT_TRUE(model_);
  Driver d(*model_, *prompts_, pool_);
  ASSERT_TRUE(d.RunAlone(1, {1}).ok());
  ASSERT_TRUE(d.RunAlone(2, {1}).ok());
  for (int s = 1; s < 3; ++s) EXPECT_MATCHES_REFERENCE(d.rows(s), (*ref_)[s]);
}

TEST_F(Qwen35Test, MixedBatchesMatchReference) {
  ASSERT_TRUE(model_);
  Driver d(*model_, *prompts_, pool_);
  const std::vector<int64_t> sizes = {1, 20, 70, 3, 1, 9, 66};
  std::vector<int64_t> left = {150, 37, 90};
  for (int k = 0; left[0] + left[1] + left[2] > 0; ++k) {
    std::vector<std::pair<int, int64_t>> parts;
    for (int s : {2, 0, 1}) {  // not in slot or block order
      const int64_t n = std::min(left[s], sizes[(k + s) % sizes.size()]);
      if (n > 0) parts.push_back({s, n});
      left[s] -= n;
    }
    ASSERT_TRUE(d.Step(parts).ok());
  }
  for (int s = 0; s < 3; ++s) EXPECT_MATCHES_REFERENCE(d.rows(s), (*ref_)[s]);
}

// Embeddings passed for a row replace that row's token embedding exactly.
TEST_F(Qwen35Test, EmbedRowsReplaceTokenEmbeddings) {
  ASSERT_TRUE(model_);
  std::vector<int32_t> a = RandomIds(12, 9), b = a;
  b[5] = (a[5] + 1) % kVocab;
  auto archive = SafetensorsArchive::OpenDir(*dir_);
  ASSERT_TRUE(archive.ok());
  const TensorInfo* e = archive->Find("model.language_model.embed_tokens.weight");
  ASSERT_NE(e, nullptr);
  Driver da(*model_, {a}, pool_), db(*model_, {b}, pool_);
  db.embed_rows = {5};
  db.embeds.resize(64);
  ConvertToF32(e->dtype, e->data + a[5] * 64 * DTypeSize(e->dtype), db.embeds.data(), 64);
  ASSERT_TRUE(da.RunAlone(0, {12}).ok());
  ASSERT_TRUE(db.RunAlone(0, {12}).ok());
  for (size_t r = 0; r < 12; ++r) {
    for (int64_t v = 0; v < kVocab; ++v) ASSERT_EQ(da.rows(0)[r][v], db.rows(0)[r][v]) << r;
  }
}

// A sequence restarting at position 0 in a used slot starts from the zero state.
TEST_F(Qwen35Test, RestartInUsedSlotStartsFresh) {
  ASSERT_TRUE(model_);
  const auto p = (*prompts_)[1];
  Driver d(*model_, {p, p}, pool_);
  d.ShareSlot(1, 0);
  ASSERT_TRUE(d.RunAlone(0, {37}).ok());
  ASSERT_TRUE(d.RunAlone(1, {37}).ok());
  EXPECT_MATCHES_REFERENCE(d.rows(1), (*ref_)[1]);
}

// A hybrid step without state slots is refused, not run.
TEST_F(Qwen35Test, ForwardWithoutStateSlotsFails) {
  ASSERT_TRUE(model_);
  KvCache kv(model_->info().kv, 4, 16, DType::kF32);
  const std::vector<int32_t> tokens = {1, 2}, blocks = {0};
  const std::vector<SeqStep> steps = {{0, 2, blocks, 0}};
  const std::vector<int64_t> rows = {1};
  ForwardBatch b;
  b.tokens = tokens;
  b.seqs = steps;
  b.logit_rows = rows;
  std::vector<float> logits(kVocab);
  EXPECT_FALSE(model_->Forward(b, kv, nullptr, logits.data(), pool_).ok());
}

// Rewrites `dir`'s model.safetensors through `edit(name, tensor) -> keep?`, optionally adding one.
void RewriteCheckpoint(const std::string& dir, const std::function<bool(const TensorInfo&)>& keep,
                       const std::string& add_name = "", std::vector<int64_t> add_shape = {}) {
  SafetensorsWriter w;
  {
    auto a = SafetensorsArchive::OpenDir(dir);
    ASSERT_TRUE(a.ok());
    for (const auto& [name, t] : a->tensors()) {
      if (!keep(t)) continue;
      w.Add(name, t.dtype, t.shape, std::string(reinterpret_cast<const char*>(t.data), t.nbytes));
    }
  }
  if (!add_name.empty()) {
    int64_t n = 1;
    for (int64_t d : add_shape) n *= d;
    w.Add(add_name, DType::kF32, add_shape, std::string(n * 4, '\0'));
  }
  ASSERT_TRUE(w.Write(dir + "/model.safetensors").ok());
}

TEST(Qwen35LoadTest, VisionTensorsAreValidated) {
  const std::string dir = TempDir("vision");
  TinyCheckpointOptions o;
  o.out_dir = dir;
  o.vocab_size = kVocab;
  o.eos_token_id = {2};
  ThreadPool pool(1);
  LoadOptions lo;
  lo.model_dir = dir;
  const std::string victim = "model.vision_tower.vit_merger.linear_1.weight";
  // Complete checkpoint (vision, merger and mtp.* tensors included): loads.
  ASSERT_TRUE(WriteTinyMiniCpmV46(o).ok());
  {
    auto a = SafetensorsArchive::OpenDir(dir);
    ASSERT_TRUE(a.ok());
    EXPECT_NE(a->Find(victim), nullptr);
    EXPECT_NE(a->Find("model.merger.mlp.0.linear_2.weight"), nullptr);
    EXPECT_NE(a->Find("mtp.fc.weight"), nullptr);
  }
  EXPECT_TRUE(LoadModel(lo, pool).ok());
  // A missing vision tensor.
  RewriteCheckpoint(dir, [&](const TensorInfo& t) { return t.name != victim; });
  auto m = LoadModel(lo, pool);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find(victim), std::string::npos) << m.status().message();
  // A wrong shape.
  ASSERT_TRUE(WriteTinyMiniCpmV46(o).ok());
  RewriteCheckpoint(dir, [&](const TensorInfo& t) { return t.name != victim; }, victim, {3, 4});
  m = LoadModel(lo, pool);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("[3, 4]"), std::string::npos) << m.status().message();
  // An unknown tensor under the vision prefix.
  ASSERT_TRUE(WriteTinyMiniCpmV46(o).ok());
  RewriteCheckpoint(dir, [](const TensorInfo&) { return true; }, "model.vision_tower.extra.weight", {2});
  m = LoadModel(lo, pool);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("model.vision_tower.extra.weight"), std::string::npos);
  // A tied checkpoint holding a redundant head under the language model's prefix, as the
  // tensor listing of the seed document shows one: ignored, as vLLM skips "lm_head.weight" names.
  ASSERT_TRUE(WriteTinyMiniCpmV46(o).ok());
  RewriteCheckpoint(dir, [](const TensorInfo&) { return true; },
                    "model.language_model.lm_head.weight", {kVocab, 64});
  m = LoadModel(lo, pool);
  EXPECT_TRUE(m.ok()) << m.status().message();
  // A missing text tensor.
  ASSERT_TRUE(WriteTinyMiniCpmV46(o).ok());
  RewriteCheckpoint(dir, [](const TensorInfo& t) { return t.name != "model.language_model.layers.2.linear_attn.A_log"; });
  m = LoadModel(lo, pool);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("layers.2.linear_attn.A_log"), std::string::npos);
  fs::remove_all(dir);
}

// A plain Qwen3_5ForCausalLM (flat config, "model." names) with two value heads per key head
// and a separate lm_head, stored in bf16 and computed in float32.
TEST(Qwen35LoadTest, FlatQwen35WithGroupedValueHeadsMatchesReference) {
  const std::string dir = TempDir("flat");
  TinyCheckpointOptions o;
  o.out_dir = dir;
  o.seed = 3;
  o.vocab_size = kVocab;
  o.eos_token_id = {2, 5};
  o.tie_word_embeddings = false;
  TinyQwen35Dims d;
  d.minicpmv = false;
  d.num_hidden_layers = 4;
  d.linear_num_key_heads = 2;
  d.linear_num_value_heads = 4;
  d.linear_key_head_dim = 8;
  ASSERT_TRUE(WriteTinyQwen35(o, d).ok());
  const std::vector<std::vector<int32_t>> prompts = {RandomIds(80, 11), RandomIds(9, 12)};
  const std::vector<Rows> ref = Reference(dir, prompts);
  ASSERT_EQ(ref.size(), 2u);
  ThreadPool pool(2);
  auto model = Load(dir, DTypeChoice::kFloat32, pool);
  ASSERT_TRUE(model);
  EXPECT_EQ(model->info().architecture, "Qwen3_5ForCausalLM");
  EXPECT_EQ(model->info().kv.num_attention_layers, 1);
  EXPECT_EQ(model->info().eos_token_ids, (std::vector<int32_t>{2, 5}));
  Driver drv(*model, prompts, pool);
  ASSERT_TRUE(drv.Step({{0, 70}, {1, 4}}).ok());
  ASSERT_TRUE(drv.Step({{1, 5}, {0, 10}}).ok());
  for (int s = 0; s < 2; ++s) EXPECT_MATCHES_REFERENCE(drv.rows(s), ref[s]);
  fs::remove_all(dir);
}

// The released MiniCPM-V-4.6 config.json parses to the dimensions of the spec (§1).
TEST(Qwen35ConfigTest, RealMiniCpmV46Config) {
  const std::string path = std::string(CPM_SOURCE_DIR) + "/../shared/models/MiniCPM-V-4.6/config.json";
  auto text = ReadTextFile(path);
  if (!text.ok()) GTEST_SKIP() << path << " not found";
  auto c = ParseQwen35Config(*text, path);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->weight_prefix, "model.language_model.");
  EXPECT_EQ(c->hidden_size, 1024);
  EXPECT_EQ(c->num_hidden_layers, 24);
  for (int64_t i = 0; i < 24; ++i) EXPECT_EQ(c->full_attention[i], i % 4 == 3) << i;
  EXPECT_EQ(c->num_full_layers(), 6);
  EXPECT_EQ(c->head_dim, 256);
  EXPECT_EQ(c->rotary_dim, 64);
  EXPECT_EQ(c->rope_theta, 1e7);
  EXPECT_TRUE(c->attn_output_gate);
  EXPECT_EQ(c->conv_dim(), 6144);
  EXPECT_EQ(c->value_dim(), 2048);
  EXPECT_EQ(c->vocab_size, 248094);
  EXPECT_TRUE(c->tie_word_embeddings);
  EXPECT_EQ(c->torch_dtype, "");
  EXPECT_EQ(c->eos_token_id, std::vector<int32_t>{248044});
  auto v = ParseMiniCpmV46VisionConfig(*text, path);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v->hidden_size, 1152);
  EXPECT_EQ(v->num_hidden_layers, 27);
  EXPECT_EQ(v->insert_layer_id, 6);
  EXPECT_EQ(v->image_size / v->patch_size, 70);
  // The image processor's pixels are RGB: another channel count is refused (it read past them).
  nlohmann::json j = nlohmann::json::parse(*text);
  j["vision_config"]["num_channels"] = 4;
  auto four = ParseMiniCpmV46VisionConfig(j.dump(), path);
  ASSERT_FALSE(four.ok());
  EXPECT_NE(four.status().message().find("field 'num_channels' must be 3 (RGB), got 4"),
            std::string::npos) << four.status().message();
}

TEST(Qwen35ConfigTest, BadConfigsAreRejected) {
  const std::string base = R"({"architectures": ["Qwen3_5ForCausalLM"], "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 32, "linear_num_key_heads": 4,
    "linear_num_value_heads": 4, "linear_key_head_dim": 16, "linear_value_head_dim": 16,
    "linear_conv_kernel_dim": 4, "vocab_size": 300, "max_position_embeddings": 64,
    "rms_norm_eps": 1e-6, "layer_types": ["linear_attention", "full_attention"]
    REPLACE})";
  auto parse = [&](const std::string& extra) {
    std::string t = base;
    t.replace(t.find("REPLACE"), 7, extra);
    return ParseQwen35Config(t, "config.json");
  };
  ASSERT_TRUE(parse("").ok()) << parse("").status().ToString();
  EXPECT_EQ(parse("")->rotary_dim, 8);  // the HF default partial_rotary_factor 0.25
  EXPECT_FALSE(parse(R"(, "layer_types": ["linear_attention", "mamba"])").ok());
  EXPECT_FALSE(parse(R"(, "rope_parameters": {"rope_type": "yarn"})").ok());
  EXPECT_FALSE(parse(R"(, "hidden_act": "gelu")").ok());
  EXPECT_FALSE(parse(R"(, "linear_num_value_heads": 6)").ok());
}

// The bf16 path (activations rounded at HF's points) on a bf16-stored checkpoint, so that the
// reference sees the same weights: the float32 path must match it exactly as before, the bf16
// path closely. The random tiny model is sensitive (rounding its f32 weights to bf16 alone moves
// the float64 reference by a mean KL of about 0.02), so the bf16 bounds are loose: they catch a
// wrong rounding point or norm, not last-bit differences.
TEST(Qwen35Bf16Test, Bf16PathAgreesWithReference) {
  const std::string dir = TempDir("bf16");
  TinyCheckpointOptions o;
  o.out_dir = dir;
  o.seed = 5;
  o.vocab_size = kVocab;
  o.storage = DType::kBF16;
  o.eos_token_id = {2};
  ASSERT_TRUE(WriteTinyMiniCpmV46(o).ok());
  const std::vector<std::vector<int32_t>> prompts = {RandomIds(130, 21), RandomIds(40, 22)};
  const std::vector<Rows> ref = Reference(dir, prompts);
  ASSERT_EQ(ref.size(), 2u);
  ThreadPool pool(2);
  auto f32 = Load(dir, DTypeChoice::kFloat32, pool);
  auto bf16 = Load(dir, DTypeChoice::kAuto, pool);  // config "dtype": "bfloat16"
  ASSERT_TRUE(f32 && bf16);
  EXPECT_EQ(bf16->info().dtype, DType::kBF16);
  for (Model* m : {f32.get(), bf16.get()}) {
    Driver d(*m, prompts, pool);
    ASSERT_TRUE(d.RunAlone(0, {1000}).ok());  // chunked rule
    ASSERT_TRUE(d.RunAlone(1, {1}).ok());     // decode
    for (int s = 0; s < 2; ++s) {
      const Agreement ag = Compare(d.rows(s), ref[s]);
      std::printf("  %s seq %d: top1 %.4f  max|dlogprob| %.3g  mean KL %.3g\n",
                  ToString(m->info().dtype), s, ag.top1, ag.max_abs, ag.mean_kl);
      if (m == f32.get()) {
        EXPECT_EQ(ag.top1, 1.0);
        EXPECT_LE(ag.max_abs, 2e-3);
      } else {
        EXPECT_GE(ag.top1, 0.85);
        EXPECT_LE(ag.mean_kl, 0.05);
      }
    }
  }
  fs::remove_all(dir);
}

// --load-format dummy needs no safetensors and runs.
TEST(Qwen35LoadTest, DummyWeightsLoadAndRun) {
  const std::string dir = TempDir("dummy");
  TinyCheckpointOptions o;
  o.out_dir = dir;
  o.vocab_size = kVocab;
  o.eos_token_id = {2};
  ASSERT_TRUE(WriteTinyMiniCpmV46(o).ok());
  fs::remove(fs::path(dir) / "model.safetensors");
  ThreadPool pool(1);
  LoadOptions lo;
  lo.model_dir = dir;
  lo.load_format = LoadFormat::kDummy;
  auto m = LoadModel(lo, pool);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->info().dtype, DType::kBF16);  // config "dtype": "bfloat16"
  Driver d(**m, {RandomIds(20, 4)}, pool);
  ASSERT_TRUE(d.RunAlone(0, {7}).ok());
  for (double v : d.rows(0).back()) ASSERT_TRUE(std::isfinite(v));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cpm
