// Table rendering for `eval logits` / `eval greedy` and the accuracy section of `validate`.
#include "eval/eval_report.h"

#include <fmt/format.h>

namespace cpm {
namespace {

using json = nlohmann::json;

std::string Pct(double fraction, int decimals) {
  return fmt::format("{:.{}f}%", 100.0 * fraction, decimals);
}

// "100% (5/5)": an overlap fraction as the seed writes it, the count out of k rounded.
std::string OverlapCell(double fraction, int k) {
  return fmt::format("{} ({:.3g}/{})", Pct(fraction, 2), fraction * k, k);
}

std::string Sci(double v) { return fmt::format("{:.3g}", v); }

json OptionalJson(const std::optional<double>& v) { return v ? json(*v) : json(); }

// The raw-logit cells need the reference's logsumexp; without it the row says so.
constexpr const char* kNoLogsumexp = "— (the reference has no logsumexp)";

std::string LogitDiffCell(const LogitsSummary& s) {
  if (!s.max_abs_logit_diff) return kNoLogsumexp;
  return fmt::format("{} / {}", Sci(*s.max_abs_logit_diff), Sci(*s.mean_abs_logit_diff));
}

json Bounds(const ReportContext& ctx) {
  return {{"checked", ctx.bounds_set}, {"failures", ctx.failures}, {"pass", ctx.failures.empty()}};
}

std::string Verdict(const ReportContext& ctx) {
  std::string out;
  for (const std::string& f : ctx.failures) out += "FAIL " + f + "\n";
  if (ctx.bounds_set) out += ctx.failures.empty() ? "PASS\n" : fmt::format("FAILED {} bound(s)\n", ctx.failures.size());
  return out;
}

std::string Short(const std::string& s, size_t max_bytes) {
  if (s.size() <= max_bytes) return s;
  size_t cut = max_bytes;
  while (cut > 0 && (static_cast<unsigned char>(s[cut]) & 0xC0) == 0x80) --cut;  // UTF-8 boundary
  return s.substr(0, cut) + "…";
}

}  // namespace

bool ParseReportFormat(const std::string& s, ReportFormat* out) {
  if (s == "text") *out = ReportFormat::kText;
  else if (s == "markdown" || s == "md") *out = ReportFormat::kMarkdown;
  else if (s == "json") *out = ReportFormat::kJson;
  else return false;
  return true;
}

std::string DescribeReferenceMeta(const json& meta) {
  auto str = [&](const char* key) {
    auto it = meta.find(key);
    return it != meta.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  std::string producer = str("producer");
  if (producer.empty()) producer = "unknown producer";
  std::string detail = str("dtype");
  if (auto it = meta.find("threads"); it != meta.end() && it->is_number_integer())
    detail += (detail.empty() ? "" : ", ") + fmt::format("{} threads", it->get<int64_t>());
  if (str("load_format") == "dummy") detail += (detail.empty() ? "" : ", ") + std::string("dummy weights");
  if (const std::string device = str("device"); !device.empty())
    detail += (detail.empty() ? "" : ", ") + device;
  return detail.empty() ? producer : producer + " (" + detail + ")";
}

std::string MarkdownCell(const std::string& text, bool code) {
  std::string s;
  for (char c : text) {
    if (c == '|') s += "\\|";
    else if (c == '\n') s += "<br>";
    else if (c == '\r') continue;
    else s += c;
  }
  if (code && s.find('`') == std::string::npos && !s.empty()) return "`" + s + "`";
  return s;
}

json LogitsEvalToJson(const LogitsEval& e, const ReportContext& ctx) {
  const LogitsSummary& s = e.summary;
  json prompts = json::array();
  for (const LogitsPromptResult& p : e.prompts) {
    const RowMetrics& m = p.metrics;
    double max_rel = 0, mean_rel = 0;
    for (double r : m.rel) max_rel = std::max(max_rel, r), mean_rel += r;
    if (!m.rel.empty()) mean_rel /= static_cast<double>(m.rel.size());
    prompts.push_back({{"id", p.id}, {"prompt", p.label}, {"top1", m.top1},
                       {"ref_top1", m.ref_top1}, {"engine_top1", m.eng_top1},
                       {"top5_overlap", m.top5_overlap}, {"top20_overlap", m.top20_overlap},
                       {"max_rel_err", max_rel}, {"mean_rel_err", mean_rel},
                       {"max_abs_logprob", m.max_abs_logprob}, {"kl", m.kl},
                       {"max_abs_logit_diff",
                        m.logit_diff ? json(m.logit_diff->max_abs) : json()}});
  }
  return {{"kind", "logits"},
          {"reference_file", ctx.reference_path},
          {"reference", ctx.reference},
          {"target", ctx.target},
          {"summary",
           {{"prompts", s.rows}, {"top1", s.top1}, {"top5_overlap", s.top5_overlap},
            {"top20_overlap", s.top20_overlap}, {"max_rel_err", s.max_rel_err},
            {"mean_rel_err", s.mean_rel_err}, {"max_abs_logprob", s.max_abs_logprob},
            {"kl_mean", s.kl_mean}, {"kl_max", s.kl_max},
            {"max_abs_logit_diff", OptionalJson(s.max_abs_logit_diff)},
            {"mean_abs_logit_diff", OptionalJson(s.mean_abs_logit_diff)},
            {"logit_rel_err", OptionalJson(s.logit_rel_err)}}},
          {"prompts", prompts},
          {"bounds", Bounds(ctx)}};
}

json GreedyEvalToJson(const GreedyEval& e, const ReportContext& ctx) {
  json prompts = json::array();
  for (const GreedyPromptResult& p : e.prompts) {
    const GreedyComparison& c = p.comparison;
    prompts.push_back({{"id", p.id}, {"prompt", p.label}, {"exact", c.exact},
                       {"token_accuracy", c.token_accuracy}, {"matched", c.matched},
                       {"length", c.length},
                       {"first_divergence", c.first_divergence ? json(*c.first_divergence) : json()},
                       {"reference_ids", p.ref_ids}, {"engine_ids", p.eng_ids},
                       {"reference_text", p.ref_text}, {"engine_text", p.eng_text}});
  }
  return {{"kind", "greedy"},
          {"reference_file", ctx.reference_path},
          {"reference", ctx.reference},
          {"target", ctx.target},
          {"tokens", e.tokens},
          {"summary",
           {{"prompts", e.summary.prompts}, {"exact", e.summary.exact},
            {"exact_rate", e.summary.exact_rate},
            {"mean_token_accuracy", e.summary.mean_token_accuracy}}},
          {"prompts", prompts},
          {"bounds", Bounds(ctx)}};
}

std::string RenderLogitsMarkdown(const LogitsEval& e, const ReportContext& ctx) {
  const LogitsSummary& s = e.summary;
  std::string out = "| 指标 Metric | 数值 Value |\n|---|---|\n";
  out += fmt::format("| 参考框架 Reference | {} |\n", MarkdownCell(ctx.reference, true));
  out += fmt::format("| 目标框架 Target | {} |\n", MarkdownCell(ctx.target, true));
  out += fmt::format("| Prompts | {} |\n", s.rows);
  out += fmt::format("| Top-1 token 一致性 (agreement) | {} ({}/{}) |\n", Pct(s.top1, 2),
                     static_cast<int64_t>(s.top1 * s.rows + 0.5), s.rows);
  out += fmt::format("| Top-5 token 一致性 (overlap) | {} |\n", OverlapCell(s.top5_overlap, 5));
  out += fmt::format("| Top-20 重叠率 (overlap) | {} |\n", OverlapCell(s.top20_overlap, 20));
  out += fmt::format("| 最大相对误差 (max relative error, top-20 probs) | {} |\n", Pct(s.max_rel_err, 4));
  out += fmt::format("| 平均相对误差 (mean relative error) | {} |\n", Pct(s.mean_rel_err, 4));
  out += fmt::format("| KL 散度 (KL(ref‖target), mean / max) | {} / {} |\n", Sci(s.kl_mean), Sci(s.kl_max));
  out += fmt::format("| Max abs log-prob diff (top-20) | {} |\n", Sci(s.max_abs_logprob));
  out += fmt::format("| Logit diff, max / mean (reference's top-K ids) | {} |\n", LogitDiffCell(s));
  out += fmt::format("| Logit relative error (mean \\|Δ\\| / mean \\|ref logit\\|) | {} |\n",
                     s.logit_rel_err ? Pct(*s.logit_rel_err, 4) : kNoLogsumexp);
  out += "\n| Prompt | Top-1 (ref → target) | Top-5 | Top-20 | Max rel err | KL |\n"
         "|---|---|---|---|---|---|\n";
  for (const LogitsPromptResult& p : e.prompts) {
    const RowMetrics& m = p.metrics;
    double max_rel = 0;
    for (double r : m.rel) max_rel = std::max(max_rel, r);
    out += fmt::format("| {} | {} {} → {} | {} | {} | {} | {} |\n", MarkdownCell(Short(p.label, 60), true),
                       m.top1 ? "✅" : "❌", m.ref_top1, m.eng_top1, Pct(m.top5_overlap, 0),
                       Pct(m.top20_overlap, 0), Pct(max_rel, 4), Sci(m.kl));
  }
  return out;
}

std::string RenderGreedyMarkdown(const GreedyEval& e, const ReportContext& ctx) {
  const GreedySummary& s = e.summary;
  std::string out = "| 指标 Metric | 数值 Value |\n|---|---|\n";
  out += fmt::format("| 参考框架 Reference | {} |\n", MarkdownCell(ctx.reference, true));
  out += fmt::format("| 目标框架 Target | {} |\n", MarkdownCell(ctx.target, true));
  out += fmt::format("| 测试 prompt 数 (prompts) | `{}` |\n", s.prompts);
  out += fmt::format("| Tokens per prompt (N) | `{}` |\n", e.tokens);
  out += fmt::format("| 精确匹配率 (exact match) | `{}`（{} / {}） |\n", Pct(s.exact_rate, 1), s.exact,
                     s.prompts);
  out += fmt::format("| 平均 Token 准确率 (mean token accuracy) | `{}` |\n",
                     Pct(s.mean_token_accuracy, 1));
  out += "\n| Prompt | 精确匹配 | Token 准确率 | First divergence | 参考输出 Reference | 目标输出 Target |\n"
         "|---|---|---|---|---|---|\n";
  for (const GreedyPromptResult& p : e.prompts) {
    const GreedyComparison& c = p.comparison;
    out += fmt::format("| {} | {} | `{}` | {} | {} | {} |\n", MarkdownCell(Short(p.label, 60), true),
                       c.exact ? "✅" : "❌", Pct(c.token_accuracy, 2),
                       c.first_divergence ? fmt::format("after {} matching tokens of {}", *c.first_divergence, c.length)
                                          : std::string("—"),
                       MarkdownCell(p.ref_text), MarkdownCell(p.eng_text));
  }
  return out;
}

std::string RenderLogits(const LogitsEval& e, const ReportContext& ctx, ReportFormat format) {
  if (format == ReportFormat::kJson) return LogitsEvalToJson(e, ctx).dump(1, ' ', false, json::error_handler_t::replace) + "\n";
  if (format == ReportFormat::kMarkdown) {
    std::string out = RenderLogitsMarkdown(e, ctx);
    const std::string v = Verdict(ctx);
    return v.empty() ? out : out + "\n```\n" + v + "```\n";
  }
  const LogitsSummary& s = e.summary;
  std::string out = fmt::format("reference: {} [{}]\ntarget:    {}\n", ctx.reference, ctx.reference_path, ctx.target);
  out += fmt::format("{:<8} {:<24} {:>5} {:>13} {:>7} {:>7} {:>10} {:>10}\n", "id", "prompt", "top1",
                     "ref->target", "top5", "top20", "max_rel", "kl");
  for (const LogitsPromptResult& p : e.prompts) {
    const RowMetrics& m = p.metrics;
    double max_rel = 0;
    for (double r : m.rel) max_rel = std::max(max_rel, r);
    std::string label = Short(p.label, 22);
    for (char& c : label) if (c == '\n') c = ' ';
    out += fmt::format("{:<8} {:<24} {:>5} {:>13} {:>7.4f} {:>7.4f} {:>10.3e} {:>10.3e}\n", p.id, label,
                       m.top1 ? "yes" : "NO", fmt::format("{}->{}", m.ref_top1, m.eng_top1),
                       m.top5_overlap, m.top20_overlap, max_rel, m.kl);
  }
  out += fmt::format(
      "overall: prompts {}  top-1 {}  top-5 overlap {}  top-20 overlap {}  max rel err {}  "
      "mean rel err {}  KL mean {} max {}  max |dlogprob| {}\n",
      s.rows, Pct(s.top1, 2), Pct(s.top5_overlap, 2), Pct(s.top20_overlap, 2), Pct(s.max_rel_err, 4),
      Pct(s.mean_rel_err, 4), Sci(s.kl_mean), Sci(s.kl_max), Sci(s.max_abs_logprob));
  out += s.max_abs_logit_diff
             ? fmt::format("logits (reference's top-K ids): max |dlogit| {}  mean |dlogit| {}  "
                           "relative error {}\n",
                           Sci(*s.max_abs_logit_diff), Sci(*s.mean_abs_logit_diff),
                           Pct(*s.logit_rel_err, 4))
             : std::string("logits: no figures, the reference has no logsumexp\n");
  return out + Verdict(ctx);
}

std::string RenderGreedy(const GreedyEval& e, const ReportContext& ctx, ReportFormat format) {
  if (format == ReportFormat::kJson) return GreedyEvalToJson(e, ctx).dump(1, ' ', false, json::error_handler_t::replace) + "\n";
  if (format == ReportFormat::kMarkdown) {
    std::string out = RenderGreedyMarkdown(e, ctx);
    const std::string v = Verdict(ctx);
    return v.empty() ? out : out + "\n```\n" + v + "```\n";
  }
  std::string out = fmt::format("reference: {} [{}]\ntarget:    {}\ntokens per prompt: {}\n",
                                ctx.reference, ctx.reference_path, ctx.target, e.tokens);
  for (const GreedyPromptResult& p : e.prompts) {
    const GreedyComparison& c = p.comparison;
    out += fmt::format("[{}] {}  exact {}  token accuracy {}  first divergence {}\n", p.id, p.label,
                       c.exact ? "yes" : "NO", Pct(c.token_accuracy, 2),
                       c.first_divergence ? fmt::format("after {} of {}", *c.first_divergence, c.length) : "-");
    out += "  reference: " + p.ref_text + "\n  target:    " + p.eng_text + "\n";
  }
  out += fmt::format("overall: prompts {}  exact match {} ({} / {})  mean token accuracy {}\n",
                     e.summary.prompts, Pct(e.summary.exact_rate, 1), e.summary.exact,
                     e.summary.prompts, Pct(e.summary.mean_token_accuracy, 2));
  return out + Verdict(ctx);
}

}  // namespace cpm
