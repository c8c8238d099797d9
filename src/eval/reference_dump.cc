// Reading and writing the JSON-lines reference dump; strict on read so that a wrong file fails
// with its line number instead of producing a misleading accuracy table.
#include "eval/reference_dump.h"

#include <cmath>
#include <fstream>
#include <set>

namespace cpm {
namespace {

using json = nlohmann::json;

// Log-probs written by float32 frameworks can exceed 0 by a rounding step.
constexpr double kLogprobSlack = 1e-4;

StatusOr<std::vector<int32_t>> IdList(const json& j, const char* field) {
  if (!j.is_array()) return InvalidArgument(std::string(field) + ": must be an array of ids");
  std::vector<int32_t> ids;
  ids.reserve(j.size());
  for (const json& v : j) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX) {
      return InvalidArgument(std::string(field) + ": " + v.dump() + " is not a token id");
    }
    ids.push_back(v.get<int32_t>());
  }
  return ids;
}

StatusOr<std::vector<std::pair<int32_t, double>>> TopList(const json& j) {
  if (!j.is_array() || j.empty()) return InvalidArgument("top_logprobs: must be a non-empty array");
  std::vector<std::pair<int32_t, double>> top;
  std::set<int32_t> seen;
  for (const json& e : j) {
    if (!e.is_array() || e.size() != 2 || !e[0].is_number_integer() || !e[1].is_number()) {
      return InvalidArgument("top_logprobs: entry " + e.dump() + " is not [token_id, logprob]");
    }
    const int64_t id = e[0].get<int64_t>();
    const double lp = e[1].get<double>();
    if (id < 0 || id > INT32_MAX) return InvalidArgument("top_logprobs: bad id " + e[0].dump());
    if (!std::isfinite(lp) || lp > kLogprobSlack) {
      return InvalidArgument("top_logprobs: " + e[1].dump() + " is not a log-probability");
    }
    if (!top.empty() && lp > top.back().second) {
      return InvalidArgument("top_logprobs: not sorted best first at id " + std::to_string(id));
    }
    if (!seen.insert(static_cast<int32_t>(id)).second) {
      return InvalidArgument("top_logprobs: id " + std::to_string(id) + " listed twice");
    }
    top.emplace_back(static_cast<int32_t>(id), lp);
  }
  return top;
}

}  // namespace

json ReferenceRecordToJson(const ReferenceRecord& r) {
  json j = json::object();
  j["id"] = r.id;
  if (r.prompt) j["prompt"] = *r.prompt;
  j["prompt_ids"] = r.prompt_ids;
  j["chat"] = r.chat;
  json top = json::array();
  for (const auto& [id, lp] : r.top_logprobs) top.push_back(json::array({id, lp}));
  j["top_logprobs"] = std::move(top);
  if (r.logsumexp) j["logsumexp"] = *r.logsumexp;
  if (r.greedy_ids) j["greedy_ids"] = *r.greedy_ids;
  if (r.greedy_text) j["greedy_text"] = *r.greedy_text;
  j["meta"] = r.meta;
  return j;
}

StatusOr<ReferenceRecord> ReferenceRecordFromJson(const json& j) {
  if (!j.is_object()) return InvalidArgument("a line must be a JSON object");
  ReferenceRecord r;
  auto id = j.find("id");
  if (id == j.end()) return InvalidArgument("id: missing");
  if (id->is_string()) r.id = id->get<std::string>();
  else if (id->is_number_integer()) r.id = std::to_string(id->get<int64_t>());
  else return InvalidArgument("id: must be a string or an integer");
  if (auto p = j.find("prompt"); p != j.end() && !p->is_null()) {
    if (!p->is_string()) return InvalidArgument("prompt: must be a string");
    r.prompt = p->get<std::string>();
  }
  auto ids = j.find("prompt_ids");
  if (ids == j.end()) return InvalidArgument("prompt_ids: missing");
  CPM_ASSIGN_OR_RETURN(r.prompt_ids, IdList(*ids, "prompt_ids"));
  if (r.prompt_ids.empty()) return InvalidArgument("prompt_ids: empty");
  if (auto c = j.find("chat"); c != j.end() && !c->is_null()) {
    if (!c->is_boolean()) return InvalidArgument("chat: must be true or false");
    r.chat = c->get<bool>();
  }
  auto top = j.find("top_logprobs");
  if (top == j.end()) return InvalidArgument("top_logprobs: missing");
  CPM_ASSIGN_OR_RETURN(r.top_logprobs, TopList(*top));
  if (auto l = j.find("logsumexp"); l != j.end() && !l->is_null()) {
    if (!l->is_number()) return InvalidArgument("logsumexp: must be a number");
    r.logsumexp = l->get<double>();
  }
  if (auto g = j.find("greedy_ids"); g != j.end() && !g->is_null()) {
    CPM_ASSIGN_OR_RETURN(std::vector<int32_t> greedy, IdList(*g, "greedy_ids"));
    r.greedy_ids = std::move(greedy);
  }
  if (auto t = j.find("greedy_text"); t != j.end() && !t->is_null()) {
    if (!t->is_string()) return InvalidArgument("greedy_text: must be a string");
    r.greedy_text = t->get<std::string>();
  }
  if (auto m = j.find("meta"); m != j.end() && !m->is_null()) {
    if (!m->is_object()) return InvalidArgument("meta: must be an object");
    r.meta = *m;
  }
  return r;
}

StatusOr<std::vector<ReferenceRecord>> ReadReferenceDump(const std::string& path) {
  std::ifstream in(path);
  if (!in) return NotFound(path + ": cannot open the reference dump");
  std::vector<ReferenceRecord> out;
  std::set<std::string> ids;
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = path + ":" + std::to_string(n) + ": ";
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return InvalidArgument(where + "not valid JSON");
    auto rec = ReferenceRecordFromJson(j);
    if (!rec.ok()) return rec.status().WithPrefix(where.substr(0, where.size() - 2));
    if (!ids.insert(rec->id).second) return InvalidArgument(where + "id '" + rec->id + "' repeats");
    rec->source = where.substr(0, where.size() - 2);
    out.push_back(std::move(*rec));
  }
  if (out.empty()) return InvalidArgument(path + ": no records");
  return out;
}

Status WriteReferenceDump(const std::string& path, const std::vector<ReferenceRecord>& records) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return InvalidArgument(path + ": cannot create");
  for (const ReferenceRecord& r : records) {
    // Replace, never throw, on text that is not valid UTF-8 (a random model's greedy bytes).
    out << ReferenceRecordToJson(r).dump(-1, ' ', false, json::error_handler_t::replace) << '\n';
  }
  out.flush();
  return out ? OkStatus() : DataLoss(path + ": write error");
}

}  // namespace cpm
