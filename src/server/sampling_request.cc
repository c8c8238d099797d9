// Defaults, range checks and context-length checks for sampling requests (vLLM's messages).
#include "server/sampling_request.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <string_view>
#include <unordered_map>

#include "chat/value.h"      // Repr: lists in messages as Python writes them
#include "server/api_error.h"
#include "server/json_reader.h"
#include "server/metrics.h"  // PythonFloat: floats in messages as Python writes them

namespace cpm {

StatusOr<int64_t> CompletionLogprobsCount(std::optional<int64_t> logprobs) {
  if (!logprobs) return -1;
  if (*logprobs < 0) {
    return protocol::ModelValidatorError("`logprobs` must be a positive value.")
        .WithParam("logprobs");
  }
  return *logprobs;
}

StatusOr<int64_t> ChatLogprobsCount(bool logprobs, std::optional<int64_t> top_logprobs,
                                    int32_t vocab_size) {
  if (top_logprobs) {
    if (*top_logprobs < -1) {
      return protocol::ModelValidatorError("`top_logprobs` must be a positive value or -1.");
    }
    // vLLM's check: 0 asks nothing, so it needs no `logprobs`.
    if (*top_logprobs != 0 && !logprobs) {
      return protocol::ModelValidatorError(
          "when using `top_logprobs`, `logprobs` must be set to true.");
    }
    if (!logprobs) return -1;
    return *top_logprobs == -1 ? vocab_size : *top_logprobs;
  }
  return logprobs ? 0 : -1;
}

namespace {

// A logit_bias key as Python's int() reads it (surrounding spaces and a '+' allowed).
std::optional<int64_t> TokenIdKey(std::string_view key) {
  while (!key.empty() && key.front() == ' ') key.remove_prefix(1);
  while (!key.empty() && key.back() == ' ') key.remove_suffix(1);
  if (!key.empty() && key.front() == '+') key.remove_prefix(1);
  int64_t id = 0;
  const auto [end, err] = std::from_chars(key.data(), key.data() + key.size(), id);
  if (key.empty() || err != std::errc() || end != key.data() + key.size()) return std::nullopt;
  return id;
}

// logit_bias, allowed_token_ids and bad_words with vLLM's checks and messages; null if the
// request has none of them.
StatusOr<std::shared_ptr<const LogitsRules>> ResolveLogitsRules(
    const protocol::SamplingFields& f, int32_t vocab_size, const Tokenizer* tokenizer) {
  auto rules = std::make_shared<LogitsRules>();
  std::vector<int64_t> out_of_vocab;
  jinja::ValueList not_ids;  // keys int() refuses, shown as Python's repr of their list
  std::unordered_map<int64_t, size_t> bias_index;  // id → its entry in rules->logit_bias
  for (const auto& [key, bias] : f.logit_bias) {
    const std::optional<int64_t> id = TokenIdKey(key);
    if (!id) {
      not_ids.push_back(jinja::Value::String(key));
      continue;
    }
    if (*id < 0 || *id >= vocab_size) {
      out_of_vocab.push_back(*id);
      continue;
    }
    // OpenAI's range; vLLM clamps rather than refuses. Keys naming one id ("5", "05", " 5")
    // are one entry, the last one's, as the dict vLLM builds from them.
    const float value = static_cast<float>(std::clamp(bias, -100.0, 100.0));
    const auto [at, added] = bias_index.emplace(*id, rules->logit_bias.size());
    if (added) {
      rules->logit_bias.emplace_back(static_cast<int32_t>(*id), value);
    } else {
      rules->logit_bias[at->second].second = value;
    }
  }
  if (!not_ids.empty()) {
    return InvalidArgument("logit_bias contains key(s) that cannot be converted to integer "
                           "token IDs: " +
                           jinja::Value::List(std::move(not_ids)).Repr())
        .WithParam("logit_bias");
  }
  if (!out_of_vocab.empty()) {
    return InvalidArgument(fmt::format(
                               "token_id(s) [{}] in logit_bias contain out-of-vocab token ids. "
                               "Vocabulary size: {}",
                               fmt::join(out_of_vocab, ", "), vocab_size))
        .WithParam("logit_bias");
  }
  if (f.allowed_token_ids) {
    if (f.allowed_token_ids->empty()) {
      return InvalidArgument("allowed_token_ids is not None and empty!");
    }
    for (int64_t id : *f.allowed_token_ids) {
      if (id < 0 || id >= vocab_size) {
        return InvalidArgument("allowed_token_ids contains out-of-vocab token id!");
      }
      rules->allowed_token_ids.push_back(static_cast<int32_t>(id));
    }
  }
  if (!f.bad_words.empty()) {
    if (tokenizer == nullptr) return InvalidArgument("bad_words: no tokenizer to encode them");
    rules->bad_words = BadWordsTokenIds(f.bad_words, *tokenizer);
  }
  if (rules->empty()) return std::shared_ptr<const LogitsRules>();
  return std::shared_ptr<const LogitsRules>(std::move(rules));
}

}  // namespace

std::vector<std::vector<int32_t>> BadWordsTokenIds(const std::vector<std::string>& words,
                                                   const Tokenizer& tokenizer) {
  std::vector<std::vector<int32_t>> ids;
  for (const std::string& word : words) {
    const std::string_view bare = std::string_view(word).substr(
        std::min(word.size(), word.find_first_not_of(" \t\n\r\f\v")));
    std::vector<int32_t> alone = tokenizer.Encode(bare, /*add_special_tokens=*/false);
    // An empty word bans nothing (vLLM would fail on it).
    if (alone.empty()) continue;
    std::vector<int32_t> spaced =
        tokenizer.Encode(" " + std::string(bare), /*add_special_tokens=*/false);
    const bool new_word = !spaced.empty() && spaced.front() != alone.front() &&
                          spaced.size() == alone.size();
    ids.push_back(std::move(alone));
    if (new_word) ids.push_back(std::move(spaced));
  }
  return ids;
}

StatusOr<ResolvedSampling> ResolveSampling(const protocol::SamplingFields& f,
                                           const GenerationDefaults& d, int64_t logprobs,
                                           int32_t vocab_size, const Tokenizer* tokenizer,
                                           int64_t max_logprobs) {
  ResolvedSampling r;
  if (f.n < 1) return InvalidArgument(fmt::format("n must be at least 1, got {}.", f.n));
  r.n = f.n;
  double temperature = f.temperature.value_or(d.temperature.value_or(1.0));
  const double top_p = f.top_p.value_or(d.top_p.value_or(1.0));
  const int64_t top_k = f.top_k.value_or(d.top_k.value_or(0));
  const double min_p = f.min_p.value_or(d.min_p.value_or(0.0));
  const double presence = f.presence_penalty.value_or(0.0);
  const double frequency = f.frequency_penalty.value_or(0.0);
  const double repetition = f.repetition_penalty.value_or(d.repetition_penalty.value_or(1.0));
  if (presence < -2 || presence > 2) {
    return InvalidArgument(
        fmt::format("presence_penalty must be in [-2, 2], got {}.", PythonFloat(presence)));
  }
  if (frequency < -2 || frequency > 2) {
    return InvalidArgument(
        fmt::format("frequency_penalty must be in [-2, 2], got {}.", PythonFloat(frequency)));
  }
  if (!(repetition > 0)) {
    return InvalidArgument(
        fmt::format("repetition_penalty must be greater than zero, got {}.", PythonFloat(repetition)));
  }
  if (temperature < 0) {
    return InvalidArgument(
               fmt::format("temperature must be non-negative, got {}.", PythonFloat(temperature)))
        .WithParam("temperature");
  }
  if (!(top_p > 0 && top_p <= 1)) {
    return InvalidArgument(fmt::format("top_p must be in (0, 1], got {}.", PythonFloat(top_p)))
        .WithParam("top_p");
  }
  if (top_k < -1 || top_k > INT32_MAX) {
    return InvalidArgument(
        fmt::format("top_k must be 0 (disable), or at least 1, got {}.", top_k));
  }
  if (min_p < 0 || min_p > 1) {
    return InvalidArgument(fmt::format("min_p must be in [0, 1], got {}.", PythonFloat(min_p)));
  }
  // vLLM raises a positive temperature below 0.01 to 0.01 (lower ones overflow its kernels),
  // so only 0 is greedy, and greedy draws are one per prompt.
  if (temperature > 0 && temperature < kMinTemperature) temperature = kMinTemperature;
  if (temperature == 0 && r.n > 1 && !f.use_beam_search) {
    return InvalidArgument(fmt::format("n must be 1 when using greedy sampling, got {}.", r.n));
  }
  r.params.temperature = static_cast<float>(temperature);
  r.params.top_p = static_cast<float>(top_p);
  r.params.top_k = static_cast<int32_t>(top_k < 0 ? 0 : top_k);
  r.params.min_p = static_cast<float>(min_p);
  r.params.presence_penalty = static_cast<float>(presence);
  r.params.frequency_penalty = static_cast<float>(frequency);
  r.params.repetition_penalty = static_cast<float>(repetition);
  // -1 is vLLM's "no seed".
  if (f.seed && *f.seed != -1) r.params.seed = static_cast<uint64_t>(*f.seed);

  r.max_tokens = f.max_tokens;
  if (r.max_tokens && *r.max_tokens < 1) {
    return InvalidArgument(fmt::format("max_tokens must be at least 1, got {}.", *r.max_tokens))
        .WithParam("max_tokens");
  }
  // generation_config.json's max_new_tokens is a server-wide cap.
  if (d.max_tokens && *d.max_tokens > 0) r.max_tokens_cap = d.max_tokens;
  if (f.min_tokens < 0) {
    return InvalidArgument(
        fmt::format("min_tokens must be greater than or equal to 0, got {}.", f.min_tokens));
  }
  r.min_tokens = f.min_tokens;  // checked against the resolved max_tokens (ResolveMaxTokens)
  for (const std::string& s : f.stop) {
    if (s.empty()) return InvalidArgument("stop cannot contain an empty string.");
  }
  r.stop = f.stop;
  std::vector<int64_t> stop_out_of_vocab;
  for (int64_t id : f.stop_token_ids) {
    if (id < 0 || id >= vocab_size) {
      stop_out_of_vocab.push_back(id);
    } else {
      r.stop_token_ids.push_back(static_cast<int32_t>(id));
    }
  }
  if (!stop_out_of_vocab.empty()) {  // vLLM's text, as for logit_bias's ids
    return InvalidArgument(fmt::format("token_id(s) [{}] in stop_token_ids contain out-of-vocab "
                                       "token ids. Vocabulary size: {}",
                                       fmt::join(stop_out_of_vocab, ", "), vocab_size))
        .WithParam("stop_token_ids");
  }
  r.ignore_eos = f.ignore_eos;
  r.include_stop_str_in_output = f.include_stop_str_in_output;
  r.skip_special_tokens = f.skip_special_tokens;
  if (logprobs < -1) {
    return protocol::ModelValidatorError("`logprobs` must be a positive value or -1.")
        .WithParam("logprobs");
  }
  if (logprobs > max_logprobs) {
    return InvalidArgument(fmt::format(
                               "Requested sample logprobs of {}, which is greater than max "
                               "allowed: {}",
                               logprobs, max_logprobs))
        .WithParam("logprobs");
  }
  r.logprobs = static_cast<int32_t>(logprobs);
  if (f.prompt_logprobs) {
    // vLLM's: -1 is the whole vocabulary; 0 (the prompt's own tokens) streams too.
    int64_t prompt_logprobs = *f.prompt_logprobs;
    if (prompt_logprobs < -1) {
      return protocol::ModelValidatorError("`prompt_logprobs` must be a positive value or -1.")
          .WithParam("prompt_logprobs");
    }
    if (f.stream && prompt_logprobs != 0) {
      return protocol::ModelValidatorError(
                 "`prompt_logprobs` are not available when `stream=True`.")
          .WithParam("prompt_logprobs");
    }
    if (prompt_logprobs == -1) prompt_logprobs = vocab_size;
    if (prompt_logprobs > max_logprobs) {
      return InvalidArgument(fmt::format(
                                 "Requested prompt logprobs of {}, which is greater than max "
                                 "allowed: {}",
                                 prompt_logprobs, max_logprobs))
          .WithParam("prompt_logprobs");
    }
    r.prompt_logprobs = static_cast<int32_t>(prompt_logprobs);
  }
  // -1 is vLLM's "no budget".
  if (f.thinking_token_budget && *f.thinking_token_budget < -1) {
    return InvalidArgument(fmt::format(
        "thinking_token_budget must be non-negative or -1, got {}.", *f.thinking_token_budget));
  }
  if (f.thinking_token_budget != -1) r.thinking_token_budget = f.thinking_token_budget;
  r.priority = f.priority;
  r.cache_salt = f.cache_salt;
  r.beam_search = f.use_beam_search;
  r.length_penalty = static_cast<float>(f.length_penalty.value_or(1.0));
  // A beam search expands each beam by its 2·n likeliest tokens: vLLM asks for that many
  // log-probs, which --max-logprobs bounds.
  if (r.beam_search && 2 * r.n > max_logprobs) {
    return InvalidArgument(fmt::format(
        "Requested sample logprobs of {}, which is greater than max allowed: {}", 2 * r.n,
        max_logprobs));
  }
  auto rules = ResolveLogitsRules(f, vocab_size, tokenizer);
  if (!rules.ok()) return rules.status();
  r.logits_rules = std::move(*rules);
  return r;
}

Status TruncatePrompt(std::optional<int64_t> k, bool keep_first, int64_t max_model_len,
                      bool multimodal, std::vector<int32_t>* ids, SpecialTokenCounts specials,
                      int64_t text_tokens) {
  if (!k) return OkStatus();
  if (*k < -1) {
    return RequestValidationError(fmt::format(
        "1 validation error: field 'truncate_prompt_tokens': Input should be greater than or "
        "equal to -1, got {}",
        *k));
  }
  if (*k > max_model_len) {
    return InvalidArgument(fmt::format(
        "truncate_prompt_tokens value ({}) is greater than max_model_len ({}). Please, select a "
        "smaller truncation size.",
        *k, max_model_len));
  }
  const int64_t keep = *k == -1 ? max_model_len : *k;
  const int64_t n = static_cast<int64_t>(ids->size());
  // vLLM truncates a prompt with images or videos as its text, each item one placeholder token.
  const int64_t counted = multimodal && text_tokens >= 0 ? text_tokens : n;
  if (keep == 0 || counted <= keep) return OkStatus();
  if (multimodal) {
    return InvalidArgument(
        "truncate_prompt_tokens cannot cut a prompt with images or videos (their placeholder "
        "tokens would be cut)");
  }
  const int64_t lead = static_cast<int64_t>(specials.leading);
  const int64_t trail = static_cast<int64_t>(specials.trailing);
  // The text's tokens [lead, n - trail) lose n - keep of theirs; with no room left for any
  // of them the specials go too (plain slice).
  const bool keep_specials = lead + trail < keep && lead + trail <= n;
  const auto text_begin = ids->begin() + (keep_specials ? lead : 0);
  const auto text_end = ids->end() - (keep_specials ? trail : 0);
  if (keep_first) {
    ids->erase(text_end - (n - keep), text_end);
  } else {
    ids->erase(text_begin, text_begin + (n - keep));
  }
  return OkStatus();
}

StatusOr<int64_t> ResolveMaxTokens(int64_t n, std::optional<int64_t> requested, int64_t l,
                                   std::optional<int64_t> cap, int64_t min_tokens) {
  // A prompt that fills the whole window leaves no room for a single generated token.
  if (n >= l) {
    return InvalidArgument(fmt::format(
                               "This model's maximum context length is {} tokens. However, your "
                               "request has {} input tokens. Please reduce the length of the "
                               "input messages.",
                               l, n))
        .WithParam("input_tokens");
  }
  if (requested && *requested > l - n) {
    return InvalidArgument(fmt::format(
                               "'max_tokens' or 'max_completion_tokens' is too large: {}. This "
                               "model's maximum context length is {} tokens and your request "
                               "has {} input tokens ({} > {} - {}).",
                               *requested, l, n, *requested, l, n))
        .WithParam("max_tokens");
  }
  int64_t max_tokens = requested ? *requested : l - n;
  if (cap) max_tokens = std::min(max_tokens, *cap);
  if (min_tokens > max_tokens) {
    return InvalidArgument(fmt::format(
        "min_tokens must be less than or equal to max_tokens={}, got {}.", max_tokens, min_tokens));
  }
  return max_tokens;
}

StatusOr<int64_t> LimitToExpandedPrompt(int64_t max_tokens, int64_t prompt_tokens,
                                        int64_t max_model_len) {
  if (prompt_tokens >= max_model_len) {
    const char* suggestion =
        prompt_tokens > max_model_len
            ? "Make sure that `max_model_len` is no smaller than the number of text tokens plus "
              "multimodal tokens. For image inputs, the number of image tokens depends on the "
              "number of images, and possibly their aspect ratios as well."
            : "Make sure that `max_model_len` is no smaller than the number of text tokens "
              "(prompt + requested output tokens).";
    return InvalidArgument(fmt::format(
        "The decoder prompt (length {}) is longer than the maximum model length of {}. {}",
        prompt_tokens, max_model_len, suggestion));
  }
  return std::min(max_tokens, max_model_len - prompt_tokens);
}

}  // namespace cpm
