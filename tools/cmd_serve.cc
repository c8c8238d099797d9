// `cpmserve serve MODEL_DIR [flags]`: the OpenAI-compatible server with `vllm serve`'s flag
// names. Only flag declarations live here; the process itself is server/serve_main.
#include <cstdio>
#include <memory>
#include <string>

#include "commands.h"
#include "model/load_options.h"
#include "server/serve_config.h"
#include "server/serve_main.h"

namespace cpm {
namespace {

struct ServeFlags {
  ServeConfig config;
  std::string max_model_len;
  std::string kv_cache_memory_bytes;
  CLI::Option* gpu_util = nullptr;
  CLI::Option* batched_tokens = nullptr;
};

int RunServeCommand(ServeFlags& f) {
  ServeConfig& c = f.config;
  if (!f.max_model_len.empty()) {
    auto len = ParseMaxModelLen(f.max_model_len);
    if (!len.ok()) {
      std::fprintf(stderr, "error: %s\n", len.status().message().c_str());
      return 2;
    }
    c.max_model_len = *len;
  }
  if (!f.kv_cache_memory_bytes.empty()) {
    // Same size syntax as lengths: 1000000, 512M, 2G.
    auto bytes = ParseMaxModelLen(f.kv_cache_memory_bytes);
    if (!bytes.ok() || *bytes < 1) {
      std::fprintf(stderr, "error: --kv-cache-memory-bytes: '%s' is not a byte count\n",
                   f.kv_cache_memory_bytes.c_str());
      return 2;
    }
    c.kv_cache_memory_bytes = *bytes;
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
  cmd->add_option("model_dir", c.model_dir, "Hugging Face model directory")->required();
  cmd->add_option("--host", c.host, "bind address")->capture_default_str();
  cmd->add_option("--port", c.port, "HTTP port")->capture_default_str();
  cmd->add_option("--seed", c.seed, "sampling seed of requests without one")->capture_default_str();
  cmd->add_option("--served-model-name", c.served_model_names,
                  "one or more names; the first is echoed in responses");
  cmd->add_option("--max-num-seqs", c.max_num_seqs, "running sequences per step")
      ->capture_default_str();
  cmd->add_option("--max-model-len", f->max_model_len,
                  "context length: 4096, 8k (x1000), 8K (x1024), -1 or auto (fit memory)");
  f->batched_tokens =
      cmd->add_option("--max-num-batched-tokens", c.max_num_batched_tokens,
                      "token budget per step (chunked prefill; vLLM's CPU default is 2048, 256 "
                      "here keeps decodes responsive on small CPUs)")
          ->capture_default_str();
  cmd->add_flag("--enable-chunked-prefill,!--no-enable-chunked-prefill", c.enable_chunked_prefill,
                "split long prompts over steps (on by default); off, a prompt waits for a step "
                "with room for all of it and the budget defaults to max(max-model-len, 256)");
  cmd->add_option("--dtype", c.dtype, "auto | bfloat16 | float32")->capture_default_str();
  cmd->add_option("--quantization,-q", c.quantization, kQuantizationHelp)->capture_default_str();
  f->gpu_util = cmd->add_option("--gpu-memory-utilization", c.gpu_memory_utilization,
                                "fraction of host RAM for weights, activations and KV cache")
                    ->capture_default_str();
  cmd->add_option("--kv-cache-memory-bytes", f->kv_cache_memory_bytes,
                  "KV cache size in bytes (wins over --gpu-memory-utilization)");
  cmd->add_option("--load-format", c.load_format, "auto | safetensors | dummy")
      ->capture_default_str();
  cmd->add_flag("--enforce-eager", c.enforce_eager, "accepted (the CPU always runs eagerly)");
  cmd->add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", c.enable_prefix_caching,
                "automatic prefix caching (on by default)");
  cmd->add_flag("--trust-remote-code", c.trust_remote_code, "accepted (no remote code runs)");
  cmd->add_option("--api-key", c.api_keys, "one or more keys for /v1 (also $VLLM_API_KEY)");
  cmd->add_option("--chat-template", c.chat_template, "chat template file or inline Jinja");
  cmd->add_option("--generation-config", c.generation_config,
                  "auto (generation_config.json), vllm (ignore it) or a folder")
      ->capture_default_str();
  cmd->add_option("--override-generation-config", c.override_generation_config_json,
                  "JSON object of sampling defaults merged over --generation-config's, e.g. "
                  "'{\"temperature\": 0.5}'");
  cmd->add_option("--tensor-parallel-size", c.tensor_parallel_size, "must be 1")
      ->capture_default_str();
  cmd->add_option("--threads", c.threads, "compute threads (0: one per physical core, as llama.cpp)");
  cmd->add_option("--block-size", c.block_size, "KV cache block size in tokens")
      ->capture_default_str();
  cmd->add_option("--mm-processor-kwargs", c.mm_processor_kwargs_json,
                  "image processor overrides, as vLLM's JSON: '{\"max_slice_nums\": 36}'");
  cmd->add_option("--limit-mm-per-prompt", c.limit_mm_per_prompt_json,
                  "most images and videos per request, as vLLM's JSON: '{\"image\": 2, \"video\": 1}'");
  cmd->add_option("--media-io-kwargs", c.media_io_kwargs_json,
                  "media loading, as vLLM's JSON: '{\"video\": {\"num_frames\": 32}}' (frames "
                  "sampled per video; -1: every frame)");
  cmd->add_option("--allowed-local-media-path", c.allowed_local_media_path,
                  "allow file:// image and video URLs below this folder (off by default, as vLLM)");
  cmd->add_flag("--return-tokens-as-token-ids", c.return_tokens_as_token_ids,
                "name tokens in log-probs as \"token_id:<id>\" (a request's "
                "return_tokens_as_token_ids overrides)");
  cmd->add_flag("--enable-auto-tool-choice", c.enable_auto_tool_choice,
                "serve tool_choice \"auto\" (and tools without a tool_choice): parse the calls "
                "out of the reply with --tool-call-parser");
  cmd->add_option("--tool-call-parser", c.tool_call_parser,
                  "qwen3_coder (or qwen3_xml): MiniCPM-V-4.6's <tool_call><function=...> format");
  cmd->add_option("--reasoning-parser", c.reasoning_parser, "split <think> text into `reasoning`: minicpmv (default for MiniCPM-V-4.6) or none");
  cmd->add_option("--speculative-config", c.speculative_config_json,
                  "vLLM's JSON; n-gram prompt lookup: '{\"method\": \"ngram\", "
                  "\"num_speculative_tokens\": 4, \"prompt_lookup_max\": 3}'; outputs unchanged");
  cmd->add_option("--structured-outputs-config", c.structured_outputs_config_json,
                  "vLLM's JSON: any backend name is served by cpmserve's own matcher; "
                  "'{\"enable_in_reasoning\": true}' constrains thinking too");
  cmd->add_option("--default-chat-template-kwargs", c.default_chat_template_kwargs_json,
                  "JSON object merged under each request's chat_template_kwargs");
  cmd->add_option("--http-threads", c.http_threads, "HTTP worker threads (0: from max-num-seqs)");
  cmd->add_option("--uvicorn-log-level", c.uvicorn_log_level, "accepted for compatibility");
  cmd->add_option("--tokenizer", c.tokenizer,
                  "tokenizer folder (tokenizer.json or tokenizer.model, tokenizer_config.json; "
                  "default: the model's)");
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
  cmd->add_flag("--enable-log-requests,!--disable-log-requests", c.enable_log_requests,
                "log each received prompt and its sampling parameters (off by default)");
  cmd->add_option("--max-log-len", c.max_log_len,
                  "prompt characters and ids in those lines (-1: all)")
      ->capture_default_str();
  cmd->add_flag("--disable-log-stats", c.disable_log_stats,
                "no periodic throughput / KV cache usage line");
  cmd->add_flag("--enable-prompt-tokens-details", c.enable_prompt_tokens_details,
                "usage.prompt_tokens_details.cached_tokens: prompt tokens read from the prefix "
                "cache");
  cmd->add_flag("--disable-uvicorn-access-log", c.disable_access_log,
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
  cmd->add_flag("--allow-credentials", c.allow_credentials, "CORS: allow credentials");
  cmd->add_flag("--enable-request-id-headers", c.enable_request_id_headers,
                "every response carries X-Request-Id: the request's, else a random one");
  cmd->callback([f, exit_code] { *exit_code = RunServeCommand(*f); });
}

}  // namespace cpm
