// Q8_0 weights: quantization at load, the activations' quantization per call, the scalar
// kernel every vector kernel must match bit for bit, and the dispatch.
#include "kernels/q8.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "base/check.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul_impl.h"
#include "tensor/dtype.h"

namespace cpm::kernels {
namespace {

float WeightAt(const LinearWeight& w, int64_t r, int64_t c) {
  const int64_t i = r * w.in_features + c;
  return w.dtype == DType::kBF16 ? Bf16ToF32(static_cast<const uint16_t*>(w.data)[i])
                                 : static_cast<const float*>(w.data)[i];
}

// Round to nearest even, saturated to int8 as vpmovsdb saturates (NaN to −128, as the
// vector conversion's "integer indefinite" does).
int8_t SaturateInt8(float v) {
  const float r = std::nearbyint(v);
  if (!(r >= -128.0f)) return -128;
  if (r > 127.0f) return 127;
  return static_cast<int8_t>(r);
}

// Amax of the block's weights of row r, for blocks [0, blocks).
float BlockAmax(const LinearWeight& w, int64_t r, int64_t b) {
  float amax = 0;
  const int64_t c1 = std::min(w.in_features, (b + 1) * kQ8Block);
  for (int64_t c = b * kQ8Block; c < c1; ++c) amax = std::max(amax, std::fabs(WeightAt(w, r, c)));
  return amax;
}

// The per-tensor power of two e that puts the largest scale in (2^14, 2^15]: fp16 then holds
// every scale down to 2^-29 of it as a normal number.
int ScaleExponent(const LinearWeight& w) {
  float max_d = 0;
  for (int64_t r = 0; r < w.out_features; ++r) {
    for (int64_t b = 0; b < Q8Blocks(w.in_features); ++b) {
      max_d = std::max(max_d, BlockAmax(w, r, b) / 127.0f);
    }
  }
  if (!(max_d > 0) || !std::isfinite(max_d)) return 0;
  int e = 0;
  std::frexp(max_d, &e);  // max_d ≤ 2^e
  return e - 15;
}

}  // namespace

std::shared_ptr<const void> PackQ8(const LinearWeight& w) {
  CPM_CHECK(w.data != nullptr && (w.dtype == DType::kBF16 || w.dtype == DType::kF32));
  auto pw = std::make_shared<PackedWeight>();
  pw->layout = PackedLayout::kPanel16Q8;
  pw->width = kQ8PanelWidth;
  pw->n = w.out_features;
  pw->k = w.in_features;
  pw->num_panels = (pw->n + kQ8PanelWidth - 1) / kQ8PanelWidth;
  pw->num_groups = Q8Blocks(pw->k);
  pw->panel_elems = pw->num_groups * kQ8PanelBlockBytes;  // bytes
  const int e = ScaleExponent(w);
  pw->out_scale = std::ldexp(1.0f, e);
  pw->data.Resize(static_cast<size_t>(pw->num_panels * pw->panel_elems), Pages::kHuge);
  pw->scales.Resize(static_cast<size_t>(pw->num_panels * pw->num_groups * kQ8PanelWidth) *
                    sizeof(uint16_t));
  uint8_t* codes = pw->data.as<uint8_t>();
  uint16_t* scales = pw->scales.as<uint16_t>();
  std::memset(codes, 128, pw->data.size());  // q = 0 in the padding
  std::memset(scales, 0, pw->scales.size());
  for (int64_t r = 0; r < pw->n; ++r) {
    const int64_t p = r / kQ8PanelWidth, j = r % kQ8PanelWidth;
    for (int64_t b = 0; b < pw->num_groups; ++b) {
      const uint16_t stored = F32ToF16(std::ldexp(BlockAmax(w, r, b) / 127.0f, -e));
      scales[(p * pw->num_groups + b) * kQ8PanelWidth + j] = stored;
      // q from the scale the kernels use, so that d·q is as near w as the stored scale allows.
      const float d = std::ldexp(F16ToF32(stored), e);
      uint8_t* block = codes + p * pw->panel_elems + b * kQ8PanelBlockBytes;
      const int64_t c1 = std::min(pw->k, (b + 1) * kQ8Block);
      for (int64_t c = b * kQ8Block; c < c1; ++c) {
        const int64_t i = c - b * kQ8Block;  // [step i/4][column j][i%4]
        const int8_t q = d > 0 ? SaturateInt8(WeightAt(w, r, c) / d) : 0;
        block[(i / kQ8GroupK) * kQ8PanelWidth * kQ8GroupK + j * kQ8GroupK + i % kQ8GroupK] =
            static_cast<uint8_t>(q + 128);
      }
    }
  }
  return pw;
}

std::vector<float> DequantizeQ8(const PackedWeight& pw) {
  CPM_CHECK(pw.layout == PackedLayout::kPanel16Q8);
  std::vector<float> out(static_cast<size_t>(pw.n * pw.k));
  const uint8_t* codes = pw.data.as<uint8_t>();
  const uint16_t* scales = pw.scales.as<uint16_t>();
  for (int64_t r = 0; r < pw.n; ++r) {
    const int64_t p = r / kQ8PanelWidth, j = r % kQ8PanelWidth;
    for (int64_t c = 0; c < pw.k; ++c) {
      const int64_t b = c / kQ8Block, i = c % kQ8Block;
      const float d =
          F16ToF32(scales[(p * pw.num_groups + b) * kQ8PanelWidth + j]) * pw.out_scale;
      const uint8_t u = codes[p * pw.panel_elems + b * kQ8PanelBlockBytes +
                              (i / kQ8GroupK) * kQ8PanelWidth * kQ8GroupK + j * kQ8GroupK +
                              i % kQ8GroupK];
      out[static_cast<size_t>(r * pw.k + c)] = d * static_cast<float>(int{u} - 128);
    }
  }
  return out;
}

void QuantizeRowsQ8Scalar(const float* x, int64_t x_stride, int64_t k, int64_t row_begin,
                          int64_t row_end, int8_t* q, float* d, int32_t* corr) {
  const int64_t blocks = Q8Blocks(k), qs = Q8XStride(k);
  for (int64_t i = row_begin; i < row_end; ++i) {
    const float* xi = x + i * x_stride;
    int8_t* qi = q + i * qs;
    std::memset(qi, 0, static_cast<size_t>(blocks * kQ8Block));
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t c0 = b * kQ8Block, c1 = std::min(k, c0 + kQ8Block);
      float amax = 0;
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(xi[c]));
      const float db = amax / 127.0f, inv = db != 0 ? 1.0f / db : 0.0f;
      int32_t sum = 0;
      for (int64_t c = c0; c < c1; ++c) {
        qi[c] = SaturateInt8(xi[c] * inv);
        sum += qi[c];
      }
      d[i * blocks + b] = db;
      corr[i * blocks + b] = -128 * sum;
    }
  }
}

void MatMulPanelsQ8Scalar(const Q8X& x, int64_t m, const PackedWeight& pw, int64_t panel_begin,
                          int64_t panel_end, float* y, int64_t y_stride, Round round) {
  const uint8_t* codes = pw.data.as<uint8_t>();
  const uint16_t* scales = pw.scales.as<uint16_t>();
  const int64_t c_end = std::min(pw.n, panel_end * kQ8PanelWidth);
  for (int64_t i = 0; i < m; ++i) {
    const int8_t* xq = x.q + i * x.q_stride;
    for (int64_t c = panel_begin * kQ8PanelWidth; c < c_end; ++c) {
      const int64_t p = c / kQ8PanelWidth, j = c % kQ8PanelWidth;
      float acc = 0;
      for (int64_t b = 0; b < pw.num_groups; ++b) {
        const uint8_t* block = codes + p * pw.panel_elems + b * kQ8PanelBlockBytes;
        int32_t dot = 0;
        for (int64_t t = 0; t < kQ8Block; ++t) {
          const uint8_t u = block[(t / kQ8GroupK) * kQ8PanelWidth * kQ8GroupK + j * kQ8GroupK +
                                  t % kQ8GroupK];
          dot += (int32_t{u} - 128) * xq[b * kQ8Block + t];
        }
        const float s =
            F16ToF32(scales[(p * pw.num_groups + b) * kQ8PanelWidth + j]) * x.d[i * x.blocks + b];
        acc = std::fma(static_cast<float>(dot), s, acc);
      }
      const float v = acc * pw.out_scale;
      y[i * y_stride + (c - panel_begin * kQ8PanelWidth)] =
          round == Round::kBf16 ? RoundBf16(v) : v;
    }
  }
}

namespace {

bool UseVnni() { return ActiveIsa() == Isa::kAvx512 && GetCpuFeatures().avx512vnni; }

}  // namespace

void QuantizeRowsQ8(const float* x, int64_t x_stride, int64_t k, int64_t row_begin,
                    int64_t row_end, int8_t* q, float* d, int32_t* corr) {
  if (ActiveIsa() == Isa::kAvx512) {
    return QuantizeRowsQ8Avx512(x, x_stride, k, row_begin, row_end, q, d, corr);
  }
  QuantizeRowsQ8Scalar(x, x_stride, k, row_begin, row_end, q, d, corr);
}

void MatMulPanelsQ8(const Q8X& x, int64_t m, const PackedWeight& pw, int64_t panel_begin,
                    int64_t panel_end, float* y, int64_t y_stride, Round round) {
  if (UseVnni()) return MatMulPanelsQ8Vnni(x, m, pw, panel_begin, panel_end, y, y_stride, round);
  if (ActiveIsa() >= Isa::kAvx2) {
    return MatMulPanelsQ8Avx2(x, m, pw, panel_begin, panel_end, y, y_stride, round);
  }
  MatMulPanelsQ8Scalar(x, m, pw, panel_begin, panel_end, y, y_stride, round);
}

std::string Q8KernelDescription() {
  if (UseVnni()) return "avx512-vnni: vpdpbusd on int8 weights and int8 activations";
  if (ActiveIsa() >= Isa::kAvx2) return "avx2: vpmaddubsw on int8 weights and int8 activations";
  return "scalar reference";
}

std::string SummarizeQ8(const std::vector<const LinearWeight*>& ws) {
  int64_t count = 0, packed_bytes = 0, bf16_bytes = 0;
  for (const LinearWeight* w : ws) {
    const PackedWeight* pw = Packed(*w);
    if (pw == nullptr || pw->layout != PackedLayout::kPanel16Q8) continue;
    ++count;
    packed_bytes += static_cast<int64_t>(pw->data.size() + pw->scales.size());
    bf16_bytes += w->out_features * w->in_features * 2;
  }
  if (count == 0) return "";
  char out[160];
  std::snprintf(out, sizeof out, "%lld of %zu linear weights as Q8_0: %.1f MB instead of %.1f MB "
                "of bf16 (%s)", static_cast<long long>(count), ws.size(), packed_bytes / 1e6,
                bf16_bytes / 1e6, Q8KernelDescription().c_str());
  return out;
}

}  // namespace cpm::kernels
