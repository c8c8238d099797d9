// Variants of the tiny tokenizers that exercise the tokenizer.json features the two tiny
// families do not use (Metaspace pre-tokenizer/decoder with prepend_scheme "first", added-token
// lstrip/rstrip/single_word/normalized flags, GPT-2 ByteLevel regex with add_prefix_space,
// ignore_merges, "a b" merges, a TemplateProcessing suffix). Shared by write_tiny_tokenizer
// (which feeds them to HF tokenizers) and tokenizer_conformance_test.
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tokenizer/tiny_tokenizer.h"

namespace cpm {

inline Status WriteTinyVariant(const std::string& name, const std::string& dir) {
  using nlohmann::ordered_json;
  const bool metaspace = name == "tiny_metaspace";
  const bool misc = name == "tiny_bytelevel_misc";
  if (!metaspace && !misc && name != "tiny_bytelevel_gpt2") {
    return InvalidArgument("unknown variant " + name);
  }
  CPM_RETURN_IF_ERROR(WriteTinyTokenizer(
      dir, metaspace ? TinyTokenizerFamily::kSentencePieceBpe : TinyTokenizerFamily::kByteLevelBpe,
      nullptr));
  const auto path = std::filesystem::path(dir) / "tokenizer.json";
  std::stringstream ss;
  ss << std::ifstream(path).rdbuf();
  auto j = ordered_json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) return DataLoss(path.string());
  if (metaspace) {
    const ordered_json ms = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"},
                             {"prepend_scheme", "first"}, {"split", true}};
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = ms;
    j["decoder"] = ms;
    for (auto& t : j["added_tokens"]) {
      if (t["content"] == "<|im_end|>") t["lstrip"] = t["rstrip"] = true;
      if (t["content"] == "<|tool_call|>") t["single_word"] = true;
      if (t["content"] == "<|fim_middle|>") t["normalized"] = true;
    }
  } else if (misc) {
    // Sequences of less common normalizers and pre-tokenizers.
    j["normalizer"] = {{"type", "Sequence"},
                       {"normalizers", {{{"type", "NFKC"}},
                                        {{"type", "Lowercase"}},
                                        {{"type", "Strip"}, {"strip_left", true}, {"strip_right", true}},
                                        {{"type", "Replace"}, {"pattern", {{"Regex", "\\s{2,}"}}}, {"content", " "}}}}};
    j["pre_tokenizer"] = {
        {"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Digits"}, {"individual_digits", true}},
          {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithNext"}, {"invert", false}},
          {{"type", "Split"}, {"pattern", {{"Regex", "[,.!?;:]"}}}, {"behavior", "MergedWithPrevious"}, {"invert", false}},
          {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", "Removed"}, {"invert", false}},
          {{"type", "Split"}, {"pattern", {{"Regex", "\\p{Han}+"}}}, {"behavior", "Contiguous"}, {"invert", true}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}};
  } else {
    j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true},
                          {"trim_offsets", true}, {"use_regex", true}};
    j["model"]["ignore_merges"] = true;
    for (auto& m : j["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
    const auto id = [&](const char* content) {
      for (const auto& t : j["added_tokens"]) {
        if (t["content"] == content) return t["id"].get<int>();
      }
      return -1;
    };
    j["post_processor"] = {
        {"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<|im_start|>"}, {"type_id", 0}}}},
                    {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                    {{"SpecialToken", {{"id", "<|im_end|>"}, {"type_id", 0}}}}}},
        {"pair", {{{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                  {{"Sequence", {{"id", "B"}, {"type_id", 1}}}}}},
        {"special_tokens",
         {{"<|im_start|>", {{"id", "<|im_start|>"}, {"ids", {id("<|im_start|>")}}, {"tokens", {"<|im_start|>"}}}},
          {"<|im_end|>", {{"id", "<|im_end|>"}, {"ids", {id("<|im_end|>")}}, {"tokens", {"<|im_end|>"}}}}}}};
    for (auto& t : j["added_tokens"]) {
      if (t["content"] == "<think>") t["lstrip"] = true;
      if (t["content"] == "</think>") t["rstrip"] = true;
    }
  }
  std::ofstream(path, std::ios::trunc) << j.dump(1) << "\n";
  // Only tokenizer.json defines these variants (as HF tokenizers sees them).
  std::filesystem::remove(std::filesystem::path(dir) / "tokenizer_config.json");
  return OkStatus();
}

}  // namespace cpm
