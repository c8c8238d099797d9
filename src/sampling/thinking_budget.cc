#include "sampling/thinking_budget.h"

#include <algorithm>
#include <cstddef>

namespace cpm {
namespace {

// Index of the last occurrence of `marker` in `ids`, or -1.
int64_t FindLast(std::span<const int32_t> ids, std::span<const int32_t> marker) {
  if (marker.empty() || marker.size() > ids.size()) return -1;
  for (size_t i = ids.size() - marker.size() + 1; i-- > 0;) {
    if (std::equal(marker.begin(), marker.end(), ids.begin() + static_cast<ptrdiff_t>(i))) {
      return static_cast<int64_t>(i);
    }
  }
  return -1;
}

bool EndsWith(std::span<const int32_t> ids, std::span<const int32_t> marker) {
  return !marker.empty() && marker.size() <= ids.size() &&
         std::equal(marker.begin(), marker.end(), ids.end() - static_cast<ptrdiff_t>(marker.size()));
}

}  // namespace

ThinkingBudgetState::ThinkingBudgetState(const ThinkingBudget& b,
                                         std::span<const int32_t> prompt) {
  in_section_ = FindLast(prompt, b.start) > FindLast(prompt, b.end);
  CheckCap(b);
}

void ThinkingBudgetState::CheckCap(const ThinkingBudget& b) {
  if (in_section_ && count_ >= b.budget && !b.end.empty()) {
    in_section_ = false;
    count_ = 0;
    forcing_ = 0;
  }
}

// The newest token (the last of `output_so_far`) moves the state on.
void ThinkingBudgetState::Advance(const ThinkingBudget& b,
                                  std::span<const int32_t> output_so_far) {
  if (forcing_ >= 0) {
    // Forced tokens are the end marker's, in order; once it is out, the section is closed.
    if (++forcing_ == static_cast<int64_t>(b.end.size())) forcing_ = -1;
    return;
  }
  if (EndsWith(output_so_far, b.start)) {
    in_section_ = true;
    count_ = 0;
  } else if (EndsWith(output_so_far, b.end)) {
    in_section_ = false;
    count_ = 0;
  } else if (in_section_) {
    ++count_;
  }
  CheckCap(b);
}

int32_t ThinkingBudgetState::Next(const ThinkingBudget& b, std::span<const int32_t> output) {
  for (; seen_ < output.size(); ++seen_) Advance(b, output.first(seen_ + 1));
  return forcing_ >= 0 ? b.end[static_cast<size_t>(forcing_)] : -1;
}

}  // namespace cpm
