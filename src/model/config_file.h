// A model folder's config.json as this process reads it: the file, with vLLM's --hf-overrides
// merged over it. Every reader of config.json (the model's loader, the vision tower's and the
// image processor's, the server's derived max_model_len) goes through here, so an override
// reaches each the same way.
#pragma once

#include <string>

#include "base/status.h"

namespace cpm {

// vLLM's --hf-overrides: a JSON object merged over every config.json read from now on: a
// sub-config's object (text_config, vision_config) key by key, as vLLM applies a nested dict to
// the sub-config it names; any other value, a dict such as rope_scaling included, replaced
// whole. "" clears it. Set once at start-up, before any thread reads a config.
Status SetHfOverrides(const std::string& json);

// <model_dir>/config.json's text with the overrides merged in (the file as it is without any).
// Errors name the file.
StatusOr<std::string> ReadModelConfigText(const std::string& model_dir);

}  // namespace cpm
