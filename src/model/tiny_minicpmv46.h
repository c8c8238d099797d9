// Tiny random MiniCPM-V-4.6 checkpoints (and plain Qwen3.5 ones) with the real tensor names,
// layouts and config keys: the Qwen3.5 hybrid text model, the vision tower with its ViT merger,
// the MLP merger and the MTP head, for tests and `cpmserve make-tiny --arch minicpmv4_6`.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "model/qwen35_config.h"
#include "model/tiny_checkpoint.h"

namespace cpm {

// Dimensions of a tiny checkpoint; the defaults are what WriteTinyMiniCpmV46 writes.
struct TinyQwen35Dims {
  int64_t hidden_size = 64;
  int64_t num_hidden_layers = 8;  // full attention where (i+1) % 4 == 0
  int64_t num_attention_heads = 4;
  int64_t num_key_value_heads = 2;
  int64_t head_dim = 32;          // partial_rotary_factor 0.25 -> rotary dim 8
  int64_t intermediate_size = 128;
  int64_t linear_num_key_heads = 4;
  int64_t linear_num_value_heads = 4;
  int64_t linear_key_head_dim = 16;
  int64_t linear_value_head_dim = 16;
  int64_t linear_conv_kernel_dim = 4;
  int64_t max_position_embeddings = 4096;
  // false: a plain Qwen3_5ForCausalLM (flat config, "model." names, no vision, no MTP).
  bool minicpmv = true;
};

// MiniCPMV4_6ForConditionalGeneration with TinyQwen35Dims{} and a vision tower of hidden 32,
// 3 layers, 2 heads, patch 14, intermediate 64, image_size 112, insert_layer_id 1; with
// options.real_heads, text hidden 256 in 4 layers (4 heads / 1 KV head of 256, 2 + 2 GDN heads
// of 128) and a vision tower of hidden 144 (2 heads of 72), image_size 980.
// image_token_id / video_token_id come from `out_dir`/tokenizer.json's <|image_pad|> and
// <|video_pad|> when that file exists (write the tokenizer first), else vocab_size − 2 and − 1.
Status WriteTinyMiniCpmV46(const TinyCheckpointOptions& options);

// The same with explicit text dimensions (tests use other head ratios and the flat layout).
Status WriteTinyQwen35(const TinyCheckpointOptions& options, const TinyQwen35Dims& dims);

// Random weights of `text`'s and `vision`'s shapes (MiniCPM-V-4.6's names, the MTP head
// included) into options.out_dir, drawn as WriteTinyMiniCpmV46 draws them; vocab_size and the
// head's tying from `text` (the config file itself is the caller's: see dims_of_checkpoint.h).
Status WriteMiniCpmV46WeightsOf(const Qwen35Config& text, const MiniCpmV46VisionConfig& vision,
                                const TinyCheckpointOptions& options);

}  // namespace cpm
