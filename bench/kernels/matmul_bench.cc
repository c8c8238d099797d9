// Matmul at MiniCPM4-0.5B's shapes, m = 1 (decode, memory-bound) to 512 (prefill, compute-bound).
// Each call uses the next of several copies of the weight totalling > 512 MiB, so weights come
// from DRAM as in a real step (a Xeon VM's 300 MiB L3 held the 128 MiB this once took);
// counters report weight GB/s and GFLOP/s.
// Times and threads: bench_threads.h.
#include <benchmark/benchmark.h>
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>
#include <vector>

#include "base/aligned_buffer.h"
#include "bench_threads.h"
#include "kernels/activation.h"
#include "kernels/matmul.h"
#include "kernels/q8.h"
#include "kernels/rmsnorm.h"
#include "kernels/ternary.h"
#include "model/row_ranges.h"
#include "tensor/dtype.h"

namespace cpm::kernels {
namespace {

struct Copies {
  std::vector<std::vector<uint16_t>> data;
  std::vector<LinearWeight> ws;
};

// `ternary`: BitCPM4-style weights (a scale per row), which PrepareLinear packs as 2-bit codes;
// copies then total > 512 MiB of codes. `quant`: packed as that (Q8_0: > 512 MiB of it).
Copies MakeCopies(int64_t n, int64_t k, bool pack, bool ternary = false,
                  WeightQuant quant = WeightQuant::kNone) {
  Copies c;
  const int64_t bytes = ternary                        ? n * k / 4
                        : quant == WeightQuant::kQ8_0 ? Q8Bytes(n, k)
                                                       : n * k * 2;
  const int64_t count = std::max<int64_t>(1, (int64_t{512} << 20) / bytes + 1);
  std::mt19937 rng(1);
  for (int64_t i = 0; i < count; ++i) {
    c.data.emplace_back(n * k);
    for (auto& v : c.data.back()) v = static_cast<uint16_t>(0x3c00 + (rng() & 0x3ff));
    if (ternary) FakeQuantizeTernary(c.data.back().data(), n, k, k, false);
  }
  for (auto& d : c.data) {
    LinearWeight w;
    w.dtype = DType::kBF16;
    w.out_features = n;
    w.in_features = k;
    w.data = d.data();
    if (pack) PrepareLinear(&w, Source::kKeep, quant);
    c.ws.push_back(w);
  }
  if (pack) c.data.clear();  // the packed copy is all the kernel reads
  return c;
}

// m rows through the copies in turn; GB/s counts `weight_bytes` per call.
void RunCopies(benchmark::State& state, int64_t m, const Copies& c, double weight_bytes) {
  const int64_t n = c.ws[0].out_features, k = c.ws[0].in_features;
  ThreadPool pool(BenchThreads());
  // bf16 values, as the model's activations: AVX-512 BF16 then runs its dot products.
  std::vector<float> x(m * k, RoundBf16(0.01f)), y(m * n);
  size_t i = 0;
  for (auto _ : state) {
    MatMul(x.data(), k, m, c.ws[i], y.data(), n, pool);
    i = (i + 1) % c.ws.size();
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["GB/s"] =
      benchmark::Counter(iters * weight_bytes / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(iters * 2.0 * m * n * k / 1e9, benchmark::Counter::kIsRate);
}

// Args: m, n, k, packed.
void BM_MatMul(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  RunCopies(state, m, MakeCopies(n, k, state.range(3) != 0), 2.0 * n * k);
}

// The linear layers of MiniCPM4-0.5B (hidden 1024, 16 q heads / 2 kv heads of 64, FFN 4096,
// vocab 73448 tied) at m rows. The LM head runs for decoded tokens only, so not at m = 512.
void ModelArgs(benchmark::internal::Benchmark* b) {
  for (int64_t m : {1, 4, 16, 64, 512}) {
    b->Args({m, 1024, 1024, 1});  // q_proj / o_proj
    b->Args({m, 128, 1024, 1});   // k_proj / v_proj
    b->Args({m, 4096, 1024, 1});  // gate_proj / up_proj
    b->Args({m, 1024, 4096, 1});  // down_proj
    if (m <= 64) b->Args({m, 73448, 1024, 1});  // tied LM head
  }
  b->Args({1, 4096, 1024, 0});  // unpacked fallback
}
BENCHMARK(BM_MatMul)->ArgNames({"m", "n", "k", "packed"})->Apply(ModelArgs)->MinTime(0.3);

// Batched decode's row counts, 1 to 8, at gate_proj's shape: each is bandwidth-bound on these
// models, so every m should stream near m = 1's GB/s.
BENCHMARK(BM_MatMul)
    ->Name("BM_MatMulDecodeRows")
    ->ArgNames({"m", "n", "k", "packed"})
    ->ArgsProduct({{1, 2, 3, 4, 5, 6, 7, 8}, {4096}, {1024}, {1}})
    ->MinTime(0.3);

// BitCPM4's layers (ternary, 2-bit codes): GB/s counts the codes the kernel streams.
void BM_MatMulTernary(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  RunCopies(state, m, MakeCopies(n, k, true, true), n * k / 4.0);
}
BENCHMARK(BM_MatMulTernary)
    ->ArgNames({"m", "n", "k"})
    ->ArgsProduct({{1, 2, 3, 4, 5, 6, 16, 512}, {4096}, {1024}})
    ->Args({1, 1024, 4096})
    ->MinTime(0.3);

// Q8_0 weights (--quantization q8_0) at MiniCPM4's q/o and gate/up shapes and the head: GB/s
// counts the int8 values and scales the kernel streams.
void BM_MatMulQ8(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  RunCopies(state, m, MakeCopies(n, k, true, false, WeightQuant::kQ8_0), double(Q8Bytes(n, k)));
}
BENCHMARK(BM_MatMulQ8)
    ->ArgNames({"m", "n", "k"})
    ->ArgsProduct({{1, 4, 16}, {1024, 4096}, {1024}})
    ->Args({1, 1024, 4096})
    ->Args({1, 73448, 1024})
    ->Args({512, 4096, 1024})
    ->MinTime(0.3);

// Q8_0 against bf16 at one shape, call by call: each iteration times a bf16 and a Q8_0 call on
// the same x, both weights cold (their copies in turn). On a shared host whose bandwidth drifts
// by ±30% within minutes, the median of these paired ratios resolves a few % where separate
// runs cannot. Counters: each format's median GB/s and "q8/bf16", the median ratio of the two
// calls' times (the bytes alone would give Q8Bytes / bf16 bytes ≈ 0.53).
void BM_Q8OverBf16(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  const Copies bf16 = MakeCopies(n, k, true);
  const Copies q8 = MakeCopies(n, k, true, false, WeightQuant::kQ8_0);
  ThreadPool pool(BenchThreads());
  std::vector<float> x(m * k, RoundBf16(0.01f)), y(m * n);
  std::vector<double> tb, tq, ratio;
  const auto timed = [&](const LinearWeight& w) {
    const auto t0 = std::chrono::steady_clock::now();
    MatMul(x.data(), k, m, w, y.data(), n, pool);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  size_t i = 0, j = 0;
  for (auto _ : state) {
    // Each format first in turn: the second call of a pair starts with the pool's threads
    // already awake, and its ratio moved by ~7% with the order.
    if (tb.size() % 2 == 0) {
      tb.push_back(timed(bf16.ws[i]));
      tq.push_back(timed(q8.ws[j]));
    } else {
      tq.push_back(timed(q8.ws[j]));
      tb.push_back(timed(bf16.ws[i]));
    }
    ratio.push_back(tq.back() / tb.back());
    i = (i + 1) % bf16.ws.size();
    j = (j + 1) % q8.ws.size();
  }
  const auto median = [](std::vector<double> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return v[v.size() / 2];
  };
  state.counters["bf16 GB/s"] = 2.0 * n * k / median(tb) / 1e9;
  state.counters["q8 GB/s"] = static_cast<double>(Q8Bytes(n, k)) / median(tq) / 1e9;
  state.counters["q8/bf16"] = median(ratio);
}
BENCHMARK(BM_Q8OverBf16)
    ->ArgNames({"m", "n", "k"})
    ->ArgsProduct({{1, 4, 16}, {4096}, {1024}})
    ->Args({1, 73448, 1024})
    ->MinTime(1.0);

// A bf16 weight [n, k] packed for the active ISA. Not one value throughout: a constant weight
// is ternary and would run the 2-bit kernels.
struct BenchWeight {
  std::vector<uint16_t> data;
  LinearWeight w;
  BenchWeight(int64_t n, int64_t k) : data(n * k) {
    for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint16_t>(0x3c00 + i % 7);
    w.dtype = DType::kBF16;
    w.out_features = n;
    w.in_features = k;
    w.data = data.data();
    PrepareLinear(&w);
  }
  BenchWeight(const BenchWeight&) = delete;  // w points into data
  BenchWeight& operator=(const BenchWeight&) = delete;
};

void BM_MatMulPrefill(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  ThreadPool pool(BenchThreads());
  const BenchWeight bw(n, k);
  const int64_t xs = k + (std::getenv("CPM_BENCH_PAD") ? 16 : 0);
  std::vector<float> x(m * xs, RoundBf16(0.01f)), y(m * n);
  for (auto _ : state) MatMul(x.data(), xs, m, bw.w, y.data(), n, pool);
  state.counters["GFLOP/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * 2.0 * m * n * k / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MatMulPrefill)
    ->Args({512, 4096, 1024})
    ->Args({512, 1024, 4096})
    ->Args({512, 1024, 1024})
    ->Args({128, 4096, 1024})
    ->Args({6, 256, 256})
    ->Args({60, 256, 256})
    ->Args({16, 256, 256})
    ->Args({16, 1024, 1024})
    ->Args({1024, 72, 1024})  // the V-4.6 vision tower's P·V per head (3 panels)
    // x past L2 (matmul_amx.cc's blocking): a 2048-token prefill step's gate and down
    // projections, and the V-4.6 vision tower's MLP over a slice's 1024 patches.
    ->Args({2048, 4096, 1024})
    ->Args({2048, 1024, 4096})
    ->Args({1024, 4304, 1152})
    ->Args({1024, 1152, 4304})
    ->MinTime(0.5);

// Every cache line of [p, p + bytes) written back and dropped from the caches.
void FlushLines(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t i = 0; i < bytes; i += 64) _mm_clflush(c + i);
  _mm_mfence();
}

// The o and down projections of a 512-token prefill as the models run them: rounded to bf16,
// into f32 rows (bf16:0) or bf16 rows (bf16:1, where MatMulWritesBf16Rows). As in a forward,
// whose layer streams ~25 MB of weights between two writes of the same output, y starts out of
// the caches (flushed before each call, untimed), so that each line written is fetched first.
void BM_MatMulPrefillRounded(benchmark::State& state) {
  const int64_t m = 512, n = state.range(0), k = state.range(1);
  const bool bf16_rows = state.range(2) != 0;
  ThreadPool pool(BenchThreads());
  const BenchWeight bw(n, k);
  const LinearWeight& w = bw.w;
  const LinearWeight* ws[] = {&w};
  if (bf16_rows && !MatMulWritesBf16Rows(ws)) {
    return state.SkipWithError("bf16 rows are not written by this CPU's kernel");
  }
  std::vector<float> x(m * k, RoundBf16(0.01f)), y(m * n);
  std::vector<uint16_t> y16(m * n);
  for (auto _ : state) {
    state.PauseTiming();
    if (bf16_rows) FlushLines(y16.data(), y16.size() * sizeof(uint16_t));
    else FlushLines(y.data(), y.size() * sizeof(float));
    state.ResumeTiming();
    if (bf16_rows) MatMul(x.data(), k, m, w, Bf16Rows{y16.data(), n}, pool);
    else MatMul(x.data(), k, m, w, y.data(), n, pool, Round::kBf16);
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * 2.0 * m * n * k / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_MatMulPrefillRounded)
    ->ArgNames({"n", "k", "bf16"})
    ->ArgsProduct({{1024}, {1024, 4096}, {0, 1}})
    ->MinTime(0.5);

// MiniCPM4-0.5B's gated MLP input half, silu(x · gateᵀ) ⊙ (x · upᵀ), at m rows: fused
// (MatMulSiluMul) against the group and a SiluMul pass over its two [m, 4096] products, split
// over the pool's rows as the models did before the fusion.
void BM_GateUpSiluMul(benchmark::State& state) {
  const int64_t m = state.range(0), n = 4096, k = 1024;
  const bool fused = state.range(1) != 0;
  const Copies gates = MakeCopies(n, k, true), ups = MakeCopies(n, k, true);
  ThreadPool pool(BenchThreads());
  std::vector<float> x(m * k, RoundBf16(0.01f)), g(m * n), u(m * n);
  size_t i = 0;
  for (auto _ : state) {
    const LinearWeight &gate = gates.ws[i], &up = ups.ws[i];
    if (fused) {
      MatMulSiluMul(x.data(), k, m, gate, up, g.data(), n, pool, Round::kBf16);
    } else {
      const LinearWeight* ws[] = {&gate, &up};
      float* ys[] = {g.data(), u.data()};
      const int64_t strides[] = {n, n};
      MatMulGroup(x.data(), k, m, ws, ys, strides, pool, Round::kBf16);
      ForRowRanges(pool, m, n, [&](int64_t r0, int64_t r1) {  // as the models ran it
        SiluMul(g.data() + r0 * n, n, u.data() + r0 * n, n, g.data() + r0 * n, n, r1 - r0, n,
                Round::kBf16);
      });
    }
    i = (i + 1) % gates.ws.size();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * 2.0 * 2 * m * n * k / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_GateUpSiluMul)
    ->ArgNames({"m", "fused"})
    ->ArgsProduct({{1, 4, 16, 512}, {0, 1}})
    ->MinTime(0.3);

// MiniCPM4-0.5B's whole gated MLP at m rows, rounded as the bf16 model runs it: GatedMlp (the
// activation handed to the down projection as bf16 pairs where it runs on them) against
// MatMulSiluMul into an f32 activation and a MatMul over it.
void BM_GatedMlp(benchmark::State& state) {
  const int64_t m = state.range(0), n = 4096, k = 1024;
  const bool fused = state.range(1) != 0;
  const Copies gates = MakeCopies(n, k, true), ups = MakeCopies(n, k, true),
               downs = MakeCopies(k, n, true);
  ThreadPool pool(BenchThreads());
  std::vector<float> x(m * k, RoundBf16(0.01f)), act(m * n), out(m * k);
  size_t i = 0;
  for (auto _ : state) {
    const LinearWeight &gate = gates.ws[i], &up = ups.ws[i], &down = downs.ws[i];
    if (fused) {
      GatedMlp(x.data(), k, m, gate, up, down, act.data(), n, out.data(), k, pool, Round::kBf16);
    } else {
      MatMulSiluMul(x.data(), k, m, gate, up, act.data(), n, pool, Round::kBf16);
      MatMul(act.data(), n, m, down, out.data(), k, pool, Round::kBf16);
    }
    i = (i + 1) % gates.ws.size();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * 2.0 * 3 * m * n * k / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_GatedMlp)->ArgNames({"m", "fused"})->ArgsProduct({{16, 512}, {0, 1}})->MinTime(0.5);

// MiniCPM4-0.5B's norms into the matmuls that read their output, at m rows, as the bf16 model
// runs them: the input norm and the q/k/v group, the post-attention norm and the gated MLP; x as
// f32 rows, which each matmul call packs into bf16 pairs (pairs = 0), or written by the norm as
// those pairs (RmsNormToPairs, MatMulGroup and GatedMlp on PairRows: pairs = 1).
void BM_NormIntoMatmuls(benchmark::State& state) {
  const int64_t m = state.range(0), hidden = 1024, kvd = 128, ffn = 4096;
  const bool pairs = state.range(1) != 0;
  const Copies qs = MakeCopies(hidden, hidden, true), ks = MakeCopies(kvd, hidden, true),
               vs = MakeCopies(kvd, hidden, true), gates = MakeCopies(ffn, hidden, true),
               ups = MakeCopies(ffn, hidden, true), downs = MakeCopies(hidden, ffn, true);
  const LinearWeight* all[] = {&qs.ws[0], &gates.ws[0], &downs.ws[0]};
  if (pairs && !MatMulTakesPairRows(all)) {
    state.SkipWithError("the matmuls take no pair rows on this CPU");
    return;
  }
  ThreadPool pool(BenchThreads());
  std::vector<float> h(m * hidden, 0.5f), norm(hidden, 1.0f), x(m * hidden), q(m * hidden),
      k(m * kvd), v(m * kvd), act(m * ffn), out(m * hidden);
  for (int64_t i = 0; i < m * hidden; ++i) h[i] = RoundBf16(0.01f * static_cast<float>(i % 97));
  const int64_t ps = PairRowsStride(hidden);
  AlignedBuffer pair_buffer(static_cast<size_t>(m * ps) * sizeof(uint32_t));  // as the model's
  uint32_t* x_pairs = pair_buffer.as<uint32_t>();
  RmsNormParams params{1e-5f, 0.0f, true, Round::kBf16};
  const auto norm_rows = [&] {
    ForRowRanges(pool, m, hidden, [&](int64_t r0, int64_t r1) {
      if (pairs) {
        RmsNormToPairs(h.data() + r0 * hidden, hidden, norm.data(), x_pairs + r0 * ps, ps,
                       r1 - r0, hidden, params);
      } else {
        RmsNorm(h.data() + r0 * hidden, hidden, norm.data(), x.data() + r0 * hidden, hidden,
                r1 - r0, hidden, params);
      }
    });
  };
  size_t i = 0, j = 0;
  for (auto _ : state) {
    const LinearWeight* ws[] = {&qs.ws[i], &ks.ws[i], &vs.ws[i]};
    float* ys[] = {q.data(), k.data(), v.data()};
    const int64_t strides[] = {hidden, kvd, kvd};
    norm_rows();
    if (pairs) {
      MatMulGroup(PairRows{x_pairs, ps}, m, ws, ys, strides, pool, Round::kBf16);
    } else {
      MatMulGroup(x.data(), hidden, m, ws, ys, strides, pool, Round::kBf16);
    }
    norm_rows();
    const LinearWeight &gate = gates.ws[j], &up = ups.ws[j], &down = downs.ws[j];
    if (pairs) {
      GatedMlp(PairRows{x_pairs, ps}, m, gate, up, down, out.data(), hidden, pool,
               Round::kBf16);
    } else {
      GatedMlp(x.data(), hidden, m, gate, up, down, act.data(), ffn, out.data(), hidden, pool,
               Round::kBf16);
    }
    i = (i + 1) % qs.ws.size();
    j = (j + 1) % gates.ws.size();
  }
}
BENCHMARK(BM_NormIntoMatmuls)
    ->ArgNames({"m", "pairs"})
    ->ArgsProduct({{16, 512}, {0, 1}})
    ->MinTime(0.5);

// Every matmul of one MiniCPM4-0.5B decode step at m rows, in the model's order: per layer
// q/k/v as one group, o_proj, the gated MLP (GatedMlp), then the tied head; 868 MB of bf16
// weights, far more than the LLC, so each step streams them from DRAM as the model does. Unlike
// one shape at a time, this includes what a step's short calls cost: the q/k/v and o calls'
// few tasks, each starting cold weight streams, and the gaps between calls. GB/s counts the
// step's weight bytes (the probe in `cpmserve bench` is its bound); the model's step adds
// attention, norms and RoPE (~3% at batch 1).
struct StepWeights {
  struct Layer {
    LinearWeight q, k, v, o, gate, up, down;
  };
  std::vector<Layer> layers;
  LinearWeight head;
  double bytes = 0;
};

const StepWeights& MiniCpm4StepWeights() {
  static const StepWeights* step = [] {
    auto* s = new StepWeights;
    std::mt19937 rng(1);
    const auto make = [&](int64_t n, int64_t k) {
      std::vector<uint16_t> data(n * k);
      for (auto& v : data) v = static_cast<uint16_t>(0x3c00 + (rng() & 0x3ff));
      LinearWeight w;
      w.dtype = DType::kBF16;
      w.out_features = n;
      w.in_features = k;
      w.data = data.data();
      PrepareLinear(&w, Source::kDrop);  // `data` is freed on return: only the packing stays
      s->bytes += 2.0 * n * k;
      return w;
    };
    for (int l = 0; l < 24; ++l) {
      s->layers.push_back({make(1024, 1024), make(128, 1024), make(128, 1024), make(1024, 1024),
                           make(4096, 1024), make(4096, 1024), make(1024, 4096)});
    }
    s->head = make(73448, 1024);
    return s;
  }();
  return *step;
}

void BM_DecodeStepMatmuls(benchmark::State& state) {
  const int64_t m = state.range(0), hidden = 1024, ffn = 4096, qkv = 1280;
  const StepWeights& w = MiniCpm4StepWeights();
  ThreadPool pool(BenchThreads());
  std::vector<float> x(m * hidden, RoundBf16(0.01f)), y(m * w.head.out_features),
      act(m * ffn), out(m * hidden);
  for (auto _ : state) {
    for (const StepWeights::Layer& l : w.layers) {
      const LinearWeight* ws[] = {&l.q, &l.k, &l.v};
      float* ys[] = {y.data(), y.data() + 1024, y.data() + 1152};
      const int64_t strides[] = {qkv, qkv, qkv};
      MatMulGroup(x.data(), hidden, m, ws, ys, strides, pool, Round::kBf16);
      MatMul(x.data(), hidden, m, l.o, out.data(), hidden, pool, Round::kBf16);
      GatedMlp(x.data(), hidden, m, l.gate, l.up, l.down, act.data(), ffn, out.data(), hidden,
               pool, Round::kBf16);
    }
    MatMul(x.data(), hidden, m, w.head, y.data(), w.head.out_features, pool);
  }
  const double iters = static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(iters * w.bytes / 1e9, benchmark::Counter::kIsRate);
  state.counters["GFLOP/s"] =
      benchmark::Counter(iters * m * w.bytes / 1e9, benchmark::Counter::kIsRate);  // 2 FLOP/weight
}
BENCHMARK(BM_DecodeStepMatmuls)->ArgName("m")->Arg(1)->Arg(4)->Arg(16)->MinTime(1.0);

}  // namespace
}  // namespace cpm::kernels
