// Stop strings over streamed text: finds the first stop string in the generated text and holds
// back any tail that could still become one, so a client never sees part of a stop string
// that later matches. Not thread-safe: one per choice.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace cpm {

class StopMatcher {
 public:
  // `include_stop_str`: keep the matched stop string in the output (vLLM's
  // include_stop_str_in_output). Empty stop strings must be rejected before this.
  StopMatcher(std::vector<std::string> stops, bool include_stop_str);

  // Adds decoded text; returns the text that is safe to emit now. After a match the returned
  // text ends where the stop string ends (or begins) and further pushes return nothing.
  std::string Push(std::string_view text);
  // Adds text that no stop string may match alone (the output of the first min_tokens tokens,
  // which vLLM does not check); a stop that begins in it and ends in later pushed text still
  // matches, so its possible beginnings are held back as Push holds them.
  std::string PushUnchecked(std::string_view text);
  // The end of generation: releases whatever was held back (nothing after a match).
  std::string Flush();

  bool matched() const { return matched_; }
  const std::string& matched_stop() const { return matched_stop_; }

 private:
  std::string Add(std::string_view text, bool checked);

  std::vector<std::string> stops_;
  bool include_stop_str_;
  std::string pending_;  // held back: a suffix that is a proper prefix of some stop string
  size_t unchecked_end_ = 0;  // pending_[0, unchecked_end_) came from PushUnchecked
  bool matched_ = false;
  std::string matched_stop_;
};

}  // namespace cpm
