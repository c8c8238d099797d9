// Gated delta rule, recurrent and chunked forms (scalar; loops over dv are contiguous so the
// compiler vectorises them). The chunked form is algebraically the recurrent one, regrouped.
#include "kernels/gated_delta_rule.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"

namespace cpm::kernels {

void GatedDeltaRuleRecurrent(const GdnHead& h, int64_t t, int64_t dk, int64_t dv) {
  constexpr int64_t kMaxDv = 1024;
  CPM_DCHECK(dv <= kMaxDv);
  float* S = h.state;  // [dk, dv]
  float u[kMaxDv];     // [dv] Sᵀk, then δ
  for (int64_t i = 0; i < t; ++i) {
    const float* q = h.q + i * h.qk_stride;
    const float* k = h.k + i * h.qk_stride;
    const float* v = h.v + i * h.v_stride;
    float* o = h.o + i * h.o_stride;
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
      float* s = S + a * dv;
      const float ka = k[a], qa = q[a];
      for (int64_t b = 0; b < dv; ++b) {
        s[b] += ka * u[b];
        o[b] += s[b] * qa;
      }
    }
  }
}

int64_t GatedDeltaRuleChunkedScratch(int64_t chunk, int64_t dk, int64_t dv) {
  // gam[C], A[C,C], P[C,C], U[C,dv], W[C,dk]
  return chunk + 2 * chunk * chunk + chunk * dv + chunk * dk;
}

namespace {

float Dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// One chunk of n <= C rows starting at row r0.
void Chunk(const GdnHead& h, int64_t r0, int64_t n, int64_t dk, int64_t dv, int64_t C,
           float* scratch) {
  float* gam = scratch;          // [n]    Γ = cumsum(g)
  float* A = gam + C;            // [n, n] strictly lower: β_i (k_i·k_j) e^{Γi−Γj}
  float* P = A + C * C;          // [n, n] lower incl. diagonal: (q_i·k_j) e^{Γi−Γj}
  float* U = P + C * C;          // [n, dv]
  float* W = U + C * dv;         // [n, dk]
  float* S = h.state;            // [dk, dv]
  auto q = [&](int64_t i) { return h.q + (r0 + i) * h.qk_stride; };
  auto k = [&](int64_t i) { return h.k + (r0 + i) * h.qk_stride; };
  auto v = [&](int64_t i) { return h.v + (r0 + i) * h.v_stride; };
  auto beta = [&](int64_t i) { return h.beta[(r0 + i) * h.gb_stride]; };

  float acc = 0.0f;
  for (int64_t i = 0; i < n; ++i) gam[i] = acc += h.g[(r0 + i) * h.gb_stride];
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j <= i; ++j) {
      const float d = std::exp(gam[i] - gam[j]);
      P[i * C + j] = Dot(q(i), k(j), dk) * d;
      if (j < i) A[i * C + j] = beta(i) * Dot(k(i), k(j), dk) * d;
    }
  }
  // Forward substitution with the unit lower-triangular (I + A):
  //   U_i = β_i v_i − Σ_{j<i} A_ij U_j,   W_i = β_i e^{Γi} k_i − Σ_{j<i} A_ij W_j.
  for (int64_t i = 0; i < n; ++i) {
    float* ui = U + i * dv;
    float* wi = W + i * dk;
    const float bi = beta(i), bgi = bi * std::exp(gam[i]);
    for (int64_t b = 0; b < dv; ++b) ui[b] = bi * v(i)[b];
    for (int64_t a = 0; a < dk; ++a) wi[a] = bgi * k(i)[a];
    for (int64_t j = 0; j < i; ++j) {
      const float aij = A[i * C + j];
      const float* uj = U + j * dv;
      const float* wj = W + j * dk;
      for (int64_t b = 0; b < dv; ++b) ui[b] -= aij * uj[b];
      for (int64_t a = 0; a < dk; ++a) wi[a] -= aij * wj[a];
    }
  }
  // V' = U − W S (written over U), and O = e^Γ (Q S) + P V'.
  for (int64_t i = 0; i < n; ++i) {
    float* ui = U + i * dv;
    float* oi = h.o + (r0 + i) * h.o_stride;
    const float* wi = W + i * dk;
    const float* qi = q(i);
    const float eg = std::exp(gam[i]);
    std::fill(oi, oi + dv, 0.0f);
    for (int64_t a = 0; a < dk; ++a) {
      const float* s = S + a * dv;
      const float wa = wi[a], qa = qi[a] * eg;
      for (int64_t b = 0; b < dv; ++b) {
        ui[b] -= wa * s[b];
        oi[b] += qa * s[b];
      }
    }
  }
  for (int64_t i = 0; i < n; ++i) {
    float* oi = h.o + (r0 + i) * h.o_stride;
    for (int64_t j = 0; j <= i; ++j) {
      const float pij = P[i * C + j];
      const float* uj = U + j * dv;
      for (int64_t b = 0; b < dv; ++b) oi[b] += pij * uj[b];
    }
  }
  // S <- e^{Γn} S + Σ_i e^{Γn−Γi} k_i ⊗ V'_i
  const float gn = gam[n - 1], egn = std::exp(gn);
  for (int64_t a = 0; a < dk; ++a) {
    float* s = S + a * dv;
    for (int64_t b = 0; b < dv; ++b) s[b] *= egn;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float* ki = k(i);
    const float* ui = U + i * dv;
    const float e = std::exp(gn - gam[i]);
    for (int64_t a = 0; a < dk; ++a) {
      float* s = S + a * dv;
      const float ka = e * ki[a];
      for (int64_t b = 0; b < dv; ++b) s[b] += ka * ui[b];
    }
  }
}

}  // namespace

void GatedDeltaRuleChunked(const GdnHead& h, int64_t t, int64_t dk, int64_t dv, int64_t chunk,
                           float* scratch) {
  for (int64_t r0 = 0; r0 < t; r0 += chunk) {
    Chunk(h, r0, std::min(chunk, t - r0), dk, dv, chunk, scratch);
  }
}

}  // namespace cpm::kernels
