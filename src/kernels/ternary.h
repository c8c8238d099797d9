// BitCPM4's ternary linear weights. The checkpoint stores them "fake-quantized": plain bf16 values
// scale × {−1, 0, +1}, one scale per group of inputs along a row, the granularity not documented
// (spec minicpm4.md §7). DetectTernary() finds it from the bits; PackTernary() then stores 2-bit
// codes plus each group's scale as its raw bf16 bits, which re-expand to the very same bytes
// (lossless), and an 8th of the bytes a decode step streams.
//
// Why the kernels can be bitwise the bf16 path: a code selects t ∈ {+0, +1, −1, −0}, and t · s in
// f32 is exactly the widened bf16 weight (±s or ±0), so the same FMA chain over k gives the same
// sums (see matmul_impl.h on batch invariance); the AVX-512 kernels rebuild the weight's very
// bf16 bits in registers and run the bf16 panels' vdpbf16ps chain on them.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/matmul.h"

namespace cpm::kernels {

struct TernaryFormat {
  // Inputs per scale along a row: 256, 128, 64 or 32, or `in_features` when one scale serves a
  // whole row (per_tensor: and all rows share it). 0: the tensor is not ternary.
  int64_t group = 0;
  bool per_row = false;        // one scale per row (group is in_features)
  bool per_tensor = false;     // and every row has the same one
  bool negative_zero = false;  // −0.0 (0x8000) occurs: code 3 keeps it
  bool ternary() const { return group > 0; }
};

// Scans `w` ([n][k] bf16 bits) once: every group of 32 inputs must hold at most one nonzero
// magnitude (and a finite one), else it is not ternary (usually decided in the first 32 values).
// Then the coarsest grouping that holds: per tensor, per row, 256, 128, 64, 32.
TernaryFormat DetectTernary(const uint16_t* w, int64_t n, int64_t k);

// "per-tensor scale", "per-row scales", "a scale per 64 inputs" or "not ternary".
std::string DescribeTernary(const TernaryFormat& f);

// Rounds `w` ([n][k] bf16, in place) to ternary as BitCPM's quantiser does:
// s = bf16(mean |w| of the group) and w = s · clamp(round(w / s), −1, 1). `group` inputs per scale
// (k or more: per row); per_tensor: one mean over the whole tensor. For make-tiny and dummy
// BitCPM-style weights.
void FakeQuantizeTernary(uint16_t* w, int64_t n, int64_t k, int64_t group, bool per_tensor);

enum class PackedLayout : uint8_t;  // matmul_impl.h

// The packed form of a bf16 weight that DetectTernary() found ternary with format `f`:
// PackedLayout::kPanel16Ternary (the AVX2 kernels') or kPanel32Ternary (AVX-512 BF16's).
std::shared_ptr<const void> PackTernary(const LinearWeight& w, const TernaryFormat& f,
                                        PackedLayout layout);

// The bf16 weight [n][k] back from the packed codes and scales (lossless: the same bytes as the
// checkpoint's, which tests compare).
std::vector<uint16_t> ExpandTernary(const LinearWeight& w);

// CPM_TERNARY=1 / =0 when set (0, false, off or no, any case, is off): PrepareLinear() then
// packs ternary bf16 weights as 2-bit codes, or never does (A/B runs against the bf16 kernels).
// Never at the scalar level.
std::optional<bool> TernaryPackingOverride();
// Whether PrepareLinear() packs ternary bf16 weights as 2-bit codes at the active ISA: the
// override when set, else where the AVX2 kernels are the matmul (matmul.cc says why).
bool TernaryPackingEnabled();

// The format a prepared weight was packed with (group 0: not packed as ternary).
TernaryFormat PackedTernaryFormat(const LinearWeight& w);

// For the load log: "168 of 169 linear weights ternary (per-row scales: 168), 2-bit codes + scales
// 90.2 MB instead of 717.2 MB of bf16", or "" when none is ternary.
std::string SummarizeTernary(std::span<const LinearWeight* const> ws);

}  // namespace cpm::kernels
