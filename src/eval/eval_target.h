// The model under evaluation, loaded once with serve-like options: weights, thread pool,
// tokenizer (optional: dumps of ids still work without one) and the EOS ids greedy stops at.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/load_options.h"
#include "model/model.h"

namespace cpm {

class Tokenizer;

struct EvalModelOptions {
  std::string model_dir;
  std::string load_format = "auto";  // auto | safetensors | dummy
  std::string dtype = "auto";        // auto | bfloat16 | float32
  std::string quantization = "none";  // none | q8_0
  int64_t max_model_len = 0;
  int threads = 0;                   // 0: one per physical core
  bool require_tokenizer = false;    // fail instead of warning when none loads
};

struct EvalTarget {
  // Declared before the model: the model may hold tasks on it until destroyed.
  std::unique_ptr<ThreadPool> pool;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;  // null when the directory has none
  std::vector<int32_t> stop_ids;         // config eos ∪ tokenizer/generation_config eos
  std::string description;               // "cpmserve 0.1.0 (bfloat16, 2 threads)"
  double load_seconds = 0;

  EvalTarget();
  ~EvalTarget();
  EvalTarget(EvalTarget&&) noexcept;
  EvalTarget& operator=(EvalTarget&&) noexcept;
};

// `version` goes into the description ("cpmserve <version>").
StatusOr<EvalTarget> LoadEvalTarget(const EvalModelOptions& options, const std::string& version);

}  // namespace cpm
