// `cpmserve bench`: offline throughput like llama-bench (pp = prompt tokens/s, tg = decode
// tokens/s at batch 1, 4, 16) of the real forward pass on dummy weights with a model's real
// dimensions, judged against the machine's limits measured in the same run (memory read
// bandwidth, FMA peak): each figure is also printed as a fraction of its bound. Models:
// MiniCPMForCausalLM (MiniCPM4) and the Qwen3.5 hybrid language model of MiniCPM-V-4.6
// (Gated DeltaNet + gated full-attention layers; decode also streams each sequence's
// recurrent state, so its bandwidth bound counts those bytes too).
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fmt/format.h>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "base/steal_time.h"
#include "base/thread_pool.h"
#include "bench_profile.h"
#include "commands.h"
#include "model_argument.h"
#include "kernels/amx.h"
#include "kernels/cpu_features.h"
#include "kernels/machine_limits.h"
#include "kernels/matmul.h"
#include "kernels/q8.h"
#include "kernels/ternary.h"
#include "kv/kv_cache.h"
#include "kv/state_slots.h"
#include "model/forward_profile.h"
#include "model/minicpm_config.h"
#include "model/qwen35_config.h"
#include "model/registry.h"

namespace cpm {
namespace {

struct BenchArgs {
  std::string model;
  std::vector<int64_t> pp = {128, 512};
  int64_t ubatch = 512;
  int64_t depth = 0;
  int64_t tg = 128;
  std::vector<int64_t> batches = {1, 4, 16};
  int repeats = 3;
  int threads = 0;
  bool pin = false;
  std::string json;
  bool skip_limits = false;
  bool ternary = false;
  std::string quantization = "none";  // none | q8_0 (--quantization)
  int64_t image_side = 448;  // MiniCPM-V-4.6: one square slice through the vision tower; 0: skip
  bool profile = false;      // each test's best run by forward section (bench_profile.h)
};

// Default model dir: ../shared/models/MiniCPM4-0.5B relative to the repo, found from the working
// directory or from the binary's place in a build directory of the repo.
std::string DefaultModelDir() {
  namespace fs = std::filesystem;
  const std::string rel = "../shared/models/MiniCPM4-0.5B";
  if (fs::exists(fs::path(rel) / "config.json")) return rel;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  for (fs::path p = exe.parent_path(); !ec && !p.empty() && p != p.parent_path();
       p = p.parent_path()) {
    if (fs::exists(p / rel / "config.json")) return (p / rel).lexically_normal().string();
  }
  return rel;
}

// Each limit at its larger value of two measurements.
kernels::MachineLimits BestOf(kernels::MachineLimits a, const kernels::MachineLimits& b) {
  if (a.fma_isa[0] == '\0') return b;  // `a` is no measurement yet
  if (b.read_gbps > a.read_gbps) {
    a.read_gbps = b.read_gbps;
    a.read_prefetch_bytes = b.read_prefetch_bytes;
  }
  a.read_gbps_1t = std::max(a.read_gbps_1t, b.read_gbps_1t);
  a.f32_fma_gflops = std::max(a.f32_fma_gflops, b.f32_fma_gflops);
  a.f32_fma_gflops_1t = std::max(a.f32_fma_gflops_1t, b.f32_fma_gflops_1t);
  a.bf16_dot_gflops = std::max(a.bf16_dot_gflops, b.bf16_dot_gflops);
  a.amx_bf16_gflops = std::max(a.amx_bf16_gflops, b.amx_bf16_gflops);
  a.int8_dot_gops = std::max(a.int8_dot_gops, b.int8_dot_gops);
  a.matmul_l1_gflops = std::max(a.matmul_l1_gflops, b.matmul_l1_gflops);
  return a;
}

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The share of `threads` threads' time over `seconds` that `stolen` CPU-seconds are.
double StealFraction(double stolen, double seconds, int threads) {
  return seconds > 0 ? std::min(1.0, stolen / (seconds * threads)) : 0;
}

// A timed run, the share of its threads' time the hypervisor gave to others (steal_time.h),
// and with `profile`, its forwards' sections (model/forward_profile.h).
struct Timed {
  double seconds = 1e30;
  double steal = 0;
  std::optional<ForwardProfile> profile;
};

template <typename F>
Timed TimeRun(int threads, bool profile, F&& run) {
  ForwardProfile sections;
  if (profile) SetThreadForwardProfile(&sections);
  const double s0 = StolenCpuSeconds(), t0 = Now();
  run();
  const double seconds = Now() - t0;
  SetThreadForwardProfile(nullptr);
  Timed t{seconds, StealFraction(StolenCpuSeconds() - s0, seconds, threads), std::nullopt};
  if (profile) t.profile = std::move(sections);
  return t;
}

// The fastest of `repeats` runs, each after an untimed `setup`.
template <typename Setup, typename F>
Timed BestRun(int repeats, int threads, bool profile, Setup&& setup, F&& run) {
  Timed best;
  for (int i = 0; i < repeats; ++i) {
    setup();
    Timed t = TimeRun(threads, profile, run);
    if (t.seconds < best.seconds) best = std::move(t);
  }
  return best;
}

// Parameter, FLOP and byte counts of one token's pass, from the config.
struct Cost {
  int64_t layer_params = 0;  // all linear weights of one decoder layer (MiniCPM)
  int64_t head_params = 0;   // vocab × hidden
  int64_t body_params = 0;   // linear weights of all layers
  int64_t weight_bytes_per_step = 0;  // body + head as stored (what one decode step streams)
  // Ternary layers on 2-bit codes: calls of more than codes_max_rows rows stream the bf16
  // panels instead (tall_weight_bytes_per_step); codes_max_rows 0: no codes.
  int64_t codes_max_rows = 0;
  int64_t tall_weight_bytes_per_step = 0;
  int64_t attn_flops_per_pair = 0;    // q·k and p·v over all attention layers, per (q, k) pair
  // Qwen3.5 hybrid only (zero for MiniCPM).
  int64_t full_layers = 0, linear_layers = 0;
  int64_t full_layer_params = 0;      // a gated-attention layer: q(+gate), k, v, o + MLP
  int64_t linear_layer_params = 0;    // a Gated DeltaNet layer: in_proj_qkv, z, b, a, out + MLP
  int64_t state_flops_per_token = 0;  // recurrent rule + conv over all GDN layers, per token
  int64_t state_bytes_per_seq = 0;    // conv + recurrent state of all GDN layers (f32)
};

// Bytes of an [n, k] linear weight as a decode step streams it: bf16, or Q8_0 (q8.h).
int64_t LinearBytes(int64_t n, int64_t k, bool q8) { return q8 ? kernels::Q8Bytes(n, k) : 2 * n * k; }

// The weight bytes a decode step of `batch` rows streams.
int64_t StepWeightBytes(const Cost& k, int64_t batch) {
  return k.codes_max_rows > 0 && batch > k.codes_max_rows ? k.tall_weight_bytes_per_step
                                                           : k.weight_bytes_per_step;
}

// `codes.max_rows` > 0: the layers' weights as BitCPM4's 2-bit codes plus a scale per output row
// (the dummy ternary weights' granularity), as the active kernels stream them up to that many
// rows, and as bf16 panels above; the head bf16 (Q8_0 with `q8`). Otherwise `q8`: every linear
// weight and the head as Q8_0.
Cost CostOf(const MiniCpmConfig& c, kernels::TernaryStreaming codes, bool q8) {
  Cost k;
  const int64_t hd = c.hidden_size, qd = c.num_attention_heads * c.head_dim,
                kvd = c.num_key_value_heads * c.head_dim, ffn = c.intermediate_size;
  k.layer_params = hd * qd + 2 * hd * kvd + qd * hd + 3 * hd * ffn;
  k.body_params = c.num_hidden_layers * k.layer_params;
  k.head_params = c.vocab_size * hd;
  const int64_t layer_rows = qd + 2 * kvd + hd + 2 * ffn + hd;
  const int64_t layer_bytes = LinearBytes(qd, hd, q8) + 2 * LinearBytes(kvd, hd, q8) +
                              LinearBytes(hd, qd, q8) + 2 * LinearBytes(ffn, hd, q8) +
                              LinearBytes(hd, ffn, q8);
  const int64_t head_bytes = LinearBytes(c.vocab_size, hd, q8);
  if (codes.max_rows > 0) {
    k.codes_max_rows = codes.max_rows;
    k.weight_bytes_per_step =
        k.body_params / 4 + c.num_hidden_layers * layer_rows * codes.scale_bytes + head_bytes;
    k.tall_weight_bytes_per_step = 2 * k.body_params + head_bytes;
  } else {
    k.weight_bytes_per_step = c.num_hidden_layers * layer_bytes + head_bytes;
  }
  k.attn_flops_per_pair = 4 * c.head_dim * c.num_attention_heads * c.num_hidden_layers;
  return k;
}

// The Qwen3.5 hybrid (MiniCPM-V-4.6's language model; its vision tower and MTP head are not
// part of a text decode step and are not counted). Per token and Gated DeltaNet layer the
// recurrent rule costs 7·Hv·dk·dv FLOPs: the decay S ← e^g S (1 per state element), Sᵀk (2),
// the rank-1 update S += k δᵀ (2) and the readout Sᵀq (2); the causal conv adds
// 2·conv_dim·kernel. Prefill is counted the same per token (it runs the chunked form of the
// rule, whose work is of that order). Each decode step reads and writes back every
// sequence's state once. Full-attention layers: 4·H·hd FLOPs per (q, k) pair, as MiniCPM.
Cost CostOf(const Qwen35Config& c, bool q8) {
  Cost k;
  const int64_t D = c.hidden_size, H = c.num_attention_heads, hd = c.head_dim,
                kvd = c.num_key_value_heads * c.head_dim, Hv = c.linear_num_value_heads,
                dk = c.linear_key_head_dim, dv = c.linear_value_head_dim;
  const int64_t mlp = 3 * D * c.intermediate_size;
  const int64_t q_rows = H * hd * (c.attn_output_gate ? 2 : 1);
  k.full_layer_params = q_rows * D + 2 * kvd * D + D * H * hd + mlp;
  k.linear_layer_params =
      c.conv_dim() * D + c.value_dim() * D + 2 * Hv * D + D * c.value_dim() + mlp;
  k.full_layers = c.num_full_layers();
  k.linear_layers = c.num_hidden_layers - k.full_layers;
  k.body_params = k.full_layers * k.full_layer_params + k.linear_layers * k.linear_layer_params;
  k.head_params = c.vocab_size * D;
  // Q8_0 leaves the Gated DeltaNet's a and b gates bf16 (qwen35_deltanet.h).
  const int64_t mlp_bytes = 2 * LinearBytes(c.intermediate_size, D, q8) +
                            LinearBytes(D, c.intermediate_size, q8);
  const int64_t full_bytes = LinearBytes(q_rows, D, q8) + 2 * LinearBytes(kvd, D, q8) +
                             LinearBytes(D, H * hd, q8) + mlp_bytes;
  const int64_t linear_bytes = LinearBytes(c.conv_dim(), D, q8) +
                               LinearBytes(c.value_dim(), D, q8) + 2 * 2 * Hv * D +
                               LinearBytes(D, c.value_dim(), q8) + mlp_bytes;
  k.weight_bytes_per_step = k.full_layers * full_bytes + k.linear_layers * linear_bytes +
                            LinearBytes(c.vocab_size, D, q8);
  k.attn_flops_per_pair = 4 * hd * H * k.full_layers;
  k.state_flops_per_token =
      k.linear_layers * (7 * Hv * dk * dv + 2 * c.conv_dim() * c.linear_conv_kernel_dim);
  k.state_bytes_per_seq = k.linear_layers *
                          ((c.linear_conv_kernel_dim - 1) * c.conv_dim() + Hv * dk * dv) *
                          static_cast<int64_t>(sizeof(float));
  return k;
}

// The dimensions a bench run needs, whichever architecture config.json names.
struct BenchModel {
  std::string architecture;
  bool hybrid = false;
  bool ternary = false;  // BitCPM4-style dummy weights (--ternary)
  bool codes = false;    // ... run as 2-bit codes (kernels::ActiveTernaryStreaming)
  bool q8 = false;       // --quantization q8_0
  int64_t vocab_size = 0;
  int64_t num_hidden_layers = 0;
  Cost cost;
};

StatusOr<BenchModel> ReadBenchModel(const std::string& text, const std::string& path,
                                    bool ternary, bool codes, bool q8) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  BenchModel m;
  if (j.is_object() && j.contains("architectures") && j["architectures"].is_array() &&
      !j["architectures"].empty() && j["architectures"][0].is_string()) {
    m.architecture = j["architectures"][0].get<std::string>();
  }
  if (m.architecture == "MiniCPMV4_6ForConditionalGeneration" ||
      m.architecture == "Qwen3_5ForCausalLM") {
    CPM_ASSIGN_OR_RETURN(Qwen35Config c, ParseQwen35Config(text, path));
    if (ternary) return InvalidArgument("--ternary: only MiniCPM4 (BitCPM4) has ternary weights");
    m.hybrid = true;
    m.vocab_size = c.vocab_size;
    m.num_hidden_layers = c.num_hidden_layers;
    m.cost = CostOf(c, q8);
    m.q8 = q8;
    return m;
  }
  CPM_ASSIGN_OR_RETURN(MiniCpmConfig c, ParseMiniCpmConfig(text, path));
  m.vocab_size = c.vocab_size;
  m.num_hidden_layers = c.num_hidden_layers;
  m.cost = CostOf(c, codes ? kernels::ActiveTernaryStreaming() : kernels::TernaryStreaming{}, q8);
  m.q8 = q8;
  m.ternary = ternary;
  m.codes = codes;
  return m;
}

struct Result {
  std::string test;
  int64_t batch = 1;
  int64_t tokens = 0;      // tokens processed per run
  double seconds = 0;      // best run
  double steal = 0;        // share of the best run's CPU time stolen by the hypervisor
  double flops = 0;        // per run, counted as 2 × params touched + attention (+ GDN state)
  double bytes = 0;        // bytes streamed per run (decode): weights + recurrent state + KV
  double state_bytes = 0;  // the recurrent-state part of `bytes` (hybrid models)
  double kv_bytes = 0;     // the KV-cache part of `bytes` (decode: every cached K and V read)
  double bound_seconds = 0;
  std::string bound;       // "bandwidth" or "compute"
  int64_t steps = 1;       // forwards per run (decode steps; 1 for a prompt or an image)
  std::optional<ForwardProfile> profile;  // the best run's sections (--profile)
};

// FLOPs of one side×side slice through MiniCPM-V-4.6's vision tower and mergers (spec §4):
// 2 × params touched per token, plus attention (QKᵀ and PV: 4·n²·D per full layer, 4·4·n·D
// for the 2×2 windows).
double VisionFlops(const MiniCpmV46VisionConfig& v, int64_t text_hidden, int64_t side) {
  const double D = v.hidden_size, I = v.intermediate_size, P = v.patch_size;
  const double n = (side / P) * (side / P), n2 = n / 4;
  const double layer_params = 4 * D * D + 2 * D * I;
  const int64_t layers = v.num_hidden_layers - (v.drop_vision_last_layer ? 1 : 0);
  const int64_t before = v.vit_merger ? v.insert_layer_id + 1 : layers;
  double f = 2 * n * (v.num_channels * P * P) * D;                      // patch embedding
  f += before * (2 * n * layer_params + 4 * n * n * D);                 // layers on h×w
  if (v.vit_merger) {
    f += 2 * n * 4 * D * D + 4 * 4 * n * D;                             // window attention
    f += 2 * n2 * (4 * D * 4 * I + 4 * I * D);                          // merge MLP
    f += (layers - before) * (2 * n2 * layer_params + 4 * n2 * n2 * D); // layers on h/2×w/2
  }
  const double blocks = (v.vit_merger ? n2 : n) / 4;
  f += 2 * blocks * (4 * D * 4 * D + 4 * D * text_hidden);              // merger
  return f;
}

TestProfile ProfileOf(const Result& r) {
  return {r.test, r.batch, r.steps, r.seconds, r.profile.value_or(ForwardProfile())};
}

// One side×side slice of noise pixels through the encoder, best of `repeats`.
Result BenchVision(VisionEncoder& enc, const MiniCpmV46VisionConfig& v, int64_t side, int repeats,
                   ThreadPool& pool) {
  std::vector<float> pixels(side * side * v.num_channels);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>((i * 2654435761u) >> 24) / 127.5f - 1;
  const int64_t patches_per_token = enc.default_patches_per_token();
  const int64_t rows = enc.OutputRows(side, side, patches_per_token);
  std::vector<float> out(rows * enc.output_dim());
  Result r;
  r.test = "image" + std::to_string(side);  // one side×side slice
  r.tokens = rows;
  r.flops = VisionFlops(v, enc.output_dim(), side);
  const Timed t = BestRun(repeats, pool.num_threads(), /*profile=*/false, [] {}, [&] {
    if (Status st = enc.EncodeSlice(pixels.data(), side, side, patches_per_token, out.data(), pool);
        !st.ok()) {
      std::fprintf(stderr, "bench: %s\n", st.message().c_str());
      std::exit(1);
    }
  });
  r.seconds = t.seconds;
  r.steal = t.steal;
  return r;
}

class Bencher {
 public:
  // `depth`: tokens already in every sequence's KV cache when a test starts (llama-bench's -d).
  // `profile`: record each test's best run by forward section.
  Bencher(Model& model, const BenchModel& m, ThreadPool& pool, int64_t depth, bool profile)
      : model_(model),
        m_(m),
        pool_(pool),
        cost_(m.cost),
        depth_(depth),
        profile_(profile),
        kv_bytes_per_token_(KvCache::BytesPerBlock(model.info().kv, 1, model.info().dtype)) {}

  // One sequence of n prompt tokens in steps of at most `ubatch` (llama-bench's n_ubatch; a
  // server's chunked prefill) after depth_ cached ones; logits for the last one only.
  Result Prefill(int64_t n, int64_t ubatch, int repeats) {
    KvCache kv(model_.info().kv, Blocks(depth_ + n), kBlockSize, model_.info().dtype);
    FillDepth(kv);
    std::unique_ptr<StateSlots> states = Slots(1);
    std::vector<int32_t> table = Table(0, depth_ + n);
    std::vector<float> logits(m_.vocab_size);
    struct Chunk {
      std::vector<int32_t> tokens;
      std::vector<SeqStep> seqs;
      std::vector<int64_t> rows;
    };
    std::vector<Chunk> chunks;
    for (int64_t p0 = 0; p0 < n; p0 += ubatch) {
      const int64_t len = std::min(ubatch, n - p0);
      chunks.push_back({Tokens(len), {{depth_ + p0, len, table, states ? 0 : -1, depth_ + n}}, {}});
      if (p0 + len == n) chunks.back().rows = {len - 1};
    }
    Result r{Name("pp", n), 1, n};
    Set(r, BestRun(repeats, pool_.num_threads(), profile_, [&] { ResetSlots(states.get()); }, [&] {
      for (const Chunk& c : chunks) Step(c.tokens, c.seqs, c.rows, kv, states.get(), logits);
    }));
    r.flops = 2.0 * (cost_.body_params * n + cost_.head_params) +
              double(cost_.attn_flops_per_pair) * (n * depth_ + n * (n + 1) / 2) +
              double(cost_.state_flops_per_token) * n;
    return r;
  }

  // `batch` sequences decode `steps` tokens each after depth_ cached ones, one token per step.
  Result Decode(int64_t batch, int64_t steps, int repeats) {
    const int64_t len = depth_ + steps, blocks = Blocks(len);
    KvCache kv(model_.info().kv, batch * blocks, kBlockSize, model_.info().dtype);
    FillDepth(kv);
    std::unique_ptr<StateSlots> states = Slots(batch);
    std::vector<std::vector<int32_t>> tables;
    for (int64_t b = 0; b < batch; ++b) tables.push_back(Table(b * blocks, len));
    std::vector<float> logits(batch * m_.vocab_size);
    std::vector<int64_t> rows(batch);
    for (int64_t b = 0; b < batch; ++b) rows[b] = b;
    Result r{Name("tg", steps), batch, batch * steps};
    r.steps = steps;
    Set(r, BestRun(repeats, pool_.num_threads(), profile_, [&] { ResetSlots(states.get()); }, [&] {
      for (int64_t s = 0; s < steps; ++s) {
        std::vector<SeqStep> seqs;
        for (int64_t b = 0; b < batch; ++b) {
          seqs.push_back({depth_ + s, 1, tables[b], states ? static_cast<int32_t>(b) : -1, depth_});
        }
        Step(Tokens(batch), seqs, rows, kv, states.get(), logits);
      }
    }));
    // Each step reads every sequence's recurrent state and writes it back, and reads the K and
    // V of every token in its cache (the new one included): (q, k) pairs of the whole run.
    const double pairs = double(batch) * (steps * depth_ + steps * (steps + 1) / 2);
    r.state_bytes = 2.0 * cost_.state_bytes_per_seq * batch * steps;
    r.kv_bytes = double(kv_bytes_per_token_) * pairs;
    r.bytes = double(StepWeightBytes(cost_, batch)) * steps + r.state_bytes + r.kv_bytes;
    r.flops = 2.0 * (cost_.body_params + cost_.head_params) * batch * steps +
              double(cost_.attn_flops_per_pair) * pairs +
              double(cost_.state_flops_per_token) * batch * steps;
    return r;
  }

  int64_t kv_bytes_per_token() const { return kv_bytes_per_token_; }

 private:
  static constexpr int64_t kBlockSize = 16;

  // "pp512", or "pp512@d1024" with a depth (llama-bench's "pp512 @ d1024").
  std::string Name(const char* kind, int64_t n) const {
    std::string name = kind + std::to_string(n);
    if (depth_ > 0) name += "@d" + std::to_string(depth_);
    return name;
  }
  // The depth's keys and values are filler, not a prefill of depth_ tokens (minutes at batch
  // 16 on a small CPU): attention reads them from memory as it would real ones. Written, not
  // left as zero pages, which would all map one physical page and stay in cache.
  void FillDepth(KvCache& kv) const {
    if (depth_ == 0) return;
    const size_t esize = DTypeSize(kv.dtype());
    for (int64_t l = 0; l < kv.spec().num_attention_layers; ++l) {
      const kernels::KvLayerView v = kv.Layer(l);
      const size_t bytes = static_cast<size_t>(kv.num_blocks() * v.BlockStride()) * esize;
      std::memset(v.k, 0x3c, bytes);  // bf16 0x3c3c ≈ 0.0115, f32 ≈ 0.0115 too
      std::memset(v.v, 0x3c, bytes);
    }
  }

  static int64_t Blocks(int64_t tokens) { return (tokens + kBlockSize - 1) / kBlockSize; }
  static std::vector<int32_t> Table(int64_t first, int64_t tokens) {
    std::vector<int32_t> t(Blocks(tokens));
    for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>(first + i);
    return t;
  }
  // Hybrid models: one recurrent-state slot per sequence (slot b for sequence b).
  std::unique_ptr<StateSlots> Slots(int64_t n) const {
    if (model_.info().state_slot_bytes == 0) return nullptr;
    auto slots = std::make_unique<StateSlots>(n, model_.info().state_slot_bytes);
    for (int64_t i = 0; i < n; ++i) slots->Allocate();
    return slots;
  }
  // Every sequence starts each run from the zero state (not timed).
  static void ResetSlots(StateSlots* slots) {
    if (slots == nullptr) return;
    for (int32_t i = 0; i < slots->num_slots(); ++i) slots->Release(i);
    for (int32_t i = 0; i < slots->num_slots(); ++i) slots->Allocate();
  }
  std::vector<int32_t> Tokens(int64_t n) {
    std::vector<int32_t> t(n);
    for (auto& v : t) v = static_cast<int32_t>(rng_() % m_.vocab_size);
    return t;
  }
  void Step(const std::vector<int32_t>& tokens, const std::vector<SeqStep>& seqs,
            const std::vector<int64_t>& rows, KvCache& kv, StateSlots* states,
            std::vector<float>& logits) {
    ForwardBatch fb;
    fb.tokens = tokens;
    fb.seqs = seqs;
    fb.logit_rows = rows;
    Status s = model_.Forward(fb, kv, states, logits.data(), pool_);
    if (!s.ok()) {
      std::fprintf(stderr, "bench: forward failed: %s\n", s.message().c_str());
      std::exit(1);
    }
  }
  static void Set(Result& r, const Timed& t) {
    r.seconds = t.seconds;
    r.steal = t.steal;
    r.profile = t.profile;
  }

  Model& model_;
  const BenchModel& m_;
  ThreadPool& pool_;
  Cost cost_;
  int64_t depth_;
  bool profile_;
  int64_t kv_bytes_per_token_;  // K and V of one token over all attention layers
  std::mt19937 rng_{7};
};

// What a MiniCPM4 decode step's weight bytes are made of.
const char* WeightsDescription(const BenchModel& m) {
  if (m.codes) {
    return m.q8 ? "of weights (layers ternary: 2-bit codes + row scales; head Q8_0)"
                : "of weights (layers ternary: 2-bit codes + row scales; head bf16)";
  }
  if (m.q8) {
    return m.ternary ? "of Q8_0 weights (layers ternary, quantized as any weight)"
                     : "of Q8_0 weights (int8 in blocks of 32 + fp16 scales)";
  }
  return m.ternary ? "bf16 weights (layers ternary, run as bf16: the 2-bit codes are off here, "
                     "by CPM_TERNARY=0 or for want of a kernel at this ISA)"
                   : "bf16 weights";
}

void PrintModelLine(const std::string& dir, const BenchModel& m) {
  const Cost& cost = m.cost;
  if (!m.hybrid) {
    std::printf("model: %s dims, %.1f M params/layer × %lld + head %.1f M, %.0f MB %s per "
                "decode step",
                dir.c_str(), cost.layer_params / 1e6, static_cast<long long>(m.num_hidden_layers),
                cost.head_params / 1e6, cost.weight_bytes_per_step / 1e6, WeightsDescription(m));
    if (cost.codes_max_rows > 0) {
      std::printf(" (%.0f MB at batches above %lld, whose calls stream the bf16 panels)",
                  cost.tall_weight_bytes_per_step / 1e6,
                  static_cast<long long>(cost.codes_max_rows));
    }
    std::printf("\n\n");
    return;
  }
  std::printf("model: %s dims (%s, Qwen3.5 hybrid), %.1f M params/Gated DeltaNet layer × %lld + "
              "%.1f M/gated attention layer × %lld + head %.1f M (tied), %.0f MB %s per decode "
              "step; recurrent state %.1f MB per sequence\n\n",
              dir.c_str(), m.architecture.c_str(), cost.linear_layer_params / 1e6,
              static_cast<long long>(cost.linear_layers), cost.full_layer_params / 1e6,
              static_cast<long long>(cost.full_layers), cost.head_params / 1e6,
              cost.weight_bytes_per_step / 1e6,
              m.q8 ? "of Q8_0 weights (Gated DeltaNet's a/b gates bf16)" : "bf16 weights",
              cost.state_bytes_per_seq / 1e6);
}

nlohmann::json ModelJson(const std::string& dir, const BenchModel& m) {
  const Cost& cost = m.cost;
  nlohmann::json j = {{"dir", dir}, {"weight_bytes_per_decode_step", cost.weight_bytes_per_step},
                      {"body_params", cost.body_params}, {"head_params", cost.head_params}};
  if (m.q8) j["quantization"] = "q8_0";
  if (m.ternary) {
    j["ternary"] = true;
    j["ternary_codes"] = m.codes;
    if (m.codes) {
      j["ternary_codes_max_rows"] = cost.codes_max_rows;  // taller calls stream bf16 panels
      j["weight_bytes_per_decode_step_above_max_rows"] = cost.tall_weight_bytes_per_step;
    }
  }
  if (m.hybrid) {
    j["architecture"] = m.architecture;
    j["full_attention_layers"] = cost.full_layers;
    j["linear_attention_layers"] = cost.linear_layers;
    j["full_layer_params"] = cost.full_layer_params;
    j["linear_layer_params"] = cost.linear_layer_params;
    j["attn_flops_per_pair"] = cost.attn_flops_per_pair;
    j["state_flops_per_token"] = cost.state_flops_per_token;
    j["state_bytes_per_sequence"] = cost.state_bytes_per_seq;
  }
  return j;
}

// Lines after the table for a shared host: the tests and probes the hypervisor took CPU time
// from (steal ≥ 1%), and any test that beat its bound, which only a limit measured low can
// explain (its probes fell on a bad minute: a neighbour on the memory bus, or the other vCPU
// run on the same core, which shows no steal).
void PrintHostNotes(const std::vector<Result>& results, bool kernel_check_above_peak,
                    double probe_stolen, double probe_seconds, int threads) {
  constexpr double kNotable = 0.01;
  std::string stolen, above = kernel_check_above_peak ? "the kernel check" : "";
  for (const Result& r : results) {
    const std::string name =
        r.test.rfind("tg", 0) == 0 ? fmt::format("{} batch {}", r.test, r.batch) : r.test;
    if (r.steal >= kNotable) stolen += fmt::format(", {} {:.1f}%", name, 100 * r.steal);
    if (r.bound_seconds > r.seconds) above += (above.empty() ? "" : ", ") + name;
  }
  const double probes = StealFraction(probe_stolen, probe_seconds, threads);
  if (probes >= kNotable) stolen += fmt::format(", the limit probes {:.1f}%", 100 * probes);
  if (!stolen.empty()) {
    std::printf("host steal (CPU time the hypervisor gave to other guests): %s\n",
                stolen.substr(2).c_str());
  }
  if (!above.empty()) {
    std::printf("warning: %s ran faster than the bound the limit probes allow: the limits were "
                "measured low (the host was busy during every probe); run again for fractions "
                "to trust\n",
                above.c_str());
  }
}

int RunBench(const BenchArgs& a) {
  std::string dir = a.model.empty() ? DefaultModelDir() : a.model;
  if (!ResolveModelArgument("bench", &dir, /*need_weights=*/false)) return 2;
  std::ifstream cf(dir + "/config.json");
  if (!cf) {
    std::fprintf(stderr, "bench: %s/config.json not found (use --model DIR)\n", dir.c_str());
    return 2;
  }
  std::stringstream text;
  text << cf.rdbuf();
  // Ternary dummy weights are streamed as 2-bit codes only where PrepareLinear packs them so.
  const bool codes = a.ternary && kernels::TernaryPackingEnabled();
  kernels::WeightQuant quant = kernels::WeightQuant::kNone;
  if (!ParseQuantization(a.quantization, &quant)) {
    std::fprintf(stderr, "bench: --quantization '%s' is not supported (none, q8_0)\n",
                 a.quantization.c_str());
    return 2;
  }
  const bool q8 = quant == kernels::WeightQuant::kQ8_0;
  auto bm = ReadBenchModel(text.str(), dir + "/config.json", a.ternary, codes, q8);
  if (!bm.ok()) {
    std::fprintf(stderr, "bench: %s\n", bm.status().message().c_str());
    return 2;
  }
  // MiniCPM-V-4.6: the vision slice's side must be a multiple of 4 patches (checked up front).
  std::optional<MiniCpmV46VisionConfig> vision;
  if (a.image_side > 0 && bm->architecture == "MiniCPMV4_6ForConditionalGeneration") {
    auto vc = ParseMiniCpmV46VisionConfig(text.str(), dir + "/config.json");
    if (!vc.ok()) {
      std::fprintf(stderr, "bench: %s\n", vc.status().message().c_str());
      return 2;
    }
    if (a.image_side % (4 * vc->patch_size) != 0) {
      std::fprintf(stderr, "bench: --image-side %lld is not a multiple of %lld (4 patches)\n",
                   static_cast<long long>(a.image_side), static_cast<long long>(4 * vc->patch_size));
      return 2;
    }
    vision = *vc;
  }
  ThreadPool pool(ThreadPoolOptions{
      .num_threads = a.threads, .pin_threads = a.pin, .before_sleep = kernels::ReleaseTiles});
  LoadOptions lo;
  lo.model_dir = dir;
  lo.load_format = LoadFormat::kDummy;
  lo.dtype = DTypeChoice::kBFloat16;
  lo.dummy_ternary = a.ternary;
  lo.quantization = quant;
  // Positions the runs reach; a hybrid model's RoPE table would otherwise span 262k positions.
  int64_t max_len = a.tg;
  for (int64_t n : a.pp) max_len = std::max(max_len, n);
  max_len += a.depth;
  if (bm->hybrid) lo.max_model_len = max_len;
  const double t_load = Now();
  auto model = LoadModel(lo, pool);
  if (!model.ok()) {
    std::fprintf(stderr, "bench: %s\n", model.status().message().c_str());
    return 1;
  }
  std::fprintf(stderr, "bench: %s dummy %s weights loaded in %.1f s; %d threads, isa %s\n",
               dir.c_str(), a.ternary ? "ternary (BitCPM4-style)" : q8 ? "bf16 → Q8_0" : "bf16",
               Now() - t_load,
               pool.num_threads(), kernels::ToString(kernels::ActiveIsa()));
  if (bm->hybrid && (*model)->info().state_slot_bytes != bm->cost.state_bytes_per_seq) {
    std::fprintf(stderr, "bench: the cost model's state size (%lld B) differs from the model's "
                 "(%lld B)\n", static_cast<long long>(bm->cost.state_bytes_per_seq),
                 static_cast<long long>((*model)->info().state_slot_bytes));
    return 1;
  }

  // The limits are probed before the first test, between tests and after the last, and each
  // is taken at its best: on a shared machine a neighbour (or the hypervisor running another
  // guest on our cores) only ever lowers a measurement, so the best one is closest to the real
  // limit, the fractions below err on the side of modesty, and a test is never judged against
  // one probe that happened to fall on a bad minute.
  kernels::MachineLimits lim;
  double probe_stolen = 0, probe_seconds = 0;  // CPU-seconds stolen during the probes; wall time
  auto probe = [&](int repeats) {
    if (a.skip_limits) return;
    const double s0 = StolenCpuSeconds(), t0 = Now();
    lim = BestOf(lim, kernels::MeasureMachineLimits(pool, int64_t{1} << 30, repeats));
    probe_stolen += StolenCpuSeconds() - s0;
    probe_seconds += Now() - t0;
  };

  const Cost& cost = bm->cost;
  Bencher bench(**model, *bm, pool, a.depth, a.profile);
  std::vector<std::function<Result()>> tests;
  // As llama-bench's -p 0 / -n 0: a prompt length or decode length of 0 is no test.
  for (int64_t n : a.pp) {
    if (n > 0) tests.push_back([&, n] { return bench.Prefill(n, a.ubatch, a.repeats); });
  }
  if (a.tg > 0) {
    for (int64_t b : a.batches) {
      tests.push_back([&, b] { return bench.Decode(b, a.tg, a.repeats); });
    }
  }
  std::unique_ptr<VisionEncoder> encoder;
  if (vision) {
    auto enc = LoadVisionEncoder(lo, (*model)->info(), pool);
    if (!enc.ok()) {
      std::fprintf(stderr, "bench: %s\n", enc.status().message().c_str());
      return 1;
    }
    encoder = std::move(*enc);
    tests.push_back([&] { return BenchVision(*encoder, *vision, a.image_side, a.repeats, pool); });
  }
  constexpr int kProbeRepeats = 5, kBetweenTestsRepeats = 2;
  probe(kProbeRepeats);
  std::vector<Result> results;
  for (size_t i = 0; i < tests.size(); ++i) {
    results.push_back(tests[i]());
    probe(i + 1 < tests.size() ? kBetweenTestsRepeats : kProbeRepeats);
  }
  // The matmuls run f32 FMAs on the widened bf16 weights unless bf16 dot products are in use;
  // Q8_0 weights, int8 dot products (their peak counts a product and its add as two ops).
  // On AMX tiles (kernels::MatMulUsesAmx), their peak.
  const bool bf16_dot = kernels::MatMulUsesBf16Dot();
  const bool amx = bf16_dot && kernels::MatMulUsesAmx() && lim.amx_bf16_gflops > 0;
  const bool int8_dot = q8 && lim.int8_dot_gops > 0;
  const double matmul_peak =
      (amx ? lim.amx_bf16_gflops : bf16_dot ? lim.bf16_dot_gflops : lim.f32_fma_gflops) * 1e9;
  const double peak = int8_dot ? lim.int8_dot_gops * 1e9 : matmul_peak;  // the tests' bound
  const double bw = lim.read_gbps * 1e9;
  for (Result& r : results) {
    const double t_bw = bw > 0 ? r.bytes / bw : 0, t_fl = peak > 0 ? r.flops / peak : 0;
    r.bound_seconds = std::max(t_bw, t_fl);
    // No limits measured (--skip-limits): no bound to name or compare with.
    r.bound = r.bound_seconds == 0 ? "-" : t_bw >= t_fl ? "bandwidth" : "compute";
  }

  std::printf("\nmachine: %d threads, read bandwidth %.1f GB/s (1 thread %.1f; best of software "
              "prefetch distances 0-2 KiB: %lld B), f32 FMA peak %.1f GFLOP/s (1 thread %.1f, %s)",
              pool.num_threads(), lim.read_gbps, lim.read_gbps_1t,
              static_cast<long long>(lim.read_prefetch_bytes), lim.f32_fma_gflops,
              lim.f32_fma_gflops_1t, lim.fma_isa);
  if (lim.bf16_dot_gflops > 0) std::printf(", bf16 dot peak %.1f GFLOP/s", lim.bf16_dot_gflops);
  if (lim.amx_bf16_gflops > 0) {
    std::printf(", AMX bf16 peak %.1f GFLOP/s (non-zero tiles)", lim.amx_bf16_gflops);
  }
  if (q8 && lim.int8_dot_gops > 0) {
    std::printf(", int8 dot peak %.1f GOP/s (%s)", lim.int8_dot_gops, lim.int8_isa);
  }
  std::printf("\n");
  std::printf("matmul: %s\n", kernels::MatMulDescription().c_str());
  if (lim.matmul_l1_gflops > 0 && matmul_peak > 0) {
    std::printf("kernel check: the matmul kernel on an in-L1 problem (one prefill tile's rows × 32 "
                "× 256, bf16) runs at "
                "%.1f GFLOP/s = %.0f%% of the %s peak in this run (a busy neighbour on the "
                "core lowers it; the peak loop, products only, barely feels one)\n",
                lim.matmul_l1_gflops, 100 * lim.matmul_l1_gflops * 1e9 / matmul_peak,
                amx ? "AMX bf16" : bf16_dot ? "bf16 dot" : "FMA");
  }
  PrintModelLine(dir, *bm);
  int name_width = 6;  // "pp512@d1024" with a depth
  for (const Result& r : results) name_width = std::max<int>(name_width, r.test.size());
  std::printf("| %-*s | batch | tokens/s | ms/step | GB/s  | GFLOP/s | bound     | of bound |\n",
              name_width, "test");
  std::printf("|%s|------:|---------:|--------:|------:|--------:|-----------|---------:|\n",
              std::string(name_width + 2, '-').c_str());
  nlohmann::json jr = nlohmann::json::array();
  for (const Result& r : results) {
    const bool decode = r.bytes > 0;
    const double steps = decode ? double(r.tokens) / r.batch : 1;
    const double frac = r.bound_seconds > 0 ? r.bound_seconds / r.seconds : 0;
    const std::string of_bound = r.bound_seconds > 0 ? fmt::format("{:7.1f}%", 100 * frac) : "-";
    std::printf("| %-*s | %5lld | %8.1f | %7.2f | %5.1f | %7.1f | %-9s | %8s |\n",
                name_width, r.test.c_str(), static_cast<long long>(r.batch), r.tokens / r.seconds,
                1e3 * r.seconds / steps, r.bytes / r.seconds / 1e9, r.flops / r.seconds / 1e9,
                r.bound.c_str(), of_bound.c_str());
    nlohmann::json e = {
        {"test", r.test}, {"batch", r.batch}, {"tokens", r.tokens},
        {"seconds", r.seconds}, {"tokens_per_s", r.tokens / r.seconds},
        {"weight_gb_per_s", (r.bytes - r.state_bytes - r.kv_bytes) / r.seconds / 1e9},
        {"kv_gb_per_s", r.kv_bytes / r.seconds / 1e9},
        {"gflop_per_s", r.flops / r.seconds / 1e9}, {"steal_fraction", r.steal}};
    // Without measured limits the bound fields are null.
    e["bound"] = r.bound_seconds > 0 ? nlohmann::json(r.bound) : nlohmann::json();
    e["bound_tokens_per_s"] =
        r.bound_seconds > 0 ? nlohmann::json(r.tokens / r.bound_seconds) : nlohmann::json();
    e["fraction_of_bound"] = r.bound_seconds > 0 ? nlohmann::json(frac) : nlohmann::json();
    if (bm->hybrid) {
      e["state_gb_per_s"] = r.state_bytes / r.seconds / 1e9;
      e["bytes"] = r.bytes;
      e["flops"] = r.flops;
    }
    if (r.profile) e["profile"] = ProfileJson(ProfileOf(r));
    jr.push_back(std::move(e));
  }
  std::printf("\ndecode fraction = max((weight + KV cache) bytes/step ÷ bandwidth, FLOPs ÷ peak) "
              "÷ measured time (KV: K and V of every cached token, %lld B each, %lld cached "
              "before each test); prefill FLOPs = 2 × body params × tokens + 2 × head params "
              "(last token) + attention, in steps of ≤ %lld prompt tokens (--ubatch); best of "
              "%d runs\n",
              static_cast<long long>(bench.kv_bytes_per_token()),
              static_cast<long long>(a.depth), static_cast<long long>(a.ubatch), a.repeats);
  if (bm->hybrid) {
    std::printf("hybrid: decode bytes/step also count 2 × %.1f MB recurrent state per sequence "
                "(read + written back; GB/s column = weights + state + KV cache); FLOPs add "
                "%.1f MFLOP per token for the Gated DeltaNet layers (7·Hv·dk·dv state decay, Sᵀk, "
                "rank-1 update, readout + 2·conv_dim·kernel conv per layer, prefill too) and "
                "attention over the %lld gated full-attention layers only; vision tower and MTP "
                "not counted\n",
                cost.state_bytes_per_seq / 1e6, cost.state_flops_per_token / 1e6,
                static_cast<long long>(cost.full_layers));
  }
  if (int8_dot) {
    std::printf("Q8_0: the peak is the int8 dot products' (%s; a product and its add are two "
                "ops, as FLOPs count them), which the kernels' per-block scaling and activation "
                "quantization also share the core with\n",
                lim.int8_isa);
  }
  PrintHostNotes(results, matmul_peak > 0 && lim.matmul_l1_gflops * 1e9 > matmul_peak, probe_stolen,
                 probe_seconds, pool.num_threads());
  for (const Result& r : results) {
    if (r.profile) PrintProfile(ProfileOf(r), {lim.read_gbps, peak / 1e9});
  }
  if (!a.json.empty()) {
    nlohmann::json j = {
        {"machine",
         {{"threads", pool.num_threads()}, {"isa", kernels::ToString(kernels::ActiveIsa())},
          {"read_gb_per_s", lim.read_gbps}, {"read_gb_per_s_1t", lim.read_gbps_1t},
          {"read_prefetch_bytes", lim.read_prefetch_bytes},
          {"f32_fma_gflop_per_s", lim.f32_fma_gflops},
          {"f32_fma_gflop_per_s_1t", lim.f32_fma_gflops_1t},
          {"bf16_dot_gflop_per_s", lim.bf16_dot_gflops},
          {"amx_bf16_gflop_per_s", lim.amx_bf16_gflops},
          {"int8_dot_gop_per_s", lim.int8_dot_gops},
          {"matmul_l1_gflop_per_s", lim.matmul_l1_gflops},
          {"probe_steal_fraction", StealFraction(probe_stolen, probe_seconds, pool.num_threads())},
          {"prefill_peak", int8_dot ? "int8_dot" : amx ? "amx_bf16" : bf16_dot ? "bf16_dot" : "f32_fma"}}},
        {"model", ModelJson(dir, *bm)},
        {"repeats", a.repeats},
        {"ubatch", a.ubatch},
        {"depth", a.depth},
        {"results", jr}};
    std::ofstream out(a.json);
    out << j.dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "bench: cannot write %s\n", a.json.c_str());
      return 1;
    }
  }
  return 0;
}

// A whole number of at least `lo`. (CLI11's PositiveNumber and NonNegativeNumber accept
// fractions and print their upper bound as a 300-digit double when they refuse a value.)
CLI::Validator AtLeast(int64_t lo) {
  return CLI::Validator(
      [lo](std::string& v) -> std::string {
        int64_t n = 0;
        const auto [end, err] = std::from_chars(v.data(), v.data() + v.size(), n);
        if (err != std::errc() || end != v.data() + v.size() || n < lo) {
          return "must be a whole number ≥ " + std::to_string(lo) + ", got " + v;
        }
        return {};
      },
      "");
}

}  // namespace

void RegisterBenchCommand(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "offline prefill/decode throughput on dummy weights, as fractions of the "
               "machine's measured bandwidth and FMA peak");
  cmd->add_option("--model", a->model,
                  "model directory whose config.json gives the dimensions: MiniCPM4 or "
                  "MiniCPM-V-4.6 (default: ../shared/models/MiniCPM4-0.5B)");
  cmd->add_option("--pp", a->pp, "prompt lengths to prefill (0: no prefill test)")
      ->delimiter(',')
      ->check(AtLeast(0))
      ->capture_default_str();
  cmd->add_option("--ubatch", a->ubatch,
                  "prompt tokens per prefill step, as llama-bench's -ub (longer prompts take "
                  "several steps, as a server's chunked prefill)")
      ->check(AtLeast(1))
      ->capture_default_str();
  cmd->add_option("--depth", a->depth,
                  "tokens already in each sequence's KV cache when a test starts, as "
                  "llama-bench's -d (decode then also counts reading them)")
      ->check(AtLeast(0))
      ->capture_default_str();
  cmd->add_option("--tg", a->tg, "tokens to decode per sequence (0: no decode test)")
      ->check(AtLeast(0))
      ->capture_default_str();
  cmd->add_option("--batch", a->batches, "decode batch sizes")
      ->delimiter(',')
      ->check(AtLeast(1))
      ->capture_default_str();
  cmd->add_option("--repeats", a->repeats, "runs per test (best is reported)")
      ->check(AtLeast(1))
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "compute threads (0: one per physical core, as llama.cpp)");
  cmd->add_flag("--pin-threads", a->pin, "pin compute threads to CPUs");
  cmd->add_option("--json", a->json, "also write the results as JSON to this file");
  cmd->add_flag("--skip-limits", a->skip_limits,
                "do not measure bandwidth and peak (no bound or fraction printed; null in JSON)");
  cmd->add_option("--image-side", a->image_side,
                  "MiniCPM-V-4.6: also encode one square slice of this many pixels (a multiple "
                  "of 56; 448 is a full slice); 0 skips")
      ->capture_default_str();
  cmd->add_flag("--profile", a->profile,
                "also print where each test's best run spent its time, by forward section (ms "
                "per step, share; the matmuls' weight GB/s and GFLOP/s against the read "
                "bandwidth and the matmul peak)");
  cmd->add_option("--quantization,-q", a->quantization, kQuantizationHelp)->capture_default_str();
  cmd->add_flag("--ternary", a->ternary,
                "dummy layer weights ternary as BitCPM4-0.5B's (MiniCPM4 dims): measures the "
                "2-bit kernels where they are used (CPM_TERNARY)");
  RegisterBenchServeCommand(*cmd, exit_code);
  cmd->callback([a, cmd, exit_code] {
    if (!cmd->got_subcommand("serve")) *exit_code = RunBench(*a);
  });
}

}  // namespace cpm
