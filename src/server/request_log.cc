#include "server/request_log.h"

#include <fmt/format.h>

#include <algorithm>

#include "chat/value.h"

namespace cpm {
namespace {

// The first `n` code points of UTF-8 `s` (all for n < 0). Continuation bytes (10xxxxxx) never
// start a code point.
std::string_view FirstCodePoints(std::string_view s, int64_t n) {
  if (n < 0) return s;
  size_t i = 0;
  for (int64_t seen = 0; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && seen++ == n) break;
  }
  return s.substr(0, i);
}

std::string PyStr(std::string_view s) { return jinja::Value::String(std::string(s)).Repr(); }
// A float field as Python prints the JSON number it came from: the float's shortest form
// (0.2, not the 0.20000000298023224 its double widening would print), with ".0" if integral.
std::string PyFloat(float v) {
  std::string s = fmt::format("{}", v);
  if (s.find_first_of(".en") == std::string::npos) s += ".0";
  return s;
}
std::string PyBool(bool b) { return b ? "True" : "False"; }
std::string PyInt(int32_t i) { return std::to_string(i); }

template <typename T, typename F>
std::string PyList(const std::vector<T>& items, F format, int64_t limit = -1) {
  std::string out = "[";
  const size_t n = limit < 0 ? items.size() : std::min(items.size(), static_cast<size_t>(limit));
  for (size_t i = 0; i < n; ++i) out += (i ? ", " : "") + format(items[i]);
  return out + "]";
}

std::string PyOptionalInt(int64_t v) { return v < 0 ? "None" : std::to_string(v); }

// The fields vLLM's SamplingParams.__repr__ prints that a request here can set, in its order.
std::string SamplingParamsRepr(const ResolvedSampling& s, int64_t max_tokens) {
  const SamplingParams& p = s.params;
  return fmt::format(
      "SamplingParams(n={}, presence_penalty={}, frequency_penalty={}, repetition_penalty={}, "
      "temperature={}, top_p={}, top_k={}, min_p={}, seed={}, stop={}, stop_token_ids={}, "
      "include_stop_str_in_output={}, ignore_eos={}, max_tokens={}, min_tokens={}, logprobs={}, "
      "prompt_logprobs={}, skip_special_tokens={})",
      s.n, PyFloat(p.presence_penalty), PyFloat(p.frequency_penalty), PyFloat(p.repetition_penalty),
      PyFloat(p.temperature), PyFloat(p.top_p), p.top_k, PyFloat(p.min_p),
      p.seed ? std::to_string(*p.seed) : "None", PyList(s.stop, PyStr),
      PyList(s.stop_token_ids, PyInt),
      PyBool(s.include_stop_str_in_output), PyBool(s.ignore_eos), max_tokens, s.min_tokens,
      PyOptionalInt(s.logprobs), PyOptionalInt(s.prompt_logprobs), PyBool(s.skip_special_tokens));
}

}  // namespace

std::string RequestLogLine(std::string_view request_id, std::string_view prompt,
                           const std::vector<int32_t>& prompt_ids, const ResolvedSampling& s,
                           int64_t max_tokens, int64_t max_len) {
  return fmt::format("Received request {}: prompt: {}, params: {}, prompt_token_ids: {}.",
                     request_id, PyStr(FirstCodePoints(prompt, max_len)),
                     SamplingParamsRepr(s, max_tokens),
                     PyList(prompt_ids, PyInt, max_len));
}

}  // namespace cpm
