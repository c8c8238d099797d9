// The vocabulary-wide sampling ops over one row of MiniCPM4-0.5B's 73448 logits, at each ISA the
// CPU has: LogSoftmax (every sampled token of a request that asks for logprobs, and every
// position of an evaluation dump or of prompt_logprobs), CountAtLeast (a prompt token's rank),
// ExpScaled (sampling with a temperature) and TopK (top-k / top-p candidates). One thread, as
// the sampler runs them.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/sampling_ops.h"

namespace cpm::kernels {
namespace {

constexpr int64_t kVocab = 73448;

// Logits spread as a language model's: most far below the few largest.
std::vector<float> Logits() {
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  std::vector<float> x(kVocab);
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

}  // namespace
}  // namespace cpm::kernels
