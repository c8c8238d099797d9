// Loading the evaluated model the way `serve` does (same LoadOptions parsing and names).
#include "eval/eval_target.h"

#include <algorithm>
#include <chrono>
#include <fmt/format.h>

#include "base/log.h"
#include "kernels/amx.h"
#include "model/registry.h"
#include "tokenizer/tokenizer.h"

namespace cpm {

EvalTarget::EvalTarget() = default;
EvalTarget::~EvalTarget() {
  // The model first: it may reference the pool.
  model.reset();
  pool.reset();
}
EvalTarget::EvalTarget(EvalTarget&&) noexcept = default;
EvalTarget& EvalTarget::operator=(EvalTarget&&) noexcept = default;

StatusOr<EvalTarget> LoadEvalTarget(const EvalModelOptions& o, const std::string& version) {
  LoadOptions lo;
  lo.model_dir = o.model_dir;
  lo.max_model_len = o.max_model_len;
  lo.threads = o.threads;
  CPM_RETURN_IF_ERROR(ParseLoadChoices(o.load_format, o.dtype, o.quantization, &lo));
  EvalTarget t;
  t.pool = std::make_unique<ThreadPool>(
      ThreadPoolOptions{.num_threads = o.threads, .before_sleep = kernels::ReleaseTiles});
  const auto t0 = std::chrono::steady_clock::now();
  auto model = LoadModel(lo, *t.pool);
  if (!model.ok()) return model.status();
  t.model = std::move(*model);
  t.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const ModelInfo& info = t.model->info();
  t.stop_ids = info.eos_token_ids;
  auto tok = Tokenizer::Load(o.model_dir);
  if (tok.ok()) {
    t.tokenizer = std::move(*tok);
    for (int32_t id : t.tokenizer->eos_ids()) {
      if (std::find(t.stop_ids.begin(), t.stop_ids.end(), id) == t.stop_ids.end()) t.stop_ids.push_back(id);
    }
  } else if (o.require_tokenizer) {
    return tok.status().WithPrefix("tokenizer");
  } else {
    CPM_LOG_WARN("no tokenizer ({}); texts will show token ids", tok.status().message());
  }
  const bool q8 = lo.quantization == kernels::WeightQuant::kQ8_0;
  t.description = fmt::format("cpmserve {} ({}{}, {} threads{})", version, ToString(info.dtype),
                              q8 ? ", q8_0 weights" : "", t.pool->num_threads(),
                              lo.load_format == LoadFormat::kDummy ? ", dummy weights" : "");
  CPM_LOG_INFO("loaded {} ({} weights, {:.1f} MiB) in {:.2f} s, {} threads", info.architecture,
               ToString(info.dtype), info.weight_bytes / 1048576.0, t.load_seconds, t.pool->num_threads());
  return t;
}

}  // namespace cpm
