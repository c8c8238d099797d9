// The Qwen3.5 hybrid language model (18 Gated DeltaNet + 6 gated full-attention layers in
// MiniCPM-V-4.6): MiniCPMV4_6ForConditionalGeneration (text path; the vision tensors
// validated here and run by minicpmv46_vision, mtp.* skipped) and plain Qwen3_5ForCausalLM.
// Math: ../shared/docs/specs/minicpmv46.md §2-3, 5.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "model/load_options.h"
#include "model/model.h"

namespace cpm {

// Loads either architecture; which one comes from config.json's "architectures".
StatusOr<std::unique_ptr<Model>> LoadQwen35(const LoadOptions& options, const std::string& config_text,
                                            const std::string& config_path, ThreadPool& pool);

}  // namespace cpm
