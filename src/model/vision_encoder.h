// What the server and the engine need of a model's image encoder: slices of normalized pixels
// in, rows of language-model input embeddings out (one per image placeholder token).
#pragma once

#include <cstdint>

#include "base/status.h"
#include "base/thread_pool.h"

namespace cpm {

class VisionEncoder {
 public:
  virtual ~VisionEncoder() = default;
  // Bytes of weights the encoder holds (mmapped or owned), for the memory budget.
  virtual int64_t weight_bytes() const = 0;
  // Width of an output row: the language model's hidden size.
  virtual int64_t output_dim() const = 0;
  // Embedding rows of one `height`×`width` slice (both multiples of 4 patches).
  virtual int64_t OutputRows(int64_t height, int64_t width) const = 0;
  // pixels [height][width][channels] normalized → out [OutputRows(height, width), output_dim].
  // Runs on `pool` (the engine thread's).
  virtual Status EncodeSlice(const float* pixels, int64_t height, int64_t width, float* out,
                             ThreadPool& pool) = 0;
};

}  // namespace cpm
