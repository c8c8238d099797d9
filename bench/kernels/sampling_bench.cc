// The vocabulary-wide sampling ops over one row of MiniCPM4-0.5B's 73448 logits, at each ISA the
// CPU has: LogSoftmax (every sampled token of a request that asks for logprobs, and every
// position of an evaluation dump or of prompt_logprobs), CountAtLeast (a prompt token's rank),
// ExpScaled (sampling with a temperature) and TopK (top-k / top-p candidates); and a whole
// sampled token at MiniCPM4's generation_config defaults (SampleToken, temperature 0.8, top-p
// 0.8) over a trained model's row and over a flat one as dummy weights give, and at temperature
// alone (MiniCPM-V-4.6's defaults). One thread, as the sampler runs them.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/sampling_ops.h"
#include "sampling/sampler.h"

namespace cpm::kernels {
namespace {

using cpm::Rng;
using cpm::SampleToken;
using cpm::SamplingParams;

constexpr int64_t kVocab = 73448;

// Logits spread as a language model's: most far below the few largest (sigma 3); or nearly
// flat, as dummy weights make them (sigma 0.5: top-p's set spans most of the vocabulary).
std::vector<float> Logits(float sigma = 3.0f, int64_t n = kVocab) {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

// The ISA of a benchmark's first argument (cpu_features.h Isa) while it runs, the CPU's best
// again afterwards; `ok()` false (the benchmark skipped) where the CPU lacks it.
class IsaScope {
 public:
  explicit IsaScope(benchmark::State& state) : isa_(static_cast<Isa>(state.range(0))) {
    if (!ok()) {
      state.SkipWithError("ISA not available");
      return;
    }
    SetActiveIsa(isa_);
    state.SetLabel(ToString(isa_));
  }
  ~IsaScope() { SetActiveIsa(BestIsa()); }
  bool ok() const { return isa_ <= BestIsa(); }

 private:
  Isa isa_;
};

void BM_LogSoftmax(benchmark::State& state) {
  const IsaScope isa(state);
  if (!isa.ok()) return;
  const std::vector<float> x = Logits();
  std::vector<float> out(kVocab);
  for (auto _ : state) benchmark::DoNotOptimize(LogSoftmax(x.data(), kVocab, out.data()));
}

void BM_ExpScaled(benchmark::State& state) {
  const IsaScope isa(state);
  if (!isa.ok()) return;
  const std::vector<float> x = Logits();
  std::vector<float> out(kVocab);
  const float mx = Max(x.data(), kVocab);
  for (auto _ : state) {
    benchmark::DoNotOptimize(ExpScaled(x.data(), kVocab, mx, 1.0f / 0.7f, out.data()));
  }
}

void BM_CountAtLeast(benchmark::State& state) {
  const IsaScope isa(state);
  if (!isa.ok()) return;
  const std::vector<float> x = Logits();
  for (auto _ : state) benchmark::DoNotOptimize(CountAtLeast(x.data(), kVocab, x[100]));
}

// Args: the ISA, k (256: top-p's first candidates; 20: the most top_logprobs vLLM allows).
void BM_TopK(benchmark::State& state) {
  const IsaScope isa(state);
  if (!isa.ok()) return;
  const int64_t k = state.range(1);
  const std::vector<float> x = Logits();
  std::vector<int32_t> idx(k);
  std::vector<float> val(k);
  for (auto _ : state) benchmark::DoNotOptimize(TopK(x.data(), kVocab, k, idx.data(), val.data()));
}

// Arg: 0 a trained model's row (top-p ends within the first candidates), 1 a flat one (top-p
// over the whole vocabulary: SampleSelected's histogram and slices).
void BM_SampleToken(benchmark::State& state) {
  const bool flat = state.range(0) == 1;
  const std::vector<float> x = Logits(flat ? 0.5f : 3.0f);
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.8f;
  Rng rng(1);
  state.SetLabel(flat ? "flat" : "peaked");
  for (auto _ : state) benchmark::DoNotOptimize(SampleToken(x.data(), kVocab, p, rng));
}

// Temperature alone (MiniCPM-V-4.6's generation_config: 0.7, top-p 1, top-k 0) over a vocabulary
// of the arg's size: MiniCPM4's 73448 or MiniCPM-V-4.6's 248320 (SampleAll's walk over blocks).
void BM_SampleTokenTemperature(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::vector<float> x = Logits(3.0f, n);
  SamplingParams p;
  p.temperature = 0.7f;
  Rng rng(1);
  for (auto _ : state) benchmark::DoNotOptimize(SampleToken(x.data(), n, p, rng));
}

void Isas(benchmark::internal::Benchmark* b) {
  b->ArgName("isa")->Arg(static_cast<int>(Isa::kAvx2))->Arg(static_cast<int>(Isa::kAvx512));
}
BENCHMARK(BM_LogSoftmax)->Apply(Isas);
BENCHMARK(BM_ExpScaled)->Apply(Isas);
BENCHMARK(BM_CountAtLeast)  // isa:0 is the plain loop, as the std::count_if it replaced
    ->ArgName("isa")
    ->Arg(static_cast<int>(Isa::kScalar))
    ->Arg(static_cast<int>(Isa::kAvx2));
BENCHMARK(BM_TopK)
    ->ArgNames({"isa", "k"})
    ->ArgsProduct({{static_cast<int>(Isa::kAvx2), static_cast<int>(Isa::kAvx512)}, {20, 256}});
BENCHMARK(BM_SampleToken)->ArgName("flat")->Arg(0)->Arg(1);
BENCHMARK(BM_SampleTokenTemperature)->ArgName("vocab")->Arg(kVocab)->Arg(248320);

}  // namespace
}  // namespace cpm::kernels
