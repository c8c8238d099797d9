// `vllm serve` flags that change nothing cpmserve does: GPU, compilation and distributed tuning,
// and frontend knobs of FastAPI and uvicorn. vLLM's CPU platform accepts the GPU ones and drops them (platforms/cpu.py), and
// deployment scripts pass them as a matter of course, so cpmserve accepts each one too and says
// in one log line that it is ignored, rather than refusing to start.
//
// Flags that would change what a request gets (--enable-lora, --middleware, ...) are not here: they
// stay unrecognized, a start-up error.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "base/log.h"

namespace cpm {

struct IgnoredFlag {
  const char* names;  // CLI11 names, e.g. "--code-revision" or "--enable-sleep-mode,!--no-enable-sleep-mode"
  bool takes_value;   // a value follows
  const char* why;    // why it changes nothing here
};

inline const std::vector<IgnoredFlag>& IgnoredVllmFlags() {
  static const std::vector<IgnoredFlag> flags = {
      // GPU, compilation and parallelism.
      {"--cpu-offload-gb", true, "the weights already live in CPU memory"},
      {"--distributed-executor-backend", true, "one process runs the model"},
      {"--disable-custom-all-reduce,!--no-disable-custom-all-reduce", false, "no GPU collectives"},
      {"--compilation-config,-O", true, "no graph compilation on the CPU; kernels are built in"},
      {"--max-cudagraph-capture-size", true, "no CUDA graphs"},
      {"--cuda-graph-sizes", true, "no CUDA graphs"},
      {"--async-scheduling,!--no-async-scheduling", false,
       "the scheduler and the model share one step loop"},
      {"--enable-sleep-mode,!--no-enable-sleep-mode", false, "no GPU memory to release"},
      {"--attention-backend", true, "one CPU attention kernel per ISA, chosen at start-up"},
      {"--enable-expert-parallel,!--no-enable-expert-parallel", false, "no experts in these models"},
      // Model loading.
      {"--code-revision", true, "no remote code runs"},
      {"--config-format", true, "config.json is read (Hugging Face format)"},
      {"--model-impl", true, "cpmserve's own implementation runs"},
      {"--max-parallel-loading-workers", true, "the weights load with the compute pool"},
      // Engine knobs with nothing to choose here.
      {"--disable-sliding-window,!--no-disable-sliding-window", false,
       "these models have no sliding window"},
      {"--prefix-caching-hash-algo", true, "block hashes are cpmserve's own"},
      {"--mm-encoder-tp-mode", true, "one process runs the vision tower"},
      {"--mm-encoder-attn-backend", true, "one CPU attention kernel per ISA, chosen at start-up"},
      {"--max-num-partial-prefills", true,
       "prompts share a step as the budget allows (--long-prefill-token-threshold caps each)"},
      {"--stream-interval", true, "each step's tokens stream as they come"},
      // FastAPI / uvicorn frontend.
      {"--enable-server-load-tracking,!--no-enable-server-load-tracking", false,
       "/load always counts the engine's running and waiting sequences"},
      {"--enable-log-outputs,!--no-enable-log-outputs", false, "outputs are not logged"},
      {"--enable-offline-docs,!--no-enable-offline-docs", false,
       "/docs and /redoc load their scripts from the jsDelivr CDN, as FastAPI's default"},
      {"--show-hidden-metrics-for-version", true, "/metrics has no hidden (deprecated) series"},
      {"--log-config-file", true, "logging is cpmserve's own (spdlog)"},
      {"--tool-parser-plugin", true, "no Python plugins"},
      {"--reasoning-parser-plugin", true, "no Python plugins"},
      {"--h11-max-incomplete-event-size", true, "no h11 parser"},
      {"--api-server-count", true, "one API server thread pool serves every request"},
  };
  return flags;
}

// Declares every ignored flag on `cmd`; Log() later names the ones given.
class IgnoredFlags {
 public:
  void Register(CLI::App* cmd) {
    for (const IgnoredFlag& f : IgnoredVllmFlags()) {
      const std::string help = std::string("ignored: ") + f.why;
      CLI::Option* o = f.takes_value ? cmd->add_option(f.names, value_, help)
                                     : cmd->add_flag(f.names, flag_, help);
      o->group("vLLM flags accepted and ignored (nothing to tune on a CPU)");
      given_.push_back({o, &f});
    }
  }
  void Log() const {
    for (const auto& [option, flag] : given_) {
      if (option->count() == 0) continue;
      CPM_LOG_INFO("{}: accepted, ignored ({})", option->get_name(), flag->why);
    }
  }

 private:
  std::string value_;
  bool flag_ = false;
  std::vector<std::pair<CLI::Option*, const IgnoredFlag*>> given_;
};

}  // namespace cpm
