// A tiny servable model directory for end-to-end tests: the MiniCPM4-style tiny tokenizer and
// a random 2-layer MiniCPM checkpoint whose vocabulary matches it.
#pragma once

#include <string>

#include "base/status.h"

namespace cpm {

Status WriteTinyServingModel(const std::string& dir);

}  // namespace cpm
