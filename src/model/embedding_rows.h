// The embedding table's rows of a step's tokens, as f32: the first layer's input.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/matmul.h"

namespace cpm {

// out[t, :] = table[tokens[t], :] widened to f32 ([tokens, in_features]). The rows are read at
// random from a 150-500 MB table: it should be on huge pages (WeightLoader::EmbeddingTable).
void EmbeddingRows(const kernels::LinearWeight& table, std::span<const int32_t> tokens,
                   float* out);

}  // namespace cpm
