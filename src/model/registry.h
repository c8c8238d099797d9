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

namespace cpm {

StatusOr<std::unique_ptr<Model>> LoadModel(const LoadOptions& options, ThreadPool& pool);

// The architectures LoadModel accepts.
std::vector<std::string> SupportedArchitectures();

}  // namespace cpm
