// Defaults, range checks and context-length checks for sampling requests (vLLM's messages).
#include "server/sampling_request.h"

#include <fmt/format.h>

#include <algorithm>

namespace cpm {

StatusOr<int64_t> ChatLogprobsCount(bool logprobs, std::optional<int64_t> top_logprobs) {
  if (top_logprobs) {
    if (!logprobs) {
      return InvalidArgument("when using `top_logprobs`, `logprobs` must be set to true.");
    }
    if (*top_logprobs < 0) return InvalidArgument("`top_logprobs` must be a positive value.");
    return *top_logprobs;
  }
  return logprobs ? 0 : -1;
}

StatusOr<ResolvedSampling> ResolveSampling(const protocol::SamplingFields& f,
                                           const GenerationDefaults& d, int64_t logprobs,
                                           int32_t vocab_size) {
  ResolvedSampling r;
  if (f.n < 1) return InvalidArgument(fmt::format("n must be at least 1, got {}.", f.n));
  if (f.n > kMaxN) return InvalidArgument(fmt::format("n must be at most {}, got {}.", kMaxN, f.n));
  r.n = f.n;
  const double temperature = f.temperature.value_or(d.temperature.value_or(1.0));
  const double top_p = f.top_p.value_or(d.top_p.value_or(1.0));
  const int64_t top_k = f.top_k.value_or(d.top_k.value_or(0));
  const double min_p = f.min_p.value_or(d.min_p.value_or(0.0));
  const double presence = f.presence_penalty.value_or(0.0);
  const double frequency = f.frequency_penalty.value_or(0.0);
  const double repetition = f.repetition_penalty.value_or(d.repetition_penalty.value_or(1.0));
  if (presence < -2 || presence > 2) {
    return InvalidArgument(fmt::format("presence_penalty must be in [-2, 2], got {}.", presence));
  }
  if (frequency < -2 || frequency > 2) {
    return InvalidArgument(
        fmt::format("frequency_penalty must be in [-2, 2], got {}.", frequency));
  }
  if (!(repetition > 0)) {
    return InvalidArgument(
        fmt::format("repetition_penalty must be greater than zero, got {}.", repetition));
  }
  if (temperature < 0) {
    return InvalidArgument(fmt::format("temperature must be non-negative, got {}.", temperature));
  }
  if (!(top_p > 0 && top_p <= 1)) {
    return InvalidArgument(fmt::format("top_p must be in (0, 1], got {}.", top_p));
  }
  if (top_k < -1 || top_k > INT32_MAX) {
    return InvalidArgument(
        fmt::format("top_k must be 0 (disable), or at least 1, got {}.", top_k));
  }
  if (min_p < 0 || min_p > 1) {
    return InvalidArgument(fmt::format("min_p must be in [0, 1], got {}.", min_p));
  }
  r.params.temperature = static_cast<float>(temperature);
  r.params.top_p = static_cast<float>(top_p);
  r.params.top_k = static_cast<int32_t>(top_k < 0 ? 0 : top_k);
  r.params.min_p = static_cast<float>(min_p);
  r.params.presence_penalty = static_cast<float>(presence);
  r.params.frequency_penalty = static_cast<float>(frequency);
  r.params.repetition_penalty = static_cast<float>(repetition);
  if (f.seed) r.params.seed = static_cast<uint64_t>(*f.seed);

  r.max_tokens = f.max_tokens;
  if (r.max_tokens && *r.max_tokens < 1) {
    return InvalidArgument(fmt::format("max_tokens must be at least 1, got {}.", *r.max_tokens));
  }
  // generation_config.json's max_new_tokens is a server-wide cap.
  if (d.max_tokens && *d.max_tokens > 0) {
    r.max_tokens = r.max_tokens ? std::min(*r.max_tokens, *d.max_tokens) : *d.max_tokens;
  }
  if (f.min_tokens < 0) {
    return InvalidArgument(
        fmt::format("min_tokens must be greater than or equal to 0, got {}.", f.min_tokens));
  }
  if (r.max_tokens && f.min_tokens > *r.max_tokens) {
    return InvalidArgument(fmt::format(
        "min_tokens must be less than or equal to max_tokens={}, got {}.", *r.max_tokens,
        f.min_tokens));
  }
  r.min_tokens = f.min_tokens;
  for (const std::string& s : f.stop) {
    if (s.empty()) return InvalidArgument("stop cannot contain an empty string.");
  }
  r.stop = f.stop;
  for (int64_t id : f.stop_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return InvalidArgument(fmt::format("stop_token_ids: token id {} is out of vocabulary", id));
    }
    r.stop_token_ids.push_back(static_cast<int32_t>(id));
  }
  r.ignore_eos = f.ignore_eos;
  r.include_stop_str_in_output = f.include_stop_str_in_output;
  r.skip_special_tokens = f.skip_special_tokens;
  if (logprobs < -1) {
    return InvalidArgument(fmt::format("logprobs must be non-negative, got {}.", logprobs));
  }
  if (logprobs > kMaxLogprobs) {
    return InvalidArgument(fmt::format(
        "Requested sample logprobs of {}, which is greater than max allowed: {}", logprobs,
        kMaxLogprobs));
  }
  r.logprobs = static_cast<int32_t>(logprobs);
  if (f.prompt_logprobs) {
    if (f.stream) {
      return InvalidArgument("`prompt_logprobs` are not available when `stream=True`.");
    }
    if (*f.prompt_logprobs < 0) {
      return InvalidArgument(
          fmt::format("prompt_logprobs must be non-negative, got {}.", *f.prompt_logprobs));
    }
    if (*f.prompt_logprobs > kMaxLogprobs) {
      return InvalidArgument(fmt::format(
          "Requested prompt logprobs of {}, which is greater than max allowed: {}",
          *f.prompt_logprobs, kMaxLogprobs));
    }
    r.prompt_logprobs = static_cast<int32_t>(*f.prompt_logprobs);
  }
  return r;
}

StatusOr<int64_t> ResolveMaxTokens(int64_t n, std::optional<int64_t> requested, int64_t l) {
  // A prompt that fills the whole window leaves no room for a single generated token.
  if (n >= l) {
    return InvalidArgument(fmt::format(
        "This model's maximum context length is {} tokens. However, your request has {} input "
        "tokens. Please reduce the length of the input messages.",
        l, n));
  }
  if (requested && *requested > l - n) {
    return InvalidArgument(fmt::format(
        "'max_tokens' or 'max_completion_tokens' is too large: {}. This model's maximum context "
        "length is {} tokens and your request has {} input tokens ({} > {} - {}).",
        *requested, l, n, *requested, l, n));
  }
  return requested ? *requested : l - n;
}

}  // namespace cpm
