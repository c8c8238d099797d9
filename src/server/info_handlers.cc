// The small endpoints: /tokenize, /detokenize, /v1/models, /version; and helpers shared by
// the generation endpoints (usage, stop_reason, ignored-field log).
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "base/log.h"
#include "io/mmap_file.h"
#include "server/chat_prompt.h"
#include "server/handlers.h"
#include "server/protocol.h"

#ifndef CPM_VERSION
#define CPM_VERSION "0.0.0"
#endif

namespace cpm {

using Json = nlohmann::ordered_json;

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void LogIgnoredFields(const std::vector<std::string>& fields) {
  if (fields.empty()) return;
  std::string set = "{";
  for (size_t i = 0; i < fields.size(); ++i) set += (i ? ", '" : "'") + fields[i] + "'";
  CPM_LOG_WARN("The following fields were present in the request but ignored: {}}}", set);
}

Json ResponseHead(const std::string& id, const char* object, int64_t created,
                  const std::string& model) {
  Json r;
  r["id"] = id;
  r["object"] = object;
  r["created"] = created;
  r["model"] = model;
  return r;
}

Json CompleteResponse(const std::string& id, const char* object, int64_t created,
                      const std::string& model, Json choices, int64_t prompt_tokens,
                      int64_t completion_tokens, std::optional<int64_t> cached_tokens) {
  Json r = ResponseHead(id, object, created, model);
  r["choices"] = std::move(choices);
  r["service_tier"] = nullptr;  // vLLM's chat and completion responses carry both as null
  r["system_fingerprint"] = nullptr;
  r["usage"] = UsageJson(prompt_tokens, completion_tokens, cached_tokens);
  r["kv_transfer_params"] = nullptr;
  return r;
}

Json StreamUsageJson(Json usage) {
  if (auto d = usage.find("prompt_tokens_details"); d != usage.end() && d->is_null()) {
    usage.erase(d);
  }
  return usage;
}

Json UsageJson(int64_t prompt_tokens, int64_t completion_tokens,
               std::optional<int64_t> cached_tokens) {
  Json u;
  u["prompt_tokens"] = prompt_tokens;
  u["total_tokens"] = prompt_tokens + completion_tokens;
  u["completion_tokens"] = completion_tokens;
  u["prompt_tokens_details"] =
      cached_tokens ? Json{{"cached_tokens", *cached_tokens}} : Json(nullptr);
  return u;
}

std::optional<int64_t> ReportedCachedTokens(const ServerContext& ctx, const GenerationRun& run,
                                            bool streamed) {
  if (!ctx.enable_prompt_tokens_details) return std::nullopt;
  return run.cached_tokens(streamed);
}

Json StopReasonJson(const ChoiceUpdate& u) {
  if (u.stop_string) return *u.stop_string;
  if (u.stop_token) return *u.stop_token;
  return nullptr;
}

HttpReply HandleTokenize(const ServerContext& ctx, const std::string& body) {
  std::vector<std::string> ignored;
  auto req = protocol::ParseTokenizeRequest(body, &ignored);
  if (!req.ok()) return HttpReply::Error(req.status());
  LogIgnoredFields(ignored);
  if (Status s = ctx.CheckModel(req->model); !s.ok()) return HttpReply::Error(s);
  std::vector<int32_t> ids;
  if (req->is_chat) {
    std::vector<MediaRef> media;
    auto text = RenderChatPrompt(ctx, req->chat, &media);
    if (!text.ok()) return HttpReply::Error(text.status());
    // Images count as their placeholder tokens, as in the chat request itself.
    auto prompt = EncodeChatPrompt(ctx, *text, media, req->add_special_tokens.value_or(false),
                                   req->chat, nullptr);
    if (!prompt.ok()) return HttpReply::Error(prompt.status());
    ids = std::move(*prompt);
  } else {
    ids = ctx.tokenizer->Encode(req->prompt, req->add_special_tokens.value_or(true));
  }
  Json r;
  r["count"] = ids.size();
  r["max_model_len"] = ctx.max_model_len;
  r["tokens"] = ids;
  if (req->return_token_strs) {
    Json strs = Json::array();
    for (int32_t id : ids) strs.push_back(ctx.tokenizer->IdToToken(id));
    r["token_strs"] = std::move(strs);
  } else {
    r["token_strs"] = nullptr;
  }
  return HttpReply::Json(r);
}

HttpReply HandleDetokenize(const ServerContext& ctx, const std::string& body) {
  std::vector<std::string> ignored;
  auto req = protocol::ParseDetokenizeRequest(body, &ignored);
  if (!req.ok()) return HttpReply::Error(req.status());
  LogIgnoredFields(ignored);
  if (Status s = ctx.CheckModel(req->model); !s.ok()) return HttpReply::Error(s);
  std::vector<int32_t> ids;
  for (int64_t id : req->tokens) {
    if (id < 0 || id >= ctx.tokenizer->vocab_size()) {
      return HttpReply::Error(
          BadRequest("Token id " + std::to_string(id) + " is out of vocabulary"));
    }
    ids.push_back(static_cast<int32_t>(id));
  }
  Json r;
  r["prompt"] = ctx.tokenizer->Decode(ids, /*skip_special_tokens=*/false);
  return HttpReply::Json(r);
}

namespace {

// One served name's model card (vLLM's ModelCard and its permission), created now as vLLM's
// default factories make them.
Json ModelCard(const ServerContext& ctx, const std::string& name) {
  const int64_t now = UnixNow();
  Json perm;
  perm["id"] = ctx.NewRequestId("modelperm");
  perm["object"] = "model_permission";
  perm["created"] = now;
  perm["allow_create_engine"] = false;
  perm["allow_sampling"] = true;
  perm["allow_logprobs"] = true;
  perm["allow_search_indices"] = false;
  perm["allow_view"] = true;
  perm["allow_fine_tuning"] = false;
  perm["organization"] = "*";
  perm["group"] = nullptr;
  perm["is_blocking"] = false;
  Json card;
  card["id"] = name;
  card["object"] = "model";
  card["created"] = now;
  card["owned_by"] = "vllm";
  card["root"] = ctx.model_root;
  card["parent"] = nullptr;
  card["max_model_len"] = ctx.max_model_len;
  card["permission"] = Json::array({std::move(perm)});
  return card;
}

}  // namespace

HttpReply HandleModel(const ServerContext& ctx, const std::string& name) {
  for (const std::string& served : ctx.model_names) {
    if (served == name) return HttpReply::Json(ModelCard(ctx, name));
  }
  return HttpReply::Error(
      NotFound("The model `" + name + "` does not exist.").WithParam("model"));
}

HttpReply HandleModels(const ServerContext& ctx) {
  Json data = Json::array();
  for (const std::string& name : ctx.model_names) data.push_back(ModelCard(ctx, name));
  Json r;
  r["object"] = "list";
  r["data"] = std::move(data);
  return HttpReply::Json(r);
}

HttpReply ClientGoneReply() {
  ApiError e;
  e.status = 499;  // nginx's "client closed request"
  e.type = "ClientClosedRequest";
  e.message = "the client closed the connection; the request was cancelled";
  return HttpReply::Error(e);
}

HttpReply HandleVersion() { return HttpReply::Json(Json{{"version", CPM_VERSION}}); }

namespace {

// vLLM's _make_json_serializable over transformers' init kwargs: an AddedToken (in the JSON
// file, an object with its "content") becomes that content.
Json Serializable(const Json& v) {
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"];
  if (v.is_object()) {
    Json out = Json::object();
    for (auto it = v.begin(); it != v.end(); ++it) out[it.key()] = Serializable(*it);
    return out;
  }
  if (v.is_array()) {
    Json out = Json::array();
    for (const Json& e : v) out.push_back(Serializable(e));
    return out;
  }
  return v;
}

// Python writes an integer past 64 bits with all its digits (transformers' default
// model_max_length is int(1e30)); nlohmann holds it as the nearest double, which dump() writes
// as 1e+30. An integral double below 2^127 is written back as its exact digits: those of the
// file's integer whenever that integer is a double (int(1e30) is, being made from one).
std::string DumpKeepingBigIntegers(Json j) {
  std::vector<std::string> digits;
  const std::function<void(Json&)> mark = [&](Json& v) {
    if (v.is_structured()) {
      for (Json& e : v) mark(e);
      return;
    }
    if (!v.is_number_float()) return;
    const double d = v.get<double>();
    if (d != std::floor(d) || std::fabs(d) < 0x1p63 || std::fabs(d) >= 0x1p127) return;
    auto n = static_cast<unsigned __int128>(std::fabs(d));
    std::string s;
    do {
      s.insert(s.begin(), static_cast<char>('0' + static_cast<int>(n % 10)));
      n /= 10;
    } while (n != 0);
    if (d < 0) s.insert(s.begin(), '-');
    v = "\x01" + std::to_string(digits.size()) + "\x01";  // a placeholder, replaced below
    digits.push_back(std::move(s));
  };
  mark(j);
  std::string out = DumpJson(j);
  for (size_t i = 0; i < digits.size(); ++i) {
    const std::string placeholder = "\"\\u0001" + std::to_string(i) + "\\u0001\"";
    if (const size_t at = out.find(placeholder); at != std::string::npos) {
      out.replace(at, placeholder.size(), digits[i]);
    }
  }
  return out;
}

}  // namespace

StatusOr<Json> TokenizerInfo(const std::string& tokenizer_dir,
                             const std::string& served_chat_template) {
  const std::string path =
      (std::filesystem::path(tokenizer_dir) / "tokenizer_config.json").string();
  CPM_ASSIGN_OR_RETURN(const std::string text, ReadTextFile(path));
  const Json config = Json::parse(text, nullptr, false);
  if (!config.is_object()) return InvalidArgument(path + ": not a JSON object");
  Json info = Serializable(config);
  info.erase("vocab_file");
  info.erase("merges_file");
  // transformers' AutoTokenizer loads the fast class (converting a SentencePiece model).
  std::string cls = config.value("tokenizer_class", std::string("PreTrainedTokenizer"));
  if (cls.size() < 4 || cls.compare(cls.size() - 4, 4, "Fast") != 0) cls += "Fast";
  info["tokenizer_class"] = cls;
  if (!served_chat_template.empty()) info["chat_template"] = served_chat_template;
  return info;
}

HttpReply HandleTokenizerInfo(const ServerContext& ctx) {
  if (ctx.tokenizer_info.is_null()) {
    HttpReply r = HttpReply::Json(Json{{"detail", "Not Found"}});
    r.status = 404;
    return r;
  }
  HttpReply r = HttpReply::Json(Json::object());
  r.body = DumpKeepingBigIntegers(ctx.tokenizer_info);
  return r;
}

}  // namespace cpm
