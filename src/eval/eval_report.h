// Rendering of the accuracy tables as plain text, markdown (shaped like the seed documents'
// tables, with their Chinese row names beside the English ones) and JSON.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/eval_runner.h"

namespace cpm {

enum class ReportFormat { kText, kMarkdown, kJson };
bool ParseReportFormat(const std::string& s, ReportFormat* out);  // text | markdown | json

// Who produced what: shown in the tables' first rows and copied into the JSON.
struct ReportContext {
  std::string reference_path;
  std::string reference;  // e.g. "transformers 4.57.6 (bfloat16)", from the dump's meta
  std::string target;     // e.g. "cpmserve 0.1.0 (bfloat16, 2 threads)"
  std::vector<std::string> failures;  // failed bounds; empty = pass
  bool bounds_set = false;
};

// "producer (dtype, model)" from a record's meta, for ReportContext::reference.
std::string DescribeReferenceMeta(const nlohmann::json& meta);

nlohmann::json LogitsEvalToJson(const LogitsEval& eval, const ReportContext& ctx);
nlohmann::json GreedyEvalToJson(const GreedyEval& eval, const ReportContext& ctx);

// Markdown: the summary table then the per-prompt table (no heading: callers add theirs).
std::string RenderLogitsMarkdown(const LogitsEval& eval, const ReportContext& ctx);
std::string RenderGreedyMarkdown(const GreedyEval& eval, const ReportContext& ctx);

// One call for the commands: text, markdown or JSON (pretty, one document), each ending with
// the bound verdict.
std::string RenderLogits(const LogitsEval& eval, const ReportContext& ctx, ReportFormat format);
std::string RenderGreedy(const GreedyEval& eval, const ReportContext& ctx, ReportFormat format);

// A markdown table cell: '|' escaped, newlines as <br>, optionally in a code span.
std::string MarkdownCell(const std::string& text, bool code = false);

}  // namespace cpm
