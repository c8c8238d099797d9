#include "model/weight_loader.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <string>

#include "base/thread_pool.h"
#include "model/tiny_checkpoint.h"

namespace cpm {
namespace {

// An embedding table is an owned copy of the checkpoint's bytes (not a view of the file
// mapping, whose 4 KiB pages cost a TLB miss a row), bit for bit the zero-copy Linear view,
// which stays readable after the copy has given its pages back.
TEST(WeightLoaderTest, EmbeddingTableIsAnOwnedCopyOfTheCheckpointBytes) {
  const std::string dir = ::testing::TempDir() + "/weight_loader_tiny";
  std::filesystem::remove_all(dir);
  TinyCheckpointOptions o;
  o.out_dir = dir;
  o.seed = 3;
  o.vocab_size = 300;
  o.eos_token_id = {2};
  ASSERT_TRUE(WriteTinyMiniCpm(o).ok());
  ThreadPool pool(2);
  LoadOptions lo;
  lo.model_dir = dir;
  auto wl = WeightLoader::Open(lo, DType::kBF16, &pool);
  ASSERT_TRUE(wl.ok()) << wl.status().ToString();
  const std::string name = "model.embed_tokens.weight";
  auto view = wl->Linear(name, 300, 64);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  auto table = wl->EmbeddingTable(name, 300, 64);
  ASSERT_TRUE(table.ok()) << table.status().ToString();
  EXPECT_NE(table->data, view->data);
  EXPECT_NE(table->owner.get(), view->owner.get());
  EXPECT_EQ(table->dtype, DType::kBF16);
  EXPECT_EQ(std::memcmp(table->data, view->data, 300 * 64 * 2), 0);
  // A wrong shape is an error naming the tensor, as for Linear.
  auto wrong = wl->EmbeddingTable(name, 301, 64);
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.status().message().find(name), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cpm
