// How a kernel rounds its output: kNone keeps f32; kBf16 rounds to bf16 (kept in f32 storage),
// reproducing the rounding points of a bf16 PyTorch model (the `bf(x)` of the model specs).
#pragma once

namespace cpm::kernels {

enum class Round { kNone, kBf16 };

}  // namespace cpm::kernels
