// Paged attention: a mixed batch (prefill chunks over a cached prefix, fresh prefills, decode
// rows) over shuffled block tables, f32 and bf16 KV, every ISA against a dense reference.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/attention_impl.h"
#include "kernels/cpu_features.h"
#include "kernels/test_util.h"

namespace cpm::kernels {
namespace {

using testing::IsaGuard;
using testing::IsasToTest;
using testing::RandomVec;

struct Case {
  int64_t n_heads, num_kv_heads, head_dim, block_size;
  DType dtype;
};

struct SeqSpec {
  int64_t prefix, q_len;  // tokens already cached, new tokens this step
};

// Dense causal GQA attention in double over one sequence's full K/V ([kv_len, kv_heads, d]).
void DenseReference(const float* q, int64_t q_stride, const SeqSpec& s, const Case& c,
                    const std::vector<float>& k, const std::vector<float>& v, float scale,
                    float* out, int64_t out_stride) {
  const int64_t d = c.head_dim, group = c.n_heads / c.num_kv_heads;
  for (int64_t i = 0; i < s.q_len; ++i) {
    const int64_t n_keys = s.prefix + i + 1;
    for (int64_t h = 0; h < c.n_heads; ++h) {
      const int64_t kvh = h / group;
      std::vector<double> sc(n_keys);
      double mx = -1e300;
      for (int64_t p = 0; p < n_keys; ++p) {
        double dot = 0;
        for (int64_t j = 0; j < d; ++j) {
          dot += double{q[i * q_stride + h * d + j]} * k[(p * c.num_kv_heads + kvh) * d + j];
        }
        sc[p] = dot * scale;
        mx = std::max(mx, sc[p]);
      }
      double sum = 0;
      for (double& x : sc) sum += (x = std::exp(x - mx));
      for (int64_t j = 0; j < d; ++j) {
        double o = 0;
        for (int64_t p = 0; p < n_keys; ++p) o += sc[p] * v[(p * c.num_kv_heads + kvh) * d + j];
        out[i * out_stride + h * d + j] = static_cast<float>(o / sum);
      }
    }
  }
}

// The query rows' values: f32, bf16 (as a bf16 model's q after RoPE: with a bf16 cache and
// AVX512_BF16, scores by dot products), or every third row f32 and the rest bf16.
enum class Queries { kF32, kBf16, kMixed };

bool DotScores(const Case& c, Queries qk) {
  return qk != Queries::kF32 && c.dtype == DType::kBF16 && c.head_dim % 8 == 0 &&
         c.block_size >= 16 && GetCpuFeatures().avx512bf16;  // whole groups of 16 slots
}

void RunCase(const Case& c, const std::vector<SeqSpec>& specs, uint32_t seed,
             Queries qk = Queries::kF32) {
  ThreadPool pool(2);
  const int64_t d = c.head_dim, kvw = c.num_kv_heads * d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  // Block ids handed out in a shuffled order, so logical and physical order differ.
  int64_t total_blocks = 0;
  for (const SeqSpec& s : specs) total_blocks += (s.prefix + s.q_len + c.block_size - 1) / c.block_size;
  std::vector<int32_t> ids(total_blocks + 3);
  std::iota(ids.begin(), ids.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(ids.begin(), ids.end(), rng);
  const int64_t num_blocks = static_cast<int64_t>(ids.size());
  const size_t cache_elems = static_cast<size_t>(num_blocks * c.block_size * kvw);
  std::vector<float> kf(cache_elems, NAN), vf(cache_elems, NAN);  // NaN: unwritten slots poison
  std::vector<uint16_t> kb(cache_elems, 0x7fc0), vb(cache_elems, 0x7fc0);
  KvLayerView kv;
  kv.dtype = c.dtype;
  kv.k = c.dtype == DType::kBF16 ? static_cast<void*>(kb.data()) : kf.data();
  kv.v = c.dtype == DType::kBF16 ? static_cast<void*>(vb.data()) : vf.data();
  kv.block_size = c.block_size;
  kv.num_kv_heads = c.num_kv_heads;
  kv.head_dim = d;

  std::vector<std::vector<int32_t>> tables;
  std::vector<std::vector<float>> seq_k, seq_v;  // dense copies for the reference
  std::vector<AttentionSeq> seqs;
  int64_t next_id = 0, rows = 0;
  for (size_t si = 0; si < specs.size(); ++si) {
    const SeqSpec& s = specs[si];
    const int64_t kv_len = s.prefix + s.q_len;
    std::vector<int32_t> table((kv_len + c.block_size - 1) / c.block_size);
    for (auto& b : table) b = ids[next_id++];
    std::vector<float> k = RandomVec(kv_len * kvw, seed + 11 * si, -2, 2);
    std::vector<float> v = RandomVec(kv_len * kvw, seed + 13 * si);
    if (c.dtype == DType::kBF16) {  // the reference must see what the cache holds
      for (float& x : k) x = RoundBf16(x);
      for (float& x : v) x = RoundBf16(x);
    }
    std::vector<int64_t> slots(kv_len);
    for (int64_t p = 0; p < kv_len; ++p) {
      slots[p] = int64_t{table[p / c.block_size]} * c.block_size + p % c.block_size;
    }
    KvWrite(k.data(), kvw, v.data(), kvw, slots.data(), kv_len, kv);
    tables.push_back(std::move(table));
    seq_k.push_back(std::move(k));
    seq_v.push_back(std::move(v));
    seqs.push_back({rows, s.q_len, kv_len, nullptr});
    rows += s.q_len;
  }
  for (size_t si = 0; si < specs.size(); ++si) seqs[si].block_table = tables[si].data();

  const int64_t q_stride = c.n_heads * d + 8, out_stride = c.n_heads * d + 4;
  std::vector<float> q = RandomVec(rows * q_stride, seed + 1, -2, 2);
  for (int64_t r = 0; qk != Queries::kF32 && r < rows; ++r) {
    if (qk == Queries::kMixed && r % 3 == 0) continue;
    for (int64_t j = 0; j < q_stride; ++j) q[r * q_stride + j] = RoundBf16(q[r * q_stride + j]);
  }
  std::vector<float> ref(rows * out_stride);
  for (size_t si = 0; si < specs.size(); ++si) {
    DenseReference(q.data() + seqs[si].q_begin * q_stride, q_stride, specs[si], c, seq_k[si],
                   seq_v[si], scale, ref.data() + seqs[si].q_begin * out_stride, out_stride);
  }
  IsaGuard guard;
  std::vector<float> avx2_out;
  for (Isa isa : IsasToTest()) {
    ASSERT_TRUE(SetActiveIsa(isa));
    std::vector<float> out(rows * out_stride, -5.0f);
    PagedAttention(q.data(), q_stride, c.n_heads, seqs, kv, scale, out.data(), out_stride, pool);
    // The AVX-512 tiles compute the AVX2 tiles' chains: the same bits. bf16 dot-product scores
    // sum in another order: the bits differ (so the dot products did run), the values agree
    // with the reference below.
    if (isa == Isa::kAvx2) avx2_out = out;
    if (isa == Isa::kAvx512 && !DotScores(c, qk)) {
      ASSERT_EQ(std::memcmp(out.data(), avx2_out.data(), out.size() * 4), 0)
          << ToString(c.dtype) << " d=" << d << " bs=" << c.block_size
          << ": avx512 differs from avx2";
    }
    if (isa == Isa::kAvx512 && DotScores(c, qk) && !avx2_out.empty()) {
      ASSERT_NE(std::memcmp(out.data(), avx2_out.data(), out.size() * 4), 0)
          << ToString(c.dtype) << " d=" << d << " bs=" << c.block_size
          << ": no bf16 dot-product scores ran";
    }
    int bad = 0;
    for (int64_t r = 0; r < rows && bad < 5; ++r) {
      for (int64_t j = 0; j < c.n_heads * d && bad < 5; ++j) {
        // Outputs are convex combinations of |v| ≤ 1: f32 error well below 1e-5.
        const float got = out[r * out_stride + j], want = ref[r * out_stride + j];
        if (!(std::fabs(got - want) <= 1e-5f)) {
          ADD_FAILURE() << ToString(isa) << " " << ToString(c.dtype) << " d=" << d
                        << " bs=" << c.block_size << " row " << r << " elem " << j << ": "
                        << got << " vs " << want;
          ++bad;
        }
      }
      for (int64_t j = c.n_heads * d; j < out_stride; ++j) {
        ASSERT_EQ(out[r * out_stride + j], -5.0f) << "wrote past the heads";
      }
    }
    // Batch invariance: every row, attended alone as a one-token step over its own keys, gives
    // the same bits as within its prefill (the AVX2 kernel attends rows in groups).
    for (size_t si = 0; si < specs.size(); ++si) {
      for (int64_t i = 0; i < specs[si].q_len; ++i) {
        const int64_t t = seqs[si].q_begin + i;
        const AttentionSeq alone[] = {{0, 1, specs[si].prefix + i + 1, seqs[si].block_table}};
        std::vector<float> one(out_stride, -5.0f);
        PagedAttention(q.data() + t * q_stride, q_stride, c.n_heads, alone, kv, scale, one.data(),
                       out_stride, pool);
        ASSERT_EQ(std::memcmp(one.data(), out.data() + t * out_stride, c.n_heads * d * 4), 0)
            << ToString(isa) << " " << ToString(c.dtype) << " d=" << d << " seq " << si
            << " row " << i << " differs when attended alone";
      }
    }
  }
}

const std::vector<SeqSpec> kMixedBatch = {
    {20, 5},   // prefill chunk over a cached prefix
    {39, 1},   // decode
    {0, 33},   // fresh prefill, three blocks of 16
    {0, 1},    // first token
    {100, 1},  // longer decode
    {7, 17},   // chunk that starts mid-block
};

// Contexts over several of the AVX2 kernel's softmax spans (128 keys): prefill chunks whose rows
// straddle a span's end, and decodes.
const std::vector<SeqSpec> kLongBatch = {
    {120, 20},  // rows on both sides of key 128
    {300, 1},   // decode over three spans
    {250, 7},   // the first rows' last span is partial, the later rows' full
    {0, 260},   // fresh prefill of three spans
    {383, 2},   // decode rows around 384
};

// Contexts over several partitions (kPartitionKeys = 1024 keys), attended as separate tasks and
// merged: prefill rows on both sides of a partition's end (their row blocks have one or two
// partitions, the rows alone one or two), decodes over three, exactly one partition's keys, one
// key into the second.
const std::vector<SeqSpec> kPartitionBatch = {
    {1000, 40},
    {2100, 1},
    {2044, 8},
    {1023, 1},
    {1024, 1},
};

TEST(AttentionTest, MixedBatchMatchesDenseReference) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    RunCase({16, 2, 64, 16, dt}, kMixedBatch, 1);   // MiniCPM4-0.5B
    RunCase({4, 4, 24, 5, dt}, kMixedBatch, 2);     // MHA, odd vector count, odd block size
    RunCase({6, 2, 20, 16, dt}, kMixedBatch, 3);    // head_dim % 8 != 0: scalar fallback
    RunCase({8, 1, 128, 32, dt}, kMixedBatch, 4);   // MQA, big heads
    RunCase({24, 2, 32, 16, dt}, kMixedBatch, 5);   // group 12: softmax 8 heads + 4 heads
    RunCase({16, 1, 16, 16, dt}, kMixedBatch, 6);   // group 16: two full 8-head steps
    RunCase({16, 2, 64, 24, dt}, kMixedBatch, 7);   // blocks of a whole group of 16 and 8 more
    RunCase({12, 2, 40, 16, dt}, kMixedBatch, 8);   // group 6: value tiles of 4+2 heads, 24+16 dims
  }
}

TEST(AttentionTest, LongContextsMatchDenseReference) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    RunCase({16, 2, 64, 16, dt}, kLongBatch, 11);   // MiniCPM4-0.5B
    RunCase({8, 2, 256, 16, dt}, kLongBatch, 12);   // MiniCPM-V-4.6's full attention
    RunCase({12, 2, 40, 24, dt}, kLongBatch, 13);   // group 6, blocks of 16 + 8 slots
    RunCase({4, 4, 24, 5, dt}, kLongBatch, 14);     // MHA, blocks of 5: chunks of 5
  }
}

TEST(AttentionTest, PartitionedContextsMatchDenseReference) {
  static_assert(kPartitionKeys == 1024, "kPartitionBatch's contexts straddle 1024 and 2048");
  for (DType dt : {DType::kF32, DType::kBF16}) {
    RunCase({16, 2, 64, 16, dt}, kPartitionBatch, 21);  // MiniCPM4-0.5B
    RunCase({8, 2, 256, 16, dt}, kPartitionBatch, 22);  // MiniCPM-V-4.6's full attention
    RunCase({4, 4, 24, 5, dt}, kPartitionBatch, 23);    // MHA, blocks of 5
  }
}

// bf16 queries over a bf16 cache: where the CPU has AVX512_BF16, whole chunks' scores are bf16
// dot products, in tiles of 1, 2 or 4 chunks (decode rows of 8 and of 4 query vectors per KV
// head, prefill rows of 32), beside the f32 tiles for partial chunks (blocks of 24 and of 5
// slots) and for f32 rows (kMixed): every row agrees with the reference and, attended alone,
// gives the same bits.
TEST(AttentionTest, Bf16QueriesMatchDenseReference) {
  for (Queries qk : {Queries::kBf16, Queries::kMixed}) {
    RunCase({16, 2, 64, 16, DType::kBF16}, kMixedBatch, 31, qk);  // MiniCPM4-0.5B
    RunCase({16, 2, 64, 16, DType::kBF16}, kLongBatch, 32, qk);
    RunCase({16, 2, 64, 16, DType::kBF16}, kPartitionBatch, 33, qk);
    RunCase({8, 2, 256, 16, DType::kBF16}, kLongBatch, 34, qk);  // MiniCPM-V-4.6: group 4
    RunCase({16, 2, 64, 24, DType::kBF16}, kLongBatch, 35, qk);  // whole groups and 8-slot ones
    RunCase({8, 1, 128, 32, DType::kBF16}, kMixedBatch, 36, qk);  // dims 64 bytes apart
    RunCase({4, 4, 24, 5, DType::kBF16}, kLongBatch, 37, qk);  // no whole chunk: f32 tiles only
    RunCase({24, 2, 32, 16, DType::kBF16}, kMixedBatch, 38, qk);  // group 12: tiles of 8 + 4
  }
}

TEST(AttentionTest, KvWriteStoresRoundedBf16) {
  const int64_t d = 8;
  std::vector<uint16_t> k(2 * 1 * 4 * d), v(k.size());
  KvLayerView kv{k.data(), v.data(), DType::kBF16, 4, 1, d};
  std::vector<float> src = RandomVec(d, 5);
  const int64_t slot = 6;  // block 1, offset 2
  KvWrite(src.data(), d, src.data(), d, &slot, 1, kv);
  for (int64_t j = 0; j < d; ++j) {
    EXPECT_EQ(k[4 * d + j * 4 + 2], F32ToBf16(src[j]));  // keys transposed within the block
    EXPECT_EQ(v[4 * d + 2 * d + j], F32ToBf16(src[j]));
  }
}

// bf16 keys of a whole group of 16 slots are stored pairwise (t, t + 8) per 32-bit lane; those of
// a block's shorter last group, and f32 keys, in order.
TEST(AttentionTest, KvWritePairsBf16KeysWithinGroupsOf16) {
  EXPECT_EQ(KeySlot(0, 16, DType::kBF16), 0);
  EXPECT_EQ(KeySlot(8, 16, DType::kBF16), 1);
  EXPECT_EQ(KeySlot(9, 16, DType::kBF16), 3);
  EXPECT_EQ(KeySlot(7, 16, DType::kBF16), 14);
  EXPECT_EQ(KeySlot(15, 16, DType::kBF16), 15);
  EXPECT_EQ(KeySlot(24, 32, DType::kBF16), 17);
  EXPECT_EQ(KeySlot(17, 24, DType::kBF16), 17);  // the last group holds 8 slots
  EXPECT_EQ(KeySlot(9, 16, DType::kF32), 9);
  const int64_t d = 8, bs = 16;
  std::vector<uint16_t> k(2 * bs * d), v(k.size());
  KvLayerView kv{k.data(), v.data(), DType::kBF16, bs, 1, d};
  std::vector<float> src = RandomVec(d, 6);
  const int64_t slot = bs + 9;  // block 1, offset 9: lane 1's high half
  KvWrite(src.data(), d, src.data(), d, &slot, 1, kv);
  for (int64_t j = 0; j < d; ++j) {
    EXPECT_EQ(k[bs * d + j * bs + 3], F32ToBf16(src[j]));
    EXPECT_EQ(v[bs * d + 9 * d + j], F32ToBf16(src[j]));
  }
}

}  // namespace
}  // namespace cpm::kernels
