#include "model/embedding_rows.h"

#include "tensor/dtype.h"

namespace cpm {

void EmbeddingRows(const kernels::LinearWeight& table, std::span<const int32_t> tokens,
                   float* out) {
  const int64_t d = table.in_features;
  const int64_t row_bytes = d * static_cast<int64_t>(DTypeSize(table.dtype));
  const uint8_t* base = static_cast<const uint8_t*>(table.data);
  for (size_t t = 0; t < tokens.size(); ++t) {
    ConvertToF32(table.dtype, base + tokens[t] * row_bytes, out + t * d, d);
  }
}

}  // namespace cpm
