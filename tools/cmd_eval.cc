// `cpmserve eval dump|logits|greedy`: make a reference dump with this engine, or compare this
// engine with a reference dump (next-token distributions; greedy continuations). The tables
// are the seed documents' accuracy tables; see src/eval/README.md for the dump format.
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>

#include "base/log.h"
#include "commands.h"
#include "model_argument.h"
#include "eval/dump_producer.h"
#include "eval/eval_report.h"
#include "eval/eval_runner.h"
#include "eval/eval_target.h"
#include "eval/prompt_set.h"
#include "eval/reference_dump.h"
#include "model/model.h"

namespace cpm {
namespace {

struct EvalArgs {
  EvalModelOptions model;
  int64_t block_size = 16;
  // dump
  std::string prompts;
  std::string out;
  int64_t greedy_tokens = 0;
  bool chat = false;
  int32_t top_k = 20;
  // logits / greedy
  std::string reference;
  std::string format = "text";
  int64_t tokens = 0;
  LogitsBounds logits_bounds;
  GreedyBounds greedy_bounds;
};

int Error(const Status& s) {
  std::fprintf(stderr, "eval: %s\n", s.message().c_str());
  return 2;
}

void AddModelFlags(CLI::App* cmd, EvalArgs* a) {
  cmd->add_option("--model", a->model.model_dir, "Hugging Face model directory")->required();
  cmd->add_option("--dtype", a->model.dtype, "auto | bfloat16 | float32")->capture_default_str();
  cmd->add_option("--quantization,-q", a->model.quantization, kQuantizationHelp)
      ->capture_default_str();
  cmd->add_option("--load-format", a->model.load_format, "auto | safetensors | dummy")
      ->capture_default_str();
  cmd->add_option("--max-model-len", a->model.max_model_len, "context length (0: from config)");
  cmd->add_option("--threads", a->model.threads, "compute threads (0: one per physical core, as llama.cpp)");
  cmd->add_option("--block-size", a->block_size, "KV cache block size")->check(CLI::Range(1, 1024));
}

Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) return InvalidArgument(path + ": cannot create");
  f << text;
  return f ? OkStatus() : DataLoss(path + ": write error");
}

bool ResolveModel(EvalArgs* a) {
  return ResolveModelArgument("eval", &a->model.model_dir, a->model.load_format != "dummy");
}

int RunDump(const EvalArgs& a) {
  auto specs = ReadPromptsFile(a.prompts);
  if (!specs.ok()) return Error(specs.status());
  auto target = LoadEvalTarget(a.model, CPM_VERSION);
  if (!target.ok()) return Error(target.status());
  auto prompts = PreparePrompts(*specs, target->tokenizer.get(), a.chat);
  if (!prompts.ok()) return Error(prompts.status());
  DumpOptions o;
  o.top_k = a.top_k;
  o.greedy_tokens = a.greedy_tokens;
  o.stop_ids = target->stop_ids;
  o.block_size = a.block_size;
  const ModelInfo& info = target->model->info();
  o.meta = {{"producer", std::string("cpmserve ") + CPM_VERSION},
            {"model", a.model.model_dir},
            {"architecture", info.architecture},
            {"dtype", ToString(info.dtype)},
            {"quantization", a.model.quantization},
            {"load_format", a.model.load_format},
            {"threads", target->pool->num_threads()},
            {"top_k", a.top_k},
            {"greedy_tokens", a.greedy_tokens},
            {"chat", a.chat}};
  auto records = ProduceDump(*target->model, *target->pool, target->tokenizer.get(), *prompts, o);
  if (!records.ok()) return Error(records.status());
  if (Status s = WriteReferenceDump(a.out, *records); !s.ok()) return Error(s);
  CPM_LOG_INFO("wrote {} reference records to {}", records->size(), a.out);
  return 0;
}

// Shared by logits and greedy: load the reference, then the model.
struct Loaded {
  std::vector<ReferenceRecord> refs;
  EvalTarget target;
  ReportContext ctx;
  ReportFormat format = ReportFormat::kText;
};

StatusOr<Loaded> LoadForCompare(const EvalArgs& a) {
  Loaded l;
  if (!ParseReportFormat(a.format, &l.format))
    return InvalidArgument("--format: '" + a.format + "' (text, markdown, json)");
  CPM_ASSIGN_OR_RETURN(l.refs, ReadReferenceDump(a.reference));
  CPM_ASSIGN_OR_RETURN(l.target, LoadEvalTarget(a.model, CPM_VERSION));
  l.ctx.reference_path = a.reference;
  l.ctx.reference = DescribeReferenceMeta(l.refs.front().meta);
  l.ctx.target = l.target.description;
  return l;
}

int Emit(const std::string& report, const std::string& out, bool failed) {
  std::fwrite(report.data(), 1, report.size(), stdout);
  if (!out.empty()) {
    if (Status s = WriteText(out, report); !s.ok()) return Error(s);
  }
  return failed ? 1 : 0;
}

int RunLogits(const EvalArgs& a) {
  auto l = LoadForCompare(a);
  if (!l.ok()) return Error(l.status());
  EvalRunOptions o{a.block_size, l->target.stop_ids};
  auto eval = RunLogitsEval(*l->target.model, *l->target.pool, l->refs, l->target.tokenizer.get(), o);
  if (!eval.ok()) return Error(eval.status());
  l->ctx.bounds_set = a.logits_bounds.any();
  l->ctx.failures = CheckLogitsBounds(eval->summary, a.logits_bounds);
  return Emit(RenderLogits(*eval, l->ctx, l->format), a.out, !l->ctx.failures.empty());
}

int RunGreedy(const EvalArgs& a) {
  auto l = LoadForCompare(a);
  if (!l.ok()) return Error(l.status());
  EvalRunOptions o{a.block_size, l->target.stop_ids};
  auto eval = RunGreedyEval(*l->target.model, *l->target.pool, l->refs, l->target.tokenizer.get(),
                            a.tokens, o);
  if (!eval.ok()) return Error(eval.status());
  l->ctx.bounds_set = a.greedy_bounds.any();
  l->ctx.failures = CheckGreedyBounds(eval->summary, a.greedy_bounds);
  return Emit(RenderGreedy(*eval, l->ctx, l->format), a.out, !l->ctx.failures.empty());
}

// CLI11 fills std::optional<double> directly.
void AddLogitsBounds(CLI::App* cmd, LogitsBounds* b) {
  cmd->add_option("--min-top1", b->min_top1, "fail below this top-1 agreement (fraction, e.g. 1.0)");
  cmd->add_option("--min-top5-overlap", b->min_top5_overlap, "fail below this mean top-5 overlap");
  cmd->add_option("--min-top20-overlap", b->min_top20_overlap, "fail below this mean top-20 overlap");
  cmd->add_option("--max-rel-err", b->max_rel_err, "fail above this max relative error (0.01 = 1%)");
  cmd->add_option("--max-mean-rel-err", b->max_mean_rel_err, "fail above this mean relative error");
  cmd->add_option("--max-kl", b->max_kl, "fail above this KL divergence (the max over prompts)");
  cmd->add_option("--max-logit-diff", b->max_logit_diff,
                  "fail above this max |logit difference| (needs the reference's logsumexp)");
}

}  // namespace

void RegisterEvalCommand(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<EvalArgs>();
  CLI::App* eval = app.add_subcommand("eval", "accuracy against a reference dump (see src/eval/README.md)");
  eval->require_subcommand(1);

  CLI::App* dump = eval->add_subcommand("dump", "write a reference dump of this engine's outputs");
  AddModelFlags(dump, a.get());
  dump->add_option("--prompts", a->prompts, "prompts file: text lines or JSON objects")->required();
  dump->add_option("--out", a->out, "reference dump to write (JSON lines)")->required();
  dump->add_option("--greedy-tokens", a->greedy_tokens, "also record a greedy continuation of N tokens");
  dump->add_flag("--chat", a->chat, "render text prompts with the chat template");
  dump->add_option("--top-k", a->top_k, "log-probs kept per prompt (>= 20)")
      ->check(CLI::Range(20, 1 << 24))->capture_default_str();
  dump->callback([a, exit_code] { *exit_code = ResolveModel(a.get()) ? RunDump(*a) : 2; });

  CLI::App* logits = eval->add_subcommand("logits", "compare last-position distributions with a reference");
  AddModelFlags(logits, a.get());
  logits->add_option("--reference", a->reference, "reference dump (JSON lines)")->required();
  logits->add_option("--format", a->format, "text | markdown | json")->capture_default_str();
  logits->add_option("--out", a->out, "also write the report here");
  AddLogitsBounds(logits, &a->logits_bounds);
  logits->callback([a, exit_code] { *exit_code = ResolveModel(a.get()) ? RunLogits(*a) : 2; });

  CLI::App* greedy = eval->add_subcommand("greedy", "compare greedy continuations with a reference");
  AddModelFlags(greedy, a.get());
  greedy->add_option("--reference", a->reference, "reference dump with greedy_ids")->required();
  greedy->add_option("--tokens", a->tokens, "N tokens per prompt (0: the reference's length)")
      ->check(NonNegative());
  greedy->add_option("--format", a->format, "text | markdown | json")->capture_default_str();
  greedy->add_option("--out", a->out, "also write the report here");
  greedy->add_option("--min-exact", a->greedy_bounds.min_exact_rate, "fail below this exact-match rate");
  greedy->add_option("--min-token-accuracy", a->greedy_bounds.min_token_accuracy,
                     "fail below this mean token accuracy");
  greedy->callback([a, exit_code] { *exit_code = ResolveModel(a.get()) ? RunGreedy(*a) : 2; });
}

}  // namespace cpm
