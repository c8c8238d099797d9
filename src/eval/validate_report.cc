// The markdown report of `cpmserve validate`, laid out like the seed documents: environment,
// one section per stage with its commands and figures, the accuracy tables, a summary.
#include <fmt/format.h>

#include "eval/eval_report.h"
#include "eval/validate.h"

namespace cpm {
namespace {

const char* Mark(const GateResult& g) {
  if (g.skipped) return "⏭️ skipped (❌)";
  if (g.ungated) return "ℹ️ reported, not gated";
  return g.pass ? "✅ pass" : "❌ fail";
}

std::string Figures(const std::vector<std::pair<std::string, std::string>>& rows) {
  if (rows.empty()) return "";
  std::string out = "| 项目 Item | 数值 Value |\n|---|---|\n";
  for (const auto& [k, v] : rows) out += fmt::format("| {} | {} |\n", MarkdownCell(k), MarkdownCell(v));
  return out + "\n";
}

std::string Gate(const GateResult& g, int number) {
  std::string out = fmt::format("## {}. {} — {}\n\n", number, g.title, Mark(g));
  if (!g.commands.empty()) {
    out += "```bash\n";
    for (const std::string& c : g.commands) out += c + "\n";
    out += "```\n\n";
  }
  out += Figures(g.figures);
  if (!g.detail.empty()) out += "```\n" + g.detail + (g.detail.back() == '\n' ? "" : "\n") + "```\n\n";
  return out;
}

}  // namespace


std::string RenderValidationMarkdown(const ValidationReport& r) {
  std::string out = fmt::format("# cpmserve validation: {}\n\n", r.model_dir);
  out += "## 1. 验证环境 Environment\n\n| 组件 Component | 版本 / 值 Value |\n|---|---|\n";
  for (const auto& [k, v] : r.environment) out += fmt::format("| {} | {} |\n", MarkdownCell(k), MarkdownCell(v, true));
  out += "\n";
  for (const std::string& note : r.notes) out += "> ℹ️ " + note + "\n\n";
  int n = 2;
  for (const GateResult& g : r.gates) {
    out += Gate(g, n++);
    if (g.title.rfind("精度评测", 0) == 0) {
      if (r.logits) {
        out += "### 前向传播 logits 精度 (last-position distributions)\n\n" +
               RenderLogitsMarkdown(*r.logits, r.logits_ctx) + "\n";
        for (const std::string& f : r.logits_ctx.failures) out += "- ❌ " + f + "\n";
        if (!r.logits_ctx.bounds_set) out += "_No logits bounds were set (--min-top1, --max-rel-err, --max-kl)._\n";
        out += "\n";
      }
      if (r.greedy) {
        out += "### 贪婪解码文本一致性 (greedy decoding)\n\n" + RenderGreedyMarkdown(*r.greedy, r.greedy_ctx) + "\n";
        for (const std::string& f : r.greedy_ctx.failures) out += "- ❌ " + f + "\n";
        out += "\n";
      }
    }
  }
  out += fmt::format("## {}. 结论 Summary\n\n| Gate | Result |\n|---|---|\n", n);
  for (const GateResult& g : r.gates) out += fmt::format("| {} | {} |\n", g.title, Mark(g));
  out += fmt::format("\n**{}**\n", r.passed() ? "✅ All gates passed." : "❌ At least one gate failed.");
  for (const GateResult& g : r.gates) {
    if (g.ungated) {
      out += fmt::format("\n_{}: reported, not gated (no bounds were given; for the seed's "
                         "acceptance pass e.g. --max-rel-err 0.01 --min-top1 1)._\n", g.title);
    }
  }
  return out;
}

}  // namespace cpm
