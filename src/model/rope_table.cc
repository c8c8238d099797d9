#include "model/rope_table.h"

#include <unistd.h>

#include <cmath>

#include <fmt/format.h>

namespace cpm {
namespace {

// inv_freq[i] = fl(1 / fl(theta^(2i/rot_dim))), as `1.0 / (base ** (arange(0, d, 2) / d))` in f32.
std::vector<float> InvFreq(int64_t rot_dim, double theta) {
  std::vector<float> inv(rot_dim / 2);
  for (int64_t i = 0; i < rot_dim / 2; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(rot_dim);
    const float p = static_cast<float>(std::pow(theta, static_cast<double>(exponent)));
    inv[i] = 1.0f / p;
  }
  return inv;
}

}  // namespace

StatusOr<int64_t> RopeTablePositions(const LoadOptions& options, int64_t max_position_embeddings,
                                     int64_t rot_dim) {
  const bool given = options.max_model_len > 0;
  const int64_t positions = given ? options.max_model_len : max_position_embeddings;
  const double bytes = 2.0 * static_cast<double>(rot_dim / 2) * sizeof(float) *
                       static_cast<double>(positions);  // cos and sin
  const double memory = static_cast<double>(sysconf(_SC_PHYS_PAGES)) *
                        static_cast<double>(sysconf(_SC_PAGE_SIZE));
  if (bytes <= memory / 2) return positions;
  return InvalidArgument(fmt::format(
      "{}: {} positions would need a {:.1f} GiB RoPE table, more than half of this machine's "
      "{:.1f} GiB; pass a smaller --max-model-len",
      given ? "--max-model-len" : options.model_dir + "/config.json: max_position_embeddings",
      positions, bytes / (1 << 30), memory / (1 << 30)));
}

RopeTable BuildRopeTable(int64_t rot_dim, double theta, int64_t max_positions) {
  RopeTable t;
  t.half = rot_dim / 2;
  const std::vector<float> inv = InvFreq(rot_dim, theta);
  t.cos.resize(max_positions * t.half);
  t.sin.resize(max_positions * t.half);
  for (int64_t p = 0; p < max_positions; ++p) {
    for (int64_t i = 0; i < t.half; ++i) {
      const float ang = static_cast<float>(p) * inv[i];
      t.cos[p * t.half + i] = static_cast<float>(std::cos(static_cast<double>(ang)));
      t.sin[p * t.half + i] = static_cast<float>(std::sin(static_cast<double>(ang)));
    }
  }
  return t;
}

RopeTable BuildLongRopeTable(int64_t rot_dim, double theta, const std::vector<double>& factors,
                             int64_t max_position_embeddings,
                             int64_t original_max_position_embeddings, int64_t max_positions) {
  RopeTable t;
  t.half = rot_dim / 2;
  const std::vector<float> inv = InvFreq(rot_dim, theta);
  const double scale =
      static_cast<double>(max_position_embeddings) / static_cast<double>(original_max_position_embeddings);
  const float magnitude =
      scale <= 1.0 ? 1.0f
                   : static_cast<float>(std::sqrt(
                         1.0 + std::log(scale) / std::log(static_cast<double>(original_max_position_embeddings))));
  std::vector<float> r(t.half);
  for (int64_t i = 0; i < t.half; ++i) r[i] = 1.0f / static_cast<float>(factors[i]);
  t.cos.resize(max_positions * t.half);
  t.sin.resize(max_positions * t.half);
  for (int64_t p = 0; p < max_positions; ++p) {
    for (int64_t i = 0; i < t.half; ++i) {
      const float ang = (static_cast<float>(p) * r[i]) * inv[i];
      t.cos[p * t.half + i] = static_cast<float>(std::cos(static_cast<double>(ang))) * magnitude;
      t.sin[p * t.half + i] = static_cast<float>(std::sin(static_cast<double>(ang))) * magnitude;
    }
  }
  return t;
}

}  // namespace cpm
