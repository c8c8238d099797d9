// `cpmserve bench`: offline throughput like llama-bench (pp = prompt tokens/s, tg = decode
// tokens/s at batch 1, 4, 16) of the real forward pass on dummy weights with a model's real
// dimensions, judged against the machine's limits measured in the same run (memory read
// bandwidth, FMA peak): each figure is also printed as a fraction of its bound.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "base/thread_pool.h"
#include "commands.h"
#include "kernels/cpu_features.h"
#include "kernels/machine_limits.h"
#include "kv/kv_cache.h"
#include "model/minicpm_config.h"
#include "model/registry.h"

namespace cpm {
namespace {

struct BenchArgs {
  std::string model;
  std::vector<int64_t> pp = {128, 512};
  int64_t tg = 128;
  std::vector<int64_t> batches = {1, 4, 16};
  int repeats = 3;
  int threads = 0;
  bool pin = false;
  std::string json;
  bool skip_limits = false;
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

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Parameter and byte counts of one token's pass, from the config.
struct Cost {
  int64_t layer_params = 0;  // all linear weights of one decoder layer
  int64_t head_params = 0;   // vocab × hidden
  int64_t body_params = 0;   // layers × layer_params
  int64_t weight_bytes_per_step = 0;  // body + head, bf16 (what one decode step streams)
  int64_t attn_flops_per_pair = 0;    // q·k and p·v over all layers and heads, per (q, k) pair
};

Cost CostOf(const MiniCpmConfig& c, int64_t bytes_per_weight) {
  Cost k;
  const int64_t hd = c.hidden_size, qd = c.num_attention_heads * c.head_dim,
                kvd = c.num_key_value_heads * c.head_dim, ffn = c.intermediate_size;
  k.layer_params = hd * qd + 2 * hd * kvd + qd * hd + 3 * hd * ffn;
  k.body_params = c.num_hidden_layers * k.layer_params;
  k.head_params = c.vocab_size * hd;
  k.weight_bytes_per_step = (k.body_params + k.head_params) * bytes_per_weight;
  k.attn_flops_per_pair = 4 * c.head_dim * c.num_attention_heads * c.num_hidden_layers;
  return k;
}

struct Result {
  std::string test;
  int64_t batch = 1;
  int64_t tokens = 0;      // tokens processed per run
  double seconds = 0;      // best run
  double flops = 0;        // per run, counted as 2 × params touched + attention
  double bytes = 0;        // weight bytes streamed per run (decode)
  double bound_seconds = 0;
  std::string bound;       // "bandwidth" or "compute"
};

class Bencher {
 public:
  Bencher(Model& model, const MiniCpmConfig& c, ThreadPool& pool, const Cost& cost)
      : model_(model), c_(c), pool_(pool), cost_(cost) {}

  // One sequence of n prompt tokens in one step; logits for the last one only.
  Result Prefill(int64_t n, int repeats) {
    KvCache kv(model_.info().kv, Blocks(n), kBlockSize, model_.info().dtype);
    std::vector<int32_t> table = Table(0, n);
    std::vector<int32_t> tokens = Tokens(n);
    std::vector<SeqStep> seqs = {{0, n, table, -1}};
    std::vector<int64_t> rows = {n - 1};
    std::vector<float> logits(c_.vocab_size);
    Result r{"pp" + std::to_string(n), 1, n};
    r.seconds = Best(repeats, [&] { Step(tokens, seqs, rows, kv, logits); });
    r.flops = 2.0 * (cost_.body_params * n + cost_.head_params) +
              double(cost_.attn_flops_per_pair) * n * (n + 1) / 2;
    return r;
  }

  // `batch` sequences decode `steps` tokens each from an empty context, one token per step.
  Result Decode(int64_t batch, int64_t steps, int repeats) {
    KvCache kv(model_.info().kv, batch * Blocks(steps), kBlockSize, model_.info().dtype);
    std::vector<std::vector<int32_t>> tables;
    for (int64_t b = 0; b < batch; ++b) tables.push_back(Table(b * Blocks(steps), steps));
    std::vector<float> logits(batch * c_.vocab_size);
    std::vector<int64_t> rows(batch);
    for (int64_t b = 0; b < batch; ++b) rows[b] = b;
    Result r{"tg" + std::to_string(steps), batch, batch * steps};
    r.seconds = Best(repeats, [&] {
      for (int64_t s = 0; s < steps; ++s) {
        std::vector<SeqStep> seqs;
        for (int64_t b = 0; b < batch; ++b) seqs.push_back({s, 1, tables[b], -1});
        Step(Tokens(batch), seqs, rows, kv, logits);
      }
    });
    r.bytes = double(cost_.weight_bytes_per_step) * steps;
    r.flops = 2.0 * (cost_.body_params + cost_.head_params) * batch * steps +
              double(cost_.attn_flops_per_pair) * batch * steps * (steps + 1) / 2;
    return r;
  }

 private:
  static constexpr int64_t kBlockSize = 16;

  static int64_t Blocks(int64_t tokens) { return (tokens + kBlockSize - 1) / kBlockSize; }
  static std::vector<int32_t> Table(int64_t first, int64_t tokens) {
    std::vector<int32_t> t(Blocks(tokens));
    for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int32_t>(first + i);
    return t;
  }
  std::vector<int32_t> Tokens(int64_t n) {
    std::vector<int32_t> t(n);
    for (auto& v : t) v = static_cast<int32_t>(rng_() % c_.vocab_size);
    return t;
  }
  void Step(const std::vector<int32_t>& tokens, const std::vector<SeqStep>& seqs,
            const std::vector<int64_t>& rows, KvCache& kv, std::vector<float>& logits) {
    ForwardBatch fb;
    fb.tokens = tokens;
    fb.seqs = seqs;
    fb.logit_rows = rows;
    Status s = model_.Forward(fb, kv, nullptr, logits.data(), pool_);
    if (!s.ok()) {
      std::fprintf(stderr, "bench: forward failed: %s\n", s.message().c_str());
      std::exit(1);
    }
  }
  template <typename F>
  double Best(int repeats, F&& run) {
    double best = 1e30;
    for (int i = 0; i < repeats; ++i) {
      const double t0 = Now();
      run();
      best = std::min(best, Now() - t0);
    }
    return best;
  }

  Model& model_;
  const MiniCpmConfig& c_;
  ThreadPool& pool_;
  Cost cost_;
  std::mt19937 rng_{7};
};

int RunBench(const BenchArgs& a) {
  const std::string dir = a.model.empty() ? DefaultModelDir() : a.model;
  std::ifstream cf(dir + "/config.json");
  if (!cf) {
    std::fprintf(stderr, "bench: %s/config.json not found (use --model DIR)\n", dir.c_str());
    return 2;
  }
  std::stringstream text;
  text << cf.rdbuf();
  auto config = ParseMiniCpmConfig(text.str(), dir + "/config.json");
  if (!config.ok()) {
    std::fprintf(stderr, "bench: %s\n", config.status().message().c_str());
    return 2;
  }
  ThreadPool pool(ThreadPoolOptions{.num_threads = a.threads, .pin_threads = a.pin});
  LoadOptions lo;
  lo.model_dir = dir;
  lo.load_format = LoadFormat::kDummy;
  lo.dtype = DTypeChoice::kBFloat16;
  const double t_load = Now();
  auto model = LoadModel(lo, pool);
  if (!model.ok()) {
    std::fprintf(stderr, "bench: %s\n", model.status().message().c_str());
    return 1;
  }
  std::fprintf(stderr, "bench: %s dummy bf16 weights loaded in %.1f s; %d threads, isa %s\n",
               dir.c_str(), Now() - t_load, pool.num_threads(),
               kernels::ToString(kernels::ActiveIsa()));

  kernels::MachineLimits lim;
  if (!a.skip_limits) lim = kernels::MeasureMachineLimits(pool);
  // The matmuls run f32 FMAs on the widened bf16 weights unless bf16 dot products are in use.
  const double peak = lim.f32_fma_gflops * 1e9;
  const double bw = lim.read_gbps * 1e9;

  const Cost cost = CostOf(*config, 2);
  Bencher bench(**model, *config, pool, cost);
  std::vector<Result> results;
  for (int64_t n : a.pp) results.push_back(bench.Prefill(n, a.repeats));
  for (int64_t b : a.batches) results.push_back(bench.Decode(b, a.tg, a.repeats));
  for (Result& r : results) {
    const double t_bw = bw > 0 ? r.bytes / bw : 0, t_fl = peak > 0 ? r.flops / peak : 0;
    r.bound_seconds = std::max(t_bw, t_fl);
    r.bound = t_bw >= t_fl ? "bandwidth" : "compute";
  }

  std::printf("\nmachine: %d threads, read bandwidth %.1f GB/s (1 thread %.1f), f32 FMA peak "
              "%.1f GFLOP/s (1 thread %.1f, %s)%s\n",
              pool.num_threads(), lim.read_gbps, lim.read_gbps_1t, lim.f32_fma_gflops,
              lim.f32_fma_gflops_1t, lim.fma_isa,
              lim.bf16_dot_gflops > 0
                  ? (", bf16 dot peak " + std::to_string(lim.bf16_dot_gflops) + " GFLOP/s").c_str()
                  : "");
  std::printf("model: %s dims, %.1f M params/layer × %lld + head %.1f M, %.0f MB bf16 weights "
              "per decode step\n\n",
              dir.c_str(), cost.layer_params / 1e6, static_cast<long long>(config->num_hidden_layers),
              cost.head_params / 1e6, cost.weight_bytes_per_step / 1e6);
  std::printf("| test   | batch | tokens/s | ms/step | GB/s  | GFLOP/s | bound     | of bound |\n");
  std::printf("|--------|------:|---------:|--------:|------:|--------:|-----------|---------:|\n");
  nlohmann::json jr = nlohmann::json::array();
  for (const Result& r : results) {
    const bool decode = r.bytes > 0;
    const double steps = decode ? double(r.tokens) / r.batch : 1;
    const double frac = r.bound_seconds > 0 ? r.bound_seconds / r.seconds : 0;
    std::printf("| %-6s | %5lld | %8.1f | %7.2f | %5.1f | %7.1f | %-9s | %7.1f%% |\n",
                r.test.c_str(), static_cast<long long>(r.batch), r.tokens / r.seconds,
                1e3 * r.seconds / steps, r.bytes / r.seconds / 1e9, r.flops / r.seconds / 1e9,
                r.bound.c_str(), 100 * frac);
    jr.push_back({{"test", r.test}, {"batch", r.batch}, {"tokens", r.tokens},
                  {"seconds", r.seconds}, {"tokens_per_s", r.tokens / r.seconds},
                  {"weight_gb_per_s", r.bytes / r.seconds / 1e9},
                  {"gflop_per_s", r.flops / r.seconds / 1e9}, {"bound", r.bound},
                  {"bound_tokens_per_s", r.bound_seconds > 0 ? r.tokens / r.bound_seconds : 0},
                  {"fraction_of_bound", frac}});
  }
  std::printf("\ndecode fraction = max(weight bytes/step ÷ bandwidth, FLOPs ÷ peak) ÷ measured "
              "time; prefill FLOPs = 2 × body params × tokens + 2 × head params (last token) + "
              "attention; best of %d runs\n", a.repeats);
  if (!a.json.empty()) {
    nlohmann::json j = {
        {"machine",
         {{"threads", pool.num_threads()}, {"isa", kernels::ToString(kernels::ActiveIsa())},
          {"read_gb_per_s", lim.read_gbps}, {"read_gb_per_s_1t", lim.read_gbps_1t},
          {"f32_fma_gflop_per_s", lim.f32_fma_gflops},
          {"f32_fma_gflop_per_s_1t", lim.f32_fma_gflops_1t},
          {"bf16_dot_gflop_per_s", lim.bf16_dot_gflops}}},
        {"model",
         {{"dir", dir}, {"weight_bytes_per_decode_step", cost.weight_bytes_per_step},
          {"body_params", cost.body_params}, {"head_params", cost.head_params}}},
        {"repeats", a.repeats},
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

}  // namespace

void RegisterBenchCommand(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "offline prefill/decode throughput on dummy weights, as fractions of the "
               "machine's measured bandwidth and FMA peak");
  cmd->add_option("--model", a->model,
                  "model directory whose config.json gives the dimensions "
                  "(default: ../shared/models/MiniCPM4-0.5B)");
  cmd->add_option("--pp", a->pp, "prompt lengths to prefill")->delimiter(',')->capture_default_str();
  cmd->add_option("--tg", a->tg, "tokens to decode per sequence")->capture_default_str();
  cmd->add_option("--batch", a->batches, "decode batch sizes")->delimiter(',')->capture_default_str();
  cmd->add_option("--repeats", a->repeats, "runs per test (best is reported)")
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "compute threads (0: all CPUs)");
  cmd->add_flag("--pin-threads", a->pin, "pin compute threads to CPUs");
  cmd->add_option("--json", a->json, "also write the results as JSON to this file");
  cmd->add_flag("--skip-limits", a->skip_limits, "do not measure bandwidth and peak");
  cmd->callback([a, exit_code] { *exit_code = RunBench(*a); });
}

}  // namespace cpm
