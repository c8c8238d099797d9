// Loads a Hugging Face model directory: reads config.json and dispatches on `architectures[0]`
// to the architecture's loader. An unknown architecture is an error that names it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/load_options.h"
#include "model/model.h"
#include "model/vision_encoder.h"

namespace cpm {

StatusOr<std::unique_ptr<Model>> LoadModel(const LoadOptions& options, ThreadPool& pool);

// The image encoder of a model that has one (MiniCPM-V-4.6), in the compute dtype of the loaded
// language model `info`; null for text-only architectures.
StatusOr<std::unique_ptr<VisionEncoder>> LoadVisionEncoder(const LoadOptions& options,
                                                           const ModelInfo& info, ThreadPool& pool);

// The architectures LoadModel accepts.
std::vector<std::string> SupportedArchitectures();

// The language model's vocabulary size from `model_dir`/config.json alone (no weights read),
// as the loader would take it; errors as LoadModel's.
StatusOr<int64_t> ConfigVocabSize(const std::string& model_dir);

// `model_dir`/config.json read as LoadModel reads it (architecture, fields, the vision tower's),
// no weights opened: serve refuses a broken config before it listens.
Status CheckModelConfig(const std::string& model_dir);

}  // namespace cpm
