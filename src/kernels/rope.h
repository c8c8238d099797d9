// Rotary position embedding, rotate_half (NeoX) layout: within each head, dims i and
// i + rot_dim/2 form a pair rotated by angle φ_i(pos); dims >= rot_dim pass through.
// The angles come from the model (LongRoPE, partial RoPE, ...) as per-token cos/sin tables.
#pragma once

#include <cstdint>

#include "kernels/rounding.h"

namespace cpm::kernels {

// Where a bf16 RoPE (Round::kBf16) rounds: its results only (MiniCPM's code rotates in float
// and casts back), or every product and sum, as HF's apply_rotary_pos_emb on bf16 tensors
// (Qwen3.5's, MiniCPM-V-4.6's language model).
enum class RopeRounding { kResults, kEveryOp };

// x: [n_tokens, n_heads, head_dim] with token stride `x_stride` (elements), rotated in place.
// cos, sin: [n_tokens, rot_dim/2]. y[i] = x[i]·c − x[i+h]·s, y[i+h] = x[i+h]·c + x[i]·s with
// h = rot_dim/2; each product is rounded to f32 before the add (as eager PyTorch, no FMA), and
// to bf16 too with Round::kBf16 and RopeRounding::kEveryOp.
void RopeNeox(float* x, int64_t x_stride, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
              int64_t rot_dim, const float* cos, const float* sin, Round round,
              RopeRounding rounding = RopeRounding::kResults);

}  // namespace cpm::kernels
