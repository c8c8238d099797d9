// A subcommand's model argument as vLLM takes it: a local folder, or a Hugging Face repository
// id resolved to its snapshot in the hub cache (downloaded first when missing; hub/model_source.h).
#pragma once

#include <cstdio>
#include <string>

#include "hub/model_source.h"

namespace cpm {

// Replaces `*model` with the local folder it names; on failure prints "<command>: <why>" and
// returns false. `need_weights` is false for dummy weights (no *.safetensors fetched).
inline bool ResolveModelArgument(const char* command, std::string* model, bool need_weights) {
  hub::HubOptions o;
  o.need_weights = need_weights;
  auto dir = hub::ResolveModelFolder(*model, o);
  if (!dir.ok()) {
    std::fprintf(stderr, "%s: %s\n", command, dir.status().message().c_str());
    return false;
  }
  *model = *dir;
  return true;
}

}  // namespace cpm
