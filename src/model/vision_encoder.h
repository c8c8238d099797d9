// What the server and the engine need of a model's image encoder: slices of normalized pixels
// in, rows of language-model input embeddings out (one per image placeholder token).
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"

namespace cpm {

// Where a slice's encoding stands between pieces: the next stage and the hidden states so far.
struct VisionProgress {
  int64_t stage = 0;            // 0: not started
  int64_t grid_h = 0, grid_w = 0;  // the token grid of `hidden`
  std::vector<float> hidden;    // [grid_h·grid_w, hidden_size]
};

class VisionEncoder {
 public:
  virtual ~VisionEncoder() = default;
  // Bytes of weights the encoder holds (mmapped or owned), for the memory budget.
  virtual int64_t weight_bytes() const = 0;
  // Width of an output row: the language model's hidden size.
  virtual int64_t output_dim() const = 0;
  // Whether it can give a token per `patches_per_token` patches (SliceConfig's downsample
  // mode: MiniCPM-V-4.6's 16 with its ViT merger, or 4 without it).
  virtual bool Supports(int64_t patches_per_token) const = 0;
  // The mode of its model config (a preprocessor config or a request may name another).
  virtual int64_t default_patches_per_token() const = 0;
  // Side of a patch in pixels (vision_config.patch_size), which the slicing must share.
  virtual int64_t patch_size() const = 0;
  // Embedding rows of one `height`×`width` slice (both multiples of 4 patches).
  virtual int64_t OutputRows(int64_t height, int64_t width, int64_t patches_per_token) const = 0;
  // pixels [height][width][channels] normalized → out [OutputRows(...), output_dim], in pieces
  // of about one encoder layer, so that the engine can run forward steps between them: each
  // call runs the next piece and returns true once `out` is complete. `progress` carries the
  // slice's state from call to call (a fresh one starts a slice); `pixels`, `out` and
  // `patches_per_token` (a supported one) must stay the same until then. Runs on `pool` (the
  // engine thread's).
  virtual StatusOr<bool> EncodeSlicePiece(const float* pixels, int64_t height, int64_t width,
                                          int64_t patches_per_token, float* out,
                                          VisionProgress* progress, ThreadPool& pool) = 0;

  // The whole slice in one call.
  Status EncodeSlice(const float* pixels, int64_t height, int64_t width, int64_t patches_per_token,
                     float* out, ThreadPool& pool) {
    VisionProgress progress;
    for (;;) {
      CPM_ASSIGN_OR_RETURN(bool done, EncodeSlicePiece(pixels, height, width, patches_per_token,
                                                       out, &progress, pool));
      if (done) return OkStatus();
    }
  }
};

}  // namespace cpm
