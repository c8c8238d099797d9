// Paged attention at MiniCPM4-0.5B's head shape (16 query heads, 2 KV heads, 64 dims, bf16 KV)
// and MiniCPM-V-4.6's full-attention layers' (8, 2, 256): a batch of decode rows over long
// contexts, and causal prefill chunks. Dense (bidirectional) attention at MiniCPM-V-4.6's vision
// tower's shape (16 heads of 72 dims) over a 448² slice's 1024 tokens and the 256 after its ViT
// merger. Times and threads: bench_threads.h.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <vector>

#include "base/page_buffer.h"
#include "bench_threads.h"
#include "kernels/attention.h"
#include "kernels/dense_attention.h"
#include "tensor/dtype.h"

namespace cpm::kernels {
namespace {

constexpr int64_t kBlock = 16;

// Args: sequences, new tokens per sequence, context length (kv_len after the step).
template <int64_t kHeads, int64_t kKvHeads, int64_t kDim>
void BM_PagedAttention(benchmark::State& state) {
  const int64_t n_seqs = state.range(0), q_len = state.range(1), kv_len = state.range(2);
  const int64_t blocks_per_seq = (kv_len + kBlock - 1) / kBlock;
  // K and V on huge pages, as the server's cache (KvCache): past L3, 4 KiB pages would put TLB
  // misses on every block.
  const int64_t elems = n_seqs * blocks_per_seq * kKvHeads * kBlock * kDim;
  PageBuffer k_pages(elems * sizeof(uint16_t), Pages::kHuge);
  PageBuffer v_pages(elems * sizeof(uint16_t), Pages::kHuge);
  auto* k = reinterpret_cast<uint16_t*>(k_pages.data());
  auto* v = reinterpret_cast<uint16_t*>(v_pages.data());
  std::fill_n(k, elems, uint16_t{0x3c00});
  std::fill_n(v, elems, uint16_t{0x3c00});
  KvLayerView kv{k, v, DType::kBF16, kBlock, kKvHeads, kDim};
  std::vector<std::vector<int32_t>> tables(n_seqs);
  std::vector<AttentionSeq> seqs;
  for (int64_t s = 0; s < n_seqs; ++s) {
    for (int64_t b = 0; b < blocks_per_seq; ++b) {
      tables[s].push_back(static_cast<int32_t>(s * blocks_per_seq + b));
    }
    seqs.push_back({s * q_len, q_len, kv_len, tables[s].data()});
  }
  const int64_t rows = n_seqs * q_len;
  // bf16 values, as a bf16 model's q after RoPE: AVX512_BF16 then scores by dot products.
  std::vector<float> q(rows * kHeads * kDim, RoundBf16(0.01f)), out(q.size());
  ThreadPool pool(BenchThreads());
  for (auto _ : state) {
    PagedAttention(q.data(), kHeads * kDim, kHeads, seqs, kv, 0.125f, out.data(), kHeads * kDim,
                   pool);
  }
  // Pairs (query row, key) over the causal mask.
  const double pairs = double(n_seqs) * (q_len * (kv_len - q_len) + q_len * (q_len + 1) / 2.0);
  state.counters["GFLOP/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * pairs * 4 * kDim * kHeads / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_PagedAttention<16, 2, 64>)
    ->Args({1, 1, 1024})
    ->Args({1, 1, 8192})
    ->Args({16, 1, 64})
    ->Args({16, 1, 128})
    ->Args({16, 1, 1024})
    ->Args({16, 1, 8192})
    ->Args({1, 512, 512})
    ->Args({1, 256, 2048});
BENCHMARK(BM_PagedAttention<8, 2, 256>)
    ->Args({1, 1, 8192})
    ->Args({16, 1, 1024})
    ->Args({1, 256, 2048});

// Args: tokens. bf16 values in q, k, v (a bf16 tower's), so AVX512_BF16 takes the fused kernel.
void BM_DenseAttention(benchmark::State& state) {
  constexpr int64_t kHeads = 16, kDim = 72, kWidth = kHeads * kDim;
  const int64_t n = state.range(0);
  std::vector<float> q(n * kWidth), k(q.size()), v(q.size()), out(q.size());
  for (size_t i = 0; i < q.size(); ++i) {
    q[i] = RoundBf16(0.001f * static_cast<float>(i % 997));
    k[i] = RoundBf16(0.002f * static_cast<float>(i % 499));
    v[i] = RoundBf16(0.003f * static_cast<float>(i % 331));
  }
  ThreadPool pool(BenchThreads());
  for (auto _ : state) {
    DenseAttention(q.data(), k.data(), v.data(), kWidth, n, kHeads, kDim, 0.1178f, true,
                   out.data(), kWidth, pool);
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * 4.0 * n * n * kDim * kHeads / 1e9,
      benchmark::Counter::kIsRate);
}
BENCHMARK(BM_DenseAttention)->Arg(1024)->Arg(256);

}  // namespace
}  // namespace cpm::kernels
