// Machine limits: runs the per-ISA loops on every pool thread at once, best of several runs.
#include "kernels/machine_limits.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <iterator>
#include <memory>
#include <vector>

#include "base/aligned_buffer.h"
#include "kernels/amx.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/matmul_impl.h"
#include "kernels/ops_avx512.h"

namespace cpm::kernels {
namespace {

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// FLOP/s of `loop` on `threads` threads (the first `threads` tasks), best of `repeats`.
double PeakOn(ThreadPool& pool, int threads, int repeats, double (*loop)(int64_t)) {
  constexpr int64_t kIters = 4 << 20;  // ~25-50 ms per thread at a few GHz
  double best = 0;
  for (int r = 0; r < repeats; ++r) {
    std::atomic<double> flops{0};
    const auto t0 = std::chrono::steady_clock::now();
    pool.ParallelFor(threads, [&](int64_t, int) {
      const double f = loop(kIters);
      double cur = flops.load();
      while (!flops.compare_exchange_weak(cur, cur + f)) {}
    });
    best = std::max(best, flops.load() / Seconds(t0) / 1e9);
  }
  return best;
}

double FmaLoopScalar(int64_t iterations) {
  float a[8] = {0, 1, 2, 3, 4, 5, 6, 7};
  for (int64_t it = 0; it < iterations; ++it) {
    for (float& v : a) v = v * 0.999999f + 1e-7f;
  }
  volatile float sink = a[0] + a[7];
  (void)sink;
  return static_cast<double>(iterations) * 8 * 2;
}

uint64_t StreamReadScalar(const void* p, int64_t bytes) {
  const uint64_t* v = static_cast<const uint64_t*>(p);
  uint64_t s = 0;
  for (int64_t i = 0; i < bytes / 8; ++i) s ^= v[i];
  return s;
}

struct Read {
  double gbps = 0;
  int64_t prefetch_bytes = 0;
};

// The best streaming read on `threads` threads: `repeats` passes at each prefetch distance, the
// fastest pass kept with its distance (a busy neighbour only ever slows a pass down).
Read ReadOn(ThreadPool& pool, int threads, int repeats, const AlignedBuffer& buf) {
  const Isa isa = ActiveIsa();
  const int64_t per = static_cast<int64_t>(buf.size()) / threads / 4096 * 4096;
  Read best;
  std::atomic<uint64_t> sink{0};
  for (const int64_t distance : kReadPrefetchDistances) {
    if (isa == Isa::kScalar && distance > 0) break;
    for (int r = 0; r < repeats; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      pool.ParallelFor(threads, [&](int64_t t, int) {
        const std::byte* p = buf.data() + t * per;
        sink ^= isa == Isa::kScalar ? StreamReadScalar(p, per) : StreamReadAvx2(p, per, distance);
      });
      const double gbps = static_cast<double>(per) * threads / Seconds(t0) / 1e9;
      if (gbps > best.gbps) best = {gbps, distance};
    }
  }
  return best;
}

}  // namespace

MachineLimits MeasureMachineLimits(ThreadPool& pool, int64_t buffer_bytes, int repeats) {
  MachineLimits out;
  const int n = pool.num_threads();
  // On huge pages, as the packed weights the decode kernels stream: the limit is what the
  // machine's best reads reach (4 KiB pages read ~5-15% slower on a Zen 5 VM).
  AlignedBuffer buf(static_cast<size_t>(buffer_bytes), Pages::kHuge);
  // Touch every page (and give it non-zero content) so the reads hit real memory.
  pool.ParallelForRange(buffer_bytes, 1 << 20, [&](int64_t b, int64_t e, int) {
    std::memset(buf.data() + b, 0x5a, static_cast<size_t>(e - b));
  });
  out.read_gbps_1t = ReadOn(pool, 1, repeats, buf).gbps;
  const Read all = ReadOn(pool, n, repeats, buf);
  out.read_gbps = all.gbps;
  out.read_prefetch_bytes = all.prefetch_bytes;

  const Isa isa = ActiveIsa();
  double (*fma)(int64_t) = &FmaLoopScalar;
  out.fma_isa = "scalar";
  if (isa == Isa::kAvx512) {
    fma = &FmaPeakLoopAvx512;
    out.fma_isa = "avx512 vfmadd231ps zmm";
  } else if (isa == Isa::kAvx2) {
    fma = &FmaPeakLoopAvx2;
    out.fma_isa = "avx2 vfmadd231ps ymm";
  }
  out.f32_fma_gflops_1t = PeakOn(pool, 1, repeats, fma);
  out.f32_fma_gflops = PeakOn(pool, n, repeats, fma);
  if (isa == Isa::kAvx512 && GetCpuFeatures().avx512bf16) {
    out.bf16_dot_gflops = PeakOn(pool, n, repeats, &Bf16DotPeakLoopAvx512);
  }
  if (isa == Isa::kAvx512 && AmxUsable()) {
    out.amx_bf16_gflops = PeakOn(pool, n, repeats, &AmxBf16PeakLoop);
  }
  if (isa == Isa::kAvx512 && GetCpuFeatures().avx512vnni) {
    out.int8_dot_gops = PeakOn(pool, n, repeats, &Int8DotPeakLoopAvx512);
    out.int8_isa = "avx512-vnni vpdpbusd zmm";
  } else if (isa != Isa::kScalar) {
    out.int8_dot_gops = PeakOn(pool, n, repeats, &Int8DotPeakLoopAvx2);
    out.int8_isa = "avx2 vpmaddubsw + vpmaddwd ymm";
  }
  if (isa != Isa::kScalar) out.matmul_l1_gflops = PeakOn(pool, n, repeats, &MatmulL1Loop);
  return out;
}

void PeakOperandsBf16(uint16_t* v, int64_t n, int scale_exp, uint32_t seed) {
  uint32_t state = seed * 2654435761u + 0x2545f491u;
  for (int64_t i = 0; i < n; ++i) {
    state = state * 1664525u + 1013904223u;  // an LCG: its high bits are the usable ones
    const uint32_t sign = state >> 31, octaves_down = (state >> 29) & 3u;
    const uint32_t mantissa = (state >> 22) & 0x7fu;
    const auto exponent = static_cast<uint32_t>(127 + scale_exp - static_cast<int>(octaves_down));
    v[i] = static_cast<uint16_t>(sign << 15 | exponent << 7 | mantissa);
  }
}

double MatmulL1Loop(int64_t iterations) {
  // Rows: the height of the ISA's prefill tile (AVX2 6, AVX-512 8, AMX two tiles of 16).
  constexpr int64_t kMaxM = 32, kN = 32, kK = 256;
  // Packed once for the active ISA (as the model's weights are); bf16 values and a bf16-exact
  // x, so that an AVX-512 BF16 build takes its dot-product path as the model would.
  static const LinearWeight w = [] {
    LinearWeight lw;
    lw.dtype = DType::kBF16;
    lw.out_features = kN;
    lw.in_features = kK;
    // Values of several magnitudes: a constant weight would be found ternary (ternary.h) and
    // packed as codes, and this checks the bf16 tile.
    auto data = std::make_shared<std::vector<uint16_t>>(kN * kK);
    for (size_t i = 0; i < data->size(); ++i) (*data)[i] = static_cast<uint16_t>(0x3c00 + i % 7);
    lw.data = data->data();
    lw.owner = data;
    PrepareLinear(&lw);
    return lw;
  }();
  const PackedWeight* pw = Packed(w);
  if (pw == nullptr) return 0;
  const bool avx2 = pw->layout == PackedLayout::kPanel16Bf16;
  const bool amx = !avx2 && MatMulUsesAmx();
  const int64_t rows = avx2 ? 6 : amx ? 32 : 8;
  alignas(64) float x[kMaxM * kK], y[kMaxM * kN];
  std::fill(std::begin(x), std::end(x), 0.5f);
  // x prepared once, as MatMulGroup does once per call for all its tasks.
  uint32_t pairs[kMaxM * PairsStride(kK)];
  uint8_t dot[kMaxM];
  if (!avx2) PrepareXAvx512(x, kK, kK, 0, rows, dot, pairs);
  // As many FMAs as the register-only loop does in `iterations` (12 vector FMAs each).
  const int64_t calls = std::max<int64_t>(1, iterations * 12 * 8 / (rows * kN * kK));
  for (int64_t c = 0; c < calls; ++c) {
    if (avx2) {
      MatMulPanelsAvx2(x, rows, *pw, 0, pw->num_panels, y, kN);  // x as [k][6]: any values do
    } else if (amx) {
      MatMulPanelsAmx(pairs, PairsStride(kK), rows, *pw, 0, pw->num_panels, y, kN, Round::kNone);
    } else {
      MatMulPanelsAvx512({x, kK, dot, pairs}, rows, *pw, 0, pw->num_panels, y, kN, Round::kNone);
    }
  }
  volatile float sink = y[0];
  (void)sink;
  return static_cast<double>(calls) * 2 * rows * kN * kK;
}

}  // namespace cpm::kernels
