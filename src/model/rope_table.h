// Precomputed RoPE cos/sin tables: [max_positions, rot_dim/2] each, in f32, built in the
// operation order of the HF reference so that angles round the same way.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "model/load_options.h"

namespace cpm {

struct RopeTable {
  int64_t half = 0;  // rot_dim / 2
  std::vector<float> cos;  // [max_positions, half]
  std::vector<float> sin;

  const float* CosAt(int64_t pos) const { return cos.data() + pos * half; }
  const float* SinAt(int64_t pos) const { return sin.data() + pos * half; }
  int64_t max_positions() const { return half ? static_cast<int64_t>(cos.size()) / half : 0; }
};

// The positions a model's table covers: --max-model-len where given, else the config's
// max_position_embeddings; an error naming which, when cos and sin of rot_dim / 2 each would take
// more than half of this machine's memory (a max_position_embeddings of 10^12 asked for
// terabytes and died of bad_alloc).
StatusOr<int64_t> RopeTablePositions(const LoadOptions& options, int64_t max_position_embeddings,
                                     int64_t rot_dim);

// Plain RoPE: angle(p, i) = p · theta^(-2i/rot_dim).
RopeTable BuildRopeTable(int64_t rot_dim, double theta, int64_t max_positions);

// LongRoPE (MiniCPM/Phi-3): angle(p, i) = fl(fl(p · fl(1/f_i)) · inv_freq_i), with cos and sin
// scaled by the magnitude factor sqrt(1 + ln(S)/ln(L0)), S = max_pos_emb / L0 (1 when S <= 1).
RopeTable BuildLongRopeTable(int64_t rot_dim, double theta, const std::vector<double>& factors,
                             int64_t max_position_embeddings,
                             int64_t original_max_position_embeddings, int64_t max_positions);

}  // namespace cpm
