// The Qwen3.5 hybrid's small per-token ops at MiniCPM-V-4.6's shapes (conv_dim 6144, kernel 4;
// 16 value heads of 128; 16 key heads of 128; attention output 8 × 256), one thread: a decode
// step of `rows` sequences (one token each) or a prefill chunk of `rows` tokens.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kernels/conv1d.h"
#include "kernels/gated_delta_rule.h"
#include "kernels/gated_norm.h"

namespace cpm::kernels {
namespace {

constexpr int64_t kConvDim = 6144, kKernel = 4, kHeads = 16, kHeadDim = 128, kKeyDim = 2048;
constexpr int64_t kAttnDim = 8 * 256;

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng);
  return v;
}

// Args: sequences, tokens per sequence. One call per (sequence, block of 512 channels), as the
// layer's tasks.
void BM_CausalConv1dSilu(benchmark::State& state) {
  const int64_t seqs = state.range(0), t = state.range(1), block = 512;
  const auto x = Random(seqs * t * kConvDim, 1);
  const auto w = PackConvTaps(Random(kConvDim * kKernel, 2), kConvDim, kKernel);
  std::vector<float> states(seqs * (kKernel - 1) * kConvDim, 0.5f), y(x.size());
  for (auto _ : state) {
    for (int64_t s = 0; s < seqs; ++s) {
      for (int64_t c0 = 0; c0 < kConvDim; c0 += block) {
        CausalConv1dSilu(x.data() + s * t * kConvDim, kConvDim, t, kConvDim, c0, c0 + block,
                         w.data(), kKernel, states.data() + s * (kKernel - 1) * kConvDim,
                         y.data() + s * t * kConvDim, kConvDim, Round::kBf16);
      }
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * seqs * t);
}
BENCHMARK(BM_CausalConv1dSilu)->ArgNames({"seqs", "t"})->Args({16, 1})->Args({1, 256});

// Args: token rows. Gated DeltaNet's output norm over every (token, value head).
void BM_GatedRmsNorm(benchmark::State& state) {
  const int64_t rows = state.range(0) * kHeads;
  const auto x = Random(rows * kHeadDim, 3), z = Random(rows * kHeadDim, 4),
             w = Random(kHeadDim, 5);
  std::vector<float> y(x.size());
  for (auto _ : state) {
    GatedRmsNorm(x.data(), kHeadDim, z.data(), kHeadDim, w.data(), y.data(), kHeadDim, rows,
                 kHeadDim, 1e-6f, Round::kBf16);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_GatedRmsNorm)->ArgName("tokens")->Arg(16)->Arg(256);

// Args: token rows. q and k of every key head, as the layer normalises them in place.
void BM_L2NormHeads(benchmark::State& state) {
  const int64_t rows = state.range(0);
  auto x = Random(rows * kConvDim, 6);
  for (auto _ : state) {
    L2NormHeads(x.data(), kConvDim, rows, kHeads, kHeadDim, 1e-6f, 1.0f);
    L2NormHeads(x.data() + kKeyDim, kConvDim, rows, kHeads, kHeadDim, 1e-6f, 1.0f);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * rows);
}
BENCHMARK(BM_L2NormHeads)->ArgName("tokens")->Arg(16)->Arg(256);

// Args: token rows. Gated attention's output gate (the gate is the second half of each q row).
void BM_SigmoidMul(benchmark::State& state) {
  const int64_t rows = state.range(0);
  auto x = Random(rows * kAttnDim, 7);
  const auto g = Random(rows * 2 * kAttnDim, 8);
  for (auto _ : state) {
    SigmoidMul(x.data(), kAttnDim, g.data() + kAttnDim, 2 * kAttnDim, rows, kAttnDim,
               Round::kBf16);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * rows);
}
BENCHMARK(BM_SigmoidMul)->ArgName("tokens")->Arg(16)->Arg(256);

// Args: tokens of one head's prefill chunk, chunk size. The chunked gated delta rule at dk = dv
// = 128 (the layer runs chunks of GatedDeltaNet::kChunk = 16; 64 is HF's torch path's), with
// the decays and β of a real layer's range; items = tokens.
void BM_GatedDeltaRuleChunked(benchmark::State& state) {
  const int64_t t = state.range(0), d = kHeadDim, chunk = state.range(1);
  auto q = Random(t * d, 9), k = Random(t * d, 10);
  const auto v = Random(t * d, 11);
  for (auto* x : {&q, &k}) {  // L2-normalised rows, as the layer feeds them
    L2NormHeads(x->data(), d, t, 1, d, 1e-6f, 1.0f);
  }
  std::vector<float> g(t), beta(t), o(t * d), S(d * d, 0.0f);
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (int64_t i = 0; i < t; ++i) g[i] = -0.3f * u(rng), beta[i] = u(rng);
  std::vector<float> scratch(GatedDeltaRuleChunkedScratch(chunk, d, d));
  GdnHead h{q.data(), k.data(), d, v.data(), d, g.data(), beta.data(), 1, o.data(), d, S.data()};
  for (auto _ : state) {
    GatedDeltaRuleChunked(h, t, d, d, chunk, scratch.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * t);
}
BENCHMARK(BM_GatedDeltaRuleChunked)
    ->ArgNames({"tokens", "chunk"})
    ->Args({256, 16})
    ->Args({256, 32})
    ->Args({256, 64});

// Args: sequences, layers. A decode step's recurrent updates (one token per sequence) for every
// value head of `layers` Gated DeltaNet layers, each head's [128, 128] f32 state its own 64 KiB:
// MiniCPM-V-4.6 has 18 such layers, so at 16 sequences 288 MiB of state is read and written per
// step, far more than any cache. bytes = state read + written.
void BM_GatedDeltaRuleDecode(benchmark::State& state) {
  const int64_t seqs = state.range(0), layers = state.range(1), d = kHeadDim;
  const int64_t heads = seqs * layers * kHeads;
  auto q = Random(seqs * kKeyDim, 13), k = Random(seqs * kKeyDim, 14);
  const auto v = Random(seqs * kHeads * d, 15);
  for (auto* x : {&q, &k}) L2NormHeads(x->data(), kKeyDim, seqs, kHeads, d, 1e-6f, 1.0f);
  std::vector<float> g(seqs * kHeads, -0.05f), beta(seqs * kHeads, 0.5f), o(seqs * kHeads * d);
  std::vector<float> states(heads * d * d, 0.01f);
  for (auto _ : state) {
    for (int64_t l = 0; l < layers; ++l) {
      for (int64_t s = 0; s < seqs; ++s) {
        for (int64_t h = 0; h < kHeads; ++h) {
          const int64_t sh = s * kHeads + h;
          GdnHead head{q.data() + s * kKeyDim + h * d, k.data() + s * kKeyDim + h * d, kKeyDim,
                       v.data() + sh * d, d, g.data() + sh, beta.data() + sh, 1,
                       o.data() + sh * d, d, states.data() + ((l * seqs + s) * kHeads + h) * d * d};
          GatedDeltaRuleRecurrent(head, 1, d, d);
        }
      }
    }
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * heads);
  state.SetBytesProcessed(state.iterations() * heads * 2 * d * d * int64_t{sizeof(float)});
}
BENCHMARK(BM_GatedDeltaRuleDecode)->ArgNames({"seqs", "layers"})->Args({1, 1})->Args({16, 18});

}  // namespace
}  // namespace cpm::kernels
