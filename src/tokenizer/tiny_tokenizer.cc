// Tiny tokenizer files for test checkpoints (see tiny_tokenizer.h). The vocabularies are
// learned from TinyTrainingText() so that real text tokenizes into multi-character tokens.
#include "tokenizer/tiny_tokenizer.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "tokenizer/bpe_trainer.h"
#include "tokenizer/regex.h"
#include "tokenizer/tiny_tokenizer_data.h"
#include "tokenizer/unicode_util.h"

namespace cpm {
namespace {

using Json = nlohmann::ordered_json;
constexpr char kSpaceMark[] = "\xE2\x96\x81";  // "▁"
constexpr int kSentencePieceMerges = 450;
constexpr int kByteLevelMerges = 500;

struct AddedSpec {
  const char* content;
  bool special;
};

constexpr AddedSpec kMiniCpm4Added[] = {
    {"<|im_end|>", true},        {"<|im_start|>", true},   {"<|tool_call|>", true},
    {"<|execute_start|>", true}, {"<|execute_end|>", true}, {"<|fim_prefix|>", true},
    {"<|fim_middle|>", true},    {"<|fim_suffix|>", true}};

constexpr AddedSpec kMiniCpmV46Added[] = {
    {"<|endoftext|>", true}, {"<|im_start|>", true},    {"<|im_end|>", true},
    {"<|image_pad|>", true}, {"<|video_pad|>", true},   {"<image>", true},
    {"</image>", true},      {"<slice>", true},         {"</slice>", true},
    {"<image_id>", true},    {"</image_id>", true},     {"<think>", false},
    {"</think>", false},     {"<tool_call>", false},    {"</tool_call>", false},
    {"<|vision_start|>", true}, {"<|vision_end|>", true}};

// Token strings in id order, with lookup for de-duplication.
class VocabBuilder {
 public:
  int32_t Add(const std::string& token) {
    const auto it = ids_.find(token);
    if (it != ids_.end()) return it->second;
    const auto id = static_cast<int32_t>(tokens_.size());
    tokens_.push_back(token);
    ids_.emplace(token, id);
    return id;
  }
  int32_t Id(const std::string& token) const { return ids_.at(token); }
  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  Json ToJson() const {
    Json v = Json::object();
    for (size_t i = 0; i < tokens_.size(); ++i) v[tokens_[i]] = i;
    return v;
  }

 private:
  std::vector<std::string> tokens_;
  std::map<std::string, int32_t> ids_;
};

std::vector<std::string> CodePoints(const std::string& s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    const int n = DecodeUtf8(s, i, &cp);
    out.push_back(s.substr(i, n));
    i += n;
  }
  return out;
}

Json AddedTokenJson(int32_t id, const std::string& content, bool special) {
  return Json{{"id", id},          {"content", content}, {"single_word", false},
              {"lstrip", false},   {"rstrip", false},    {"normalized", false},
              {"special", special}};
}

Json AddedTokensDecoder(const Json& added_tokens) {
  Json dec = Json::object();
  for (const auto& t : added_tokens) {
    dec[std::to_string(t["id"].get<int32_t>())] = Json{
        {"content", t["content"]}, {"lstrip", false},      {"normalized", false},
        {"rstrip", false},         {"single_word", false}, {"special", t["special"]}};
  }
  return dec;
}

Status WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Internal(path.string() + ": cannot write");
  out << text;
  out.close();
  if (!out) return Internal(path.string() + ": write failed");
  return OkStatus();
}

Json MergesJson(const std::vector<std::pair<std::string, std::string>>& merges) {
  Json list = Json::array();
  for (const auto& [a, b] : merges) list.push_back(Json::array({a, b}));
  return list;
}

// MiniCPM4-like tokenizer.json + configs.
Status WriteSentencePieceFamily(const std::filesystem::path& dir, int32_t* vocab_size) {
  VocabBuilder vocab;
  for (const char* t : {"<unk>", "<s>", "</s>"}) vocab.Add(t);
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    vocab.Add(name);
  }
  // Words as SentencePiece sees them: spaces become "▁", which starts each word.
  std::map<std::vector<std::string>, int> words;
  std::set<std::string> chars = {"\n", "\t"};
  for (const auto& cp : CodePoints(TinyTrainingText())) chars.insert(cp == " " ? kSpaceMark : cp);
  std::vector<std::string> word;
  for (const auto& cp : CodePoints(TinyTrainingText())) {
    const bool breaks = cp == " " || cp == "\n";
    if (breaks && !word.empty()) {
      ++words[word];
      word.clear();
    }
    if (cp == " ") word.push_back(kSpaceMark);
    if (!breaks) word.push_back(cp);
  }
  if (!word.empty()) ++words[word];
  for (const auto& c : chars) vocab.Add(c);
  const auto merges = TrainBpeMerges(words, kSentencePieceMerges);
  for (const auto& [a, b] : merges) vocab.Add(a + b);

  Json added = Json::array();
  for (const char* t : {"<unk>", "<s>", "</s>"}) added.push_back(AddedTokenJson(vocab.Id(t), t, true));
  Json specials = Json::array();
  int32_t next_id = vocab.size();
  for (const auto& spec : kMiniCpm4Added) {
    added.push_back(AddedTokenJson(next_id++, spec.content, spec.special));
    specials.push_back(spec.content);
  }
  const Json space_to_mark = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", kSpaceMark}};
  Json tok = {
      {"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added},
      // MiniCPM4's tokenizer.model has add_dummy_prefix=false: no Prepend, no Strip.
      {"normalizer", space_to_mark},
      {"pre_tokenizer", nullptr},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", Json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
        {"pair", Json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                              {{"SpecialToken", {{"id", "<s>"}, {"type_id", 1}}}},
                              {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}})},
        {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}}},
      {"decoder",
       {{"type", "Sequence"},
        {"decoders", Json::array({{{"type", "Replace"}, {"pattern", {{"String", kSpaceMark}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}},
                                  {{"type", "Fuse"}}})}}},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", "<unk>"},
        {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
        {"fuse_unk", true}, {"byte_fallback", true}, {"ignore_merges", false},
        {"vocab", vocab.ToJson()}, {"merges", MergesJson(merges)}}}};
  const int32_t im_end = vocab.size();  // first added token after the base vocab
  Json cfg = {{"add_bos_token", true},
              {"add_eos_token", false},
              {"added_tokens_decoder", AddedTokensDecoder(added)},
              {"additional_special_tokens", specials},
              {"bos_token", "<s>"},
              {"chat_template", MiniCpm4ChatTemplate()},
              {"clean_up_tokenization_spaces", false},
              {"eos_token", "<|im_end|>"},
              {"legacy", true},
              {"model_max_length", 32768},
              {"pad_token", nullptr},
              {"spaces_between_special_tokens", false},
              {"tokenizer_class", "LlamaTokenizer"},
              {"unk_token", "<unk>"}};
  Json gen = {{"bos_token_id", 1}, {"eos_token_id", {2, im_end}}, {"pad_token_id", 2}};
  CPM_RETURN_IF_ERROR(WriteFile(dir / "tokenizer.json", tok.dump(1) + "\n"));
  CPM_RETURN_IF_ERROR(WriteFile(dir / "tokenizer_config.json", cfg.dump(2) + "\n"));
  CPM_RETURN_IF_ERROR(WriteFile(dir / "generation_config.json", gen.dump(2) + "\n"));
  *vocab_size = next_id;
  return OkStatus();
}

// MiniCPM-V-4.6-like (Qwen3.5 byte-level) tokenizer.json + configs + chat_template.jinja.
Status WriteByteLevelFamily(const std::filesystem::path& dir, int32_t* vocab_size) {
  const ByteLevelAlphabet alphabet;
  VocabBuilder vocab;
  for (int b = 0; b < 256; ++b) vocab.Add(alphabet.Encode(static_cast<uint8_t>(b)));
  CPM_ASSIGN_OR_RETURN(auto split, Regex::Compile(Qwen35PretokenizeRegex()));
  const std::string text = TinyTrainingText();
  std::map<std::vector<std::string>, int> words;
  split->ForEachMatch(text, [&](size_t b, size_t e) {
    std::vector<std::string> syms;
    for (size_t i = b; i < e; ++i) syms.push_back(alphabet.Encode(static_cast<uint8_t>(text[i])));
    ++words[syms];
  });
  const auto merges = TrainBpeMerges(words, kByteLevelMerges);
  for (const auto& [a, b] : merges) vocab.Add(a + b);

  Json added = Json::array();
  std::map<std::string, int32_t> ids;
  int32_t next_id = vocab.size();
  for (const auto& spec : kMiniCpmV46Added) {
    ids[spec.content] = next_id;
    added.push_back(AddedTokenJson(next_id++, spec.content, spec.special));
  }
  const Json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false},
                           {"trim_offsets", false}, {"use_regex", false}};
  Json tok = {
      {"version", "1.0"}, {"truncation", nullptr}, {"padding", nullptr}, {"added_tokens", added},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         Json::array({{{"type", "Split"}, {"pattern", {{"Regex", Qwen35PretokenizeRegex()}}},
                       {"behavior", "Isolated"}, {"invert", false}},
                      byte_level})}}},
      {"post_processor", byte_level},
      {"decoder", byte_level},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
        {"continuing_subword_prefix", ""}, {"end_of_word_suffix", ""}, {"fuse_unk", false},
        {"byte_fallback", false}, {"ignore_merges", false},
        {"vocab", vocab.ToJson()}, {"merges", MergesJson(merges)}}}};
  Json cfg = {{"add_prefix_space", false},
              {"added_tokens_decoder", AddedTokensDecoder(added)},
              {"bos_token", "<|im_start|>"},
              {"chat_template", MiniCpmV46ChatTemplate()},
              {"clean_up_tokenization_spaces", false},
              {"eos_token", "<|im_end|>"},
              {"errors", "replace"},
              {"extra_special_tokens",
               {{"image_token", "<|image_pad|>"}, {"video_token", "<|video_pad|>"},
                {"image_start_token", "<image>"}, {"image_end_token", "</image>"},
                {"slice_start_token", "<slice>"}, {"slice_end_token", "</slice>"},
                {"image_id_start_token", "<image_id>"}, {"image_id_end_token", "</image_id>"}}},
              {"model_max_length", 262144},
              {"pad_token", "<|endoftext|>"},
              {"pretokenize_regex", Qwen35PretokenizeRegex()},
              {"split_special_tokens", false},
              {"tokenizer_class", "Qwen2Tokenizer"}};
  Json gen = {{"bos_token_id", ids["<|im_start|>"]},
              {"eos_token_id", {ids["<|endoftext|>"], ids["<|im_end|>"]}}};
  CPM_RETURN_IF_ERROR(WriteFile(dir / "tokenizer.json", tok.dump(1) + "\n"));
  CPM_RETURN_IF_ERROR(WriteFile(dir / "tokenizer_config.json", cfg.dump(2) + "\n"));
  CPM_RETURN_IF_ERROR(WriteFile(dir / "generation_config.json", gen.dump(2) + "\n"));
  CPM_RETURN_IF_ERROR(WriteFile(dir / "chat_template.jinja", MiniCpmV46ChatTemplate()));
  *vocab_size = next_id;
  return OkStatus();
}

}  // namespace

const char* ToString(TinyTokenizerFamily family) {
  switch (family) {
    case TinyTokenizerFamily::kSentencePieceBpe: return "sentencepiece_bpe";
    case TinyTokenizerFamily::kByteLevelBpe: return "byte_level_bpe";
    default: return "unknown";
  }
}

Status WriteTinyTokenizer(const std::string& dir, TinyTokenizerFamily family,
                          int32_t* vocab_size_out) {
  if (!std::filesystem::is_directory(dir)) return NotFound(dir + ": not a directory");
  int32_t vocab_size = 0;
  Status s;
  try {
    switch (family) {
      case TinyTokenizerFamily::kSentencePieceBpe:
        s = WriteSentencePieceFamily(dir, &vocab_size);
        break;
      case TinyTokenizerFamily::kByteLevelBpe:
        s = WriteByteLevelFamily(dir, &vocab_size);
        break;
      default:
        return InvalidArgument("unknown TinyTokenizerFamily");
    }
  } catch (const std::exception& e) {
    return Internal(std::string("WriteTinyTokenizer: ") + e.what());
  }
  if (s.ok() && vocab_size_out != nullptr) *vocab_size_out = vocab_size;
  return s;
}

}  // namespace cpm
