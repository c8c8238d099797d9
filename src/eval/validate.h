// `cpmserve validate MODEL_DIR`: the seed documents' adaptation checklist in one run — dummy
// gate, real-weight gate (with memory figures), smoke request, and the accuracy tables when a
// reference dump is given — collected into one report with pass/fail per gate.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "eval/eval_report.h"
#include "eval/eval_runner.h"
#include "eval/eval_target.h"
#include "eval/logit_metrics.h"
#include "eval/greedy_metrics.h"

namespace cpm {

struct ValidateOptions {
  std::string model_dir;
  std::string exe;                      // the cpmserve binary that runs `serve`
  // Extra `serve` flags, passed to both server runs, except --host/--port (validate picks its
  // own); an --api-key here (or $VLLM_API_KEY) is sent by the probes.
  std::vector<std::string> serve_args;
  EvalModelOptions eval_model;          // dtype / max_model_len / threads, also passed to serve
  std::string reference;                // empty: no accuracy stage
  int64_t greedy_tokens = 0;            // 0: the reference's own length
  LogitsBounds logits_bounds;
  GreedyBounds greedy_bounds;
  double ready_timeout_s = 600;
  double request_timeout_s = 300;
  std::string smoke_prompt = "你好";
  int smoke_max_tokens = 32;
  // A second smoke request with this image (URL, or a local file sent as a data: URL) and
  // `smoke_image_prompt`, as the seed documents' image request; empty: a built-in test image for
  // a model that takes images (its architecture a MiniCPM-V one), none for the others.
  std::string smoke_image;
  std::string smoke_image_prompt = "请观察图片，描述你看到的内容。";
  std::string work_dir;  // server logs go here
  bool skip_dummy = false;
  bool dummy_only = false;  // Stage A alone: a directory without weights can be checked
  std::string version;   // "0.1.0"
};

struct GateResult {
  std::string title;     // "Stage A — Dummy Fast Gate"
  bool pass = false;
  bool skipped = false;  // not run because an earlier gate failed
  // Reported, not gated: it ran without error but no bound was given (the accuracy tables
  // without --max-rel-err and the like), so its figures neither pass nor fail the run.
  bool ungated = false;
  std::vector<std::string> commands;  // shell lines a person could run by hand
  std::vector<std::pair<std::string, std::string>> figures;  // table rows
  std::string detail;    // free text: errors, log tails, the smoke reply
};

struct ValidationReport {
  std::string model_dir;
  std::vector<std::pair<std::string, std::string>> environment;
  std::vector<std::string> notes;  // one line each, about how the run was set up
  std::vector<GateResult> gates;
  std::optional<LogitsEval> logits;
  std::optional<GreedyEval> greedy;
  ReportContext logits_ctx;
  ReportContext greedy_ctx;
  bool passed() const;
};

ValidationReport RunValidation(const ValidateOptions& options);

std::string RenderValidationMarkdown(const ValidationReport& report);

}  // namespace cpm
