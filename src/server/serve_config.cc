// Flag values with a syntax of their own, and cross-flag checks for `cpmserve serve`.
#include "server/serve_config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <regex>

#include "model/load_options.h"
#include "multimodal/image_source.h"
#include "server/generation_defaults.h"
#include "server/reasoning_parser.h"
#include "server/tool_call_parser.h"

namespace cpm {

StatusOr<int64_t> ParseMaxModelLen(const std::string& text) {
  // vLLM's human_readable_int_or_auto: surrounding whitespace dropped, "-1" or "auto" (any
  // case), a number with a decimal (k m g t) or binary (K M G T) suffix, or a plain integer.
  const std::string bad = "--max-model-len: '" + text +
                          "' is not a length (examples: 4096, 8k, 32K, 25.6k, -1, auto)";
  const size_t first = text.find_first_not_of(" \t\n\r\f\v");
  const std::string v =
      first == std::string::npos ? "" : text.substr(first, text.find_last_not_of(" \t\n\r\f\v") - first + 1);
  std::string lower = v;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "-1" || lower == "auto") return int64_t{-1};
  static const std::regex suffixed(R"((\d+(?:\.\d+)?)([kKmMgGtT]))");
  static const std::regex plain(R"([+-]?\d+(?:_\d+)*)");
  std::smatch m;
  double len = 0;
  if (std::regex_match(v, m, suffixed)) {
    const std::string number = m[1].str();
    const char suffix = m[2].str()[0];
    const int power = std::string("kmgt").find(static_cast<char>(std::tolower(suffix))) + 1;
    if (std::islower(static_cast<unsigned char>(suffix))) {
      len = std::floor(std::stod(number) * std::pow(1e3, power));
    } else if (number.find('.') != std::string::npos) {
      return InvalidArgument(fmt::format(
          "--max-model-len: Decimals are not allowed with binary suffixes like {}. Did you mean "
          "to use {}{} instead?",
          suffix, number, static_cast<char>(std::tolower(suffix))));
    } else {
      len = std::stod(number) * std::pow(1024.0, power);
    }
  } else if (std::regex_match(v, plain)) {
    std::string digits;
    for (char c : v) {
      if (c != '_') digits += c;
    }
    len = std::stod(digits);
  } else {
    return InvalidArgument(bad);
  }
  if (len < 1 || len > 1e12) return InvalidArgument(bad);
  return static_cast<int64_t>(len);
}

Status ValidateServeConfig(const ServeConfig& c) {
  {
    LoadOptions scratch;  // the model's load choices, refused before the server listens
    CPM_RETURN_IF_ERROR(ParseLoadChoices(c.load_format, c.dtype, c.quantization, &scratch));
  }
  if (c.port < 0 || c.port > 65535) {
    return InvalidArgument("--port: " + std::to_string(c.port) + " is not a TCP port");
  }
  if (c.tensor_parallel_size != 1) {
    return InvalidArgument("--tensor-parallel-size: " + std::to_string(c.tensor_parallel_size) +
                           " is not supported: cpmserve runs one CPU process (use 1)");
  }
  if (c.max_num_seqs < 1) return InvalidArgument("--max-num-seqs must be at least 1");
  if (c.max_num_batched_tokens < 1) {
    return InvalidArgument("--max-num-batched-tokens must be at least 1");
  }
  if (!(c.gpu_memory_utilization > 0 && c.gpu_memory_utilization <= 1)) {
    return InvalidArgument("--gpu-memory-utilization must be in (0, 1], got " +
                           std::to_string(c.gpu_memory_utilization));
  }
  if (c.kv_cache_memory_bytes && *c.kv_cache_memory_bytes <= 0) {
    return InvalidArgument("--kv-cache-memory-bytes must be positive");
  }
  if (c.block_size < 1 || c.block_size > 1024) {
    return InvalidArgument("--block-size must be in [1, 1024]");
  }
  if (c.threads < 0) return InvalidArgument("--threads must be >= 0");
  if (!(c.mm_processor_cache_gb >= 0)) {
    return InvalidArgument("--mm-processor-cache-gb must be at least 0 (GiB; 0 turns the cache "
                           "off)");
  }
  if (c.shutdown_timeout < 0) {
    return InvalidArgument("--shutdown-timeout must be 0 (abort at once) or a number of seconds");
  }
  if (c.max_logprobs < -1) {
    return InvalidArgument("--max-logprobs must be -1 (the vocabulary) or at least 0, got " +
                           std::to_string(c.max_logprobs));
  }
  if (c.max_log_len < -1) return InvalidArgument("--max-log-len must be -1 (all) or at least 0");
  if (auto cors = CorsFromConfig(c); !cors.ok()) return cors.status();
  CPM_RETURN_IF_ERROR(ValidateTlsOptions(c.tls));
  {
    GenerationDefaults scratch;
    CPM_RETURN_IF_ERROR(ApplyGenerationOverrides(c.override_generation_config_json, &scratch));
  }
  if (c.scheduling_policy != "fcfs" && c.scheduling_policy != "priority") {
    return InvalidArgument("--scheduling-policy: '" + c.scheduling_policy +
                           "' is not supported (fcfs, priority)");
  }
  if (c.generation_config.empty()) {
    return InvalidArgument("--generation-config: give auto, vllm or a folder");
  }
  // vLLM's four modes; log-probs here are always the model's own (raw_logprobs, its default).
  if (c.logprobs_mode != "raw_logprobs") {
    const bool known = c.logprobs_mode == "raw_logits" || c.logprobs_mode == "processed_logprobs" ||
                       c.logprobs_mode == "processed_logits";
    return InvalidArgument(
        known ? "--logprobs-mode " + c.logprobs_mode +
                    " is not supported: log-probs are the model's distribution (raw_logprobs, "
                    "vLLM's default)"
              : "argument --logprobs-mode: invalid choice: '" + c.logprobs_mode +
                    "' (choose from raw_logprobs, raw_logits, processed_logprobs, "
                    "processed_logits)");
  }
  if (Status s = ValidateReasoningParserName(c.reasoning_parser); !s.ok()) {
    return s.WithPrefix("--reasoning-parser");
  }
  if (c.enable_auto_tool_choice && !c.tool_call_parser.empty()) {  // only then, as vLLM
    if (Status s = ValidateToolCallParserName(c.tool_call_parser); !s.ok()) {
      return s.WithPrefix("--tool-call-parser");
    }
  }
  if (c.enable_auto_tool_choice && c.tool_call_parser.empty()) {  // vLLM's start-up check
    return InvalidArgument("--enable-auto-tool-choice requires --tool-call-parser");
  }
  for (const char* modality : {"image", "video"}) {
    if (auto limit = ParseMediaLimit(c.limit_mm_per_prompt_json, modality); !limit.ok())
      return limit.status();
  }
  MediaOptions media;
  CPM_RETURN_IF_ERROR(ApplyMediaIoKwargs(c.media_io_kwargs_json, &media));
  if (auto so = ParseStructuredOutputsConfig(c.structured_outputs_config_json); !so.ok()) {
    return so.status();
  }
  if (auto spec = ParseSpeculativeConfig(c.speculative_config_json); !spec.ok()) {
    return spec.status();
  }
  if (auto rc = ParseReasoningConfig(c.reasoning_config_json); !rc.ok()) return rc.status();
  if (!c.default_chat_template_kwargs_json.empty()) {
    const auto j = nlohmann::json::parse(c.default_chat_template_kwargs_json, nullptr, false);
    if (j.is_discarded() || !j.is_object()) {
      return InvalidArgument("--default-chat-template-kwargs: not a JSON object: " +
                             c.default_chat_template_kwargs_json);
    }
  }
  return OkStatus();
}

StatusOr<CorsOptions> CorsFromConfig(const ServeConfig& c) {
  CorsOptions o;
  CPM_ASSIGN_OR_RETURN(o.allowed_origins, ParseCorsList("--allowed-origins", c.allowed_origins_json));
  CPM_ASSIGN_OR_RETURN(o.allowed_methods, ParseCorsList("--allowed-methods", c.allowed_methods_json));
  CPM_ASSIGN_OR_RETURN(o.allowed_headers, ParseCorsList("--allowed-headers", c.allowed_headers_json));
  o.allow_credentials = c.allow_credentials;
  return o;
}

Status CheckKvCacheDtype(const std::string& kv_cache_dtype, const std::string& model_dtype) {
  if (kv_cache_dtype == "auto" || kv_cache_dtype == model_dtype) return OkStatus();
  if (kv_cache_dtype.rfind("fp8", 0) == 0) {
    return InvalidArgument("--kv-cache-dtype: '" + kv_cache_dtype +
                           "' is not supported: the KV cache holds the model's dtype (" +
                           model_dtype + " here; pass auto)");
  }
  return InvalidArgument("--kv-cache-dtype: '" + kv_cache_dtype + "' is not the model's dtype (" +
                         model_dtype + "), which the KV cache holds: pass auto or " + model_dtype);
}

Status CheckUnchunkedBudget(int64_t max_num_batched_tokens, int64_t max_model_len) {
  if (max_num_batched_tokens >= max_model_len) return OkStatus();
  return InvalidArgument(
      "max_num_batched_tokens (" + std::to_string(max_num_batched_tokens) +
      ") is smaller than max_model_len (" + std::to_string(max_model_len) +
      "). This effectively limits the maximum sequence length to max_num_batched_tokens and "
      "makes vLLM reject longer sequences. Please increase max_num_batched_tokens or decrease "
      "max_model_len.");
}

StatusOr<StructuredOutputsOptions> ParseStructuredOutputsConfig(const std::string& json) {
  StructuredOutputsOptions options;
  if (json.empty()) return options;
  const auto j = nlohmann::json::parse(json, nullptr, false);
  const std::string what = "--structured-outputs-config: ";
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument(what + "not a JSON object: " + json);
  }
  for (const auto& [key, value] : j.items()) {
    if (key == "backend") {
      static const char* kBackends[] = {"auto", "xgrammar", "guidance", "outlines",
                                        "lm-format-enforcer"};
      if (!value.is_string() ||
          std::find(std::begin(kBackends), std::end(kBackends), value.get<std::string>()) ==
              std::end(kBackends)) {
        return InvalidArgument(what + "unknown backend " + value.dump());
      }
    } else if (key == "enable_in_reasoning") {
      if (!value.is_boolean()) return InvalidArgument(what + "enable_in_reasoning: a boolean");
      options.enable_in_reasoning = value.get<bool>();
    } else if (key == "disable_any_whitespace") {
      if (!value.is_boolean()) return InvalidArgument(what + "disable_any_whitespace: a boolean");
      options.disable_any_whitespace = value.get<bool>();
    } else if (key != "disable_fallback" &&
               key != "disable_additional_properties" && key != "reasoning_parser") {
      return InvalidArgument(what + "unknown field '" + key + "'");
    }
  }
  return options;
}

StatusOr<ReasoningConfig> ParseReasoningConfig(const std::string& json) {
  ReasoningConfig config;
  if (json.empty()) return config;
  const auto j = nlohmann::json::parse(json, nullptr, false);
  const std::string what = "--reasoning-config: ";
  if (j.is_discarded() || !j.is_object()) {
    return InvalidArgument(what + "not a JSON object: " + json);
  }
  for (const auto& [key, value] : j.items()) {
    std::string* field = key == "reasoning_parser"      ? &config.reasoning_parser
                         : key == "reasoning_start_str" ? &config.start
                         : key == "reasoning_end_str"   ? &config.end
                                                        : nullptr;
    if (field == nullptr) return InvalidArgument(what + "unknown field '" + key + "'");
    if (value.is_null()) continue;
    if (!value.is_string()) return InvalidArgument(what + key + ": a string");
    *field = value.get<std::string>();
  }
  if (Status s = ValidateReasoningParserName(config.reasoning_parser); !s.ok()) {
    return s.WithPrefix("--reasoning-config");
  }
  return config;
}

// vLLM's SpeculativeConfig fields that shape a draft model's run (its parallelism, graphs,
// length, weights) or its logging: accepted, as vLLM accepts them with the n-gram method, and
// without effect on prompt lookup.
bool IgnoredSpeculativeField(const std::string& key) {
  static const char* const kFields[] = {
      "enforce_eager",    "draft_tensor_parallel_size", "quantization",
      "max_model_len",    "revision",                   "code_revision",
      "disable_logprobs", "disable_log_stats",          "disable_padded_drafter_batch",
      "speculative_token_tree"};
  return std::find(std::begin(kFields), std::end(kFields), key) != std::end(kFields);
}

StatusOr<SpeculativeConfig> ParseSpeculativeConfig(const std::string& json) {
  SpeculativeConfig c;  // off
  if (json.empty()) return c;
  const std::string what = "--speculative-config: ";
  const auto j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument(what + "not a JSON object: " + json);
  std::optional<int64_t> k, min_n, max_n;
  std::string method;
  bool model_ngram = false;
  for (const auto& [key, value] : j.items()) {
    if (key == "method") {
      if (!value.is_string()) return InvalidArgument(what + "method: a string");
      method = value.get<std::string>();
    } else if (key == "num_speculative_tokens" || key == "prompt_lookup_min" ||
               key == "prompt_lookup_max") {
      if (!value.is_number_integer() || value.get<int64_t>() < 1) {
        return InvalidArgument(what + key + " must be a positive integer, got " + value.dump());
      }
      (key == "num_speculative_tokens" ? k : key == "prompt_lookup_min" ? min_n : max_n) =
          value.get<int64_t>();
    } else if (key == "disable_by_batch_size") {
      if (!value.is_number_integer() || value.get<int64_t>() < 2) {
        return InvalidArgument(what + key + " must be an integer >= 2, got " + value.dump());
      }
      c.disable_by_batch_size = value.get<int64_t>();
    } else if (key == "model") {
      // vLLM: a method-less config whose model is "ngram" or "[ngram]" is the n-gram method.
      if (value != "ngram" && value != "[ngram]") {
        return InvalidArgument(what + "a draft model is not supported; use \"method\": \"ngram\"");
      }
      model_ngram = true;
    } else if (IgnoredSpeculativeField(key)) {
      continue;
    } else {
      return InvalidArgument(what + "unknown field '" + key + "'");
    }
  }
  if (method.empty() && model_ngram) method = "ngram";
  if (method != "ngram") {
    return InvalidArgument(what + "method " + (method.empty() ? "(none)" : "'" + method + "'") +
                           " is not supported: cpmserve drafts by prompt lookup only (\"ngram\");"
                           " it runs no draft model, EAGLE head or MTP head (V-4.6's mtp.*)");
  }
  if (!k) return InvalidArgument(what + "num_speculative_tokens is required");
  c.num_speculative_tokens = *k;
  c.prompt_lookup_min = min_n.value_or(max_n.value_or(5));
  c.prompt_lookup_max = max_n.value_or(min_n.value_or(5));
  if (c.prompt_lookup_min > c.prompt_lookup_max) {
    return InvalidArgument(what + "prompt_lookup_min=" + std::to_string(c.prompt_lookup_min) +
                           " must be <= prompt_lookup_max=" + std::to_string(c.prompt_lookup_max));
  }
  return c;
}

StatusOr<int64_t> ParseMediaLimit(const std::string& json, const std::string& modality) {
  if (json.empty()) return kDefaultMediaLimit;
  const auto j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return InvalidArgument("--limit-mm-per-prompt: not a JSON object: " + json);
  auto it = j.find(modality);
  if (it == j.end()) return kDefaultMediaLimit;
  // vLLM's per-modality options: {"count": N, "width": ..., "height": ...}; the sizes only
  // shape vLLM's memory-profiling dummy inputs, which cpmserve does not run.
  const nlohmann::json* count = &*it;
  if (it->is_object()) {
    auto c = it->find("count");
    if (c == it->end()) return kDefaultMediaLimit;
    count = &*c;
  }
  if (!count->is_number_integer() || count->get<int64_t>() < 0) {
    return InvalidArgument("--limit-mm-per-prompt: '" + modality +
                           "' must be a non-negative integer or {\"count\": N}");
  }
  return count->get<int64_t>();
}

int DefaultHttpThreads(int64_t max_num_seqs) {
  return static_cast<int>(std::clamp<int64_t>(2 * max_num_seqs + 64, 128, 512));
}

}  // namespace cpm
