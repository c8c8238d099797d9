// Internals of attention (kernels/ only): per-ISA kernels for one query row of one GQA group.
#pragma once

#include <cstdint>

#include "kernels/attention.h"

namespace cpm::kernels {

// out[g, :] = softmax(scale · q[g] · K[0:n_keys]ᵀ) · V[0:n_keys] for the `group` query heads
// g that share KV head `kvh`; q and out: [group, head_dim] contiguous. head_dim % 8 == 0.
void AttendRowAvx2(const float* q, int64_t n_keys, int64_t kvh, int64_t group,
                   const KvLayerView& kv, const int32_t* block_table, float scale, float* out);

}  // namespace cpm::kernels
