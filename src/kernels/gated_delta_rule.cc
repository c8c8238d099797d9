// Gated delta rule: dispatch, the recurrent form's scalar reference, and the chunked form
// (gated_delta_rule_chunked.h) over scalar primitives.
#include "kernels/gated_delta_rule.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "kernels/cpu_features.h"
#include "kernels/gated_delta_rule_chunked.h"
#include "kernels/gated_delta_rule_impl.h"
#include "kernels/ops_avx512.h"

namespace cpm::kernels {

void GatedDeltaRuleRecurrent(const GdnHead& h, int64_t t, int64_t dk, int64_t dv) {
  const Isa isa = ActiveIsa();
  if (isa == Isa::kAvx512 && dv % 16 == 0) return GatedDeltaRuleRecurrentAvx512(h, t, dk, dv);
  if (isa != Isa::kScalar && dv % 8 == 0) return GatedDeltaRuleRecurrentAvx2(h, t, dk, dv);
  constexpr int64_t kMaxDv = 1024;
  CPM_DCHECK(dv <= kMaxDv);
  float* S = h.state;  // [dk, dv]
  float u[kMaxDv];     // [dv] Sᵀk, then δ
  for (int64_t i = 0; i < t; ++i) {
    const float* q = h.q + i * h.qk_stride;
    const float* k = h.k + i * h.qk_stride;
    const float* v = h.v + i * h.v_stride;
    float* __restrict o = h.o + i * h.o_stride;
    const float decay = std::exp(h.g[i * h.gb_stride]);
    const float beta = h.beta[i * h.gb_stride];
    // S <- e^g S and u = Sᵀ k in one pass over S.
    std::fill(u, u + dv, 0.0f);
    for (int64_t a = 0; a < dk; ++a) {
      float* s = S + a * dv;
      const float ka = k[a];
      for (int64_t b = 0; b < dv; ++b) {
        s[b] *= decay;
        u[b] += s[b] * ka;
      }
    }
    // δ = β (v − u)
    for (int64_t b = 0; b < dv; ++b) u[b] = beta * (v[b] - u[b]);
    // S <- S + k δᵀ and o = Sᵀ q in one pass.
    std::fill(o, o + dv, 0.0f);
    for (int64_t a = 0; a < dk; ++a) {
      float* __restrict s = S + a * dv;
      const float ka = k[a], qa = q[a];
      for (int64_t b = 0; b < dv; ++b) {
        s[b] += ka * u[b];
        o[b] += s[b] * qa;
      }
    }
  }
}

int64_t GatedDeltaRuleChunkedScratch(int64_t chunk, int64_t dk, int64_t dv) {
  return ChunkedScratchFloats(chunk, dk, dv);
}

namespace {

// The chunked form's primitives (gated_delta_rule_chunked.h), scalar.
struct ScalarOps {
  // Four rows of X at a time, so each row of B is loaded once per four output rows.
  static void MatAcc(const float* X, int64_t xs, int64_t m, int64_t k, const float* B, int64_t bs,
                     float* __restrict Y, int64_t ys, int64_t n, float alpha, float beta = 1.0f) {
    if (beta != 1.0f) {
      for (int64_t r = 0; r < m; ++r) Scale(Y + r * ys, n, beta, Y + r * ys);
    }
    int64_t i = 0;
    for (; i + 4 <= m; i += 4) {
      float* __restrict y0 = Y + i * ys;
      float* __restrict y1 = y0 + ys;
      float* __restrict y2 = y1 + ys;
      float* __restrict y3 = y2 + ys;
      for (int64_t a = 0; a < k; ++a) {
        const float* __restrict b = B + a * bs;
        const float x0 = alpha * X[i * xs + a], x1 = alpha * X[(i + 1) * xs + a],
                    x2 = alpha * X[(i + 2) * xs + a], x3 = alpha * X[(i + 3) * xs + a];
        for (int64_t j = 0; j < n; ++j) {
          y0[j] += x0 * b[j];
          y1[j] += x1 * b[j];
          y2[j] += x2 * b[j];
          y3[j] += x3 * b[j];
        }
      }
    }
    for (; i < m; ++i) {
      float* __restrict y = Y + i * ys;
      for (int64_t a = 0; a < k; ++a) {
        const float* __restrict b = B + a * bs;
        const float x = alpha * X[i * xs + a];
        for (int64_t j = 0; j < n; ++j) y[j] += x * b[j];
      }
    }
  }

  static void Scale(const float* src, int64_t n, float a, float* dst) {
    for (int64_t i = 0; i < n; ++i) dst[i] = a * src[i];
  }

  static void Transpose(const float* src, int64_t ss, int64_t rows, int64_t cols, float* dst,
                        int64_t ds) {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) dst[c * ds + r] = src[r * ss + c];
  }

  static void DecayMasks(const float* gam, const float* bet, int64_t n, int64_t C, float* A,
                         float* P) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const float d = j <= i ? std::exp(gam[i] - gam[j]) : 0.0f;
        P[i * C + j] *= d;
        A[i * C + j] = j < i ? A[i * C + j] * d * bet[i] : 0.0f;
      }
    }
  }
};

}  // namespace

void GatedDeltaRuleChunked(const GdnHead& h, int64_t t, int64_t dk, int64_t dv, int64_t chunk,
                           float* scratch) {
  const Isa isa = ActiveIsa();
  if (isa == Isa::kAvx512) return GatedDeltaRuleChunkedAvx512(h, t, dk, dv, chunk, scratch);
  if (isa != Isa::kScalar) return GatedDeltaRuleChunkedAvx2(h, t, dk, dv, chunk, scratch);
  GdnChunked<ScalarOps>(h, t, dk, dv, chunk, scratch);
}

}  // namespace cpm::kernels
