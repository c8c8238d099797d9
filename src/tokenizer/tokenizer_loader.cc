// Tokenizer::Load: reads tokenizer.json or tokenizer.model plus tokenizer_config.json,
// chat_template.jinja and generation_config.json from a model directory. Every error names the
// file and the field.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tokenizer/hf_backend.h"
#include "tokenizer/sentencepiece_backend.h"
#include "tokenizer/tokenizer.h"

namespace cpm {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

StatusOr<std::string> ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path.string() + ": cannot open");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Parses a JSON file; a missing optional file gives a null value.
StatusOr<json> ReadJson(const fs::path& path, bool required) {
  if (!fs::exists(path)) {
    if (required) return NotFound(path.string() + ": missing");
    return json();
  }
  CPM_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return DataLoss(path.string() + ": not valid JSON");
  if (!j.is_object()) return DataLoss(path.string() + ": top level is not an object");
  return j;
}

// A token setting: a string, an AddedToken object with "content", or null.
StatusOr<std::optional<std::string>> TokenString(const json& cfg, const char* key) {
  if (!cfg.is_object() || !cfg.contains(key) || cfg[key].is_null()) {
    return std::optional<std::string>();
  }
  const json& v = cfg[key];
  if (v.is_string()) return std::optional<std::string>(v.get<std::string>());
  if (v.is_object() && v.contains("content") && v["content"].is_string()) {
    return std::optional<std::string>(v["content"].get<std::string>());
  }
  return InvalidArgument(std::string("field '") + key + "' is neither a string nor a token object");
}

StatusOr<AddedToken> ParseAddedToken(const json& j, int32_t id) {
  if (id < 0 || id >= kMaxTokenId) {
    return InvalidArgument("id " + std::to_string(id) + " is not in [0, " +
                           std::to_string(kMaxTokenId) + ")");
  }
  AddedToken t;
  try {
    t.id = id;
    t.content = j.at("content").get<std::string>();
    t.special = j.value("special", false);
    t.lstrip = j.value("lstrip", false);
    t.rstrip = j.value("rstrip", false);
    t.normalized = j.value("normalized", !t.special);
    t.single_word = j.value("single_word", false);
  } catch (const std::exception& e) {
    return InvalidArgument(e.what());
  }
  return t;
}

StatusOr<bool> OptionalBool(const json& cfg, const char* key, bool fallback, bool* present) {
  *present = cfg.is_object() && cfg.contains(key) && !cfg[key].is_null();
  if (!*present) return fallback;
  if (!cfg[key].is_boolean()) return InvalidArgument(std::string("field '") + key + "' is not a bool");
  return cfg[key].get<bool>();
}

}  // namespace

class TokenizerLoader {
 public:
  static StatusOr<std::unique_ptr<Tokenizer>> Load(const std::string& model_dir);

 private:
  static Status LoadModel(const fs::path& dir, const json& cfg, Tokenizer* t);
  static Status LoadConfig(const fs::path& dir, const json& cfg, Tokenizer* t);
  static Status AddSpecialString(const std::string& content, Tokenizer* t);
  static Status LoadGenerationConfig(const fs::path& dir, Tokenizer* t);
};

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::Load(const std::string& model_dir) {
  return TokenizerLoader::Load(model_dir);
}

StatusOr<std::unique_ptr<Tokenizer>> TokenizerLoader::Load(const std::string& model_dir) {
  const fs::path dir(model_dir);
  const fs::path cfg_path = dir / "tokenizer_config.json";
  CPM_ASSIGN_OR_RETURN(json cfg, ReadJson(cfg_path, /*required=*/false));
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  CPM_RETURN_IF_ERROR(LoadModel(dir, cfg, t.get()));
  if (Status s = LoadConfig(dir, cfg, t.get()); !s.ok()) return s.WithPrefix(cfg_path.string());
  CPM_RETURN_IF_ERROR(LoadGenerationConfig(dir, t.get()));
  t->vocab_size_ = std::max(t->backend_->vocab_size(), t->added_.max_id() + 1);
  return t;
}

Status TokenizerLoader::LoadModel(const fs::path& dir, const json& cfg, Tokenizer* t) {
  std::optional<std::string> split_override;
  if (cfg.is_object() && cfg.contains("pretokenize_regex") && cfg["pretokenize_regex"].is_string()) {
    split_override = cfg["pretokenize_regex"].get<std::string>();
  }
  const fs::path json_path = dir / "tokenizer.json";
  const fs::path model_path = dir / "tokenizer.model";
  if (fs::exists(json_path)) {
    CPM_ASSIGN_OR_RETURN(json root, ReadJson(json_path, /*required=*/true));
    auto prefixed = [&](const Status& s) { return s.WithPrefix(json_path.string()); };
    auto backend = HfBackend::FromJson(root, split_override);
    if (!backend.ok()) return prefixed(backend.status());
    t->backend_ = std::move(backend).value();
    if (root.contains("added_tokens") && root["added_tokens"].is_array()) {
      for (size_t i = 0; i < root["added_tokens"].size(); ++i) {
        const json& a = root["added_tokens"][i];
        if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() ||
            a["id"].get<int64_t>() < 0 || a["id"].get<int64_t>() >= kMaxTokenId) {
          return InvalidArgument(json_path.string() + ": field 'added_tokens[" +
                                 std::to_string(i) + "].id' missing or not an integer in [0, " +
                                 std::to_string(kMaxTokenId) + ")");
        }
        auto token = ParseAddedToken(a, a["id"].get<int32_t>());
        if (!token.ok()) {
          return token.status().WithPrefix(json_path.string() + ": field 'added_tokens[" +
                                           std::to_string(i) + "]'");
        }
        t->added_.Add(*token);
      }
    }
    auto post = ParsePostProcessor(root.contains("post_processor") ? root["post_processor"] : json());
    if (!post.ok()) return prefixed(post.status());
    t->post_processor_ = *post;
    auto decoder = ParseDecoder(root.contains("decoder") ? root["decoder"] : json());
    if (!decoder.ok()) return prefixed(decoder.status());
    t->decoder_ = std::move(decoder).value();
    return OkStatus();
  }
  if (!fs::exists(model_path)) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) return NotFound(dir.string() + ": no such directory");
    return NotFound(dir.string() + ": neither tokenizer.json nor tokenizer.model exists");
  }
  CPM_ASSIGN_OR_RETURN(auto sp, SentencePieceBackend::Load(model_path.string()));
  t->decoder_ = MakeSentencePieceDecoder(sp->adds_dummy_prefix());
  t->backend_ = std::move(sp);
  // Slow Llama-style tokenizers add BOS by default; LoadConfig applies add_bos/eos_token.
  return OkStatus();
}

Status TokenizerLoader::AddSpecialString(const std::string& content, Tokenizer* t) {
  if (t->added_.FindByContent(content) != nullptr) return OkStatus();
  AddedToken token;
  token.content = content;
  token.special = true;
  // Like transformers' add_special_tokens: reuse the vocab id, or append a new one.
  if (auto id = t->backend_->PieceToId(content)) {
    token.id = *id;
  } else {
    token.id = std::max(t->backend_->vocab_size(), t->added_.max_id() + 1);
  }
  t->added_.Add(token);
  return OkStatus();
}

Status TokenizerLoader::LoadConfig(const fs::path& dir, const json& cfg, Tokenizer* t) {
  const bool is_sentencepiece = !fs::exists(dir / "tokenizer.json");
  if (cfg.is_object() && cfg.contains("added_tokens_decoder")) {
    const json& dec = cfg["added_tokens_decoder"];
    if (!dec.is_object()) return InvalidArgument("field 'added_tokens_decoder' is not an object");
    std::vector<AddedToken> tokens;
    for (const auto& [key, value] : dec.items()) {
      int32_t id = 0;
      try {
        id = std::stoi(key);
      } catch (const std::exception&) {
        return InvalidArgument("field 'added_tokens_decoder': key '" + key + "' is not an id");
      }
      auto token = ParseAddedToken(value, id);
      if (!token.ok()) return token.status().WithPrefix("field 'added_tokens_decoder." + key + "'");
      tokens.push_back(*token);
    }
    std::sort(tokens.begin(), tokens.end(),
              [](const AddedToken& a, const AddedToken& b) { return a.id < b.id; });
    for (const auto& token : tokens) t->added_.Add(token);
  }
  std::optional<std::string> bos, eos, pad, unk;
  for (auto [key, out] : {std::pair{"bos_token", &bos}, std::pair{"eos_token", &eos},
                          std::pair{"pad_token", &pad}, std::pair{"unk_token", &unk}}) {
    CPM_ASSIGN_OR_RETURN(*out, TokenString(cfg, key));
    if (out->has_value()) CPM_RETURN_IF_ERROR(AddSpecialString(**out, t));
  }
  for (const char* key : {"additional_special_tokens", "extra_special_tokens"}) {
    if (!cfg.is_object() || !cfg.contains(key) || cfg[key].is_null()) continue;
    const json& list = cfg[key];
    if (!list.is_array() && !list.is_object()) {
      return InvalidArgument(std::string("field '") + key + "' is neither a list nor an object");
    }
    for (const auto& item : list) {
      const json& content = item.is_object() && item.contains("content") ? item["content"] : item;
      if (!content.is_string()) {
        return InvalidArgument(std::string("field '") + key + "' holds a non-string token");
      }
      CPM_RETURN_IF_ERROR(AddSpecialString(content.get<std::string>(), t));
    }
  }
  if (bos) {
    t->bos_token_ = *bos;
    t->bos_id_ = t->TokenToId(*bos);
  }
  if (eos) {
    t->eos_token_ = *eos;
    if (auto id = t->TokenToId(*eos)) t->eos_ids_.push_back(*id);
  }
  if (pad) t->pad_id_ = t->TokenToId(*pad);

  // add_bos_token / add_eos_token rebuild the template (transformers' update_post_processor);
  // a tokenizer.model has no post-processor, so Llama's defaults apply there.
  bool has_add_bos = false, has_add_eos = false;
  CPM_ASSIGN_OR_RETURN(const bool add_bos, OptionalBool(cfg, "add_bos_token", true, &has_add_bos));
  CPM_ASSIGN_OR_RETURN(const bool add_eos, OptionalBool(cfg, "add_eos_token", false, &has_add_eos));
  if (is_sentencepiece || has_add_bos || has_add_eos) {
    std::vector<int32_t> prefix, suffix;
    if (is_sentencepiece || has_add_bos) {
      if (add_bos && t->bos_id_) prefix.push_back(*t->bos_id_);
    } else {
      prefix = t->post_processor_.prefix();
    }
    if (is_sentencepiece || has_add_eos) {
      if (add_eos && !t->eos_ids_.empty()) suffix.push_back(t->eos_ids_[0]);
    } else {
      suffix = t->post_processor_.suffix();
    }
    t->post_processor_ = PostProcessor(std::move(prefix), std::move(suffix));
  }
  bool present = false;
  CPM_ASSIGN_OR_RETURN(t->clean_up_tokenization_spaces_,
                       OptionalBool(cfg, "clean_up_tokenization_spaces", false, &present));

  if (cfg.is_object() && cfg.contains("chat_template") && !cfg["chat_template"].is_null()) {
    const json& ct = cfg["chat_template"];
    if (ct.is_string()) {
      t->chat_template_ = ct.get<std::string>();
    } else if (ct.is_array()) {
      // A list of named templates: the one called "default" is the chat template.
      for (const auto& named : ct) {
        if (named.is_object() && named.value("name", std::string()) == "default" &&
            named.contains("template") && named["template"].is_string()) {
          t->chat_template_ = named["template"].get<std::string>();
        }
      }
    } else {
      return InvalidArgument("field 'chat_template' is neither a string nor a list");
    }
  }
  const fs::path jinja = dir / "chat_template.jinja";
  if (fs::exists(jinja)) {
    auto text = ReadFile(jinja);
    if (!text.ok()) return text.status();
    t->chat_template_ = std::move(text).value();
  }
  return OkStatus();
}

Status TokenizerLoader::LoadGenerationConfig(const fs::path& dir, Tokenizer* t) {
  const fs::path path = dir / "generation_config.json";
  CPM_ASSIGN_OR_RETURN(json gen, ReadJson(path, /*required=*/false));
  if (!gen.is_object() || !gen.contains("eos_token_id") || gen["eos_token_id"].is_null()) {
    return OkStatus();
  }
  const json& eos = gen["eos_token_id"];
  std::vector<json> items = eos.is_array() ? std::vector<json>(eos.begin(), eos.end())
                                           : std::vector<json>{eos};
  for (const auto& item : items) {
    if (!item.is_number_integer()) {
      return InvalidArgument(path.string() + ": field 'eos_token_id' must be an int or a list of ints");
    }
    const auto id = item.get<int32_t>();
    if (std::find(t->eos_ids_.begin(), t->eos_ids_.end(), id) == t->eos_ids_.end()) {
      t->eos_ids_.push_back(id);
    }
  }
  return OkStatus();
}

}  // namespace cpm
