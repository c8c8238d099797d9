// Matrix multiplication against a linear layer's weight: y[m, out] = x[m, in] · Wᵀ.
// Activations are f32; weights are f32 or bf16 (as loaded), accumulation is f32.
// Few rows (decode) is memory-bound: each weight byte is streamed once per call for all rows.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "base/thread_pool.h"
#include "kernels/rounding.h"
#include "tensor/dtype.h"

namespace cpm::kernels {

// A weight matrix in PyTorch nn.Linear layout: row-major [out_features, in_features].
// `data` points into an mmapped checkpoint (`mapped`; `owner` then holds the mapping) or into
// `owner` (converted or dummy weights).
// `packed` is an optional kernel-private re-layout made once at load by PrepareLinear().
struct LinearWeight {
  DType dtype = DType::kF32;  // kF32 or kBF16
  int64_t out_features = 0;
  int64_t in_features = 0;
  const void* data = nullptr;       // [out_features, in_features]
  std::shared_ptr<void> owner;      // keeps `data` alive: its buffer, or the checkpoint's mapping
  bool mapped = false;              // `data` is inside a mapped checkpoint file
  std::shared_ptr<const void> packed;  // kernel-private; null until PrepareLinear()
};

// What becomes of a weight's [out, in] source once it is packed.
enum class Source {
  kKeep,
  // Dropped: a private copy is freed, a mapped checkpoint's pages go back to the OS, and `data`
  // becomes null, so a model is held once rather than twice (MiniCPM4-0.5B on dummy weights
  // peaks at 1.02 GB resident, 1.72 before). Only where nothing else reads the source (not a tied embedding)
  // and no caller lowers the ISA below the packing's afterwards (kernel tests do).
  kDrop,
};

// What a weight is served as: its own values (f32 or bf16, as loaded), or quantized to Q8_0
// (`--quantization q8_0`, q8.h: 8-bit values in blocks of 32 with an fp16 scale each; the
// activations are quantized the same way at each call).
enum class WeightQuant { kNone, kQ8_0 };

// Optionally re-lays out `w` for the active ISA (may allocate `packed`), or quantizes it as
// `quant` says (at any ISA: a quantized weight has no other form). Idempotent.
void PrepareLinear(LinearWeight* w, Source source = Source::kKeep,
                   WeightQuant quant = WeightQuant::kNone);

// What PrepareLinear changed in the bytes a load holds: each Q8_0 or ternary weight's packed
// bytes (codes and scales, and a ternary weight's bf16 panels for the larger calls), less its
// source's where PrepareLinear dropped that (Source::kDrop). A re-laid-out f32 or bf16 weight
// holds what its dropped source did.
int64_t PackedHeldBytesDelta(const std::vector<const LinearWeight*>& ws);

// What a call streams of a ternary weight packed at the active ISA (`cpmserve bench`'s byte
// counts): calls of at most `max_rows` rows read the 2-bit codes (n·k/4 bytes) and
// `scale_bytes` per output column and scale group; taller calls read the bf16 panels (n·k·2).
// max_rows 0: ternary weights are not packed as codes here.
struct TernaryStreaming {
  int64_t max_rows = 0;
  int64_t scale_bytes = 0;
};
TernaryStreaming ActiveTernaryStreaming();

// The bytes of `w` a call of `rows` rows streams, as packed at the active ISA: its panels (their
// padding columns included), a Q8_0 or ternary weight's codes and scales (a ternary weight's bf16
// panels for calls past ActiveTernaryStreaming().max_rows), or the source as stored if unpacked.
int64_t StreamedBytes(const LinearWeight& w, int64_t rows);

// y[m, out] = x[m, in] · Wᵀ. x row stride `x_stride`, y row stride `y_stride` (in elements).
// With Round::kBf16 every y element is rounded to bf16 once its sum is complete (by the task
// that computed it, while its columns are still in cache, rather than in a pass of its own).
void MatMul(const float* x, int64_t x_stride, int64_t m, const LinearWeight& w, float* y,
            int64_t y_stride, ThreadPool& pool, Round round = Round::kNone);

// y as bf16 values: row i's column j at data[i · stride + j]. The output form of a call whose
// sums are rounded to bf16 anyway and whose reader takes them so (residual.h's AddScaled on a
// bf16 delta): AMX's tiles write a 32-column block's row in one 64-byte store where f32 rows take
// two, and in a forward those lines, scattered at the row stride, have left the caches since the
// last layer and are fetched before they are written. 2 vCPUs of a Xeon with AMX: kernels_bench
// BM_MatMulPrefillRounded (y flushed before each call), three rounds, TFLOP/s: o_proj's shape
// 1.25-1.37 -> 1.33-1.49, the down projection's 1.41-1.58 -> 1.56-1.63; MiniCPM4's pp512, seven
// alternated runs: the o projection 16.8-20.6 -> 13.0-15.0 ms a step, the residual adds
// 8.8-10.6 -> 7.5-9.0.
struct Bf16Rows {
  uint16_t* data;
  int64_t stride;
};
// Whether MatMul writes Bf16Rows for these weights from its kernel (AMX tiles on bf16 pair
// panels). Elsewhere it computes f32 rows and narrows them, a pass more, so a model takes bf16
// rows only where this holds.
bool MatMulWritesBf16Rows(std::span<const LinearWeight* const> ws);
// y[m, out] = bf(x · Wᵀ) as bf16 rows: bitwise MatMul's Round::kBf16 results.
void MatMul(const float* x, int64_t x_stride, int64_t m, const LinearWeight& w, const Bf16Rows& y,
            ThreadPool& pool);

// Several weights that share the same input (q/k/v, gate/up) in one pass over x: ys[i][m, out_i].
void MatMulGroup(const float* x, int64_t x_stride, int64_t m,
                 std::span<const LinearWeight* const> ws, std::span<float* const> ys,
                 std::span<const int64_t> y_strides, ThreadPool& pool,
                 Round round = Round::kNone);

// x as rows of bf16 pairs, the form the bf16 dot-product kernels (vdpbf16ps, AMX) read it in:
// row i's element 2p in the low half of pairs[i · stride + p] (an odd k's last pair with a zero
// high half), stride = PairRowsStride(k). Written by the step before a matmul where the matmul is
// its only reader (rmsnorm.h's RmsNormToPairs), so that the matmul neither reads x as f32 nor
// packs it (at a 512-token prefill of MiniCPM4, 2 MiB read and 1 MiB written per call, and the
// pool's hand-off for it). Every row is taken as bf16-exact.
struct PairRows {
  const uint32_t* pairs;
  int64_t stride;
};
int64_t PairRowsStride(int64_t k);
// Whether MatMulGroup over these weights takes PairRows at the active ISA: each packed as bf16
// pairs (or ternary codes) for the bf16 dot products.
bool MatMulTakesPairRows(std::span<const LinearWeight* const> ws);

// MatMulGroup on x given as pair rows (MatMulTakesPairRows(ws) must hold): bitwise the same
// results as on the f32 rows they hold.
void MatMulGroup(const PairRows& x, int64_t m, std::span<const LinearWeight* const> ws,
                 std::span<float* const> ys, std::span<const int64_t> y_strides,
                 ThreadPool& pool, Round round = Round::kNone);

// out[m, n] = silu(x · gateᵀ) ⊙ (x · upᵀ), the gated MLP's first half: bitwise MatMulGroup of
// gate and up (rounded as `round` says) followed by SiluMul, but each task finishes its own
// columns while their two products are in L2, so the [m, n] products are never written out
// and read back (at a 512-token prefill of MiniCPM4, 2 × 8 MiB per layer). gate and up: same
// shapes. out may not alias x.
void MatMulSiluMul(const float* x, int64_t x_stride, int64_t m, const LinearWeight& gate,
                   const LinearWeight& up, float* out, int64_t out_stride, ThreadPool& pool,
                   Round round = Round::kNone);

// The gated MLP whole: out[m, hidden] = act · downᵀ with act = silu(x · gateᵀ) ⊙ (x · upᵀ),
// bitwise MatMulSiluMul into act then MatMul. Where down runs on bf16 dot products and the
// products are rounded to bf16, act is written straight as the bf16 pairs the down kernel reads
// (half the bytes), never as f32 (`act` is then unused): at a 512-token prefill of MiniCPM4,
// 8 MiB of f32 written, 8 read back and 4 of pairs written per layer become 4. act: [m, n] of
// act_stride; out may not alias x or act.
void GatedMlp(const float* x, int64_t x_stride, int64_t m, const LinearWeight& gate,
              const LinearWeight& up, const LinearWeight& down, float* act, int64_t act_stride,
              float* out, int64_t out_stride, ThreadPool& pool, Round round = Round::kNone);
// GatedMlp on x given as pair rows, where its activation goes to down as pairs: round is
// Round::kBf16 and MatMulTakesPairRows holds for gate, up and down.
void GatedMlp(const PairRows& x, int64_t m, const LinearWeight& gate, const LinearWeight& up,
              const LinearWeight& down, float* out, int64_t out_stride, ThreadPool& pool,
              Round round);

// GatedMlp on pair rows with its output as bf16 rows (MatMulTakesPairRows holds for gate, up and
// down; the results are rounded to bf16 by definition).
void GatedMlp(const PairRows& x, int64_t m, const LinearWeight& gate, const LinearWeight& up,
              const LinearWeight& down, const Bf16Rows& out, ThreadPool& pool);

// Whether MatMul on bf16 weights uses bf16 dot products (AVX512_BF16 vdpbf16ps), so that its
// FLOP/s are to be judged against the bf16-dot peak rather than the f32 FMA peak.
bool MatMulUsesBf16Dot();
// Whether those dot products run on AMX tiles (Intel Sapphire Rapids and later; CPM_AMX=0 keeps
// them on vdpbf16ps): their FLOP/s are then judged against the AMX peak.
bool MatMulUsesAmx();

// What the matmul runs on this CPU and why, for start-up logs and benchmarks ("avx2: f32 FMAs on
// bf16 weights widened in registers", ...). On an AVX-512 CPU the first call makes the choice.
std::string MatMulDescription();

// Scalar reference (tests compare every variant with it). Row range [row_begin, row_end) of W.
void MatMulRef(const float* x, int64_t x_stride, int64_t m, const LinearWeight& w,
               int64_t row_begin, int64_t row_end, float* y, int64_t y_stride);

}  // namespace cpm::kernels
