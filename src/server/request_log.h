// vLLM's --enable-log-requests: one INFO line per received prompt with its text and token ids
// (each cut to --max-log-len, as vLLM slices them) and the sampling parameters in vLLM's
// SamplingParams(...) form, so that logs read and grep like vLLM's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "server/sampling_request.h"

namespace cpm {

struct RequestLogOptions {
  bool enabled = false;
  int64_t max_len = -1;  // characters of the prompt and ids shown; -1: all
  // Each prompt logged as <id>-<index>, even a lone one (vLLM's completions endpoint); else the
  // bare id for a single prompt (its chat endpoint).
  bool indexed_prompt_ids = false;
};

// "Received request <id>: prompt: '<text>', params: SamplingParams(...), prompt_token_ids:
// [...]." `prompt` is UTF-8 and cut by code points, as Python slices a str.
std::string RequestLogLine(std::string_view request_id, std::string_view prompt,
                           const std::vector<int32_t>& prompt_ids, const ResolvedSampling& s,
                           int64_t max_tokens, int64_t max_len);

}  // namespace cpm
