// MiniCPMForCausalLM (MiniCPM4-0.5B, BitCPM4-0.5B): a Llama block with muP scalars
// (scale_emb, scale_depth/sqrt(L) on both residual branches, hidden/(hidden_size/dim_model_base)
// before the tied head), GQA and LongRoPE. Math: ../shared/docs/specs/minicpm4.md.
#pragma once

#include <memory>

#include "base/status.h"
#include "model/load_options.h"
#include "model/model.h"

namespace cpm {

StatusOr<std::unique_ptr<Model>> LoadMiniCpm(const LoadOptions& options,
                                             const std::string& config_text,
                                             const std::string& config_path, ThreadPool& pool);

}  // namespace cpm
