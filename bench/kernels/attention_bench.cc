// Paged attention at MiniCPM4-0.5B's head shape (16 query heads, 2 KV heads, 64 dims, bf16 KV)
// and MiniCPM-V-4.6's full-attention layers' (8, 2, 256): a batch of decode rows over long
// contexts, and causal prefill chunks. Times and threads: bench_threads.h.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <vector>

#include "base/page_buffer.h"
#include "bench_threads.h"
#include "kernels/attention.h"
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
    ->Args({16, 1, 1024})
    ->Args({16, 1, 8192})
    ->Args({1, 512, 512})
    ->Args({1, 256, 2048});
BENCHMARK(BM_PagedAttention<8, 2, 256>)
    ->Args({1, 1, 8192})
    ->Args({16, 1, 1024})
    ->Args({1, 256, 2048});

}  // namespace
}  // namespace cpm::kernels
