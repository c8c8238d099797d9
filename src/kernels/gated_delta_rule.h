// The gated delta rule of Gated DeltaNet for one head of one sequence, f32 throughout, with the
// state carried in and out: a token-by-token (recurrent) form for decode and short chunks and a
// chunked (WY / UT-transform) form for long prefill chunks. Both compute the same function.
#pragma once

#include <cstdint>

namespace cpm::kernels {

// One head's inputs and outputs over t tokens (rows), each with its own row stride:
// q, k: [t, dk] (q already L2-normalised and scaled by dk^-1/2, k L2-normalised); v: [t, dv];
// g: [t] log-decays (<= 0); beta: [t]; o: [t, dv]; state S: [dk, dv] f32, read and updated.
struct GdnHead {
  const float* q = nullptr;
  const float* k = nullptr;
  int64_t qk_stride = 0;
  const float* v = nullptr;
  int64_t v_stride = 0;
  const float* g = nullptr;
  const float* beta = nullptr;
  int64_t gb_stride = 0;
  float* o = nullptr;
  int64_t o_stride = 0;
  float* state = nullptr;

  // The same head from its token `row` on: its inputs and outputs from there; the state is
  // shared, so call this after rows [0, row) have updated it.
  GdnHead FromRow(int64_t row) const {
    GdnHead h = *this;
    h.q += row * qk_stride;
    h.k += row * qk_stride;
    h.v += row * v_stride;
    h.g += row * gb_stride;
    h.beta += row * gb_stride;
    h.o += row * o_stride;
    return h;
  }
};

// Per token: S <- e^g S;  δ = β (v − Sᵀk);  S <- S + k δᵀ;  o = Sᵀq  (with the updated S).
void GatedDeltaRuleRecurrent(const GdnHead& h, int64_t t, int64_t dk, int64_t dv);

// Floats of scratch GatedDeltaRuleChunked needs for chunk size `chunk`.
int64_t GatedDeltaRuleChunkedScratch(int64_t chunk, int64_t dk, int64_t dv);

// The same rule, `chunk` tokens at a time (the last chunk may be shorter; no padding is read).
// Within a chunk with Γ = cumsum(g), D_ij = e^{Γi−Γj} (j <= i):
//   A = strict_lower(diag(β) K Kᵀ ⊙ D),  U = (I + A)⁻¹ diag(β) V,  W = (I + A)⁻¹ diag(β e^Γ) K
//   V' = U − W S,  O = diag(e^Γ) Q S + (Q Kᵀ ⊙ D) V',  S <- e^{Γc} S + (diag(e^{Γc−Γ}) K)ᵀ V'
// scratch: GatedDeltaRuleChunkedScratch(chunk, dk, dv) floats.
void GatedDeltaRuleChunked(const GdnHead& h, int64_t t, int64_t dk, int64_t dv, int64_t chunk,
                           float* scratch);

}  // namespace cpm::kernels
