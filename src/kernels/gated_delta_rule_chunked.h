// The chunked (WY / UT-transform) form of the gated delta rule, written once over its primitive
// operations so that the scalar reference (gated_delta_rule.cc) and the AVX2 and AVX-512
// variants (gated_delta_rule_avx2.cc, _avx512.cc) run the same algorithm; kernels/ only. `Ops`
// provides, all f32 with row strides:
//   MatAcc(X, xs, m, k, B, bs, Y, ys, n, alpha, beta = 1)
//                                                 Y[m, n] = beta · Y + alpha · X[m, k] · B[k, n]
//                                                 (beta · Y rounded, then the sum: a Scale of Y
//                                                 first, to the bit)
//   Scale(src, n, a, dst)                         dst[0, n) = a · src[0, n)
//   Transpose(src, ss, rows, cols, dst, ds)       dst[c, r] = src[r, c]
//   DecayMasks(gam, bet, n, C, A, P)              with D_ij = e^{Γi−Γj} for j ≤ i:
//       P <- P ⊙ D (0 above the diagonal), A <- diag(β) (A ⊙ D) strictly below it (0 elsewhere)
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/gated_delta_rule.h"

namespace cpm::kernels {

// Floats of scratch per chunk of C: gam, bet, e [C]; A, P, T [C, C]; Vb, U [C, dv];
// Kb, W, Qg [C, dk]; Kt [dk, C].
inline int64_t ChunkedScratchFloats(int64_t C, int64_t dk, int64_t dv) {
  return 3 * C + 3 * C * C + 2 * C * dv + 4 * C * dk;
}

// One chunk of n ≤ C rows starting at row r0 (see gated_delta_rule.h for the equations).
template <class Ops>
void GdnChunk(const GdnHead& h, int64_t r0, int64_t n, int64_t dk, int64_t dv, int64_t C,
              float* scratch) {
  float* gam = scratch;     // [n]      Γ = cumsum(g)
  float* bet = gam + C;     // [n]      β
  float* e = bet + C;       // [n]      e^{Γi}, then e^{Γn−Γi}
  float* A = e + C;         // [n, C]   strictly lower: β_i (k_i·k_j) e^{Γi−Γj}
  float* P = A + C * C;     // [n, C]   lower incl. diagonal: (q_i·k_j) e^{Γi−Γj}
  float* T = P + C * C;     // [n, C]   (I + A)⁻¹, unit lower-triangular
  float* Vb = T + C * C;    // [n, dv]  diag(β) V
  float* U = Vb + C * dv;   // [n, dv]  U = T Vb, then V'
  float* Kb = U + C * dv;   // [n, dk]  diag(β e^Γ) K, then K̃ = diag(e^{Γn−Γ}) K
  float* W = Kb + C * dk;   // [n, dk]  W = T Kb
  float* Qg = W + C * dk;   // [n, dk]  diag(e^Γ) Q
  float* Kt = Qg + C * dk;  // [dk, C]  Kᵀ, then K̃ᵀ
  float* S = h.state;       // [dk, dv]
  const int64_t ks = h.qk_stride;
  const float* K = h.k + r0 * ks;
  const float* Q = h.q + r0 * ks;
  float* O = h.o + r0 * h.o_stride;

  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    gam[i] = acc += h.g[(r0 + i) * h.gb_stride];
    bet[i] = h.beta[(r0 + i) * h.gb_stride];
    e[i] = std::exp(gam[i]);
  }
  // A = K Kᵀ, P = Q Kᵀ (full [n, n]), then masked and scaled by the decays.
  Ops::Transpose(K, ks, n, dk, Kt, C);
  std::fill(A, A + n * C, 0.0f);
  std::fill(P, P + n * C, 0.0f);
  Ops::MatAcc(K, ks, n, dk, Kt, C, A, C, n, 1.0f);
  Ops::MatAcc(Q, ks, n, dk, Kt, C, P, C, n, 1.0f);
  Ops::DecayMasks(gam, bet, n, C, A, P);
  // T = (I + A)⁻¹ by forward substitution on its rows, T_i = e_i − Σ_{j<i} A_ij T_j (row j of T
  // is zero past column j); then U = T diag(β) V and W = T diag(β e^Γ) K as whole products (the
  // UT transform: a [C, C] solve rather than one over dv + dk columns for each row).
  std::fill(T, T + n * C, 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    T[i * C + i] = 1.0f;
    Ops::MatAcc(A + i * C, C, 1, i, T, C, T + i * C, C, i, -1.0f);
  }
  for (int64_t i = 0; i < n; ++i) {
    Ops::Scale(h.v + (r0 + i) * h.v_stride, dv, bet[i], Vb + i * dv);
    Ops::Scale(K + i * ks, dk, bet[i] * e[i], Kb + i * dk);
    Ops::Scale(Q + i * ks, dk, e[i], Qg + i * dk);
  }
  std::fill(U, U + n * dv, 0.0f);
  std::fill(W, W + n * dk, 0.0f);
  Ops::MatAcc(T, C, n, n, Vb, dv, U, dv, dv, 1.0f);
  Ops::MatAcc(T, C, n, n, Kb, dk, W, dk, dk, 1.0f);
  // V' = U − W S (over U); O = (e^Γ Q) S + P V'.
  Ops::MatAcc(W, dk, n, dk, S, dv, U, dv, dv, -1.0f);
  for (int64_t i = 0; i < n; ++i) std::fill(O + i * h.o_stride, O + i * h.o_stride + dv, 0.0f);
  Ops::MatAcc(Qg, dk, n, dk, S, dv, O, h.o_stride, dv, 1.0f);
  Ops::MatAcc(P, C, n, n, U, dv, O, h.o_stride, dv, 1.0f);
  // S <- e^{Γn} S + K̃ᵀ V' with K̃_i = e^{Γn−Γi} k_i; the decay of S as the product's β (a pass
  // over the 64 KiB state a chunk, ~2/3 of the scales' time with chunks of 16, saved).
  const float gn = gam[n - 1];
  for (int64_t i = 0; i < n; ++i) Ops::Scale(K + i * ks, dk, std::exp(gn - gam[i]), Kb + i * dk);
  Ops::Transpose(Kb, dk, n, dk, Kt, C);
  Ops::MatAcc(Kt, C, dk, n, U, dv, S, dv, dv, 1.0f, std::exp(gn));
}

template <class Ops>
void GdnChunked(const GdnHead& h, int64_t t, int64_t dk, int64_t dv, int64_t chunk,
                float* scratch) {
  for (int64_t r0 = 0; r0 < t; r0 += chunk) {
    GdnChunk<Ops>(h, r0, std::min(chunk, t - r0), dk, dv, chunk, scratch);
  }
}

}  // namespace cpm::kernels
