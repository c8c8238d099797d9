// MiniCPM-V-4.6's non-text tensors: the SigLIP vision tower (model.vision_tower.*, with the
// ViT window merger nested in it) and the MLP merger (model.merger.*), named and shaped from
// the config (spec §4.6), plus the MTP head (mtp.*) that serving skips. Vision does not run
// yet; the loader validates these tensors so a wrong checkpoint fails at start-up.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "io/safetensors.h"
#include "model/qwen35_config.h"

namespace cpm {

struct NamedShape {
  std::string name;
  std::vector<int64_t> shape;
};

// Every tensor of the vision tower and the merger, in checkpoint order, for a text model of
// `text_hidden` (the merger's output width).
std::vector<NamedShape> MiniCpmV46VisionTensors(const MiniCpmV46VisionConfig& v, int64_t text_hidden);

// True for tensor names under model.vision_tower., model.merger. or mtp.
bool IsMiniCpmV46VisionTensor(const std::string& name);
bool IsMtpTensor(const std::string& name);

// Checks `archive` against MiniCpmV46VisionTensors: each present with its shape and a supported
// dtype, and no unknown tensor under the vision prefixes.
Status ValidateMiniCpmV46Vision(const SafetensorsArchive& archive, const MiniCpmV46VisionConfig& v,
                                int64_t text_hidden);

}  // namespace cpm
