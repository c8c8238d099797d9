// Measures the limits the kernels are judged against: memory read bandwidth (streaming a
// buffer much larger than the last-level cache) and the register-only FMA / bf16-dot peak,
// each on all threads of a pool. Used by `cpmserve bench` to print results as fractions.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"

namespace cpm::kernels {

struct MachineLimits {
  // Streaming reads: the best over software-prefetch distances (kReadPrefetchDistances). A
  // bound that the decode kernels (which prefetch their weights) could beat would be no bound:
  // on a Zen 5 the plain read reached 70 GB/s, the one prefetching 1 KiB ahead 75-81 and the
  // batch-1 matmul 74-82.
  double read_gbps = 0;             // best multi-threaded streaming read, GB/s (1e9 B/s)
  double read_gbps_1t = 0;          // the same on one thread
  int64_t read_prefetch_bytes = 0;  // the distance of read_gbps: bytes ahead of each stream
  double f32_fma_gflops = 0;     // f32 FMA peak over all threads (2 FLOPs per lane per FMA)
  double f32_fma_gflops_1t = 0;
  double bf16_dot_gflops = 0;    // vdpbf16ps peak (4 FLOPs per f32 lane); 0 without AVX512_BF16
  double amx_bf16_gflops = 0;    // TDPBF16PS peak (16384 FLOPs per tile product); 0 without AMX
  // Int8 dot products as the Q8_0 kernels (q8.h) do them: AVX-512 VNNI vpdpbusd (8 ops per
  // 32-bit lane: four u8 × s8 products and their sum), else AVX2's vpmaddubsw + vpmaddwd +
  // vpaddd; GOP/s counting a product and its add as two ops, as FLOPs are. 0 for scalar.
  double int8_dot_gops = 0;
  const char* int8_isa = "";
  const char* fma_isa = "";      // the instructions the peak was measured with
  // The matmul kernel of the active ISA on a problem that stays in L1 (6 rows × 32 columns ×
  // k 256, bf16 weights), over all threads: what the core gives the kernel's instruction mix
  // (loads, broadcasts, widening, FMAs) rather than FMAs alone. On a host whose other
  // hyperthread is busy the two differ, and that gap is not the cache blocking's. 0 for scalar.
  double matmul_l1_gflops = 0;
};

// `buffer_bytes` should be ≥ 8× the LLC. Takes about 2-3 s.
MachineLimits MeasureMachineLimits(ThreadPool& pool, int64_t buffer_bytes = int64_t{1} << 30,
                                   int repeats = 5);

// Register-only loops (internal): FLOPs done by one call on the calling thread.
double FmaPeakLoopAvx2(int64_t iterations);
double FmaPeakLoopAvx512(int64_t iterations);
double Bf16DotPeakLoopAvx512(int64_t iterations);
double AmxBf16PeakLoop(int64_t iterations);  // needs AmxUsable()
double Int8DotPeakLoopAvx512(int64_t iterations);  // vpdpbusd: needs AVX512_VNNI
double Int8DotPeakLoopAvx2(int64_t iterations);
// bf16 operands for a peak loop whose speed depends on its data: `n` values with a model's
// variety (signs mixed, 7-bit mantissas spread, exponents in [scale_exp - 3, scale_exp]), from a
// fixed generator seeded by `seed`. TDPBF16PS ran ~20% faster on zeroed tiles than on any
// non-zero operands (a standalone loop on one thread of a Xeon with AMX, four interleaved
// rounds: zeros 3.1-3.5 TFLOP/s; a repeated 0x3c3c, 1.0 or varied values 2.4-2.9), so a peak
// measured on zeros is one that no matmul on real weights approaches.
void PeakOperandsBf16(uint16_t* v, int64_t n, int scale_exp, uint32_t seed);
// The in-L1 matmul loop behind matmul_l1_gflops.
double MatmulL1Loop(int64_t iterations);
// Software-prefetch distances the read is measured at (0: the hardware prefetchers alone).
inline constexpr int64_t kReadPrefetchDistances[] = {0, 512, 1024, 2048};
// Streams [p, p + bytes / 512 · 512) as four streams, each prefetched `prefetch_bytes` ahead
// (0: not), and returns the XOR of its 64-bit words. `run_bytes` 0: the streams a quarter of the
// range apart (the probe). Else (a multiple of 128) the range is read in groups of four runs of
// run_bytes, the four streams one group's runs at a time, and covers bytes / (4 · run_bytes)
// groups: a four-panel decode tile's pattern, its panels run_bytes long (64 KiB at k = 1024).
uint64_t StreamReadAvx2(const void* p, int64_t bytes, int64_t prefetch_bytes,
                        int64_t run_bytes = 0);

}  // namespace cpm::kernels
