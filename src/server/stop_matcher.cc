// Stop-string matching with hold-back of partial matches.
#include "server/stop_matcher.h"

#include <algorithm>

namespace cpm {

StopMatcher::StopMatcher(std::vector<std::string> stops, bool include_stop_str)
    : stops_(std::move(stops)), include_stop_str_(include_stop_str) {}

std::string StopMatcher::Push(std::string_view text) {
  if (matched_) return {};
  if (stops_.empty()) return std::string(text);
  pending_.append(text);
  // The earliest occurrence wins; among stops found at the same place, the first listed.
  size_t best_pos = std::string::npos;
  const std::string* best = nullptr;
  for (const std::string& s : stops_) {
    const size_t pos = pending_.find(s);
    if (pos != std::string::npos && pos < best_pos) {
      best_pos = pos;
      best = &s;
    }
  }
  if (best) {
    matched_ = true;
    matched_stop_ = *best;
    std::string out = pending_.substr(0, best_pos + (include_stop_str_ ? best->size() : 0));
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string; everything
  // before it can no longer be the start of a match.
  size_t hold = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, pending_.size());
    for (size_t len = max_len; len > hold; --len) {
      if (pending_.compare(pending_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopMatcher::PushUnchecked(std::string_view text) {
  if (matched_) return {};
  std::string out = Flush();
  out.append(text);
  return out;
}

std::string StopMatcher::Flush() {
  if (matched_) return {};
  std::string out;
  out.swap(pending_);
  return out;
}

}  // namespace cpm
