// --hf-overrides over config.json: keys replaced, nested objects merged into the sub-config.
#include "model/config_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

namespace cpm {
namespace {

TEST(ConfigFile, OverridesMergeOverTheFile) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("cpm_config_file_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json")
      << R"({"max_position_embeddings": 32768, "text_config": {"a": 1, "b": 2}, "l": [1],)"
      << R"("rope_scaling": {"rope_type": "longrope", "long_factor": [1]}})";
  ASSERT_TRUE(SetHfOverrides(R"({"max_position_embeddings": 65536, "text_config": {"b": 3}, "l": [2],)"
                             R"("rope_scaling": {"rope_type": "dynamic", "factor": 2}})").ok());
  auto text = ReadModelConfigText(dir.string());
  ASSERT_TRUE(text.ok()) << text.status().message();
  const auto j = nlohmann::json::parse(*text);
  EXPECT_EQ(j["max_position_embeddings"], 65536);
  EXPECT_EQ(j["text_config"]["a"], 1);  // kept
  EXPECT_EQ(j["text_config"]["b"], 3);
  EXPECT_EQ(j["l"], nlohmann::json::array({2}));  // a list is replaced whole
  // A dict that is no sub-config is replaced whole, as vLLM's setattr: no LongRoPE factors left.
  EXPECT_EQ(j["rope_scaling"], nlohmann::json::parse(R"({"rope_type": "dynamic", "factor": 2})"));
  EXPECT_FALSE(SetHfOverrides("[1]").ok());
  ASSERT_TRUE(SetHfOverrides("").ok());
  text = ReadModelConfigText(dir.string());
  EXPECT_EQ(nlohmann::json::parse(*text)["max_position_embeddings"], 32768);
  EXPECT_FALSE(ReadModelConfigText((dir / "missing").string()).ok());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cpm
