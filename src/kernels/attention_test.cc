// Paged attention: a mixed batch (prefill chunks over a cached prefix, fresh prefills, decode
// rows) over shuffled block tables, f32 and bf16 KV, every ISA against a dense reference.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/attention_impl.h"
#include "kernels/attention_tiles.h"
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

// How the reference computes softmax(s)·V: plainly, or (a bf16 cache) in FlashAttention's
// arithmetic, which rounds P to bf16 (attention.h), over the SIMD kernels' blocks of keys or,
// as the scalar kernel, each row's keys at once.
enum class Softmax { kPlain, kRoundedSpans, kRoundedRow };

// Dense causal GQA attention in double over one sequence's full K/V ([kv_len, kv_heads, d]).
// Rounded: partitions of kPartitionKeys keys (kRoundedSpans), each from a fresh state over
// spans of kSpan keys (a running max m, each span's exps e^(s − m) summed unrounded into l and
// rounded to bf16 for their products with V), merged at the end. `slack` gets each output's
// share of the exps within the kernel's f32 error of a bf16 rounding tie, which it may round
// the other way.
void DenseReference(const float* q, int64_t q_stride, const SeqSpec& s, const Case& c,
                    const std::vector<float>& k, const std::vector<float>& v, float scale,
                    float* out, int64_t out_stride, Softmax mode, float* slack) {
  const int64_t d = c.head_dim, group = c.n_heads / c.num_kv_heads;
  const bool round_p = mode != Softmax::kPlain;
  for (int64_t i = 0; i < s.q_len; ++i) {
    const int64_t n_keys = s.prefix + i + 1;
    const bool spans = mode == Softmax::kRoundedSpans;
    const int64_t part_keys = spans ? kPartitionKeys : n_keys;
    const int64_t span_keys = spans ? attn::kSpan : n_keys;
    for (int64_t h = 0; h < c.n_heads; ++h) {
      const int64_t kvh = h / group;
      const auto value = [&](int64_t p, int64_t j) {
        return v[(p * c.num_kv_heads + kvh) * d + j];
      };
      // Scores, and a bound on the kernel's f32 error in each (its sums of d products).
      std::vector<double> sc(n_keys), sc_err(n_keys);
      for (int64_t p = 0; p < n_keys; ++p) {
        double dot = 0, abs_sum = 0;
        for (int64_t j = 0; j < d; ++j) {
          const double t =
              double{q[i * q_stride + h * d + j]} * k[(p * c.num_kv_heads + kvh) * d + j];
          dot += t;
          abs_sum += std::fabs(t);
        }
        sc[p] = dot * scale;
        sc_err[p] = abs_sum * scale * static_cast<double>(d + 2) * 0x1p-24;
      }
      // Each partition's (m, l, o), then their merge.
      std::vector<double> ms, ls;
      std::vector<std::vector<double>> os, ties;  // ties: the slack's terms, scaled as o's
      for (int64_t p0 = 0; p0 < n_keys; p0 += part_keys) {
        const int64_t p_end = std::min(n_keys, p0 + part_keys);
        double m = -INFINITY, l = 0, m_err_prev = 0;
        std::vector<double> o(d, 0.0), tie(d, 0.0);
        for (int64_t s0 = p0; s0 < p_end; s0 += span_keys) {
          const int64_t s1 = std::min(p_end, s0 + span_keys);
          double m_new = m, m_err = m_err_prev;
          for (int64_t p = s0; p < s1; ++p) {
            if (sc[p] > m_new) {
              m_new = sc[p];
              m_err = sc_err[p];
            }
          }
          m_err_prev = m_err;
          const double alpha = std::exp(m - m_new);  // 0 on the first span
          l *= alpha;
          for (double& x : o) x *= alpha;
          for (double& x : tie) x *= alpha;
          for (int64_t p = s0; p < s1; ++p) {
            const double e = std::exp(sc[p] - m_new);
            l += e;
            const double pe = round_p ? double{RoundBf16(static_cast<float>(e))} : e;
            // The other bf16 neighbour, where e is within the kernel's error of the tie
            // between the two: its score's and max's, and its exp's (a few ulp).
            const double window = sc_err[p] + m_err + 1e-6;
            const double up = double{RoundBf16(static_cast<float>(e * (1 + window)))};
            const double down = double{RoundBf16(static_cast<float>(e * (1 - window)))};
            const double other = up != pe ? up : down;
            for (int64_t j = 0; j < d; ++j) {
              o[j] += pe * value(p, j);
              if (round_p) tie[j] += std::fabs((other - pe) * value(p, j));
            }
          }
          m = m_new;
        }
        ms.push_back(m);
        ls.push_back(l);
        os.push_back(std::move(o));
        ties.push_back(std::move(tie));
      }
      const double mx = *std::max_element(ms.begin(), ms.end());
      double sum = 0;
      std::vector<double> o(d, 0.0), tie(d, 0.0);
      for (size_t part = 0; part < ms.size(); ++part) {
        const double w = std::exp(ms[part] - mx);
        sum += ls[part] * w;
        for (int64_t j = 0; j < d; ++j) {
          o[j] += os[part][j] * w;
          tie[j] += ties[part][j] * w;
        }
      }
      for (int64_t j = 0; j < d; ++j) {
        out[i * out_stride + h * d + j] = static_cast<float>(o[j] / sum);
        slack[i * out_stride + h * d + j] = static_cast<float>(tie[j] / sum);
      }
    }
  }
}

// The query rows' values: f32, bf16 (as a bf16 model's q after RoPE: with a bf16 cache and
// AVX512_BF16, bf16 dot products for P·V and for the scores of whole chunks), or every third
// row f32 and the rest bf16.
enum class Queries { kF32, kBf16, kMixed };

// Whether row r takes bf16 dot products at the AVX-512 level.
bool DotProducts(const Case& c, Queries qk, int64_t r) {
  // Scores of whole chunks (a block of at least 16 slots) or P·V on value pairs (an even block
  // size: ValuePath).
  const bool chunks_or_pairs = c.block_size >= attn::kChunk || c.block_size % 2 == 0;
  return (qk == Queries::kBf16 || (qk == Queries::kMixed && r % 3 != 0)) &&
         c.dtype == DType::kBF16 && c.head_dim % 8 == 0 && chunks_or_pairs &&
         GetCpuFeatures().avx512bf16;
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
  // The reference as the SIMD kernels and as the scalar one compute it (the same for f32).
  const bool bf16 = c.dtype == DType::kBF16;
  std::vector<float> ref_simd(rows * out_stride), slack_simd(rows * out_stride);
  std::vector<float> ref_scalar(rows * out_stride), slack_scalar(rows * out_stride);
  for (size_t si = 0; si < specs.size(); ++si) {
    const int64_t at = seqs[si].q_begin * out_stride;
    const float* qs = q.data() + seqs[si].q_begin * q_stride;
    DenseReference(qs, q_stride, specs[si], c, seq_k[si], seq_v[si], scale, ref_simd.data() + at,
                   out_stride, bf16 ? Softmax::kRoundedSpans : Softmax::kPlain,
                   slack_simd.data() + at);
    DenseReference(qs, q_stride, specs[si], c, seq_k[si], seq_v[si], scale,
                   ref_scalar.data() + at, out_stride,
                   bf16 ? Softmax::kRoundedRow : Softmax::kPlain, slack_scalar.data() + at);
  }
  IsaGuard guard;
  std::vector<float> avx2_out;
  for (Isa isa : IsasToTest()) {
    ASSERT_TRUE(SetActiveIsa(isa));
    std::vector<float> out(rows * out_stride, -5.0f);
    PagedAttention(q.data(), q_stride, c.n_heads, seqs, kv, scale, out.data(), out_stride, pool);
    // The AVX-512 tiles compute the AVX2 tiles' chains: the same bits. Rows of bf16 dot
    // products sum in another order: the bits differ (so the dot products did run), the
    // values agree with the reference below.
    if (isa == Isa::kAvx2) avx2_out = out;
    // Round::kBf16 rounds each output as the tasks finish: bf16(out) exactly, the padding past
    // the heads untouched.
    std::vector<float> rounded(rows * out_stride, -5.0f);
    PagedAttention(q.data(), q_stride, c.n_heads, seqs, kv, scale, rounded.data(), out_stride,
                   pool, Round::kBf16);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < out_stride; ++j) {
        const float got = rounded[r * out_stride + j], from = out[r * out_stride + j];
        ASSERT_EQ(std::bit_cast<uint32_t>(got),
                  std::bit_cast<uint32_t>(j < c.n_heads * d ? RoundBf16(from) : from))
            << ToString(isa) << " " << ToString(c.dtype) << " d=" << d << " row " << r
            << " elem " << j << ": rounded output " << got << " from " << from;
      }
    }
    // (A row over one key gives that key's values either way.)
    if (isa == Isa::kAvx512 && !avx2_out.empty()) {
      int64_t dot_rows = 0, dot_rows_differing = 0;
      for (int64_t r = 0; r < rows; ++r) {
        const bool same = std::memcmp(out.data() + r * out_stride,
                                      avx2_out.data() + r * out_stride, out_stride * 4) == 0;
        if (DotProducts(c, qk, r)) {
          ++dot_rows;
          dot_rows_differing += !same;
        } else {
          ASSERT_TRUE(same) << ToString(c.dtype) << " d=" << d << " bs=" << c.block_size
                            << " row " << r << ": avx512 differs from avx2";
        }
      }
      ASSERT_TRUE(dot_rows == 0 || dot_rows_differing > dot_rows / 2)
          << ToString(c.dtype) << " d=" << d << " bs=" << c.block_size << ": only "
          << dot_rows_differing << " of " << dot_rows << " rows took bf16 dot products";
    }
    const bool simd = isa != Isa::kScalar && d % 8 == 0;
    const std::vector<float>& ref = simd ? ref_simd : ref_scalar;
    const std::vector<float>& slack = simd ? slack_simd : slack_scalar;
    int bad = 0;
    for (int64_t r = 0; r < rows && bad < 5; ++r) {
      for (int64_t j = 0; j < c.n_heads * d && bad < 5; ++j) {
        // Outputs are convex combinations of |v| ≤ 1: f32 error well below 1e-5.
        const float got = out[r * out_stride + j], want = ref[r * out_stride + j];
        const float tolerance = 1e-5f + slack[r * out_stride + j];
        if (!(std::fabs(got - want) <= tolerance)) {
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

// P·V reads its values' pairs as the cache holds them, where a sequence's last block has slots
// past its keys: what an earlier sequence left there (a freed block is reused unwritten) must
// not show, though a pair row or an AMX tile of 8 pair rows reads them beside the last keys, as
// 0 · NaN is NaN. A decode over 97 keys (an odd count: its last pair half a key's) whose block's
// slots 97-111 hold NaN from an earlier sequence, and on the same thread one over 112 keys
// whose last 12 values are NaN (the per-thread buffers): its outputs are finite and what they
// are over a cache of zeros past its keys.
TEST(AttentionTest, SlotsPastTheKeysLeaveNoTrace) {
  const int64_t n_heads = 16, kv_heads = 2, d = 64, bs = 16, kvw = kv_heads * d;
  ThreadPool pool(1);  // one thread: one set of per-thread buffers
  std::vector<uint16_t> kb(2 * 7 * bs * kvw), vb(kb.size());
  KvLayerView kv{kb.data(), vb.data(), DType::kBF16, bs, kv_heads, d};
  const std::vector<int32_t> poisoned = {0, 1, 2, 3, 4, 5, 6}, clean = {7, 8, 9, 10, 11, 12, 13};
  const std::vector<float> k = RandomVec(112 * kvw, 41, -2, 2), v = RandomVec(112 * kvw, 42);
  const auto write = [&](const std::vector<int32_t>& table, int64_t from, int64_t to,
                         float value) {
    std::vector<float> vs(v);  // keys [from, to) with `value` in every dim
    std::fill(vs.begin() + from * kvw, vs.begin() + to * kvw, value);
    std::vector<int64_t> slots(112);
    for (int64_t p = 0; p < 112; ++p) slots[p] = table[p / bs] * bs + p % bs;
    KvWrite(k.data(), kvw, vs.data(), kvw, slots.data(), 112, kv);
  };
  std::vector<float> q = RandomVec(n_heads * d, 43, -2, 2);
  for (float& x : q) x = RoundBf16(x);  // bf16 values: the dot-product rows
  const float scale = 0.125f;
  const auto attend = [&](const std::vector<int32_t>& table, int64_t n_keys) {
    const AttentionSeq seq[] = {{0, 1, n_keys, table.data()}};
    std::vector<float> out(n_heads * d);
    PagedAttention(q.data(), n_heads * d, n_heads, seq, kv, scale, out.data(), n_heads * d,
                   pool);
    return out;
  };
  IsaGuard guard;
  for (Isa isa : IsasToTest()) {
    ASSERT_TRUE(SetActiveIsa(isa));
    write(clean, 97, 112, 0.0f);
    const std::vector<float> before = attend(clean, 97);
    write(poisoned, 100, 112, NAN);
    attend(poisoned, 112);
    write(clean, 97, 112, NAN);
    const std::vector<float> after = attend(clean, 97);
    for (int64_t j = 0; j < n_heads * d; ++j) {
      ASSERT_TRUE(std::isfinite(after[j])) << ToString(isa) << " output " << j;
      ASSERT_EQ(std::bit_cast<uint32_t>(after[j]), std::bit_cast<uint32_t>(before[j]))
          << ToString(isa) << " output " << j;
    }
  }
}

// Which query rows take bf16 dot products: a row of bf16 values only, of any length (the 16-lane
// loop, then its masked tail), and not once any one element, wherever it sits, has a low bit.
TEST(AttentionTest, Bf16RowCheckFindsEveryLowBit) {
  if (BestIsa() != Isa::kAvx512) GTEST_SKIP() << "no AVX-512 on this CPU";
  for (int64_t n : {1, 7, 15, 16, 17, 31, 1024, 1031}) {
    std::vector<float> x = RandomVec(n, static_cast<uint32_t>(n), -2, 2);
    for (float& v : x) v = RoundBf16(v);
    EXPECT_TRUE(HoldsBf16OnlyAvx512(x.data(), n)) << "n=" << n;
    for (int64_t i = 0; i < n; ++i) {
      for (uint32_t bit : {0x1u, 0x8000u}) {
        std::vector<float> y = x;
        y[i] = std::bit_cast<float>(std::bit_cast<uint32_t>(y[i]) ^ bit);
        ASSERT_FALSE(HoldsBf16OnlyAvx512(y.data(), n)) << "n=" << n << " at " << i;
      }
    }
  }
  EXPECT_TRUE(HoldsBf16OnlyAvx512(nullptr, 0));
}

TEST(AttentionTest, KvWriteStoresRoundedBf16) {
  const int64_t d = 8;
  std::vector<uint16_t> k(2 * 1 * 4 * d), v(k.size());
  KvLayerView kv{k.data(), v.data(), DType::kBF16, 4, 1, d};
  std::vector<float> src = RandomVec(d, 5);
  const int64_t slot = 6;  // block 1, offset 2
  KvWrite(src.data(), d, src.data(), d, &slot, 1, kv);
  for (int64_t j = 0; j < d; ++j) {
    // Keys transposed within the block, each key's dims in pairs: dim pair j / 2's row of 4
    // keys × 2 dims, key 2's pair at 4, dim j at j % 2 in it. Values in rows of key pairs: key
    // 2 the low half of each dim's pair in row 1.
    EXPECT_EQ(k[4 * d + j / 2 * 8 + 2 * 2 + j % 2], F32ToBf16(src[j]));
    EXPECT_EQ(v[4 * d + 2 * d + 2 * j], F32ToBf16(src[j]));
  }
}

// Every (key, dim) of a block lands on its own element of the head's block_size·head_dim, for
// KeyIndex or ValueIndex: even and odd head dims and block sizes, both dtypes.
template <typename Index>
void ExpectEveryElementOnce(Index index) {
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (int64_t d : {1, 7, 8, 64}) {
      for (int64_t bs : {1, 2, 5, 16}) {
        std::vector<int> hits(bs * d);
        for (int64_t o = 0; o < bs; ++o) {
          for (int64_t j = 0; j < d; ++j) {
            const int64_t i = index(o, j, bs, d, dt);
            ASSERT_GE(i, 0);
            ASSERT_LT(i, bs * d) << "d=" << d << " bs=" << bs;
            ++hits[i];
          }
        }
        for (int h : hits) ASSERT_EQ(h, 1) << "d=" << d << " bs=" << bs;
      }
    }
  }
}

// Where a key's dims sit among its head's keys of a block: f32 in a row per dim, the keys in
// order; bf16 in a row per dim pair, each key's two dims side by side (the lower dim first), and
// an odd head_dim's last dim in a row of its own, in order.
TEST(AttentionTest, KeyIndexPairsBf16DimsPerKey) {
  EXPECT_EQ(KeyIndex(9, 5, 16, 8, DType::kF32), 5 * 16 + 9);
  EXPECT_EQ(KeyIndex(0, 0, 16, 8, DType::kBF16), 0);
  EXPECT_EQ(KeyIndex(0, 1, 16, 8, DType::kBF16), 1);
  EXPECT_EQ(KeyIndex(9, 4, 16, 8, DType::kBF16), 2 * 32 + 18);
  EXPECT_EQ(KeyIndex(9, 5, 16, 8, DType::kBF16), 2 * 32 + 19);
  EXPECT_EQ(KeyIndex(4, 7, 5, 8, DType::kBF16), 3 * 10 + 9);
  EXPECT_EQ(KeyIndex(4, 6, 5, 7, DType::kBF16), 3 * 10 + 4);  // odd head_dim: the last dim
  ExpectEveryElementOnce(KeyIndex);
  const int64_t d = 8, bs = 16;
  std::vector<uint16_t> k(2 * bs * d), v(k.size());
  KvLayerView kv{k.data(), v.data(), DType::kBF16, bs, 1, d};
  std::vector<float> src = RandomVec(d, 6);
  const int64_t slot = bs + 9;  // block 1, offset 9
  KvWrite(src.data(), d, src.data(), d, &slot, 1, kv);
  for (int64_t j = 0; j < d; ++j) {
    EXPECT_EQ(k[bs * d + j / 2 * 2 * bs + 2 * 9 + j % 2], F32ToBf16(src[j]));
    EXPECT_EQ(v[bs * d + 8 * d + 2 * j + 1], F32ToBf16(src[j]));
  }
}

// Where a value's dims sit among its head's values of a block: f32 in a row per key; bf16 in a
// row per key pair, each dim's two values side by side (the even slot's first), and an odd
// block's last key in a row of its own, in order.
TEST(AttentionTest, ValueIndexPairsBf16KeysPerDim) {
  EXPECT_EQ(ValueIndex(9, 5, 16, 8, DType::kF32), 9 * 8 + 5);
  EXPECT_EQ(ValueIndex(0, 0, 16, 8, DType::kBF16), 0);
  EXPECT_EQ(ValueIndex(1, 0, 16, 8, DType::kBF16), 1);
  EXPECT_EQ(ValueIndex(8, 5, 16, 8, DType::kBF16), 8 * 8 + 10);
  EXPECT_EQ(ValueIndex(9, 5, 16, 8, DType::kBF16), 8 * 8 + 11);
  EXPECT_EQ(ValueIndex(3, 7, 5, 8, DType::kBF16), 2 * 8 + 15);
  EXPECT_EQ(ValueIndex(4, 6, 5, 8, DType::kBF16), 4 * 8 + 6);  // odd block: the last key
  ExpectEveryElementOnce(ValueIndex);
}

}  // namespace
}  // namespace cpm::kernels
