// The BPE model of tokenizer.json: vocab, ranked merges, byte fallback, unk, ignore_merges and
// continuing-subword prefix. Encodes one pre-tokenized word with a rank-ordered heap over a
// linked list of symbols (O(n log n) per word) and a sharded, size-capped word cache.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "base/status.h"

namespace cpm {

// Transparent hashing so lookups by string_view do not allocate.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
};
using StringIdMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
 public:
  // Parses the "model" object of tokenizer.json (type BPE). Merges may be "a b" strings or
  // ["a", "b"] pairs; every merge result must be in the vocab.
  static StatusOr<std::unique_ptr<BpeModel>> FromJson(const nlohmann::json& model);

  // Appends the ids of `word`. Thread-safe.
  void Encode(std::string_view word, std::vector<int32_t>* ids) const;

  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }
  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The vocab string of `id`, or an empty string when the id has none.
  const std::string& IdToToken(int32_t id) const;
  bool byte_fallback() const { return byte_fallback_; }

 private:
  struct MergeEntry {
    uint64_t key = 0;  // (left << 32) | right
    int32_t new_id = -1;  // -1 marks an empty slot
    int32_t rank = 0;
  };
  struct CacheShard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> words;
  };
  static constexpr int kCacheShards = 16;
  static constexpr size_t kCacheShardCapacity = 4096;
  // Words longer than this are not cached: a tokenizer without a splitting pre-tokenizer makes
  // whole messages "words", which a cache of 256-byte entries filled with ~45-90 MB of prompts
  // that never recur (soak run); pre-tokenized words are far shorter.
  static constexpr size_t kMaxCachedWordBytes = 64;

  BpeModel() = default;
  Status AddMerge(const std::string& left, const std::string& right, int32_t rank);
  const MergeEntry* FindMerge(int32_t left, int32_t right) const;
  int32_t CharId(std::string_view ch, char32_t cp, bool first) const;
  void EncodeUncached(std::string_view word, std::vector<int32_t>* ids) const;

  StringIdMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<MergeEntry> merges_;  // open addressing, power-of-two size
  std::vector<int32_t> bmp_char_id_;  // id of each single-char token below U+10000, or -1
  std::array<int32_t, 256> byte_id_{};  // <0xNN> tokens for byte fallback, -1 if absent
  std::optional<int32_t> unk_id_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  mutable std::array<CacheShard, kCacheShards> cache_;
};

}  // namespace cpm
