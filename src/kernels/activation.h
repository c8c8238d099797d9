// Gated activations of the MLP blocks: out = act(gate) ⊙ up.
#pragma once

#include <cstdint>

#include "kernels/rounding.h"

namespace cpm::kernels {

// out[r, j] = silu(gate[r, j]) · up[r, j]; with Round::kBf16 it is bf(bf(silu(g)) · u), as
// vLLM's SiluAndMul and HF's act_fn(gate) * up on bf16 tensors. out may alias gate.
void SiluMul(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
             float* out, int64_t out_stride, int64_t rows, int64_t dim, Round round);

}  // namespace cpm::kernels
