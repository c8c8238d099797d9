// The gates of `cpmserve validate`, run in the seed documents' order. Each gate starts its own
// server child (dummy, then real weights) and records the commands a person would type.
#include "eval/validate.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "eval/http_probe.h"
#include "eval/reference_dump.h"
#include "eval/serve_process.h"
#include "eval/server_figures.h"
#include "multimodal/base64.h"
#include "multimodal/image.h"
#include "multimodal/image_encode.h"

namespace cpm {
namespace {

using json = nlohmann::json;

std::string Quote(const std::string& s) {
  if (!s.empty() && s.find_first_of(" \t\"'$`\\|&;<>(){}*?!#~") == std::string::npos) return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string CommandLine(const std::vector<std::string>& args) {
  std::string line = "cpmserve";
  for (const std::string& a : args) line += " " + Quote(a);
  return line;
}

// What validate makes of the user's extra `serve` flags. The user's --host/--port are dropped:
// validate runs two servers one after the other on a free loopback port of its own, because the
// seed command lines' `--port 8000` is usually held by the very server being adapted (and two
// --port flags make serve refuse to start), and `--host 0.0.0.0` would only expose a throwaway
// server. --load-format is dropped too: each gate sets its own (the dummy gate's `dummy`, the
// real-weight gate none), and the seed's dummy command line forwarded would have run the
// real-weight gate on dummy weights (--dummy-only runs the seed's Stage A alone). The probes need the server's key: --api-key, else
// $VLLM_API_KEY as serve reads it.
struct ForwardedFlags {
  std::vector<std::string> forwarded;
  std::vector<std::string> dropped;  // as the user wrote them, for the report's note
  std::string api_key;               // empty: the servers ask for none
  bool api_key_from_env = false;
};

bool IsFlag(const std::string& a) { return a.size() > 1 && a[0] == '-'; }

ForwardedFlags SplitForwardedFlags(const std::vector<std::string>& user) {
  ForwardedFlags f;
  for (size_t i = 0; i < user.size(); ++i) {
    const std::string& a = user[i];
    bool own = false;
    for (const char* name : {"--host", "--port", "--load-format"}) {
      const std::string n = name;
      if (a == n) {
        own = true;
        std::string shown = a;
        if (i + 1 < user.size() && !IsFlag(user[i + 1])) shown += " " + user[++i];
        f.dropped.push_back(shown);
      } else if (a.rfind(n + "=", 0) == 0) {
        own = true;
        f.dropped.push_back(a);
      }
    }
    if (own) continue;
    f.forwarded.push_back(a);
    // serve takes one or more keys (--api-key K1 K2); any of them opens /v1.
    if (f.api_key.empty() && a == "--api-key" && i + 1 < user.size() && !IsFlag(user[i + 1])) {
      f.api_key = user[i + 1];
    } else if (f.api_key.empty() && a.rfind("--api-key=", 0) == 0) {
      f.api_key = a.substr(std::string("--api-key=").size());
    }
  }
  if (f.api_key.empty()) {
    if (const char* env = std::getenv("VLLM_API_KEY"); env && *env) {
      f.api_key = env;
      f.api_key_from_env = true;
    }
  }
  return f;
}

// The curl header a person would add; an environment key stays a shell variable (double quotes,
// so the shell expands it).
std::string CurlAuth(const ForwardedFlags& f) {
  if (f.api_key.empty()) return "";
  if (f.api_key_from_env) return " -H \"Authorization: Bearer $VLLM_API_KEY\"";
  return " -H " + Quote("Authorization: Bearer " + f.api_key);
}

// `serve` flags shared by both gates: the evaluation's model options, then the user's extras.
std::vector<std::string> ServeArgs(const ValidateOptions& o, const ForwardedFlags& f, int port, bool dummy) {
  std::vector<std::string> a = {"serve", o.model_dir, "--host", "127.0.0.1", "--port", std::to_string(port)};
  if (dummy) a.insert(a.end(), {"--load-format", "dummy"});
  if (o.eval_model.dtype != "auto") a.insert(a.end(), {"--dtype", o.eval_model.dtype});
  if (o.eval_model.quantization != "none") {
    a.insert(a.end(), {"--quantization", o.eval_model.quantization});
  }
  if (o.eval_model.max_model_len > 0)
    a.insert(a.end(), {"--max-model-len", std::to_string(o.eval_model.max_model_len)});
  if (o.eval_model.threads > 0) a.insert(a.end(), {"--threads", std::to_string(o.eval_model.threads)});
  a.insert(a.end(), f.forwarded.begin(), f.forwarded.end());
  return a;
}

std::string ReadSmall(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The model's architectures[0] from its config.json ("" when unreadable).
std::string Architecture(const std::string& model_dir) {
  const json cfg = json::parse(ReadSmall(model_dir + "/config.json"), nullptr, false);
  if (cfg.is_object() && cfg.contains("architectures") && cfg["architectures"].is_array() &&
      !cfg["architectures"].empty() && cfg["architectures"][0].is_string()) {
    return cfg["architectures"][0].get<std::string>();
  }
  return "";
}

std::vector<std::pair<std::string, std::string>> Environment(const ValidateOptions& o) {
  std::vector<std::pair<std::string, std::string>> env;
  env.emplace_back("cpmserve", o.version);
  std::istringstream cpu(ReadSmall("/proc/cpuinfo"));
  for (std::string line; std::getline(cpu, line);) {
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      env.emplace_back("CPU", line.substr(line.find(':') + 2));
      break;
    }
  }
  env.emplace_back("CPUs online", std::to_string(sysconf(_SC_NPROCESSORS_ONLN)));
  const double mem_gib = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE) / (1 << 30);
  env.emplace_back("Memory", fmt::format("{:.1f} GiB", mem_gib));
  env.emplace_back("Model path", o.model_dir);
  if (const std::string arch = Architecture(o.model_dir); !arch.empty()) {
    env.emplace_back("Architecture", arch);
  }
  return env;
}

// Starts a server for one gate; on failure fills the gate's detail.
bool StartServer(const ValidateOptions& o, const ForwardedFlags& f, bool dummy, const std::string& log_name,
                 ServeProcess* p, int* port, GateResult* g) {
  auto free_port = FindFreePort();
  if (!free_port.ok()) {
    g->detail = free_port.status().message();
    return false;
  }
  *port = *free_port;
  const std::vector<std::string> args = ServeArgs(o, f, *port, dummy);
  g->commands.push_back(CommandLine(args));
  const std::string log = (std::filesystem::path(o.work_dir) / log_name).string();
  std::filesystem::remove(log);
  if (Status s = p->Start(o.exe, args, log); !s.ok()) {
    g->detail = s.message();
    return false;
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (Status s = p->WaitReady(*port, o.ready_timeout_s); !s.ok()) {
    g->detail = s.message();
    return false;
  }
  g->figures.emplace_back("Ready after", fmt::format("{:.2f} s", std::chrono::duration<double>(
                                                                     std::chrono::steady_clock::now() - t0)
                                                                     .count()));
  g->figures.emplace_back("Server log", log);
  return true;
}

// GET /v1/models: 200 and at least one model; returns the first id.
bool CheckModels(int port, const ForwardedFlags& f, GateResult* g, std::string* served_name) {
  g->commands.push_back(fmt::format("curl -sf http://127.0.0.1:{}/v1/models{}", port, CurlAuth(f)));
  const HttpReply r = HttpGet(port, "/v1/models", 30, f.api_key);
  g->figures.emplace_back("GET /v1/models", r.status ? std::to_string(r.status) : "no answer: " + r.error);
  if (r.status != 200) return false;
  const json j = json::parse(r.body, nullptr, false);
  if (!j.is_object() || !j.contains("data") || !j["data"].is_array() || j["data"].empty() ||
      !j["data"][0].contains("id") || !j["data"][0]["id"].is_string()) {
    g->detail = "/v1/models answered 200 without a model list: " + r.body.substr(0, 300);
    return false;
  }
  *served_name = j["data"][0]["id"].get<std::string>();
  g->figures.emplace_back("Served model", served_name->empty() ? "(empty)" : *served_name);
  return true;
}

void AddStartupFigures(const std::string& log, GateResult* g) {
  const StartupFigures f = ParseStartupLog(log);
  if (f.lines.empty()) return;  // the server died before sizing anything: the log tail says why
  auto opt = [](const auto& v, const char* fmt_str) {
    return v ? fmt::format(fmt::runtime(fmt_str), *v) : std::string("not in the log");
  };
  g->figures.emplace_back("Model weights", opt(f.model_gib, "{:.4f} GiB"));
  g->figures.emplace_back("Weight loading", opt(f.load_seconds, "{:.3f} s"));
  g->figures.emplace_back("Available KV cache memory", opt(f.kv_cache_gib, "{:.2f} GiB"));
  g->figures.emplace_back("KV cache size", opt(f.kv_cache_tokens, "{} tokens"));
  g->figures.emplace_back("Max model len", opt(f.max_model_len, "{}"));
  g->figures.emplace_back("Maximum concurrency", opt(f.max_concurrency, "{:.2f}x"));
}

void AddMetrics(int port, const char* when, GateResult* g) {
  const HttpReply r = HttpGet(port, "/metrics", 30);
  g->figures.emplace_back(fmt::format("GET /metrics ({})", when),
                          r.status ? std::to_string(r.status) : "no answer: " + r.error);
  if (r.status != 200) return;
  const auto m = ParsePrometheus(r.body);
  for (const char* name : {"vllm:kv_cache_usage_perc", "vllm:num_requests_running",
                           "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
                           "vllm:request_success_total"}) {
    if (auto it = m.find(name); it != m.end())
      g->figures.emplace_back(fmt::format("  {}", name), fmt::format("{:g}", it->second));
  }
}

GateResult DummyGate(const ValidateOptions& o, const ForwardedFlags& f) {
  GateResult g;
  g.title = "Stage A — Dummy Fast Gate";
  ServeProcess p;
  int port = 0;
  std::string name;
  g.pass = StartServer(o, f, /*dummy=*/true, "serve_dummy.log", &p, &port, &g) && CheckModels(port, f, &g, &name);
  AddStartupFigures(p.LogText(), &g);  // dummy weights have the real sizes
  const auto code = p.Stop();
  if (code) g.figures.emplace_back("Exit status after SIGTERM", std::to_string(*code));
  return g;
}

// One chat request with `content` as the user message; records it as `label` figures and
// passes when it answers 200 with a non-empty text: its content, or its reasoning (a thinking
// model's reply cut off by max_tokens inside its <think> has only that).
bool SmokeRequest(const ValidateOptions& o, const ForwardedFlags& f, int port, const std::string& name,
                  const json& content, const std::string& label, GateResult* smoke) {
  json req = {{"model", name},
              {"messages", json::array({{{"role", "user"}, {"content", content}}})},
              {"temperature", 0},
              {"max_tokens", o.smoke_max_tokens}};
  const std::string body = req.dump();
  std::string shown = body;
  if (shown.size() > 400) shown = shown.substr(0, 400) + "…";  // data: URLs are long
  smoke->commands.push_back(fmt::format(
      "curl -s http://127.0.0.1:{}/v1/chat/completions -H \"Content-Type: application/json\"{} -d {}",
      port, CurlAuth(f), Quote(shown)));
  const HttpReply r = HttpPostJson(port, "/v1/chat/completions", body, o.request_timeout_s, f.api_key);
  smoke->figures.emplace_back("POST /v1/chat/completions" + label,
                              r.status ? std::to_string(r.status) : "no answer: " + r.error);
  smoke->figures.emplace_back("Latency" + label, fmt::format("{:.3f} s", r.seconds));
  const json j = json::parse(r.body, nullptr, false);
  if (r.status != 200 || !j.is_object() || !j.contains("choices") || !j["choices"].is_array() ||
      j["choices"].empty()) {
    if (r.status != 0) smoke->detail += "reply" + label + ": " + r.body.substr(0, 500) + "\n";
    return false;
  }
  const json& c = j["choices"][0];
  const json message = c.value("message", json::object());
  const auto text_of = [&](const char* key) {
    const auto it = message.find(key);
    return it != message.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  const std::string text = text_of("content");
  std::string reasoning = text_of("reasoning");
  if (reasoning.empty()) reasoning = text_of("reasoning_content");
  smoke->figures.emplace_back("Reply" + label, text.empty() ? "(empty)" : text);
  if (!reasoning.empty()) smoke->figures.emplace_back("Reasoning" + label, reasoning);
  if (c.contains("finish_reason") && c["finish_reason"].is_string())
    smoke->figures.emplace_back("finish_reason" + label, c["finish_reason"].get<std::string>());
  if (j.contains("usage") && j["usage"].is_object())
    smoke->figures.emplace_back("usage" + label, j["usage"].dump());
  return !text.empty() || !reasoning.empty();
}

// A 448 × 336 test image (colour bands over a gradient), JPEG as a data: URL: the image smoke's
// picture when none is given, so that a broken image path fails a gate of its own.
std::string BuiltInSmokeImage() {
  RgbImage image = BlankRgbImage(448, 336);
  for (int y = 0; y < image.height; ++y) {
    for (int x = 0; x < image.width; ++x) {
      uint8_t* p = &image.pixels[(static_cast<size_t>(y) * image.width + x) * 3];
      p[0] = static_cast<uint8_t>(x * 255 / (image.width - 1));
      p[1] = static_cast<uint8_t>(y * 255 / (image.height - 1));
      p[2] = static_cast<uint8_t>((x / 56 + y / 56) % 2 ? 200 : 40);
    }
  }
  return "data:image/jpeg;base64," + EncodeBase64(EncodeJpeg(image, 90));
}

// [image_url, text] for the image smoke: a URL as given, a local file as a data: URL, the
// built-in image when none is given.
StatusOr<json> ImageSmokeContent(const ValidateOptions& o) {
  std::string url = o.smoke_image.empty() ? BuiltInSmokeImage() : o.smoke_image;
  if (url.find("://") == std::string::npos && url.rfind("data:", 0) != 0) {
    std::ifstream in(url, std::ios::binary);
    if (!in) return InvalidArgument(url + ": cannot read");
    std::stringstream bytes;
    bytes << in.rdbuf();
    url = "data:image/*;base64," + EncodeBase64(bytes.str());
  }
  return json::array({{{"type", "image_url"}, {"image_url", {{"url", url}}}},
                      {{"type", "text"}, {"text", o.smoke_image_prompt}}});
}

// The real-weight gate and the smoke requests share one server.
std::pair<GateResult, GateResult> RealAndSmoke(const ValidateOptions& o, const ForwardedFlags& f) {
  GateResult real, smoke;
  real.title = "Stage B — Real-Weight Mandatory Gate";
  smoke.title = "Smoke 验证";
  ServeProcess p;
  int port = 0;
  std::string name;
  const bool up = StartServer(o, f, /*dummy=*/false, "serve_real.log", &p, &port, &real);
  AddStartupFigures(p.LogText(), &real);
  if (up) AddMetrics(port, "after start-up", &real);
  real.pass = up;  // weights loaded and /health answered 200
  if (!up) {
    smoke.skipped = true;
    smoke.detail = "skipped: the real-weight server did not start";
    p.Stop();
    return {real, smoke};
  }
  const bool models_ok = CheckModels(port, f, &smoke, &name);
  bool replies_ok = SmokeRequest(o, f, port, name, json(o.smoke_prompt), "", &smoke);
  if (!o.smoke_image.empty() || Architecture(o.model_dir).starts_with("MiniCPMV")) {
    // The seed documents' second smoke request: an image part and a question about it.
    auto content = ImageSmokeContent(o);
    if (!content.ok()) {
      smoke.detail += "image smoke: " + content.status().message() + "\n";
      replies_ok = false;
    } else {
      replies_ok = SmokeRequest(o, f, port, name, *content, " (image)", &smoke) && replies_ok;
    }
  }
  AddMetrics(port, "after the smoke request", &real);
  smoke.pass = models_ok && replies_ok;
  const auto code = p.Stop();
  if (code) real.figures.emplace_back("Exit status after SIGTERM", std::to_string(*code));
  return {real, smoke};
}

// The `eval` command line equivalent to the in-process accuracy run.
std::vector<std::string> EvalArgs(const ValidateOptions& o, const char* sub) {
  std::vector<std::string> a = {"eval", sub, "--model", o.model_dir, "--reference", o.reference,
                                "--dtype", o.eval_model.dtype, "--quantization",
                                o.eval_model.quantization};
  if (o.eval_model.max_model_len > 0)
    a.insert(a.end(), {"--max-model-len", std::to_string(o.eval_model.max_model_len)});
  if (o.eval_model.threads > 0) a.insert(a.end(), {"--threads", std::to_string(o.eval_model.threads)});
  auto bound = [&](const char* flag, const std::optional<double>& v) {
    if (v) a.insert(a.end(), {flag, fmt::format("{:g}", *v)});
  };
  if (std::string(sub) == "logits") {
    bound("--min-top1", o.logits_bounds.min_top1);
    bound("--min-top5-overlap", o.logits_bounds.min_top5_overlap);
    bound("--min-top20-overlap", o.logits_bounds.min_top20_overlap);
    bound("--max-rel-err", o.logits_bounds.max_rel_err);
    bound("--max-mean-rel-err", o.logits_bounds.max_mean_rel_err);
    bound("--max-kl", o.logits_bounds.max_kl);
    bound("--max-logit-diff", o.logits_bounds.max_logit_diff);
  } else {
    if (o.greedy_tokens > 0) a.insert(a.end(), {"--tokens", std::to_string(o.greedy_tokens)});
    bound("--min-exact", o.greedy_bounds.min_exact_rate);
    bound("--min-token-accuracy", o.greedy_bounds.min_token_accuracy);
  }
  return a;
}

// In-process tables against the reference dump; the gate fails on bound failures or errors.
GateResult AccuracyGate(const ValidateOptions& o, ValidationReport* rep) {
  GateResult g;
  g.title = "精度评测 Accuracy";
  g.commands.push_back(CommandLine(EvalArgs(o, "logits")));
  auto refs = ReadReferenceDump(o.reference);
  if (!refs.ok()) {
    g.detail = refs.status().message();
    return g;
  }
  EvalModelOptions mo = o.eval_model;
  mo.model_dir = o.model_dir;
  auto target = LoadEvalTarget(mo, o.version);
  if (!target.ok()) {
    g.detail = target.status().message();
    return g;
  }
  EvalRunOptions ro{16, target->stop_ids};
  const std::string ref_desc = DescribeReferenceMeta(refs->front().meta);
  auto logits = RunLogitsEval(*target->model, *target->pool, *refs, target->tokenizer.get(), ro);
  if (!logits.ok()) {
    g.detail = logits.status().message();
    return g;
  }
  rep->logits_ctx = {o.reference, ref_desc, target->description,
                     CheckLogitsBounds(logits->summary, o.logits_bounds), o.logits_bounds.any()};
  rep->logits = std::move(*logits);
  bool pass = rep->logits_ctx.failures.empty();
  const bool has_greedy = std::all_of(refs->begin(), refs->end(), [](const ReferenceRecord& r) { return r.greedy_ids.has_value(); });
  if (has_greedy) {
    g.commands.push_back(CommandLine(EvalArgs(o, "greedy")));
    auto greedy = RunGreedyEval(*target->model, *target->pool, *refs, target->tokenizer.get(),
                                o.greedy_tokens, ro);
    if (!greedy.ok()) {
      g.detail = greedy.status().message();
      return g;
    }
    rep->greedy_ctx = {o.reference, ref_desc, target->description,
                       CheckGreedyBounds(greedy->summary, o.greedy_bounds), o.greedy_bounds.any()};
    rep->greedy = std::move(*greedy);
    pass = pass && rep->greedy_ctx.failures.empty();
  } else {
    g.detail = "the reference has no greedy_ids: greedy table skipped";
  }
  g.pass = pass;
  g.ungated = !o.logits_bounds.any() && !o.greedy_bounds.any();
  return g;
}

}  // namespace

bool ValidationReport::passed() const {
  for (const GateResult& g : gates) {
    if (!g.pass) return false;
  }
  return !gates.empty();
}

ValidationReport RunValidation(const ValidateOptions& o) {
  ValidationReport rep;
  rep.model_dir = o.model_dir;
  rep.environment = Environment(o);
  const ForwardedFlags f = SplitForwardedFlags(o.serve_args);
  if (!f.dropped.empty()) {
    std::string dropped;
    for (const std::string& d : f.dropped) dropped += (dropped.empty() ? "" : ", ") + ("`" + d + "`");
    rep.notes.push_back("not forwarded to serve: " + dropped +
                        " (validate starts its servers on 127.0.0.1 and a free port of its own, "
                        "and picks each gate's --load-format)");
  }
  if (o.dummy_only) {
    // The seed's Stage A on its own (a directory with the config and tokenizer, no weights).
    rep.notes.push_back(
        "--dummy-only: the dummy-weight gate alone; no real weights, smoke requests or accuracy "
        "tables");
    rep.gates.push_back(DummyGate(o, f));
    return rep;
  }
  if (!o.skip_dummy) rep.gates.push_back(DummyGate(o, f));
  auto [real, smoke] = RealAndSmoke(o, f);
  const bool real_ok = real.pass;
  rep.gates.push_back(std::move(real));
  rep.gates.push_back(std::move(smoke));
  if (!o.reference.empty()) {
    if (real_ok) {
      rep.gates.push_back(AccuracyGate(o, &rep));
    } else {
      GateResult g;
      g.title = "精度评测 Accuracy";
      g.skipped = true;
      g.detail = "skipped: the real weights did not load";
      rep.gates.push_back(std::move(g));
    }
  }
  return rep;
}

}  // namespace cpm
