// Matmul dispatch: packs weights at load (PrepareLinear), splits a group of matmuls that share
// x into column tasks of one parallel region (MatMulGroup, and MatMulSiluMul's gate/up pairs
// finished per task; GatedMlp hands their activation to down as bf16 pairs), and holds the
// scalar reference.
#include "kernels/matmul.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/check.h"
#include "base/huge_pages.h"
#include "kernels/activation.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul_impl.h"
#include "kernels/ops_avx512.h"
#include "kernels/q8.h"
#include "kernels/residual.h"

namespace cpm::kernels {
namespace {

// Unpacked weights: output rows per task.
constexpr int64_t kRowsPerTask = 64;
// MatMulSiluMul: columns per task unit, and the most scratch a task's two products may take.
constexpr int64_t kFusedUnit = 32;
constexpr int64_t kFusedScratchBytes = 256 * 1024;

PackedLayout WantedLayout(Isa isa, DType dt) {
  if (isa == Isa::kAvx512 && Avx512Choice().on) {
    return dt == DType::kBF16 ? PackedLayout::kPanel32Bf16Pairs : PackedLayout::kPanel32F32;
  }
  return dt == DType::kBF16 ? PackedLayout::kPanel16Bf16 : PackedLayout::kPanel16F32;
}

// The least ISA whose kernels read the layout (Q8_0's have a scalar kernel).
Isa LayoutIsa(PackedLayout l) {
  if (IsQ8Layout(l)) return Isa::kScalar;
  return (l == PackedLayout::kPanel16F32 || l == PackedLayout::kPanel16Bf16 ||
          l == PackedLayout::kPanel16Ternary)
             ? Isa::kAvx2
             : Isa::kAvx512;
}

// Scalar packing (once per weight at load), written in the packed order: the stores stream and
// the reads stay within `width` rows of W, in L1. (In W's order every store touched another
// cache line: ~8 ns per element, 3.5 s of MiniCPM4-0.5B's 5.4 s load.)
template <typename T>
void PackPanels(const LinearWeight& w, PackedWeight* pw) {
  const T* src = static_cast<const T*>(w.data);
  const int64_t width = pw->width, half = width / 2, n = w.out_features, k = w.in_features;
  const int64_t k_rows = pw->panel_elems / width;  // k, or k rounded up to even for pairs
  const bool pairs = pw->layout == PackedLayout::kPanel32Bf16Pairs;
  T* out = pw->data.as<T>();
  for (int64_t r0 = 0; r0 < pw->num_panels * width; r0 += width) {
    // W's element (row r0 + j, column c), zero past its edges (a partial last panel, odd k).
    const auto at = [&](int64_t j, int64_t c) {
      return r0 + j < n && c < k ? src[(r0 + j) * k + c] : T{0};
    };
    if (pairs) {  // [k/2][width][2]
      for (int64_t c = 0; c < k_rows; c += 2) {
        for (int64_t j = 0; j < width; ++j) {
          *out++ = at(j, c);
          *out++ = at(j, c + 1);
        }
      }
      continue;
    }
    // [k][width]: 16-bit lanes hold columns (j, j + half) side by side for the widening loads.
    for (int64_t c = 0; c < k_rows; ++c) {
      for (int64_t lane = 0; lane < width; ++lane) {
        const int64_t j = sizeof(T) == 2 && lane % 2 == 1 ? half + lane / 2
                          : sizeof(T) == 2                ? lane / 2
                                                          : lane;
        *out++ = at(j, c);
      }
    }
  }
}

}  // namespace

std::shared_ptr<const void> PackLinear(const LinearWeight& w, PackedLayout layout) {
  auto pw = std::make_shared<PackedWeight>();
  pw->layout = layout;
  pw->width = LayoutIsa(layout) == Isa::kAvx512 ? 32 : 16;
  pw->n = w.out_features;
  pw->k = w.in_features;
  pw->num_panels = (w.out_features + pw->width - 1) / pw->width;
  const int64_t k_rows = layout == PackedLayout::kPanel32Bf16Pairs ? (w.in_features + 1) / 2 * 2
                                                                   : w.in_features;
  pw->panel_elems = k_rows * pw->width;
  const size_t esize = DTypeSize(w.dtype);
  pw->data.Resize(static_cast<size_t>(pw->num_panels * pw->panel_elems) * esize,
                  Pages::kHuge);
  if (w.dtype == DType::kBF16) PackPanels<uint16_t>(w, pw.get());
  else PackPanels<float>(w, pw.get());
  return pw;
}

namespace {

// One matmul of a group, as the parallel loop sees it. Tasks split it into units of
// `unit_cols` output columns: panels (packed), rows of W (unpacked: 1), or kFusedUnit.
struct Job {
  const LinearWeight* w;
  const PackedWeight* pw;  // null: unpacked path
  float* y;
  int64_t y_stride;
  int64_t units;
  int64_t unit_cols;
  uint16_t* y16 = nullptr;  // set: the output as bf16 rows (Bf16Rows) at y_stride, y unused
};

// `w` as job: its packed form only where the active ISA runs it (a test may lower the level).
Job MakeJob(const LinearWeight& w, Isa isa, float* y, int64_t y_stride) {
  const PackedWeight* pw = Packed(w);
  if (pw && !IsQ8Layout(pw->layout) && (isa == Isa::kScalar || LayoutIsa(pw->layout) > isa)) {
    pw = nullptr;
  }
  if (pw) return {&w, pw, y, y_stride, pw->num_panels, pw->width};
  CPM_CHECK(w.data != nullptr);  // a dropped source (Source::kDrop) under a lowered ISA
  return {&w, nullptr, y, y_stride, w.out_features, 1};
}

// A parallel task: units [begin, end) of jobs[job].
struct Task {
  size_t job;
  int64_t begin, end;
};

// Calls of up to this many rows (decode batches) hand their tasks out in contiguous shares
// (ThreadPool::ParallelForShares), each thread's in memory order: a task's weight prefetches
// run on into its thread's next task, where ParallelFor's interleaved claims start each task
// on a cold stream. Every matmul of a MiniCPM4-0.5B decode step, the two schedules alternated
// step by step in one process (Zen 5, 2 threads, 4 runs): 12 rows 0.81-0.96x the time, 16 rows
// 0.91-0.98x, 6-8 rows 0.97-0.99x, 1-4 rows level (0.94-1.09x). Prefill (tall blocks, whose
// panels are reread from L2) stays on ParallelFor's guided tasks: 32-64 rows were level.
constexpr int64_t kMaxSharedScheduleRows = 16;

bool SharedSchedule(int64_t m) { return m <= kMaxSharedScheduleRows; }

// AMX decode calls (SharedSchedule) hand out tasks of this many panels, whatever m: the AMX kernel
// takes a panel at a time at every m, so the AVX-512 tiles' widths below (one panel from 5 rows
// up) say nothing about it, and a task's fixed costs (the claim, the calls down to the kernel,
// its blocking) are spread over 256 KiB of weights instead of 64 (k = 1024). A MiniCPM4-0.5B
// decode step's matmuls, 1-panel and 4-panel tasks alternated step by step in one process (2
// vCPUs of a Xeon with AMX, median ratio of 40 pairs; an A/A pair 0.996-1.006): 16 rows 0.97-0.99x
// the time, 12 rows 0.98x, 6 rows 0.98x; 4 rows (3 panels before) 0.99-1.0x; 16 rows with 2, 3
// or 8 panels 1.01-1.02x 4's.
constexpr int64_t kAmxDecodeTaskPanels = 4;

// Columns of the widest tile an m-row call of `layout` runs, where one row tile takes all m rows
// (decode); taller calls' tiles span a panel. For AMX decode calls: a task's columns.
int64_t TileColumns(PackedLayout layout, int64_t width, int64_t m) {
  if (IsQ8Layout(layout)) return m > kQ8MaxTileRows ? width : width * Q8PanelsPerTile(m);
  if (layout == PackedLayout::kPanel32Bf16Pairs && AmxChoice().on && SharedSchedule(m)) {
    return width * kAmxDecodeTaskPanels;
  }
  const bool avx2 = LayoutIsa(layout) == Isa::kAvx2;
  if (m > (avx2 ? kAvx2MaxTileRows : kAvx512MaxTileRows)) return width;
  const int h = static_cast<int>(m);
  return width * (avx2 ? Avx2PanelsPerTile(h) : Avx512PanelsPerTile(h));
}

// Q8_0 decode tasks are two tiles wide: a Q8_0 column is about half a bf16 one's bytes, so a
// one-tile task streamed a quarter of a bf16 task's. MiniCPM4-0.5B dims, 3 interleaved rounds
// against one tile: batch 4 1.07-1.09x the tokens/s, batch 16 1.03-1.08x, batch 1 level
// (0.97-1.01x); three tiles were level with one.
constexpr int64_t kQ8TilesPerDecodeTask = 2;

template <typename Fn>
void ForTasks(ThreadPool& pool, int64_t m, int64_t n, const Fn& fn) {
  if (SharedSchedule(m)) {
    pool.ParallelForShares(n, fn);
  } else {
    pool.ParallelFor(n, fn);
  }
}

// Tasks split columns only, never k, so neither their sizes nor the thread count change any
// result. Units of several columns (panels): about 8 tasks per thread so the dynamic schedule
// balances, at most `max_units` each (8 panels: a decode task then streams 16-64 KiB of
// weights per panel, long enough to amortise it), shrinking towards the end of the group
// (guided: half of each thread's share of what is left) because the other threads wait for the
// last task: perf put ~3% of prefill and of batched decode in those waits. Down to one decode
// tile's width (`quantum` units), no less: a narrower tile streams worse (Zen 5: batch 1's
// 4-panel tiles against tails of 1-3 panels 0.88x; batch 2's 4-panel tiles, whose calls ended
// in 1-panel tasks before, 1.07-1.10x in two runs of 5 interleaved rounds against a duplicate's
// 0.95-1.03x; batch 3-4's 2-panel tiles level). Decode calls (SharedSchedule) take tasks of
// one tile's width (Q8_0: two) in memory order instead: the shares' stealing balances their
// ends. Rows of an unpacked W: kRowsPerTask each. `total_units`: the jobs' units of several
// columns.
const std::vector<Task>& MakeTasks(std::span<const Job> jobs, int64_t total_units, int64_t m,
                                   int threads, int64_t max_units = 8) {
  thread_local std::vector<Task> tasks;
  tasks.clear();
  int64_t quantum = 1;
  for (const Job& j : jobs) {
    if (j.pw == nullptr || total_units < 8) continue;
    quantum = std::max(quantum, TileColumns(j.pw->layout, j.pw->width, m) / j.unit_cols);
  }
  if (SharedSchedule(m)) {
    for (size_t i = 0; i < jobs.size(); ++i) {
      const bool q8 = jobs[i].pw && IsQ8Layout(jobs[i].pw->layout);
      const int64_t n = jobs[i].unit_cols > 1 ? quantum * (q8 ? kQ8TilesPerDecodeTask : 1)
                                              : kRowsPerTask;
      for (int64_t b = 0; b < jobs[i].units; b += n) {
        tasks.push_back({i, b, std::min(jobs[i].units, b + n)});
      }
    }
    return tasks;
  }
  const int64_t per_task = std::max(
      quantum,
      std::clamp<int64_t>(total_units / (8 * int64_t{threads}), 1, max_units) / quantum * quantum);
  int64_t left = total_units;
  for (size_t i = 0; i < jobs.size(); ++i) {
    for (int64_t b = 0; b < jobs[i].units;) {
      int64_t n = kRowsPerTask;
      if (jobs[i].unit_cols > 1) {
        n = std::clamp<int64_t>(left / (2 * int64_t{threads}) / quantum * quantum, quantum,
                                per_task);
        left -= std::min(n, jobs[i].units - b);
      }
      tasks.push_back({i, b, std::min(jobs[i].units, b + n)});
      b += n;
    }
  }
  return tasks;
}

// Whether a layout's AVX-512 kernels read x as bf16 pairs (Avx512X), made by PrepareX or by
// GatedMlp's SiLU epilogue.
bool ReadsPairs(PackedLayout l) {
  return l == PackedLayout::kPanel32Bf16Pairs || l == PackedLayout::kPanel32Ternary;
}

bool AnyLayout(std::span<const Job> jobs, bool (*pred)(PackedLayout)) {
  return std::any_of(jobs.begin(), jobs.end(),
                     [&](const Job& j) { return j.pw != nullptr && pred(j.pw->layout); });
}

// x packed for the AVX2 tiles (matmul_impl.h), once per call for every weight and task: the
// caller's scratch (it keeps the largest m·k seen), as only one thread calls at a time
// (ThreadPool::ParallelFor is not reentrant). One row needs no packing. The transpose is m·k
// copies against m·k·n multiply-adds.
const float* PackXForAvx2(const float* x, int64_t x_stride, int64_t m, std::span<const Job> jobs,
                          ThreadPool& pool) {
  if (m == 1 || !AnyLayout(jobs, [](PackedLayout l) { return LayoutIsa(l) == Isa::kAvx2; })) {
    return x;
  }
  thread_local AlignedBuffer scratch;
  const int64_t k = jobs[0].w->in_features;
  const size_t bytes = static_cast<size_t>(m * k) * sizeof(float);
  if (scratch.size() < bytes) scratch.Resize(bytes);
  float* packed_x = scratch.as<float>();
  pool.ParallelFor(NumRowTiles(m), [&](int64_t t, int) {
    PackRowTilesAvx2(x, x_stride, m, k, t, t + 1, packed_x);
  });
  return packed_x;
}

// x for the AVX-512 kernels: for bf16 pair panels, each row's bf16 check and pair packing,
// once per call rather than per task (O(m·k) each; a prefill matmul has dozens of tasks).
Avx512X PrepareXForAvx512(const float* x, int64_t x_stride, int64_t m, std::span<const Job> jobs,
                          ThreadPool& pool) {
  Avx512X out{x, x_stride};
  if (!AnyLayout(jobs, ReadsPairs)) {
    return out;
  }
  thread_local AlignedBuffer dot, pairs;
  const int64_t k = jobs[0].w->in_features, pairs_stride = PairsStride(k);
  if (dot.size() < static_cast<size_t>(m)) dot.Resize(static_cast<size_t>(m));
  const size_t pair_bytes = static_cast<size_t>(m * pairs_stride) * sizeof(uint32_t);
  if (pairs.size() < pair_bytes) pairs.Resize(pair_bytes);
  // The pointers are taken on this thread: inside the lambda, `dot` and `pairs` would name the
  // workers' own (empty) thread_local buffers.
  uint8_t* dot_rows = dot.as<uint8_t>();
  uint32_t* pair_rows = pairs.as<uint32_t>();
  constexpr int64_t kPrepRowsPerTask = 16;
  pool.ParallelFor((m + kPrepRowsPerTask - 1) / kPrepRowsPerTask, [&](int64_t t, int) {
    PrepareXAvx512(x, x_stride, k, t * kPrepRowsPerTask, std::min(m, (t + 1) * kPrepRowsPerTask),
                   dot_rows, pair_rows);
  });
  out.dot = dot_rows;
  out.pairs = pair_rows;
  return out;
}

// x quantized for Q8_0 weights (q8.h), once per call for all tasks, into the caller's
// thread-local scratch as PrepareXForAvx512's.
Q8X PrepareXForQ8(const float* x, int64_t x_stride, int64_t m, std::span<const Job> jobs,
                  ThreadPool& pool) {
  if (!AnyLayout(jobs, IsQ8Layout)) return {};
  const int64_t k = jobs[0].w->in_features, blocks = Q8Blocks(k), qs = Q8XStride(k);
  thread_local AlignedBuffer q, d, corr;
  if (q.size() < static_cast<size_t>(m * qs)) q.Resize(static_cast<size_t>(m * qs));
  const size_t scale_bytes = static_cast<size_t>(m * blocks) * sizeof(float);
  if (d.size() < scale_bytes) d.Resize(scale_bytes);
  if (corr.size() < scale_bytes) corr.Resize(scale_bytes);
  // Taken here: inside the lambda, the buffers would be the workers' own.
  const Q8X out{q.as<int8_t>(), d.as<float>(), corr.as<int32_t>(), qs, blocks};
  constexpr int64_t kQuantRows = 16;  // rows per task
  pool.ParallelFor((m + kQuantRows - 1) / kQuantRows, [&](int64_t t, int) {
    QuantizeRowsQ8(x, x_stride, k, t * kQuantRows, std::min(m, (t + 1) * kQuantRows),
                   const_cast<int8_t*>(out.q), const_cast<float*>(out.d),
                   const_cast<int32_t*>(out.corr));
  });
  return out;
}

// x in every form a group's kernels take, prepared once per call.
struct XForms {
  Isa isa;
  const float* x;
  int64_t x_stride;
  const float* xp;  // PackXForAvx2
  Avx512X x512;
  Q8X q8;
};

XForms PrepareX(const float* x, int64_t x_stride, int64_t m, std::span<const Job> jobs,
                ThreadPool& pool) {
  return {ActiveIsa(), x, x_stride, PackXForAvx2(x, x_stride, m, jobs, pool),
          PrepareXForAvx512(x, x_stride, m, jobs, pool), PrepareXForQ8(x, x_stride, m, jobs, pool)};
}

// x's AVX-512 forms from row r0 on (k: the rows' length, which sets the pair rows' stride).
Avx512X RowsFrom(const Avx512X& a, int64_t r0, int64_t k) {
  return {a.x ? a.x + r0 * a.x_stride : nullptr, a.x_stride, a.dot ? a.dot + r0 : nullptr,
          a.pairs ? a.pairs + r0 * PairsStride(k) : nullptr};
}

// MatMulPanelsAvx512 with its runs of bf16 rows on AMX tiles (the others, f32 FMAs, as there).
// fn(i0, i1, dot) for each run [i0, i1) of x's m rows that all take the dot products (dot) or
// all do not: AMX takes the first kind, f32 FMAs the second.
template <typename Fn>
void ForDotRuns(const Avx512X& x, int64_t m, Fn&& fn) {
  const auto dot = [&](int64_t i) { return x.dot != nullptr && x.dot[i] != 0; };
  for (int64_t i0 = 0; i0 < m;) {
    int64_t i1 = i0 + 1;
    while (i1 < m && dot(i1) == dot(i0)) ++i1;
    fn(i0, i1, dot(i0));
    i0 = i1;
  }
}

void PairPanelsAmx(const Avx512X& x, int64_t m, const PackedWeight& pw, int64_t pb, int64_t pe,
                   float* y, int64_t ys, Round round) {
  const int64_t ps = PairsStride(pw.k);
  ForDotRuns(x, m, [&](int64_t i0, int64_t i1, bool dot) {
    if (dot) {
      MatMulPanelsAmx(x.pairs + i0 * ps, ps, i1 - i0, pw, pb, pe, y + i0 * ys, ys, round);
    } else {
      MatMulPanelsAvx512(RowsFrom(x, i0, pw.k), i1 - i0, pw, pb, pe, y + i0 * ys, ys, round);
    }
  });
}

// m rows of n f32 values `f` (stride fs, bf16-exact) as bf16 rows y (stride ys).
void NarrowToBf16(const float* f, int64_t fs, int64_t m, int64_t n, uint16_t* y, int64_t ys) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t c = 0; c < n; ++c) y[i * ys + c] = F32ToBf16(f[i * fs + c]);
  }
}

// Output columns [c0, c1) of job j, all m rows, into y (at column c0), rounded as `round` says.
// c0 is a multiple of the job's panel width; c1 too, or the matrix's last column.
void RunColumns(const Job& j, const XForms& xf, int64_t m, int64_t c0, int64_t c1, float* y,
                int64_t ys, Round round) {
  // Packed kernels round each tile as they store it, while it is in registers or L1.
  if (j.pw) {
    const int64_t w = j.pw->width, pb = c0 / w, pe = (c1 + w - 1) / w;
    if (IsQ8Layout(j.pw->layout)) return MatMulPanelsQ8(xf.q8, m, *j.pw, pb, pe, y, ys, round);
    if (LayoutIsa(j.pw->layout) == Isa::kAvx2) {
      return MatMulPanelsAvx2(xf.xp, m, *j.pw, pb, pe, y, ys, round);
    }
    // Every call, whatever m: AMX's sums differ from vdpbf16ps's in the last bits, so a row must
    // not change kernels with its batch.
    if (j.pw->layout == PackedLayout::kPanel32Bf16Pairs && AmxChoice().on) {
      return PairPanelsAmx(xf.x512, m, *j.pw, pb, pe, y, ys, round);
    }
    return MatMulPanelsAvx512(xf.x512, m, *j.pw, pb, pe, y, ys, round);
  }
  // Unpacked: rows [c0, c1) of W as a weight of their own, so that y starts at column c0.
  const LinearWeight rows{j.w->dtype, c1 - c0, j.w->in_features,
                          static_cast<const uint8_t*>(j.w->data) +
                              c0 * j.w->in_features * static_cast<int64_t>(DTypeSize(j.w->dtype))};
  if (xf.isa == Isa::kScalar) {
    MatMulRef(xf.x, xf.x_stride, m, rows, 0, c1 - c0, y, ys);
  } else {
    MatMulRowsAvx2(xf.x, xf.x_stride, m, rows, 0, c1 - c0, y, ys);
  }
  for (int64_t i = 0; i < m; ++i) RoundInPlace(y + i * ys, c1 - c0, round);
}

}  // namespace

namespace {

// Re-lays out `w` for `isa` unless it already is, quantized as `quant` says. Ternary weights
// stay codes under Q8_0 (lossless, and a quarter of its bytes).
void Pack(LinearWeight* w, Isa isa, WeightQuant quant) {
  const PackedWeight* packed = Packed(*w);
  if (packed && (IsTernaryLayout(packed->layout) || IsQ8Layout(packed->layout))) return;
  // Ternary bf16 weights (BitCPM4) as 2-bit codes (TernaryPackingEnabled). Real-valued weights
  // fail the scan within their first 32 values.
  if (w->dtype == DType::kBF16 && TernaryPackingEnabled() && packed == nullptr) {
    const TernaryFormat f =
        DetectTernary(static_cast<const uint16_t*>(w->data), w->out_features, w->in_features);
    if (f.ternary()) {
      w->packed = PackTernary(*w, f, TernaryCodesLayout(isa));
      return;
    }
  }
  if (quant == WeightQuant::kQ8_0) {
    w->packed = PackQ8(*w);
    return;
  }
  const PackedLayout want = WantedLayout(isa, w->dtype);
  if (packed && packed->layout == want) return;
  w->packed = PackLinear(*w, want);
}

void DropSource(LinearWeight* w) {
  if (w->mapped) {
    // A checkpoint's mapping: its whole pages inside the weight leave this process (a buffer of
    // our own is freed with its owner instead; its pages must never be zeroed under a sharer).
    ReleaseWholePages(w->data, static_cast<size_t>(w->out_features * w->in_features) *
                                   DTypeSize(w->dtype));
  }
  w->owner.reset();
  w->data = nullptr;
  w->mapped = false;
}

}  // namespace

void PrepareLinear(LinearWeight* w, Source source, WeightQuant quant) {
  const Isa isa = ActiveIsa();
  if (w->data == nullptr || (isa == Isa::kScalar && quant == WeightQuant::kNone)) return;
  if (w->dtype != DType::kF32 && w->dtype != DType::kBF16) return;
  Pack(w, isa, quant);
  if (source == Source::kDrop && Packed(*w) != nullptr) DropSource(w);
}

// The codes wherever a kernel for them matches the matmul: an 8th of the bytes beats bf16 panels
// wherever decode is memory-bound. The AVX2 codes lose to the AVX-512 BF16 matmul (Zen 5, 2
// threads: 193 / 64 / 184 tokens/s at pp512 / batch 1 / batch 16 against 742 / 68 / 491); the
// AVX-512 codes, decoded to its own bf16 pairs, beat it up to 32 rows (batch 1 ~155 vs ~70).
// VBMI and BMI2: the AVX-512 decode's byte selects and bit gathers. Without them (or vdpbf16ps)
// an AVX-512 matmul keeps bf16 pairs, and runs the AVX2 codes only when CPM_TERNARY=1 asks.
PackedLayout TernaryCodesLayout(Isa isa) {
  const CpuFeatures& cpu = GetCpuFeatures();
  const bool avx512_dot = isa == Isa::kAvx512 && Avx512Choice().on && cpu.avx512bf16 &&
                          cpu.avx512vbmi && cpu.bmi2;
  return avx512_dot ? PackedLayout::kPanel32Ternary : PackedLayout::kPanel16Ternary;
}

bool TernaryPackingEnabled() {
  const Isa isa = ActiveIsa();
  // Never at the scalar level, whatever CPM_TERNARY says: it has no kernel for the codes (and
  // under Q8_0 the bf16 source they replace is dropped).
  if (isa == Isa::kScalar) return false;
  return TernaryPackingOverride().value_or(
      LayoutIsa(WantedLayout(isa, DType::kBF16)) == Isa::kAvx2 ||
      TernaryCodesLayout(isa) == PackedLayout::kPanel32Ternary);
}

int64_t PackedHeldBytesDelta(const std::vector<const LinearWeight*>& ws) {
  int64_t delta = 0;
  for (const LinearWeight* w : ws) {
    const PackedWeight* pw = Packed(*w);
    if (pw == nullptr || !(IsQ8Layout(pw->layout) || IsTernaryLayout(pw->layout))) continue;
    delta += static_cast<int64_t>(pw->data.size() + pw->scales.size());
    if (pw->panels) delta += static_cast<int64_t>(pw->panels->data.size());
    if (w->data == nullptr) {
      delta -= w->out_features * w->in_features * static_cast<int64_t>(DTypeSize(w->dtype));
    }
  }
  return delta;
}

TernaryStreaming ActiveTernaryStreaming() {
  if (!TernaryPackingEnabled()) return {};
  if (TernaryCodesLayout(ActiveIsa()) == PackedLayout::kPanel32Ternary) {
    return {kAvx512TernaryMaxRows, 4};  // an AND mask per pair lane
  }
  return {kAvx2MaxTileRows, 2};
}

int64_t StreamedBytes(const LinearWeight& w, int64_t rows) {
  const PackedWeight* pw = Packed(w);
  if (pw == nullptr) {
    return w.out_features * w.in_features * static_cast<int64_t>(DTypeSize(w.dtype));
  }
  if (pw->panels && rows > ActiveTernaryStreaming().max_rows) {
    return static_cast<int64_t>(pw->panels->data.size());
  }
  return static_cast<int64_t>(pw->data.size() + pw->scales.size());
}

bool MatMulUsesBf16Dot() {
  return ActiveIsa() == Isa::kAvx512 && GetCpuFeatures().avx512bf16 && Avx512Choice().on;
}

bool MatMulUsesAmx() { return MatMulUsesBf16Dot() && AmxChoice().on; }

std::string MatMulDescription() {
  switch (ActiveIsa()) {
    case Isa::kScalar: return "scalar reference";
    case Isa::kAvx512: {
      const KernelChoice& c = Avx512Choice();
      if (c.on) {
        const char* what =
            MatMulUsesAmx()
                ? "avx512 + AMX: AMX-BF16 tiles (TDPBF16PS) on bf16 weights and bf16 "
                  "activations, f32 FMAs otherwise"
            : GetCpuFeatures().avx512bf16
                ? "avx512: vdpbf16ps on bf16 weights and bf16 activations, f32 FMAs otherwise"
                : "avx512: f32 FMAs on bf16 weights widened in registers";
        std::string out = std::string(what) + " (" + c.why + ")";
        if (AmxUsable() && !AmxChoice().on) out += "; AMX " + AmxChoice().why;
        return out;
      }
      return "avx2: f32 FMAs on bf16 weights widened in registers (AVX-512 kernels not used: " +
             c.why + ")";
    }
    default: return "avx2: f32 FMAs on bf16 weights widened in registers";
  }
}

void MatMul(const float* x, int64_t x_stride, int64_t m, const LinearWeight& w, float* y,
            int64_t y_stride, ThreadPool& pool, Round round) {
  const LinearWeight* ws[] = {&w};
  float* ys[] = {y};
  const int64_t strides[] = {y_stride};
  MatMulGroup(x, x_stride, m, ws, ys, strides, pool, round);
}

bool MatMulWritesBf16Rows(std::span<const LinearWeight* const> ws) {
  if (!MatMulUsesAmx()) return false;
  return std::all_of(ws.begin(), ws.end(), [](const LinearWeight* w) {
    const PackedWeight* pw = Packed(*w);
    return pw != nullptr && pw->layout == PackedLayout::kPanel32Bf16Pairs;
  });
}

namespace {

// x's forms from row r0 on. Only where no form is a packing of row tiles (AVX2's, whose tiles
// depend on m).
XForms FromRow(const XForms& xf, int64_t r0, int64_t k) {
  XForms out = xf;
  out.x = xf.x ? xf.x + r0 * xf.x_stride : nullptr;
  out.xp = out.x;
  if (out.q8.q != nullptr) {
    out.q8.q += r0 * out.q8.q_stride;
    out.q8.d += r0 * out.q8.blocks;
    out.q8.corr += r0 * out.q8.blocks;
  }
  out.x512 = RowsFrom(xf.x512, r0, k);
  return out;
}

// RunColumns into bf16 rows y (at column c0), the sums rounded to bf16: AMX's tiles write them
// for the rows on the dot products; any other kernel, or a run of rows off them, computes f32
// rows into a scratch first (a pass more: MatMulWritesBf16Rows tells callers where none is
// taken).
void RunColumnsBf16(const Job& j, const XForms& xf, int64_t m, int64_t c0, int64_t c1,
                    uint16_t* y, int64_t ys) {
  thread_local AlignedBuffer scratch;
  const int64_t width = c1 - c0;
  const auto via_f32 = [&](const Job& job, const XForms& rows_xf, int64_t rows, uint16_t* out) {
    const size_t bytes = static_cast<size_t>(rows * width) * sizeof(float);
    if (scratch.size() < bytes) scratch.Resize(bytes);
    float* f = scratch.as<float>();
    RunColumns(job, rows_xf, rows, c0, c1, f, width, Round::kBf16);
    NarrowToBf16(f, width, rows, width, out, ys);
  };
  if (!(j.pw && j.pw->layout == PackedLayout::kPanel32Bf16Pairs && AmxChoice().on)) {
    return via_f32(j, xf, m, y);
  }
  const Avx512X& x = xf.x512;
  const int64_t w = j.pw->width, pb = c0 / w, pe = (c1 + w - 1) / w, ps = PairsStride(j.pw->k);
  ForDotRuns(x, m, [&](int64_t i0, int64_t i1, bool dot) {
    if (dot) {
      MatMulPanelsAmx(x.pairs + i0 * ps, ps, i1 - i0, *j.pw, pb, pe, y + i0 * ys, ys);
    } else {
      via_f32(j, FromRow(xf, i0, j.pw->k), i1 - i0, y + i0 * ys);
    }
  });
}

// Rows [r0, r0 + rows) (xf from row r0 on) × columns [c0, c1) of job j into its output.
void RunJobColumns(const Job& j, const XForms& xf, int64_t rows, int64_t r0, int64_t c0,
                   int64_t c1, Round round) {
  if (j.y16 != nullptr) {
    return RunColumnsBf16(j, xf, rows, c0, c1, j.y16 + r0 * j.y_stride + c0, j.y_stride);
  }
  RunColumns(j, xf, rows, c0, c1, j.y + r0 * j.y_stride + c0, j.y_stride, round);
}

// Row blocks per column task: a call of many rows but few column tasks (the vision tower's
// P·V, 72 columns in 3 panels over 1024 rows: 3 tasks for 2 threads, one of them a partial
// panel that costs a whole one) also splits its rows, into blocks of ≥ 64, until there are ~4
// tasks per thread. Rows are independent (each element one chain over k), so no result moves.
int64_t RowBlocks(int64_t tasks, int64_t m, int threads) {
  if (tasks == 0 || m < 128) return 1;
  const int64_t want = (4 * int64_t{threads} + tasks - 1) / tasks;
  return std::clamp<int64_t>(want, 1, m / 64);
}

// `jobs` over x (already in every form their kernels take) as one parallel region.
void RunGroup(std::span<const Job> jobs, const XForms& xf, int64_t m, ThreadPool& pool,
              Round round) {
  int64_t total_panels = 0;
  for (const Job& j : jobs) {
    if (j.pw) total_panels += j.units;
  }
  const std::vector<Task>& tasks = MakeTasks(jobs, total_panels, m, pool.num_threads());
  const int64_t n_tasks = static_cast<int64_t>(tasks.size());
  const bool row_tiles_packed = xf.xp != xf.x;
  const int64_t blocks = row_tiles_packed ? 1 : RowBlocks(n_tasks, m, pool.num_threads());
  const int64_t block_rows = (m + blocks - 1) / blocks;
  const int64_t k = jobs[0].w->in_features;
  ForTasks(pool, m, n_tasks * blocks, [&](int64_t t, int) {
    const Task& task = tasks[t / blocks];
    const Job& j = jobs[task.job];
    const int64_t c0 = task.begin * j.unit_cols;
    const int64_t c1 = std::min(j.w->out_features, task.end * j.unit_cols);
    if (blocks == 1) return RunJobColumns(j, xf, m, 0, c0, c1, round);
    const int64_t r0 = (t % blocks) * block_rows, r1 = std::min(m, r0 + block_rows);
    if (r0 >= r1) return;
    RunJobColumns(j, FromRow(xf, r0, k), r1 - r0, r0, c0, c1, round);
  });
}

// What finishes a gate/up task: its columns [c0, c1) from their two products g and u
// ([m][ss] each, column c0 first).
using GateUpFinish =
    std::function<void(const float* g, const float* u, int64_t ss, int64_t c0, int64_t c1)>;

// Gate and up as the jobs of a fused call (their y unused: RunGateUp's tasks write scratch);
// the two must have one shape.
struct GateUpJobs {
  Job jobs[2];
  GateUpJobs(const LinearWeight& gate, const LinearWeight& up)
      : jobs{MakeJob(gate, ActiveIsa(), nullptr, 0), MakeJob(up, ActiveIsa(), nullptr, 0)} {
    CPM_CHECK(gate.in_features == up.in_features && gate.out_features == up.out_features);
  }
};

// MatMulSiluMul's tasks over x (in every form gate and up's kernels take): each computes its
// columns of x · gateᵀ and x · upᵀ into a per-worker scratch, then `finish` takes them from there.
void RunGateUp(const XForms& xf, int64_t m, const GateUpJobs& gu, ThreadPool& pool, Round round,
               const GateUpFinish& finish) {
  const Job(&jobs)[2] = gu.jobs;
  const LinearWeight& gate = *jobs[0].w;
  // Units of kFusedUnit columns, a whole number of panels of either width (16, 32); per task at
  // most 4 (a gate/up pair of 4 panels each, as MatMulGroup's tasks of at most 8 panels) and as
  // many as keep its two products within kFusedScratchBytes (L2).
  const int64_t n = gate.out_features, units = (n + kFusedUnit - 1) / kFusedUnit;
  const int64_t unit_bytes = 2 * m * kFusedUnit * static_cast<int64_t>(sizeof(float));
  const int64_t max_units = std::clamp<int64_t>(kFusedScratchBytes / unit_bytes, 1, 4);
  // Its kernels' layout (pw) sets the smallest task; the job itself never runs.
  const Job fused{&gate, jobs[0].pw, nullptr, 0, units, kFusedUnit};
  const std::vector<Task>& tasks = MakeTasks({&fused, 1}, units, m, pool.num_threads(), max_units);
  // Each worker's scratch: the task's gate product [m][ss], then its up product. Rows a cache
  // line more than the widest task apart, so that they do not all share L1 sets.
  int64_t widest = 0;
  for (const Task& t : tasks) widest = std::max(widest, t.end - t.begin);
  const int64_t ss = widest * kFusedUnit + 16, per_worker = 2 * m * ss;
  thread_local AlignedBuffer scratch;
  const size_t bytes = static_cast<size_t>(per_worker * pool.num_threads()) * sizeof(float);
  if (scratch.size() < bytes) scratch.Resize(bytes);
  float* base = scratch.as<float>();  // taken here: inside the lambda, `scratch` is the worker's
  ForTasks(pool, m, static_cast<int64_t>(tasks.size()), [&](int64_t t, int worker) {
    const int64_t c0 = tasks[t].begin * kFusedUnit, c1 = std::min(n, tasks[t].end * kFusedUnit);
    float* g = base + worker * per_worker;
    float* u = g + m * ss;
    RunColumns(jobs[0], xf, m, c0, c1, g, ss, round);
    RunColumns(jobs[1], xf, m, c0, c1, u, ss, round);
    finish(g, u, ss, c0, c1);
  });
}

// x given as pair rows (PairRows), every row on the dot products.
XForms FromPairRows(const PairRows& x, int64_t m, int64_t k) {
  CPM_CHECK(x.stride == PairsStride(k));
  thread_local AlignedBuffer dot;
  if (dot.size() < static_cast<size_t>(m)) dot.Resize(static_cast<size_t>(m));
  std::memset(dot.data(), 1, static_cast<size_t>(m));
  return {ActiveIsa(), nullptr, 0, nullptr, Avx512X{nullptr, 0, dot.as<uint8_t>(), x.pairs},
          Q8X{}};
}

// GatedMlp where down takes pair rows (rounded to bf16, MatMulTakesPairRows): the activation
// straight into the pairs the down kernel reads. Rounded, every row is bf16-exact, so each takes
// the dot products, as PrepareX would have decided.
void GatedMlpPairs(const XForms& xf, int64_t m, const GateUpJobs& gu, const Job& down,
                   ThreadPool& pool) {
  const int64_t n = gu.jobs[0].w->out_features, ps = PairsStride(n);
  thread_local AlignedBuffer pairs;
  const size_t pair_bytes = static_cast<size_t>(m * ps) * sizeof(uint32_t);
  if (pairs.size() < pair_bytes) pairs.Resize(pair_bytes);
  // Taken here: inside the lambda, `pairs` would name the worker's own buffer.
  uint32_t* pair_rows = pairs.as<uint32_t>();
  RunGateUp(xf, m, gu, pool, Round::kBf16,
            [&](const float* g, const float* u, int64_t ss, int64_t c0, int64_t c1) {
              SiluMulToPairsAvx512(g, ss, u, ss, pair_rows + c0 / 2, ps, m, c1 - c0);
            });
  RunGroup({&down, 1}, FromPairRows({pair_rows, ps}, m, n), m, pool, Round::kBf16);
}

// A group's jobs at the active ISA (its weights share one k).
std::vector<Job> GroupJobs(std::span<const LinearWeight* const> ws, std::span<float* const> ys,
                           std::span<const int64_t> y_strides) {
  CPM_CHECK(ws.size() == ys.size() && ws.size() == y_strides.size());
  for (const LinearWeight* w : ws) CPM_CHECK(w->in_features == ws[0]->in_features);
  const Isa isa = ActiveIsa();
  std::vector<Job> jobs(ws.size());
  for (size_t i = 0; i < ws.size(); ++i) jobs[i] = MakeJob(*ws[i], isa, ys[i], y_strides[i]);
  return jobs;
}

}  // namespace

int64_t PairRowsStride(int64_t k) { return PairsStride(k); }

bool MatMulTakesPairRows(std::span<const LinearWeight* const> ws) {
  if (!MatMulUsesBf16Dot()) return false;
  const Isa isa = ActiveIsa();
  return std::all_of(ws.begin(), ws.end(), [&](const LinearWeight* w) {
    const PackedWeight* pw = Packed(*w);
    return pw != nullptr && ReadsPairs(pw->layout) && LayoutIsa(pw->layout) <= isa;
  });
}

void MatMulGroup(const float* x, int64_t x_stride, int64_t m,
                 std::span<const LinearWeight* const> ws, std::span<float* const> ys,
                 std::span<const int64_t> y_strides, ThreadPool& pool, Round round) {
  if (m == 0 || ws.empty()) return;
  const std::vector<Job> jobs = GroupJobs(ws, ys, y_strides);
  RunGroup(jobs, PrepareX(x, x_stride, m, jobs, pool), m, pool, round);
}

void MatMulGroup(const PairRows& x, int64_t m, std::span<const LinearWeight* const> ws,
                 std::span<float* const> ys, std::span<const int64_t> y_strides,
                 ThreadPool& pool, Round round) {
  if (m == 0 || ws.empty()) return;
  CPM_CHECK(MatMulTakesPairRows(ws));
  const std::vector<Job> jobs = GroupJobs(ws, ys, y_strides);
  RunGroup(jobs, FromPairRows(x, m, ws[0]->in_features), m, pool, round);
}

void MatMulSiluMul(const float* x, int64_t x_stride, int64_t m, const LinearWeight& gate,
                   const LinearWeight& up, float* out, int64_t out_stride, ThreadPool& pool,
                   Round round) {
  const GateUpJobs gu(gate, up);
  if (m == 0) return;
  RunGateUp(PrepareX(x, x_stride, m, gu.jobs, pool), m, gu, pool, round,
            [&](const float* g, const float* u, int64_t ss, int64_t c0, int64_t c1) {
              SiluMul(g, ss, u, ss, out + c0, out_stride, m, c1 - c0, round);
            });
}

void GatedMlp(const float* x, int64_t x_stride, int64_t m, const LinearWeight& gate,
              const LinearWeight& up, const LinearWeight& down, float* act, int64_t act_stride,
              float* out, int64_t out_stride, ThreadPool& pool, Round round) {
  CPM_CHECK(down.in_features == gate.out_features);
  if (m == 0) return;
  const LinearWeight* downs[] = {&down};
  if (round != Round::kBf16 || !MatMulTakesPairRows(downs)) {
    MatMulSiluMul(x, x_stride, m, gate, up, act, act_stride, pool, round);
    return MatMul(act, act_stride, m, down, out, out_stride, pool, round);
  }
  const GateUpJobs gu(gate, up);
  GatedMlpPairs(PrepareX(x, x_stride, m, gu.jobs, pool), m, gu,
                MakeJob(down, ActiveIsa(), out, out_stride), pool);
}

namespace {

// GatedMlp on pair rows, its output wherever `down`'s job writes it (f32 or bf16 rows).
void GatedMlpOnPairRows(const PairRows& x, int64_t m, const LinearWeight& gate,
                        const LinearWeight& up, const Job& down, ThreadPool& pool) {
  CPM_CHECK(down.w->in_features == gate.out_features);
  const GateUpJobs gu(gate, up);
  if (m == 0) return;
  const LinearWeight* all[] = {&gate, &up, down.w};
  CPM_CHECK(MatMulTakesPairRows(all));
  GatedMlpPairs(FromPairRows(x, m, gate.in_features), m, gu, down, pool);
}

}  // namespace

void GatedMlp(const PairRows& x, int64_t m, const LinearWeight& gate, const LinearWeight& up,
              const LinearWeight& down, float* out, int64_t out_stride, ThreadPool& pool,
              Round round) {
  CPM_CHECK(m == 0 || round == Round::kBf16);  // pair rows hold bf16 values
  GatedMlpOnPairRows(x, m, gate, up, MakeJob(down, ActiveIsa(), out, out_stride), pool);
}

void MatMul(const float* x, int64_t x_stride, int64_t m, const LinearWeight& w, const Bf16Rows& y,
            ThreadPool& pool) {
  if (m == 0) return;
  Job j = MakeJob(w, ActiveIsa(), nullptr, y.stride);
  j.y16 = y.data;
  RunGroup({&j, 1}, PrepareX(x, x_stride, m, {&j, 1}, pool), m, pool, Round::kBf16);
}

void GatedMlp(const PairRows& x, int64_t m, const LinearWeight& gate, const LinearWeight& up,
              const LinearWeight& down, const Bf16Rows& out, ThreadPool& pool) {
  Job d = MakeJob(down, ActiveIsa(), nullptr, out.stride);
  d.y16 = out.data;
  GatedMlpOnPairRows(x, m, gate, up, d, pool);
}

void MatMulRef(const float* x, int64_t x_stride, int64_t m, const LinearWeight& w,
               int64_t row_begin, int64_t row_end, float* y, int64_t y_stride) {
  const int64_t k = w.in_features;
  for (int64_t r = row_begin; r < row_end; ++r) {
    for (int64_t i = 0; i < m; ++i) {
      const float* xi = x + i * x_stride;
      float acc = 0.0f;
      if (w.dtype == DType::kBF16) {
        const uint16_t* wr = static_cast<const uint16_t*>(w.data) + r * k;
        for (int64_t j = 0; j < k; ++j) acc += xi[j] * Bf16ToF32(wr[j]);
      } else {
        const float* wr = static_cast<const float*>(w.data) + r * k;
        for (int64_t j = 0; j < k; ++j) acc += xi[j] * wr[j];
      }
      y[i * y_stride + r] = acc;
    }
  }
}

}  // namespace cpm::kernels
