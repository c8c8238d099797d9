// Loading MiniCPM checkpoints: every broken file or config gives an error that names the file,
// the tensor or field, and what was expected — never a crash. And the full-size MiniCPM4-0.5B
// config loads with dummy weights and generates.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "engine/offline_generator.h"
#include "io/mmap_file.h"
#include "io/safetensors.h"
#include "model/registry.h"
#include "model/tiny_checkpoint.h"

namespace cpm {
namespace {
namespace fs = std::filesystem;

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cpm_loader_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    TinyCheckpointOptions o;
    o.out_dir = dir_.string();
    o.vocab_size = 64;
    o.eos_token_id = {2};
    ASSERT_TRUE(WriteTinyMiniCpm(o).ok());
  }
  void TearDown() override { fs::remove_all(dir_); }

  StatusOr<std::unique_ptr<Model>> Load(LoadFormat format = LoadFormat::kAuto) {
    LoadOptions lo;
    lo.model_dir = dir_.string();
    lo.load_format = format;
    return LoadModel(lo, pool_);
  }

  // Rewrites model.safetensors through `edit` (which may drop, change or add tensors).
  void RewriteWeights(const std::function<void(const TensorInfo&, SafetensorsWriter&)>& edit,
                      const std::function<void(SafetensorsWriter&)>& extra = nullptr) {
    const std::string path = (dir_ / "model.safetensors").string();
    SafetensorsWriter w;
    {
      auto a = SafetensorsArchive::OpenFile(path);
      ASSERT_TRUE(a.ok());
      for (const auto& [name, t] : a->tensors()) edit(t, w);
      if (extra) extra(w);
    }
    ASSERT_TRUE(w.Write(path).ok());
  }

  void EditConfig(const std::function<void(nlohmann::json&)>& edit) {
    const std::string path = (dir_ / "config.json").string();
    auto text = ReadTextFile(path);
    ASSERT_TRUE(text.ok());
    nlohmann::json j = nlohmann::json::parse(*text);
    edit(j);
    ASSERT_TRUE(WriteTextFile(path, j.dump()).ok());
  }

  static void ExpectMentions(const Status& s, std::initializer_list<const char*> parts) {
    ASSERT_FALSE(s.ok());
    for (const char* p : parts) {
      EXPECT_NE(s.message().find(p), std::string::npos) << "'" << p << "' not in: " << s.message();
    }
  }

  static std::string Bytes(const TensorInfo& t) {
    return std::string(reinterpret_cast<const char*>(t.data), t.nbytes);
  }

  fs::path dir_;
  ThreadPool pool_{2};
};

TEST_F(LoaderTest, TinyCheckpointLoads) {
  auto m = Load();
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->info().vocab_size, 64);
  EXPECT_EQ((*m)->info().kv.num_attention_layers, 2);
}

TEST_F(LoaderTest, MissingTensorNamesIt) {
  RewriteWeights([](const TensorInfo& t, SafetensorsWriter& w) {
    if (t.name != "model.layers.1.mlp.up_proj.weight") w.Add(t.name, t.dtype, t.shape, Bytes(t));
  });
  ExpectMentions(Load().status(), {"model.safetensors", "model.layers.1.mlp.up_proj.weight", "[128, 64]"});
}

TEST_F(LoaderTest, WrongShapeNamesExpectedAndActual) {
  EditConfig([](nlohmann::json& j) { j["intermediate_size"] = 96; });
  ExpectMentions(Load().status(), {"model.layers.0.mlp.gate_proj.weight", "[128, 64]", "[96, 64]"});
}

TEST_F(LoaderTest, UnexpectedTensorIsAnError) {
  RewriteWeights([](const TensorInfo& t, SafetensorsWriter& w) { w.Add(t.name, t.dtype, t.shape, Bytes(t)); },
                 [](SafetensorsWriter& w) { w.Add("model.layers.7.extra.weight", DType::kF32, {2}, std::string(8, '\0')); });
  ExpectMentions(Load().status(), {"unexpected tensor", "model.layers.7.extra.weight"});
}

TEST_F(LoaderTest, RotaryCacheTensorsAreIgnored) {
  RewriteWeights([](const TensorInfo& t, SafetensorsWriter& w) { w.Add(t.name, t.dtype, t.shape, Bytes(t)); },
                 [](SafetensorsWriter& w) {
                   w.Add("model.layers.0.self_attn.rotary_emb.inv_freq", DType::kF32, {8}, std::string(32, '\0'));
                 });
  EXPECT_TRUE(Load().ok());
}

TEST_F(LoaderTest, TruncatedFileNamesFile) {
  const fs::path p = dir_ / "model.safetensors";
  fs::resize_file(p, fs::file_size(p) - 100);
  ExpectMentions(Load().status(), {"model.safetensors", "truncated"});
}

TEST_F(LoaderTest, CorruptHeaderNamesFile) {
  std::fstream f(dir_ / "model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(10);
  f.write("\xff\xfe{{{", 5);
  f.close();
  ExpectMentions(Load().status(), {"model.safetensors"});
}

TEST_F(LoaderTest, UnknownArchitectureNamesIt) {
  EditConfig([](nlohmann::json& j) { j["architectures"] = {"LlamaForCausalLM"}; });
  ExpectMentions(Load().status(), {"config.json", "architectures", "LlamaForCausalLM", "MiniCPMForCausalLM"});
}

TEST_F(LoaderTest, ConfigThatIsNotAnObjectSaysSo) {
  EditConfig([](nlohmann::json& j) { j = nlohmann::json::array({1, 2}); });
  ExpectMentions(Load().status(), {"config.json", "not a JSON object"});
  ASSERT_TRUE(WriteTextFile((dir_ / "config.json").string(), "{\"architectures\": [").ok());
  ExpectMentions(Load().status(), {"config.json", "not valid JSON"});
}

TEST_F(LoaderTest, MissingConfigFieldNamesIt) {
  EditConfig([](nlohmann::json& j) { j.erase("scale_depth"); });
  ExpectMentions(Load().status(), {"config.json", "'scale_depth'", "missing"});
  EditConfig([](nlohmann::json& j) {
    j["scale_depth"] = 1.4;
    j["hidden_size"] = "big";
  });
  ExpectMentions(Load().status(), {"config.json", "'hidden_size'", "integer"});
}

TEST_F(LoaderTest, BadLongRopeListNamesIt) {
  EditConfig([](nlohmann::json& j) { j["rope_scaling"]["short_factor"] = {1.0, 2.0}; });
  ExpectMentions(Load().status(), {"config.json", "rope_scaling", "short_factor"});
}

// LongRoPE's scale divides by ln(original_max_position_embeddings), and rope_theta is a base:
// values that make the table meaningless are refused, not served as degenerate text.
TEST_F(LoaderTest, DegenerateRopeFieldsNameThem) {
  for (const int64_t original : {0, 1, -4}) {
    EditConfig([&](nlohmann::json& j) { j["rope_scaling"]["original_max_position_embeddings"] = original; });
    ExpectMentions(Load().status(), {"config.json", "'original_max_position_embeddings' must be >= 2"});
  }
  EditConfig([](nlohmann::json& j) {
    j["rope_scaling"]["original_max_position_embeddings"] = 32;
    j["rope_theta"] = 0;
  });
  ExpectMentions(Load().status(), {"config.json", "'rope_theta' must be > 0"});
}

// Sizes each within bounds whose product no machine holds: with dummy weights no file checks
// them, so the loader does, before allocating (this was an uncaught bad_alloc).
TEST_F(LoaderTest, DummyWeightsBeyondMemoryNameTheConfig) {
  EditConfig([](nlohmann::json& j) {
    const int64_t head_dim = j["hidden_size"].get<int64_t>() / j["num_attention_heads"].get<int64_t>();
    j["num_attention_heads"] = j["num_key_value_heads"] = 1 << 12;  // head_dim kept for RoPE
    j["hidden_size"] = (1 << 12) * head_dim;
    j["vocab_size"] = 1 << 24;  // a 2+ TiB embedding
  });
  const Status s = Load(LoadFormat::kDummy).status();
  EXPECT_EQ(s.code(), StatusCode::kResourceExhausted) << s.message();
  ExpectMentions(s, {"config.json", "more than this machine's", "are the config's sizes"});
}

// Offline generation stops where the load's context ends ("length", as the server's), and a
// prompt beyond it is an error naming it (this was "position 64 is beyond the model length").
TEST_F(LoaderTest, OfflineGenerationStopsAtTheContext) {
  LoadOptions lo;
  lo.model_dir = dir_.string();
  lo.max_model_len = 16;
  auto m = LoadModel(lo, pool_);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ((*m)->info().max_positions, 16);
  OfflineGenerator gen(**m, pool_, {});
  GenerateRequest r;
  r.prompt = {1, 5, 6, 7, 8, 9};
  r.max_tokens = 100;
  r.ignore_eos = true;
  auto out = gen.Run({r});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ((*out)[0].output.size(), 10u);  // 6 prompt tokens + 10 = 16 positions
  EXPECT_EQ((*out)[0].finish_reason, "length");
  GenerateRequest longer = r;
  longer.prompt.assign(17, 5);
  auto too_long = gen.Run({r, longer});
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.status().message().find("prompt 1 has 17 tokens, beyond the model's 16 positions"),
            std::string::npos) << too_long.status().message();
}

// A context no machine can hold is an error naming where it came from, not a bad_alloc.
TEST_F(LoaderTest, ContextBeyondMemoryNamesIt) {
  EditConfig([](nlohmann::json& j) { j["max_position_embeddings"] = int64_t{1} << 40; });
  ExpectMentions(Load().status(), {"config.json", "max_position_embeddings", "RoPE table"});
  LoadOptions lo;
  lo.model_dir = dir_.string();
  lo.max_model_len = 64;  // a length that fits serves
  EXPECT_TRUE(LoadModel(lo, pool_).ok());
}

// Sizes no checkpoint has are refused before anything is sized by them (10^12 layers of
// expected tensor names, or of layer flags, ran out of memory).
TEST_F(LoaderTest, SizesBeyondAnyCheckpointNameTheField) {
  EditConfig([](nlohmann::json& j) { j["num_hidden_layers"] = int64_t{1000000000000}; });
  ExpectMentions(Load().status(), {"config.json", "'num_hidden_layers'", "beyond 4096"});
  EditConfig([](nlohmann::json& j) {
    j["num_hidden_layers"] = 2;
    j["intermediate_size"] = int64_t{1} << 40;
  });
  ExpectMentions(Load().status(), {"config.json", "'intermediate_size'", "beyond"});
}

TEST_F(LoaderTest, MissingDirectoryIsAnError) {
  fs::remove_all(dir_);
  ExpectMentions(Load().status(), {"config.json"});
}

// The real MiniCPM4-0.5B config at full size, with vLLM-style dummy weights, loads and generates.
TEST(FullSizeDummyTest, MiniCpm4LoadsAndGenerates) {
  const fs::path dir = fs::path(CPM_SOURCE_DIR) / ".." / "shared" / "models" / "MiniCPM4-0.5B";
  if (!fs::exists(dir / "config.json")) GTEST_SKIP() << "no " << dir;
  ThreadPool pool(2);
  LoadOptions lo;
  lo.model_dir = dir.string();
  lo.load_format = LoadFormat::kDummy;
  lo.max_model_len = 512;
  auto m = LoadModel(lo, pool);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const ModelInfo& info = (*m)->info();
  EXPECT_EQ(info.vocab_size, 73448);
  EXPECT_EQ(info.dtype, DType::kBF16);
  // 433,873,920 parameters (spec §1.1): bf16 matrices, plus the 49 norm vectors held in f32.
  const int64_t norm_params = 1024 * (24 * 2 + 1);
  EXPECT_EQ(info.weight_bytes, (433873920LL - norm_params) * 2 + norm_params * 4);
  OfflineGenerator gen(**m, pool, {});
  GenerateRequest r;
  r.prompt = {1, 73441, 1836, 5};
  r.max_tokens = 3;
  r.ignore_eos = true;
  auto out = gen.Run({r});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ((*out)[0].output.size(), 3u);
  for (int32_t t : (*out)[0].output) EXPECT_LT(t, 73448);
}

}  // namespace
}  // namespace cpm
