// The loading progress bar: counts shards as their tensors complete, percent by bytes, and
// Finish() ends at 100% whatever was skipped.
#include "model/load_progress.h"

#include <gtest/gtest.h>

namespace cpm {
namespace {

bool Has(const std::string& line, const std::string& part) {
  return line.find(part) != std::string::npos;
}

TEST(LoadProgress, ShardsAndPercent) {
  LoadProgress p({{"a.safetensors", 300}, {"b.safetensors", 100}});
  EXPECT_TRUE(Has(p.Line(), "Loading safetensors checkpoint shards:   0% Completed | 0/2 ["))
      << p.Line();
  p.Add("a.safetensors", 100);
  EXPECT_TRUE(Has(p.Line(), " 25% Completed | 0/2")) << p.Line();
  p.Add("a.safetensors", 200);
  EXPECT_TRUE(Has(p.Line(), " 75% Completed | 1/2")) << p.Line();
  p.Finish();  // b's tensors were skipped (e.g. mtp.*)
  EXPECT_TRUE(Has(p.Line(), "100% Completed | 2/2")) << p.Line();
}

}  // namespace
}  // namespace cpm
