// Stop-string matching with hold-back of partial matches.
#include "server/stop_matcher.h"

#include <algorithm>

namespace cpm {

StopMatcher::StopMatcher(std::vector<std::string> stops, bool include_stop_str)
    : stops_(std::move(stops)), include_stop_str_(include_stop_str) {}

std::string StopMatcher::Push(std::string_view text) { return Add(text, true); }

std::string StopMatcher::PushUnchecked(std::string_view text) { return Add(text, false); }

std::string StopMatcher::Add(std::string_view text, bool checked) {
  if (matched_) return {};
  if (stops_.empty()) return std::string(text);
  pending_.append(text);
  if (!checked) unchecked_end_ = pending_.size();
  // The first listed stop found wins, wherever another occurs (vLLM's check_stop_strings tries
  // them in order). A match must end past the unchecked text (vLLM searches only back from the
  // new text, so a stop begun in the first min_tokens tokens' text and finished after them
  // counts).
  size_t best_pos = std::string::npos;
  const std::string* best = nullptr;
  for (size_t i = 0; checked && best == nullptr && i < stops_.size(); ++i) {
    const std::string& s = stops_[i];
    const size_t from = unchecked_end_ >= s.size() ? unchecked_end_ - s.size() + 1 : 0;
    const size_t pos = pending_.find(s, from);
    if (pos != std::string::npos) {
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
  const size_t released = pending_.size() - hold;
  std::string out = pending_.substr(0, released);
  pending_.erase(0, released);
  unchecked_end_ -= std::min(unchecked_end_, released);
  return out;
}

std::string StopMatcher::Flush() {
  if (matched_) return {};
  std::string out;
  out.swap(pending_);
  unchecked_end_ = 0;
  return out;
}

}  // namespace cpm
