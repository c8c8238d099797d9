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

// A file written by hand: 8-byte header length, the header, then `data_bytes` bytes.
void WriteRaw(const fs::path& path, const std::string& header, size_t data_bytes) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << std::string(data_bytes, '\0');
}

// What the format's own reader refuses (Metadata::validate): tensors that overlap or leave a
// gap, bytes after the last tensor, a non-string metadata map, an element count that overflows.
TEST_F(SafetensorsTest, LayoutMustTileTheDataSection) {
  const fs::path path = dir_ / "model.safetensors";
  const auto open_error = [&] {
    auto a = SafetensorsArchive::OpenDir(dir_.string());
    EXPECT_FALSE(a.ok());
    return a.ok() ? std::string() : std::string(a.status().message());
  };
  WriteRaw(path, R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                 R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12);
  EXPECT_NE(open_error().find("'b' starts at byte 4 of the data section, where the previous "
                              "tensor ends at 8 (overlapping tensors)"), std::string::npos);
  WriteRaw(path, R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8);
  EXPECT_NE(open_error().find("(a gap)"), std::string::npos);
  WriteRaw(path, R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 9);
  EXPECT_NE(open_error().find("the tensors end at byte 4 of a data section of 9 bytes"),
            std::string::npos);
  WriteRaw(path, R"({"__metadata__":{"format":1},"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4);
  EXPECT_NE(open_error().find("__metadata__['format'] is not a string"), std::string::npos);
  WriteRaw(path, R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,0]}})", 0);
  EXPECT_NE(open_error().find("shape's element count overflows"), std::string::npos);
  // The same tensors in order, metadata of strings, and an empty tensor: fine.
  WriteRaw(path, R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]},)"
                 R"("e":{"dtype":"F32","shape":[0],"data_offsets":[8,8]},)"
                 R"("a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 8);
  auto a = SafetensorsArchive::OpenDir(dir_.string());
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->Find("b")->nbytes, 4u);
}

TEST_F(SafetensorsTest, MissingDirectoryIsNotFound) {
  auto a = SafetensorsArchive::OpenDir((dir_ / "nope").string());
  ASSERT_FALSE(a.ok());
}

}  // namespace
}  // namespace cpm
