// `cpmserve serve MODEL_DIR [flags]`: the OpenAI-compatible server with `vllm serve`'s flag
// names. Only flag declarations live here; the process itself is server/serve_main.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/log.h"
#include "commands.h"
#include "model/load_options.h"
#include "server/serve_config.h"
#include "server/serve_main.h"
#include "serve_ignored_flags.h"

namespace cpm {
namespace {

struct ServeFlags {
  ServeConfig config;
  std::string max_model_len;
  std::string kv_cache_memory_bytes;
  CLI::Option* gpu_util = nullptr;
  CLI::Option* batched_tokens = nullptr;
  // vLLM flags with no field in ServeConfig: checked (and, where harmless, ignored) here.
  std::string model;  // --model: vLLM's alternative to the positional model
  int pipeline_parallel_size = 1;
  int data_parallel_size = 1;
  double swap_space = 4;
  CLI::Option* swap_space_opt = nullptr;
  bool disable_frontend_multiprocessing = false;
  std::string tokenizer_mode = "auto";
  CLI::Option* num_gpu_blocks_override = nullptr;
  CLI::Option* uds = nullptr;
  CLI::Option* api_key = nullptr;
  std::string runner = "auto";  // --runner: auto or generate serve; pooling and draft do not
  std::string task;             // --task (vLLM's deprecated form of --runner)
  bool enable_mm_embeds = false;
  bool enable_prompt_embeds = false;
  std::string mm_processor_cache_type = "lru";  // how vLLM's processes share the cache
  bool disable_mm_preprocessor_cache = false;   // vLLM's deprecated --mm-processor-cache-gb 0
  std::string max_num_batched_tokens;
  IgnoredFlags ignored;
};

// uvicorn's levels, the choices vLLM's --uvicorn-log-level takes.
bool IsUvicornLogLevel(const std::string& level) {
  for (const char* l : {"critical", "error", "warning", "info", "debug", "trace"}) {
    if (level == l) return true;
  }
  return false;
}

int FlagError(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 2;
}

// The vLLM flags that only need a check or a log line here (see ServeFlags).
int CheckVllmOnlyFlags(ServeFlags& f) {
  ServeConfig& c = f.config;
  if (!f.model.empty()) {
    if (c.model_dir.empty()) {
      c.model_dir = f.model;
    } else if (c.model_dir != f.model) {
      return FlagError("the model is given twice: '" + c.model_dir + "' and --model '" + f.model +
                       "' (give it once, as MODEL_DIR or --model)");
    }
  }
  if (c.model_dir.empty()) {
    return FlagError("the model directory is required: cpmserve serve MODEL_DIR [options] (or "
                     "--model MODEL_DIR)");
  }
  // vLLM's optional_type: "" and "None" are no key; given so, $VLLM_API_KEY is not read either.
  c.api_key_given = f.api_key->count() > 0;
  std::erase_if(c.api_keys, [](const std::string& k) { return k.empty() || k == "None"; });
  if (f.uds->count() > 0) {
    return FlagError("--uds: Unix domain sockets are not supported; use --host/--port");
  }
  if (f.pipeline_parallel_size != 1) {
    return FlagError("--pipeline-parallel-size: " + std::to_string(f.pipeline_parallel_size) +
                     " is not supported: cpmserve runs one CPU process (use 1)");
  }
  if (f.data_parallel_size != 1) {
    return FlagError("--data-parallel-size: " + std::to_string(f.data_parallel_size) +
                     " is not supported: cpmserve runs one engine (use 1; to serve more, start "
                     "more servers behind a load balancer)");
  }
  if (!IsUvicornLogLevel(c.uvicorn_log_level)) {
    return FlagError("argument --uvicorn-log-level: invalid choice: '" + c.uvicorn_log_level +
                     "' (choose from 'critical', 'error', 'warning', 'info', 'debug', 'trace')");
  }
  // argparse's choices of vLLM's Literal-typed flags (a value vLLM accepts but cpmserve cannot
  // run, fp8 say, gets cpmserve's own explanation later). --task only when given.
  std::vector<std::pair<const char*, std::pair<const std::string*, std::vector<std::string>>>>
      choices = {
          {"--dtype", {&c.dtype, {"auto", "half", "float16", "bfloat16", "float", "float32"}}},
          {"--kv-cache-dtype",
           {&c.kv_cache_dtype,
            {"auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"}}},
          {"--scheduling-policy", {&c.scheduling_policy, {"fcfs", "priority"}}},
          {"--runner", {&f.runner, {"auto", "generate", "pooling", "draft"}}},
          {"--chat-template-content-format",
           {&c.chat_template_content_format, {"auto", "string", "openai"}}},
          {"--mm-processor-cache-type", {&f.mm_processor_cache_type, {"lru", "shm"}}}};
  if (!f.task.empty()) {
    choices.push_back({"--task",
                       {&f.task,
                        {"auto", "generate", "embedding", "embed", "classify", "score", "reward",
                         "transcription", "draft"}}});
  }
  for (const auto& [flag, value_and_choices] : choices) {
    const auto& [value, allowed] = value_and_choices;
    if (std::find(allowed.begin(), allowed.end(), *value) != allowed.end()) continue;
    std::string list;
    for (const std::string& a : allowed) list += (list.empty() ? "'" : ", '") + a + "'";
    return FlagError(std::string("argument ") + flag + ": invalid choice: '" + *value +
                     "' (choose from " + list + ")");
  }
  // The runners and tasks cpmserve cannot run: refused, saying so.
  const std::pair<const char*, const std::string*> kinds[] = {{"--runner", &f.runner},
                                                                {"--task", &f.task}};
  for (const auto& [flag, value] : kinds) {
    if (value->empty() || *value == "auto" || *value == "generate") continue;
    return FlagError(std::string(flag) + ": '" + *value + "' is not supported: cpmserve serves "
                     "generative models (auto or generate)");
  }
  if (!f.task.empty()) {
    CPM_LOG_WARN("The 'task' option has been deprecated and will be removed in v0.13.0 or "
                 "v1.0, whichever comes first. Please remove this option.");
  }
  if (f.enable_mm_embeds) {
    return FlagError("--enable-mm-embeds is not supported: images and videos are taken as "
                     "image_url / video_url parts only (no precomputed embeddings)");
  }
  if (f.enable_prompt_embeds) {
    return FlagError("--enable-prompt-embeds is not supported: prompts are text or token ids");
  }
  if (f.disable_mm_preprocessor_cache) {
    CPM_LOG_WARN("`--disable-mm-preprocessor-cache` is deprecated and will be removed in v0.13. "
                 "Please use `--mm-processor-cache-gb 0` instead.");
    c.mm_processor_cache_gb = 0;
  }
  if (f.mm_processor_cache_type == "shm") {
    CPM_LOG_INFO("--mm-processor-cache-type shm: the cache is one process's LRU here, as with "
                 "lru (shm only changes how vLLM's API and engine processes share it)");
  }
  if (f.num_gpu_blocks_override->count() > 0) {
    return FlagError("--num-gpu-blocks-override is not supported: size the KV cache with "
                     "--kv-cache-memory-bytes (bytes) or --gpu-memory-utilization; the start-up "
                     "log prints the resulting block count (KV cache size / --block-size)");
  }
  if (f.tokenizer_mode == "mistral" || f.tokenizer_mode == "custom") {
    return FlagError("--tokenizer-mode: '" + f.tokenizer_mode + "' is not supported: cpmserve "
                     "reads Hugging Face tokenizer files (auto, hf or slow)");
  }
  if (f.tokenizer_mode != "auto" && f.tokenizer_mode != "hf" && f.tokenizer_mode != "slow") {
    return FlagError("--tokenizer-mode: '" + f.tokenizer_mode +
                     "' is not a tokenizer mode (auto, hf, slow, mistral, custom)");
  }
  if (f.tokenizer_mode == "slow") {
    CPM_LOG_INFO("--tokenizer-mode slow: accepted, ignored (cpmserve has one tokenizer, which "
                 "gives Hugging Face's token ids)");
  }
  if (f.swap_space_opt->count() > 0) {
    if (!(f.swap_space >= 0)) return FlagError("--swap-space must be at least 0 (GiB)");
    CPM_LOG_INFO("--swap-space: accepted, ignored (a preempted request's KV blocks are freed and "
                 "recomputed, never swapped to CPU memory)");
  }
  f.ignored.Log();
  if (f.disable_frontend_multiprocessing) {
    CPM_LOG_INFO("--disable-frontend-multiprocessing: accepted (the API server and the engine "
                 "always run in one process)");
  }
  return 0;
}

int RunServeCommand(ServeFlags& f) {
  ServeConfig& c = f.config;
  if (int rc = CheckVllmOnlyFlags(f); rc != 0) return rc;
  if (!f.max_model_len.empty()) {
    auto len = ParseMaxModelLen(f.max_model_len);
    if (!len.ok()) {
      std::fprintf(stderr, "error: %s\n", len.status().message().c_str());
      return 2;
    }
    c.max_model_len = *len;
  }
  // vLLM's human_readable_int, the syntax of lengths: 8192, 8k (x1000), 8K (x1024), 2G.
  const auto count = [](const char* flag, const char* what, const std::string& text,
                        auto* out) {
    if (text.empty()) return true;
    auto n = ParseMaxModelLen(text);
    if (!n.ok() || *n < 1) {
      std::fprintf(stderr, "error: %s: '%s' is not %s\n", flag, text.c_str(), what);
      return false;
    }
    *out = *n;
    return true;
  };
  if (!count("--kv-cache-memory-bytes", "a byte count", f.kv_cache_memory_bytes,
             &c.kv_cache_memory_bytes) ||
      !count("--max-num-batched-tokens", "a token count", f.max_num_batched_tokens,
             &c.max_num_batched_tokens)) {
    return 2;
  }
  c.gpu_memory_utilization_set = f.gpu_util->count() > 0;
  c.max_num_batched_tokens_set = f.batched_tokens->count() > 0;
  return RunServe(c);
}

}  // namespace

void RegisterServeCommand(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<ServeFlags>();
  ServeConfig& c = f->config;
  CLI::App* cmd = app.add_subcommand("serve", "serve a model behind an OpenAI-compatible API");
  // A flag given twice takes its last value, as argparse does (deployment scripts append the
  // user's flags after their defaults); the list-valued flags below keep every value of their
  // last occurrence (TranslateServeArgv drops the earlier ones).
  cmd->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cmd->add_option("model_dir", c.model_dir,
                  "a Hugging Face model folder, or a hub repository id (org/name) looked up in "
                  "the hub cache and downloaded into it when missing (or --model)");
  cmd->add_option("--model", f->model, "the model, as vLLM's --model (instead of MODEL_DIR)");
  cmd->add_option("--revision", c.revision, "the hub revision (branch, tag or commit) of a repository id")
      ->capture_default_str();
  cmd->add_option("--tokenizer-revision", c.tokenizer_revision,
                  "the hub revision of --tokenizer when it is a repository id (default: "
                  "--revision)");
  cmd->add_option("--download-dir", c.download_dir,
                  "the hub cache folder to look in and download into (default: $HF_HUB_CACHE, "
                  "else $HF_HOME/hub, else ~/.cache/huggingface/hub)");
  cmd->add_option("--hf-overrides", c.hf_overrides_json,
                  "JSON object merged over the model's config.json (nested objects into the "
                  "config's), e.g. '{\"max_position_embeddings\": 65536}'; dotted keys as "
                  "vLLM's (--hf-overrides.max_position_embeddings 65536)");
  cmd->add_option("--hf-token", c.hf_token,
                  "the hub token (default, or with no value: $HF_TOKEN, else the stored login "
                  "token)")
      ->expected(0, 1);
  cmd->add_option("--host", c.host, "bind address")->capture_default_str();
  cmd->add_option("--port", c.port, "HTTP port")->capture_default_str();
  cmd->add_option("--seed", c.seed, "sampling seed of requests without one")->capture_default_str();
  cmd->add_option("--served-model-name", c.served_model_names,
                  "one or more names; the first is echoed in responses")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--max-num-seqs", c.max_num_seqs, "running sequences per step")
      ->capture_default_str();
  cmd->add_option("--max-model-len", f->max_model_len,
                  "context length: 4096, 8k (x1000), 8K (x1024), -1 or auto (the config's, or what the KV cache holds if less)");
  f->batched_tokens =
      cmd->add_option("--max-num-batched-tokens", f->max_num_batched_tokens,
                      "token budget per step: 256 (default, or --max-num-seqs where larger: keeps "
                      "decodes responsive on small CPUs; vLLM's CPU default is 2048), 2k (x1000), "
                      "2K (x1024)");
  cmd->add_option("--logprobs-mode", c.logprobs_mode,
                  "raw_logprobs (vLLM's default; its other modes are refused)")
      ->capture_default_str();
  cmd->add_option("--long-prefill-token-threshold", c.long_prefill_token_threshold,
                  "with chunked prefill, the most tokens one request takes a step (0: no cap)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_flag("--enable-chunked-prefill,!--no-enable-chunked-prefill", c.enable_chunked_prefill,
                "split long prompts over steps (on by default); off, a prompt waits for a step "
                "with room for all of it and the budget defaults to max(max-model-len, 256)");
  cmd->add_option("--dtype", c.dtype, "auto | bfloat16 | float32 (half / float16: as bfloat16)")->capture_default_str();
  cmd->add_option("--quantization,-q", c.quantization, kQuantizationHelp)->capture_default_str();
  f->gpu_util = cmd->add_option("--gpu-memory-utilization", c.gpu_memory_utilization,
                                "fraction of host RAM for weights, activations and KV cache")
                    ->capture_default_str();
  cmd->add_option("--kv-cache-memory-bytes", f->kv_cache_memory_bytes,
                  "KV cache size in bytes (wins over --gpu-memory-utilization)");
  cmd->add_option("--load-format", c.load_format, "auto | safetensors | dummy")
      ->capture_default_str();
  cmd->add_flag("--enforce-eager,!--no-enforce-eager", c.enforce_eager, "accepted (the CPU always runs eagerly)");
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", c.enable_prefix_caching,
                "automatic prefix caching (on by default)");
  cmd->add_flag("--trust-remote-code,!--no-trust-remote-code", c.trust_remote_code, "accepted (no remote code runs)");
  f->api_key = cmd->add_option("--api-key", c.api_keys,
                                "one or more keys for /v1 (else $VLLM_API_KEY; an empty key or "
                                "None: no key)")
                   ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--chat-template", c.chat_template, "chat template file or inline Jinja");
  cmd->add_flag("--trust-request-chat-template,!--no-trust-request-chat-template", c.trust_request_chat_template,
                "render a request's own chat_template (refused with vLLM's 400 otherwise)");
  cmd->add_option("--generation-config", c.generation_config,
                  "auto (generation_config.json), vllm (ignore it) or a folder")
      ->capture_default_str();
  cmd->add_option("--override-generation-config", c.override_generation_config_json,
                  "JSON object of sampling defaults merged over --generation-config's, e.g. "
                  "'{\"temperature\": 0.5}'");
  // Given twice (-tp 1 ... --tensor-parallel-size 1), the last wins, as in argparse.
  cmd->add_option("--tensor-parallel-size", c.tensor_parallel_size, "must be 1 (also -tp)")
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cmd->add_option("--pipeline-parallel-size", f->pipeline_parallel_size, "must be 1 (also -pp)")
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  cmd->add_option("--data-parallel-size", f->data_parallel_size, "must be 1 (also -dp)")
      ->capture_default_str()
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  f->swap_space_opt = cmd->add_option("--swap-space", f->swap_space,
                                      "accepted, ignored (preempted requests are recomputed, not "
                                      "swapped)");
  cmd->add_flag("--disable-frontend-multiprocessing,!--no-disable-frontend-multiprocessing", f->disable_frontend_multiprocessing,
                "accepted (the API server and engine share one process)");
  cmd->add_option("--tokenizer-mode", f->tokenizer_mode,
                  "auto or hf (slow: accepted, same ids); mistral and custom are not supported")
      ->capture_default_str();
  cmd->add_option("--chat-template-content-format", c.chat_template_content_format,
                  "how messages' content reaches the template: string (text parts joined), "
                  "openai (a list of parts), or auto: the one vLLM detects in each template")
      ->capture_default_str();
  f->num_gpu_blocks_override = cmd->add_option(
      "--num-gpu-blocks-override", "not supported: size the KV cache with --kv-cache-memory-bytes");
  f->uds = cmd->add_option("--uds", "not supported: use --host/--port");
  cmd->add_option("--runner", f->runner, "auto or generate (what cpmserve runs); pooling and "
                  "draft are not supported")
      ->capture_default_str();
  cmd->add_option("--task", f->task, "deprecated in vLLM: auto or generate only");
  cmd->add_flag("--enable-mm-embeds,!--no-enable-mm-embeds", f->enable_mm_embeds,
                "not supported: no precomputed image embeddings");
  cmd->add_flag("--enable-prompt-embeds,!--no-enable-prompt-embeds", f->enable_prompt_embeds,
                "not supported: prompts are text or token ids");
  cmd->add_option("--threads", c.threads, "compute threads (0: one per physical core, as llama.cpp)");
  cmd->add_option("--block-size", c.block_size, "KV cache block size in tokens")
      ->capture_default_str();
  cmd->add_option("--mm-processor-kwargs", c.mm_processor_kwargs_json,
                  "image processor overrides, as vLLM's JSON: '{\"max_slice_nums\": 36}'");
  cmd->add_option("--mm-processor-cache-gb", c.mm_processor_cache_gb,
                  "GiB of vision tower outputs kept for images sent again (each turn of a chat "
                  "resends its images; 0: encode every image anew)")
      ->capture_default_str();
  cmd->add_option("--mm-processor-cache-type", f->mm_processor_cache_type,
                  "lru or shm (both: this process's LRU cache)")
      ->capture_default_str();
  cmd->add_flag("--skip-mm-profiling,!--no-skip-mm-profiling", c.skip_mm_profiling,
                "no vision encoder warm-up at start-up (its first image requests then pay ~0.2 s "
                "of first touches)");
  cmd->add_flag("--disable-mm-preprocessor-cache,!--no-disable-mm-preprocessor-cache",
                f->disable_mm_preprocessor_cache, "deprecated: --mm-processor-cache-gb 0");
  cmd->add_option("--limit-mm-per-prompt", c.limit_mm_per_prompt_json,
                  "most images and videos per request, as vLLM's JSON: '{\"image\": 2, \"video\": 1}'");
  cmd->add_option("--media-io-kwargs", c.media_io_kwargs_json,
                  "media loading, as vLLM's JSON: '{\"video\": {\"num_frames\": 32}}' (frames "
                  "sampled per video; -1: every frame)");
  cmd->add_option("--allowed-media-domains", c.allowed_media_domains,
                  "http(s) image and video URLs only from these hosts, redirects included "
                  "(default: any)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  cmd->add_option("--allowed-local-media-path", c.allowed_local_media_path,
                  "allow file:// image and video URLs below this folder (off by default, as vLLM)");
  cmd->add_flag("--enable-force-include-usage,!--no-enable-force-include-usage",
                c.enable_force_include_usage,
                "every streamed reply ends with a usage chunk, whatever its stream_options");
  cmd->add_flag("--return-tokens-as-token-ids,!--no-return-tokens-as-token-ids", c.return_tokens_as_token_ids,
                "name tokens in log-probs as \"token_id:<id>\" (a request's "
                "return_tokens_as_token_ids overrides)");
  cmd->add_flag("--enable-auto-tool-choice,!--no-enable-auto-tool-choice", c.enable_auto_tool_choice,
                "serve tool_choice \"auto\" (and tools without a tool_choice): parse the calls "
                "out of the reply with --tool-call-parser");
  cmd->add_flag("--exclude-tools-when-tool-choice-none,!--no-exclude-tools-when-tool-choice-none",
                c.exclude_tools_when_tool_choice_none,
                "a request with tool_choice \"none\" gets no tools in its prompt");
  cmd->add_option("--tool-call-parser", c.tool_call_parser,
                  "qwen3_coder (or qwen3_xml, minicpmv): MiniCPM-V-4.6's <tool_call><function=...> format");
  cmd->add_option("--reasoning-parser", c.reasoning_parser, "split <think> text into `reasoning`: minicpmv (default for MiniCPM-V-4.6), qwen3, "
                  "deepseek_r1 or none");
  cmd->add_option("--speculative-config", c.speculative_config_json,
                  "vLLM's JSON; n-gram prompt lookup: '{\"method\": \"ngram\", "
                  "\"num_speculative_tokens\": 4, \"prompt_lookup_max\": 3}'; outputs unchanged");
  cmd->add_option("--structured-outputs-config", c.structured_outputs_config_json,
                  "vLLM's JSON: any backend name is served by cpmserve's own matcher; "
                  "'{\"enable_in_reasoning\": true}' constrains thinking too");
  cmd->add_option("--reasoning-config", c.reasoning_config_json,
                  "vLLM's JSON: '{\"reasoning_start_str\": \"<think>\", \"reasoning_end_str\": "
                  "\"</think>\"}', the texts thinking_token_budget counts from and forces "
                  "(default: the reasoning parser's markers)");
  cmd->add_option("--default-chat-template-kwargs", c.default_chat_template_kwargs_json,
                  "JSON object merged under each request's chat_template_kwargs");
  cmd->add_option("--http-threads", c.http_threads, "HTTP worker threads (0: from max-num-seqs)");
  cmd->add_option("--uvicorn-log-level", c.uvicorn_log_level,
                  "critical | error | warning | info | debug | trace: uvicorn's; above info, no "
                  "access log")
      ->capture_default_str();
  cmd->add_flag("--disable-fastapi-docs,!--no-disable-fastapi-docs", c.disable_fastapi_docs,
                "no /openapi.json, /docs or /redoc (FastAPI's documentation routes)");
  cmd->add_flag("--enable-tokenizer-info-endpoint,!--no-enable-tokenizer-info-endpoint",
                c.enable_tokenizer_info_endpoint,
                "serve GET /tokenizer_info: the tokenizer's configuration, as vLLM's");
  cmd->add_option("--tokenizer", c.tokenizer,
                  "tokenizer folder or hub repository id (tokenizer.json or tokenizer.model, "
                  "tokenizer_config.json; default: the model's)");
  cmd->add_option("--max-logprobs", c.max_logprobs,
                  "most log-probs (logprobs, top_logprobs, prompt_logprobs) a request may ask "
                  "for; -1: the vocabulary")
      ->capture_default_str();
  cmd->add_option("--kv-cache-dtype", c.kv_cache_dtype,
                  "auto: the model's dtype, which the KV cache holds (fp8 caches not supported)")
      ->capture_default_str();
  cmd->add_option("--response-role", c.response_role,
                  "role of chat replies when add_generation_prompt is true")
      ->capture_default_str();
  cmd->add_flag("--enable-log-requests,--no-disable-log-requests,!--disable-log-requests,!--no-enable-log-requests", c.enable_log_requests,
                "log each received prompt and its sampling parameters (off by default)");
  cmd->add_option("--max-log-len", c.max_log_len,
                  "prompt characters and ids in those lines (-1: all)")
      ->capture_default_str();
  cmd->add_flag("--disable-log-stats,!--no-disable-log-stats", c.disable_log_stats,
                "no periodic throughput / KV cache usage line");
  cmd->add_flag("--enable-prompt-tokens-details,!--no-enable-prompt-tokens-details", c.enable_prompt_tokens_details,
                "usage.prompt_tokens_details.cached_tokens: prompt tokens read from the prefix "
                "cache");
  cmd->add_flag("--disable-uvicorn-access-log,!--no-disable-uvicorn-access-log", c.disable_access_log,
                "no access-log line per HTTP request");
  cmd->add_option("--scheduling-policy", c.scheduling_policy,
                  "fcfs, or priority: requests wait by their `priority` (lower first, then "
                  "arrival) and preemption takes the last in that order")
      ->capture_default_str();
  cmd->add_option("--allowed-origins", c.allowed_origins_json,
                  "CORS: JSON list of allowed origins (default [\"*\"])");
  cmd->add_option("--allowed-methods", c.allowed_methods_json,
                  "CORS: JSON list of allowed methods (default [\"*\"])");
  cmd->add_option("--allowed-headers", c.allowed_headers_json,
                  "CORS: JSON list of allowed headers (default [\"*\"])");
  cmd->add_flag("--allow-credentials,!--no-allow-credentials", c.allow_credentials, "CORS: allow credentials");
  cmd->add_flag("--enable-request-id-headers,!--no-enable-request-id-headers", c.enable_request_id_headers,
                "every response carries X-Request-Id: the request's, else a random one");
  cmd->add_option("--root-path", c.root_path,
                  "the path prefix of a proxy in front (FastAPI's root_path): PREFIX/v1/... is "
                  "served as /v1/..., which is served too");
  cmd->add_option("--shutdown-timeout", c.shutdown_timeout,
                  "seconds a SIGTERM/SIGINT leaves the requests in flight to finish (new "
                  "connections refused) before the rest are aborted; 0 aborts at once")
      ->capture_default_str();
  cmd->add_option("--ssl-certfile", c.tls.certfile,
                  "HTTPS: the server's PEM certificate chain (its key too unless --ssl-keyfile)");
  cmd->add_option("--ssl-keyfile", c.tls.keyfile, "HTTPS: the PEM private key");
  cmd->add_option("--ssl-ca-certs", c.tls.ca_certs,
                  "HTTPS: PEM CA certificates that client certificates are checked against");
  cmd->add_option("--ssl-cert-reqs", c.tls.cert_reqs,
                  "HTTPS client certificates: 0 not asked, 1 checked when sent, 2 required "
                  "(Python's ssl.CERT_NONE, CERT_OPTIONAL, CERT_REQUIRED)")
      ->capture_default_str();
  cmd->add_option("--ssl-ciphers", c.tls.ciphers,
                  "HTTPS: OpenSSL cipher list for TLS 1.2 (TLS 1.3 keeps its own suites)");
  cmd->add_flag("--enable-ssl-refresh,!--no-enable-ssl-refresh", c.tls.refresh,
                "HTTPS: serve a renewed certificate and key (their files rewritten) from the next "
                "connection on, without a restart");
  f->ignored.Register(cmd);
  cmd->callback([f, exit_code] { *exit_code = RunServeCommand(*f); });
}

}  // namespace cpm
