// The settings of `cpmserve serve`, as vLLM's `vllm serve` names them, and the parsing of the
// flag values that have a syntax of their own (--max-model-len 1k, --default-chat-template-kwargs).
// Plain data; depends only on base/ (and the engine's SpeculativeConfig).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "engine/ngram_proposer.h"
#include "server/cors.h"
#include "server/reasoning_parser.h"
#include "server/tls.h"

namespace cpm {

struct ServeConfig {
  std::string model_dir;  // a folder, or a Hugging Face repository id (resolved by RunServe)
  // The model as given, before RunServe resolves model_dir to a local folder: the default served
  // name and /v1/models' root, as vLLM's args.model.
  std::string model_name;
  // Hub downloads (hub/model_source.h), as vLLM's flags of these names.
  std::string revision = "main";
  std::string tokenizer_revision;  // --tokenizer's revision ("": --revision, as vLLM)
  std::string download_dir;        // "": the Hugging Face cache
  std::string hf_token;            // "": $HF_TOKEN, else the stored login token
  std::string hf_overrides_json;   // vLLM's --hf-overrides: merged over config.json
  std::string host = "0.0.0.0";
  int port = 8000;
  uint64_t seed = 0;
  std::vector<std::string> served_model_names;  // empty: the model dir as given
  int64_t max_num_seqs = 128;                   // vLLM's CPU default (128 x TP x PP)
  // 0: from config.json; -1: the config's length, or less if the KV cache holds fewer tokens
  // ("auto" / -1 in vLLM).
  int64_t max_model_len = 0;
  // vLLM's CPU default is 2048 (x TP x PP); on a small CPU a 2048-token step takes seconds and
  // stalls every running decode, so the default here is 256: prefill is as efficient per token
  // at 128-512 tokens, and `bench serve` (16 streams, 256 in / 64 out) measured +19% total
  // throughput, median TTFT 8 s instead of 22 s and p99 ITL 2.3 s instead of 12 s.
  int64_t max_num_batched_tokens = 256;
  int64_t long_prefill_token_threshold = 0;  // vLLM's: a request's most tokens a step (0: none)
  bool max_num_batched_tokens_set = false;  // given on the command line
  // --no-enable-chunked-prefill: a prompt is prefilled in one step or waits for a step with room
  // (vLLM V1's rule); the token budget then defaults to max(max_model_len, 256) and may not be
  // below max_model_len.
  bool enable_chunked_prefill = true;
  std::string dtype = "auto";
  std::string quantization = "none";  // vLLM's --quantization: none | q8_0
  double gpu_memory_utilization = 0.9;
  bool gpu_memory_utilization_set = false;  // explicit flag: the free-memory check is strict
  std::optional<int64_t> kv_cache_memory_bytes;  // wins over the utilisation when set
  std::string load_format = "auto";
  bool enforce_eager = false;
  bool enable_prefix_caching = true;
  bool trust_remote_code = false;
  std::vector<std::string> api_keys;  // --api-key, else $VLLM_API_KEY
  bool api_key_given = false;         // --api-key on the command line ("" too): no $VLLM_API_KEY
  std::string chat_template;          // file or inline Jinja; empty: the tokenizer's
  std::string chat_template_content_format = "auto";  // auto, string or openai
  bool trust_request_chat_template = false;  // a request's chat_template is used, not refused
  std::string generation_config = "auto";  // auto | vllm | a folder with generation_config.json
  std::string override_generation_config_json;  // merged over it (vLLM's JSON object)
  int tensor_parallel_size = 1;
  int threads = 0;                    // compute threads; 0: one per physical core
  int64_t block_size = 16;
  std::string reasoning_parser;       // "": the model's default; "none": off
  std::string logprobs_mode = "raw_logprobs";  // vLLM's --logprobs-mode: only its default here
  std::string structured_outputs_config_json;  // vLLM's --structured-outputs-config (JSON)
  std::string reasoning_config_json;  // vLLM's --reasoning-config (JSON): thinking budget texts
  std::string speculative_config_json;  // vLLM's --speculative-config (JSON); empty: off
  bool return_tokens_as_token_ids = false;  // log-probs name tokens "token_id:<id>"
  bool enable_force_include_usage = false;  // streams end with usage whatever stream_options say
  bool enable_auto_tool_choice = false;  // with tool_call_parser: tool_choice "auto" served
  bool exclude_tools_when_tool_choice_none = false;  // tool_choice "none": no tools in the prompt
  std::string tool_call_parser;          // "" or a ValidateToolCallParserName name
  std::string default_chat_template_kwargs_json;  // JSON object merged under the request's
  std::string allowed_local_media_path;  // file:// media URLs are read only below this folder
  std::vector<std::string> allowed_media_domains;  // http(s) media hosts allowed (empty: any)
  std::string limit_mm_per_prompt_json;  // vLLM's {"image": N, "video": M}; empty: no limit
  std::string media_io_kwargs_json;      // vLLM's {"video": {"num_frames": N}}
  std::string mm_processor_kwargs_json;  // vLLM's image processor overrides (max_slice_nums, ...)
  double mm_processor_cache_gb = 4;      // the vision tower's outputs kept for reuse; 0: none
  // vLLM's --skip-mm-profiling: no vision encoder warm-up at start-up (the language model's
  // still runs; EngineConfig::warm_up).
  bool skip_mm_profiling = false;
  int http_threads = 0;               // 0: DefaultHttpThreads(max_num_seqs)
  int64_t shutdown_timeout = 0;       // seconds a SIGTERM leaves requests in flight to finish
  std::string uvicorn_log_level = "info";
  std::string tokenizer;              // --tokenizer: folder or repository id; empty: model_dir
  int64_t max_logprobs = 20;          // most log-probs a request may ask for; -1: the vocabulary
  std::string kv_cache_dtype = "auto";  // auto or the model's dtype (the cache holds it)
  std::string response_role = "assistant";  // chat replies' role with add_generation_prompt
  bool enable_log_requests = false;   // one log line per received prompt
  int64_t max_log_len = -1;           // prompt characters / ids in that line; -1: all
  bool disable_log_stats = false;     // no periodic throughput line
  bool enable_prompt_tokens_details = false;  // usage reports prefix-cache hits
  bool disable_access_log = false;  // --disable-uvicorn-access-log: no line per HTTP request
  bool enable_request_id_headers = false;  // responses carry X-Request-Id
  std::string root_path;                   // --root-path: a proxy's prefix, stripped (FastAPI's)
  bool enable_tokenizer_info_endpoint = false;  // GET /tokenizer_info
  bool disable_fastapi_docs = false;  // no /openapi.json, /docs, /redoc
  std::string scheduling_policy = "fcfs";  // fcfs | priority (a request's priority, lower first)
  // vLLM's CORS flags: JSON lists of strings ("" = ["*"]), and credentials.
  std::string allowed_origins_json, allowed_methods_json, allowed_headers_json;
  bool allow_credentials = false;
  TlsOptions tls;  // --ssl-certfile, --ssl-keyfile, ...: HTTPS when a certificate is given
};

// vLLM's --kv-cache-dtype against the dtype the model runs in ("bfloat16", "float32"): auto or
// that dtype; fp8 caches and other dtypes are errors naming the flag.
Status CheckKvCacheDtype(const std::string& kv_cache_dtype, const std::string& model_dtype);

// vLLM's check with chunked prefill off: a prompt of max_model_len tokens must fit one step.
Status CheckUnchunkedBudget(int64_t max_num_batched_tokens, int64_t max_model_len);

// vLLM's --structured-outputs-config: {"backend": auto | xgrammar | guidance | outlines |
// lm-format-enforcer (all served by cpmserve's own matcher), "enable_in_reasoning": bool,
// "disable_any_whitespace": bool, and vLLM's other fields (accepted, no effect here)}. An
// unknown field or backend is an error.
struct StructuredOutputsOptions {
  bool enable_in_reasoning = false;     // constrain the thinking too
  bool disable_any_whitespace = false;  // compact JSON for every request
};
StatusOr<StructuredOutputsOptions> ParseStructuredOutputsConfig(const std::string& json);

// vLLM's --reasoning-config (ReasoningConfig, reasoning_parser.h): {"reasoning_parser": name,
// "reasoning_start_str": text, "reasoning_end_str": text}. An unknown field, a non-string or an
// unknown parser is an error.
StatusOr<ReasoningConfig> ParseReasoningConfig(const std::string& json);

// vLLM's --speculative-config: {"method": "ngram", "num_speculative_tokens": k,
// "prompt_lookup_min": a, "prompt_lookup_max": b, "disable_by_batch_size": n}; the window defaults as vLLM's (both 5, or
// the one given for both). Methods that need a draft model (eagle, medusa, mtp, a model name)
// and unknown fields are errors naming them. Empty: speculative decoding off.
StatusOr<SpeculativeConfig> ParseSpeculativeConfig(const std::string& json);

// vLLM's --limit-mm-per-prompt: a JSON object of per-modality counts; the count of `modality`
// ("image", "video"), or vLLM's default, 999, when `json` is empty or names no limit for it.
// Other modalities (audio) are accepted and ignored.
inline constexpr int64_t kDefaultMediaLimit = 999;
StatusOr<int64_t> ParseMediaLimit(const std::string& json, const std::string& modality);

// vLLM's --max-model-len syntax: an integer (`_` separators allowed), a number with a k/m/g/t
// suffix (powers of 1000, decimals allowed: "25.6k") or an integer with K/M/G/T (powers of
// 1024), or -1 / "auto" for the largest length that fits. Returns 0 never;
// -1 means auto.
StatusOr<int64_t> ParseMaxModelLen(const std::string& text);

// The CORS options the flags ask for (every origin, method and header when not given).
StatusOr<CorsOptions> CorsFromConfig(const ServeConfig& c);

// Checks the combinations a flag parser cannot see; messages name the flag.
Status ValidateServeConfig(const ServeConfig& config);

// HTTP worker threads when --http-threads is not given: 2·max_num_seqs + 64, within [128, 512].
// Each connection holds a worker while it is open (cpp-httplib's thread pool; a keep-alive
// connection until it has been idle for 5 s, uvicorn's default too), so the pool must outnumber
// the clients a server meets, not its batch: with 24 workers for --max-num-seqs 16, a 32-stream
// benchmark left 8 clients in the TCP backlog, unseen by /metrics' waiting count, and /health
// answered after 5 s. vLLM's asyncio server takes every connection; requests beyond the batch
// wait in its scheduler, as they do here once they have a worker. Idle workers sleep.
int DefaultHttpThreads(int64_t max_num_seqs);

}  // namespace cpm
