// `cpmserve validate MODEL_DIR [serve flags]`: the seed documents' adaptation checklist in one
// go (dummy gate, real-weight gate, smoke, accuracy tables), printed as a markdown report.
// Unknown flags are handed to every `serve` child unchanged (e.g. --max-num-seqs 16).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <unistd.h>

#include "commands.h"
#include "model_argument.h"
#include "eval/eval_runner.h"
#include "eval/reference_dump.h"
#include "eval/serve_process.h"
#include "eval/validate.h"
#include "model/registry.h"

namespace cpm {
namespace {

int RunValidate(ValidateOptions o, const std::vector<std::string>& extras, const std::string& out) {
  // Both gates load the same folder; the real-weight gate needs the weights.
  if (!ResolveModelArgument("validate", &o.model_dir, !o.dummy_only)) return 2;
  o.serve_args = extras;
  o.version = CPM_VERSION;
  o.eval_model.require_tokenizer = false;
  auto exe = SelfExecutable();
  if (!exe.ok()) {
    std::fprintf(stderr, "validate: %s\n", exe.status().message().c_str());
    return 2;
  }
  o.exe = *exe;
  if (!o.reference.empty()) {
    // Read before the gates run their servers (minutes), as `eval` reads it: unusable, exit 2.
    auto refs = ReadReferenceDump(o.reference);
    if (!refs.ok()) {
      std::fprintf(stderr, "validate: %s\n", refs.status().message().c_str());
      return 2;
    }
    // ...and checked against the model's vocabulary from its config (a config that does not
    // parse is the gates' to report).
    if (auto vocab = ConfigVocabSize(o.model_dir); vocab.ok()) {
      if (Status s = CheckReferenceForModel(*refs, *vocab); !s.ok()) {
        std::fprintf(stderr, "validate: %s\n", s.message().c_str());
        return 2;
      }
    }
  }
  std::error_code ec;
  if (o.work_dir.empty()) {
    o.work_dir = (std::filesystem::temp_directory_path() /
                  ("cpmserve-validate-" + std::to_string(getpid()))).string();
  }
  std::filesystem::create_directories(o.work_dir, ec);
  if (ec) {
    std::fprintf(stderr, "validate: cannot create %s: %s\n", o.work_dir.c_str(), ec.message().c_str());
    return 2;
  }
  const ValidationReport report = RunValidation(o);
  const std::string md = RenderValidationMarkdown(report);
  std::fwrite(md.data(), 1, md.size(), stdout);
  std::fflush(stdout);
  if (!out.empty()) {
    std::ofstream f(out, std::ios::binary | std::ios::trunc);
    f << md;
    if (!f) {
      std::fprintf(stderr, "validate: cannot write %s\n", out.c_str());
      return 2;
    }
  }
  return report.passed() ? 0 : 1;
}

}  // namespace

void RegisterValidateCommand(CLI::App& app, int* exit_code) {
  auto o = std::make_shared<ValidateOptions>();
  auto out = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "validate", "dummy gate, real-weight gate, smoke request and accuracy tables, as one report");
  cmd->allow_extras();  // forwarded to `serve`
  cmd->add_option("model_dir", o->model_dir, "Hugging Face model directory")->required();
  cmd->add_option("--dtype", o->eval_model.dtype, "auto | bfloat16 | float32 (serve and eval)")
      ->capture_default_str();
  cmd->add_option("--quantization,-q", o->eval_model.quantization,
                  std::string(kQuantizationHelp) + " (serve and eval)")
      ->capture_default_str();
  cmd->add_option("--max-model-len", o->eval_model.max_model_len, "context length (serve and eval)");
  cmd->add_option("--threads", o->eval_model.threads, "compute threads (serve and eval)");
  cmd->add_option("--reference", o->reference, "reference dump: adds the accuracy tables");
  cmd->add_option("--greedy-tokens", o->greedy_tokens, "N for the greedy table (0: the reference's)");
  cmd->add_option("--min-top1", o->logits_bounds.min_top1, "accuracy gate: min top-1 agreement");
  cmd->add_option("--min-top5-overlap", o->logits_bounds.min_top5_overlap, "accuracy gate: min top-5 overlap");
  cmd->add_option("--min-top20-overlap", o->logits_bounds.min_top20_overlap, "accuracy gate: min top-20 overlap");
  cmd->add_option("--max-rel-err", o->logits_bounds.max_rel_err, "accuracy gate: max relative error (0.01 = 1%)");
  cmd->add_option("--max-mean-rel-err", o->logits_bounds.max_mean_rel_err, "accuracy gate: max mean relative error");
  cmd->add_option("--max-kl", o->logits_bounds.max_kl, "accuracy gate: max KL divergence");
  cmd->add_option("--max-logit-diff", o->logits_bounds.max_logit_diff,
                  "accuracy gate: max |logit difference| (the reference needs logsumexp)");
  cmd->add_option("--min-exact", o->greedy_bounds.min_exact_rate, "accuracy gate: min greedy exact-match rate");
  cmd->add_option("--min-token-accuracy", o->greedy_bounds.min_token_accuracy, "accuracy gate: min mean token accuracy");
  cmd->add_option("--ready-timeout", o->ready_timeout_s, "seconds to wait for /health")->capture_default_str();
  cmd->add_option("--request-timeout", o->request_timeout_s, "seconds for the smoke request")->capture_default_str();
  cmd->add_option("--smoke-prompt", o->smoke_prompt, "user message of the smoke request")->capture_default_str();
  cmd->add_option("--smoke-max-tokens", o->smoke_max_tokens, "max_tokens of the smoke request")->capture_default_str();
  cmd->add_option("--smoke-image", o->smoke_image,
                  "also send an image request: an image URL or a local file (a MiniCPM-V model "
                  "gets a built-in test image without it)");
  cmd->add_option("--smoke-image-prompt", o->smoke_image_prompt, "question of the image smoke request")
      ->capture_default_str();
  cmd->add_option("--work-dir", o->work_dir, "where the server logs go (default: a temp dir)");
  cmd->add_flag("--skip-dummy", o->skip_dummy, "skip the dummy-weight gate");
  cmd->add_flag("--dummy-only", o->dummy_only,
                "run the dummy-weight gate alone (the seed's Stage A: a model directory "
                "without weights)")
      ->excludes("--skip-dummy");
  cmd->add_option("--out", *out, "also write the markdown report here");
  cmd->callback([o, out, cmd, exit_code] { *exit_code = RunValidate(*o, cmd->remaining(), *out); });
}

}  // namespace cpm
