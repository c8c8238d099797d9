// Gated delta rule, recurrent and chunked forms (scalar; loops over dv are contiguous so the
// compiler vectorises them). The chunked form is algebraically the recurrent one, regrouped.
#include "kernels/gated_delta_rule.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "kernels/cpu_features.h"
#include "kernels/gated_delta_rule_impl.h"

namespace cpm::kernels {

void GatedDeltaRuleRecurrent(const GdnHead& h, int64_t t, int64_t dk, int64_t dv) {
  if (ActiveIsa() != Isa::kScalar && dv % 8 == 0) return GatedDeltaRuleRecurrentAvx2(h, t, dk, dv);
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
  // gam[C], A[C,C], P[C,C], U[C,dv], W[C,dk], Qg[C,dk], Kt[dk,C]
  return chunk + 2 * chunk * chunk + chunk * dv + 3 * chunk * dk;
}

namespace {

// Y[m, n] += alpha · X[m, k] · B[k, n] (row strides ys, xs, bs). Four rows of X at a time, so
// each row of B is loaded once per four output rows; the n loop is contiguous (vectorised).
void MatAcc(const float* X, int64_t xs, int64_t m, int64_t k, const float* B, int64_t bs,
            float* __restrict Y, int64_t ys, int64_t n, float alpha) {
  if (ActiveIsa() != Isa::kScalar) return MatAccAvx2(X, xs, m, k, B, bs, Y, ys, n, alpha);
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

// One chunk of n <= C rows starting at row r0.
void Chunk(const GdnHead& h, int64_t r0, int64_t n, int64_t dk, int64_t dv, int64_t C,
           float* scratch) {
  float* gam = scratch;  // [n]     Γ = cumsum(g)
  float* A = gam + C;    // [n, C]  strictly lower: β_i (k_i·k_j) e^{Γi−Γj}
  float* P = A + C * C;  // [n, C]  lower incl. diagonal: (q_i·k_j) e^{Γi−Γj}
  float* U = P + C * C;  // [n, dv] U, then V'
  float* W = U + C * dv; // [n, dk]
  float* Qg = W + C * dk;  // [n, dk] e^{Γi} q_i
  float* Kt = Qg + C * dk;  // [dk, C] kᵀ, then (e^{Γn−Γi} k_i)ᵀ
  float* S = h.state;    // [dk, dv]
  auto k = [&](int64_t i) { return h.k + (r0 + i) * h.qk_stride; };
  auto beta = [&](int64_t i) { return h.beta[(r0 + i) * h.gb_stride]; };

  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) gam[i] = acc += h.g[(r0 + i) * h.gb_stride];
  for (int64_t i = 0; i < n; ++i)
    for (int64_t a = 0; a < dk; ++a) Kt[a * C + i] = k(i)[a];

  // A = K Kᵀ, P = Q Kᵀ (full [n, n]), then masked and scaled by the decays.
  std::fill(A, A + n * C, 0.0f);
  std::fill(P, P + n * C, 0.0f);
  MatAcc(h.k + r0 * h.qk_stride, h.qk_stride, n, dk, Kt, C, A, C, n, 1.0f);
  MatAcc(h.q + r0 * h.qk_stride, h.qk_stride, n, dk, Kt, C, P, C, n, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const float d = j <= i ? std::exp(gam[i] - gam[j]) : 0.0f;
      P[i * C + j] *= d;
      A[i * C + j] = j < i ? A[i * C + j] * d * beta(i) : 0.0f;
    }
  }
  // Forward substitution with the unit lower-triangular (I + A):
  //   U_i = β_i v_i − Σ_{j<i} A_ij U_j,   W_i = β_i e^{Γi} k_i − Σ_{j<i} A_ij W_j.
  for (int64_t i = 0; i < n; ++i) {
    float* ui = U + i * dv;
    float* wi = W + i * dk;
    const float* v = h.v + (r0 + i) * h.v_stride;
    const float bi = beta(i), bgi = bi * std::exp(gam[i]);
    for (int64_t b = 0; b < dv; ++b) ui[b] = bi * v[b];
    for (int64_t a = 0; a < dk; ++a) wi[a] = bgi * k(i)[a];
    MatAcc(A + i * C, C, 1, i, U, dv, ui, dv, dv, -1.0f);
    MatAcc(A + i * C, C, 1, i, W, dk, wi, dk, dk, -1.0f);
  }
  // V' = U − W S (over U); O = (e^Γ Q) S + P V'.
  MatAcc(W, dk, n, dk, S, dv, U, dv, dv, -1.0f);
  for (int64_t i = 0; i < n; ++i) {
    const float eg = std::exp(gam[i]);
    const float* q = h.q + (r0 + i) * h.qk_stride;
    for (int64_t a = 0; a < dk; ++a) Qg[i * dk + a] = eg * q[a];
    float* o = h.o + (r0 + i) * h.o_stride;
    std::fill(o, o + dv, 0.0f);
  }
  MatAcc(Qg, dk, n, dk, S, dv, h.o + r0 * h.o_stride, h.o_stride, dv, 1.0f);
  MatAcc(P, C, n, n, U, dv, h.o + r0 * h.o_stride, h.o_stride, dv, 1.0f);
  // S <- e^{Γn} S + K̃ᵀ V' with K̃_i = e^{Γn−Γi} k_i.
  const float gn = gam[n - 1], egn = std::exp(gn);
  for (int64_t a = 0; a < dk * dv; ++a) S[a] *= egn;
  for (int64_t i = 0; i < n; ++i) {
    const float e = std::exp(gn - gam[i]);
    for (int64_t a = 0; a < dk; ++a) Kt[a * C + i] *= e;
  }
  MatAcc(Kt, C, dk, n, U, dv, S, dv, dv, 1.0f);
}

}  // namespace

void GatedDeltaRuleChunked(const GdnHead& h, int64_t t, int64_t dk, int64_t dv, int64_t chunk,
                           float* scratch) {
  for (int64_t r0 = 0; r0 < t; r0 += chunk) {
    Chunk(h, r0, std::min(chunk, t - r0), dk, dv, chunk, scratch);
  }
}

}  // namespace cpm::kernels
