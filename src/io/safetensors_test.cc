#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace cpm {
namespace {
namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cpm_st_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  SafetensorsWriter TwoTensors() {
    SafetensorsWriter w;
    std::string a(2 * 3 * 4, '\0');
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<char>(i);
    w.Add("a", DType::kF32, {2, 3}, a);
    w.Add("b", DType::kBF16, {4}, std::string(8, '\x01'));
    return w;
  }
  fs::path dir_;
};

TEST_F(SafetensorsTest, SingleFileRoundTrip) {
  ASSERT_TRUE(TwoTensors().Write((dir_ / "model.safetensors").string()).ok());
  auto a = SafetensorsArchive::OpenDir(dir_.string());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  const TensorInfo* t = a->Find("a");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::kF32);
  EXPECT_EQ(t->ShapeString(), "[2, 3]");
  EXPECT_EQ(t->nbytes, 24u);
  EXPECT_EQ(t->data[5], 5);
  EXPECT_EQ(a->Find("b")->dtype, DType::kBF16);
  EXPECT_EQ(a->TotalBytes(), 32u);
}

TEST_F(SafetensorsTest, ShardedRoundTrip) {
  ASSERT_TRUE(TwoTensors().WriteSharded(dir_.string(), 2).ok());
  auto a = SafetensorsArchive::OpenDir(dir_.string());
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->files().size(), 2u);
  EXPECT_NE(a->Find("a")->file, a->Find("b")->file);
}

TEST_F(SafetensorsTest, TruncatedFileNamesFileAndTensor) {
  const std::string path = (dir_ / "model.safetensors").string();
  ASSERT_TRUE(TwoTensors().Write(path).ok());
  fs::resize_file(path, fs::file_size(path) - 4);
  auto a = SafetensorsArchive::OpenDir(dir_.string());
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(a.status().message().find("model.safetensors"), std::string::npos);
  EXPECT_NE(a.status().message().find("'b'"), std::string::npos) << a.status().message();
}

TEST_F(SafetensorsTest, GarbageHeaderIsAnError) {
  const std::string path = (dir_ / "model.safetensors").string();
  std::ofstream(path) << "this is not a safetensors file at all";
  auto a = SafetensorsArchive::OpenDir(dir_.string());
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find(path), std::string::npos);
  std::ofstream(path, std::ios::trunc) << "abc";
  EXPECT_FALSE(SafetensorsArchive::OpenDir(dir_.string()).ok());
}

TEST_F(SafetensorsTest, ShapeByteMismatchIsAnError) {
  SafetensorsWriter w;
  w.Add("x", DType::kF32, {3}, std::string(8, '\0'));  // 3 floats need 12 bytes
  ASSERT_TRUE(w.Write((dir_ / "model.safetensors").string()).ok());
  auto a = SafetensorsArchive::OpenDir(dir_.string());
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("needs 12"), std::string::npos) << a.status().message();
}

TEST_F(SafetensorsTest, IndexPointingAtWrongFileIsAnError) {
  ASSERT_TRUE(TwoTensors().WriteSharded(dir_.string(), 2).ok());
  std::ofstream(dir_ / "model.safetensors.index.json", std::ios::trunc)
      << R"({"weight_map": {"a": "model-00002-of-00002.safetensors"}})";
  auto a = SafetensorsArchive::OpenDir(dir_.string());
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("'a'"), std::string::npos) << a.status().message();
}

TEST_F(SafetensorsTest, MissingDirectoryIsNotFound) {
  auto a = SafetensorsArchive::OpenDir((dir_ / "nope").string());
  ASSERT_FALSE(a.ok());
}

}  // namespace
}  // namespace cpm
