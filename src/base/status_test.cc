#include "base/status.h"

#include <gtest/gtest.h>

namespace cpm {
namespace {

StatusOr<int> Half(int x) {
  if (x % 2) return InvalidArgument("odd: " + std::to_string(x));
  return x / 2;
}

Status Quarter(int x, int* out) {
  CPM_ASSIGN_OR_RETURN(int h, Half(x));
  CPM_ASSIGN_OR_RETURN(*out, Half(h));
  return OkStatus();
}

TEST(StatusTest, PropagatesFirstError) {
  int out = 0;
  EXPECT_TRUE(Quarter(8, &out).ok());
  EXPECT_EQ(out, 2);
  Status s = Quarter(6, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "odd: 3");
  EXPECT_EQ(s.WithPrefix("file.json").ToString(), "INVALID_ARGUMENT: file.json: odd: 3");
}

}  // namespace
}  // namespace cpm
