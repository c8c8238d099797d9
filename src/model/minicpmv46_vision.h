// MiniCPM-V-4.6's image encoder (spec minicpmv46.md §4): the SigLIP tower over one slice's
// patches — patch convolution plus a 70×70 position table, 27 pre-LN encoder layers with
// bidirectional attention inside the slice, the ViT window merger (2×2 windows: attention, then
// a merge MLP) after layer `insert_layer_id`, post_layernorm — and the MLP merger (2×2 blocks
// to the language model's width). A slice of h×w patches gives (h/4)(w/4) embeddings.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/load_options.h"
#include "model/qwen35_config.h"
#include "model/vision_encoder.h"
#include "tensor/dtype.h"

namespace cpm {

// Loads model.vision_tower.* and model.merger.* (or vLLM-style dummy weights) in `dtype`
// (bf16: weights as stored and activations rounded where a bf16 PyTorch tower rounds them).
StatusOr<std::unique_ptr<VisionEncoder>> LoadMiniCpmV46Vision(const LoadOptions& options,
                                                              const MiniCpmV46VisionConfig& config,
                                                              int64_t text_hidden, DType dtype,
                                                              ThreadPool& pool);

}  // namespace cpm
