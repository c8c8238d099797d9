// BPE model of tokenizer.json (see bpe_model.h).
#include "tokenizer/bpe_model.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <queue>

#include "tokenizer/tokenizer_backend.h"
#include "tokenizer/unicode_util.h"

namespace cpm {
namespace {

uint64_t PairKey(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

size_t MixHash(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return static_cast<size_t>(k);
}

// A symbol of the word being merged; removed symbols have len == 0.
struct Symbol {
  int32_t id;
  int32_t prev;
  int32_t next;
  int32_t len;
};

struct Candidate {
  int32_t rank;
  int32_t pos;
  int32_t new_id;
  // std::priority_queue is a max-heap: invert so the lowest rank, then leftmost, pops first.
  bool operator<(const Candidate& o) const {
    return rank != o.rank ? rank > o.rank : pos > o.pos;
  }
};

}  // namespace

StatusOr<std::unique_ptr<BpeModel>> BpeModel::FromJson(const nlohmann::json& model) {
  std::unique_ptr<BpeModel> m(new BpeModel());
  try {
    const std::string type = model.value("type", std::string("BPE"));
    if (type != "BPE") return Unimplemented("model.type '" + type + "' (only BPE)");
    int32_t max_id = -1;
    const auto& vocab = model.at("vocab");
    m->vocab_.reserve(vocab.size());
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      // Ids index a dense table: a negative one would write before it, a huge one (HF's are
      // u32, and no vocabulary comes near 2^24) would allocate gigabytes for nothing.
      const nlohmann::json& value = it.value();
      if (!value.is_number_integer() || value.get<int64_t>() < 0 ||
          value.get<int64_t>() >= kMaxTokenId) {
        return InvalidArgument("model.vocab['" + it.key() + "']: id " + value.dump() +
                               " is not an integer in [0, " + std::to_string(kMaxTokenId) + ")");
      }
      const auto id = value.get<int32_t>();
      m->vocab_.emplace(it.key(), id);
      max_id = std::max(max_id, id);
    }
    m->id_to_token_.resize(static_cast<size_t>(max_id + 1));
    for (const auto& [token, id] : m->vocab_) m->id_to_token_[id] = token;
    if (model.contains("unk_token") && model["unk_token"].is_string()) {
      const auto it = m->vocab_.find(model["unk_token"].get<std::string>());
      if (it != m->vocab_.end()) m->unk_id_ = it->second;
    }
    auto str_or_empty = [&](const char* key) {
      return model.contains(key) && model[key].is_string() ? model[key].get<std::string>()
                                                           : std::string();
    };
    m->continuing_subword_prefix_ = str_or_empty("continuing_subword_prefix");
    m->end_of_word_suffix_ = str_or_empty("end_of_word_suffix");
    m->byte_fallback_ = model.value("byte_fallback", false);
    m->fuse_unk_ = model.value("fuse_unk", false);
    m->ignore_merges_ = model.value("ignore_merges", false);

    const auto& merges = model.at("merges");
    size_t cap = 16;
    while (cap < merges.size() * 2) cap <<= 1;
    m->merges_.assign(cap, MergeEntry{});
    int32_t rank = 0;
    for (const auto& merge : merges) {
      std::string left, right;
      if (merge.is_array()) {
        left = merge.at(0).get<std::string>();
        right = merge.at(1).get<std::string>();
      } else {
        const std::string line = merge.get<std::string>();
        const size_t sp = line.find(' ');
        if (sp == std::string::npos || line.find(' ', sp + 1) != std::string::npos) {
          return InvalidArgument("model.merges[" + std::to_string(rank) + "]: '" + line +
                                 "' is not 'a b'");
        }
        left = line.substr(0, sp);
        right = line.substr(sp + 1);
      }
      CPM_RETURN_IF_ERROR(m->AddMerge(left, right, rank));
      ++rank;
    }
  } catch (const std::exception& e) {
    return InvalidArgument(std::string("model: ") + e.what());
  }

  m->bmp_char_id_.assign(0x10000, -1);
  for (const auto& [token, id] : m->vocab_) {
    char32_t cp;
    if (!token.empty() && static_cast<size_t>(DecodeUtf8(token, 0, &cp)) == token.size() &&
        cp < 0x10000) {
      m->bmp_char_id_[cp] = id;
    }
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    const auto it = m->vocab_.find(std::string_view(name));
    m->byte_id_[b] = it == m->vocab_.end() ? -1 : it->second;
  }
  return m;
}

Status BpeModel::AddMerge(const std::string& left, const std::string& right, int32_t rank) {
  const auto l = vocab_.find(left), r = vocab_.find(right);
  // HF joins a + b minus b's continuing-subword prefix.
  const size_t skip = right.compare(0, continuing_subword_prefix_.size(),
                                    continuing_subword_prefix_) == 0
                          ? continuing_subword_prefix_.size()
                          : 0;
  const auto merged = vocab_.find(left + right.substr(skip));
  if (l == vocab_.end() || r == vocab_.end() || merged == vocab_.end()) {
    return InvalidArgument("model.merges[" + std::to_string(rank) + "]: '" + left + "' + '" +
                           right + "' uses a token missing from model.vocab");
  }
  const uint64_t key = PairKey(l->second, r->second);
  for (size_t i = MixHash(key) & (merges_.size() - 1);; i = (i + 1) & (merges_.size() - 1)) {
    MergeEntry& e = merges_[i];
    if (e.new_id < 0) {
      e = MergeEntry{key, merged->second, rank};
      return OkStatus();
    }
    if (e.key == key) return OkStatus();  // a repeated merge keeps its first (best) rank
  }
}

const BpeModel::MergeEntry* BpeModel::FindMerge(int32_t left, int32_t right) const {
  const uint64_t key = PairKey(left, right);
  for (size_t i = MixHash(key) & (merges_.size() - 1);; i = (i + 1) & (merges_.size() - 1)) {
    const MergeEntry& e = merges_[i];
    if (e.new_id < 0) return nullptr;
    if (e.key == key) return &e;
  }
}

std::optional<int32_t> BpeModel::TokenToId(std::string_view token) const {
  const auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string& BpeModel::IdToToken(int32_t id) const {
  static const std::string kEmpty;
  if (id < 0 || id >= vocab_size()) return kEmpty;
  return id_to_token_[id];
}

int32_t BpeModel::CharId(std::string_view ch, char32_t cp, bool first) const {
  if ((first || continuing_subword_prefix_.empty()) && cp < 0x10000 && cp != 0xFFFD) {
    return bmp_char_id_[cp];
  }
  std::string key = first ? std::string() : continuing_subword_prefix_;
  key.append(ch);
  const auto it = vocab_.find(key);
  return it == vocab_.end() ? -1 : it->second;
}

void BpeModel::Encode(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  if (word.size() > kMaxCachedWordBytes) {
    EncodeUncached(word, ids);
    return;
  }
  CacheShard& shard = cache_[std::hash<std::string_view>()(word) % kCacheShards];
  {
    std::lock_guard<std::mutex> lock(shard.mu);
    const auto it = shard.words.find(word);
    if (it != shard.words.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = ids->size();
  EncodeUncached(word, ids);
  std::lock_guard<std::mutex> lock(shard.mu);
  if (shard.words.size() < kCacheShardCapacity) {
    shard.words.emplace(std::string(word), std::vector<int32_t>(ids->begin() + start, ids->end()));
  }
}

void BpeModel::EncodeUncached(std::string_view word, std::vector<int32_t>* ids) const {
  std::vector<Symbol> syms;
  syms.reserve(word.size());
  auto add = [&](int32_t id, int32_t len) {
    const auto n = static_cast<int32_t>(syms.size());
    syms.push_back(Symbol{id, n - 1, -1, len});
    if (n > 0) syms[n - 1].next = n;
  };
  // A pending unk token and the bytes it covers, kept open so fuse_unk can extend it.
  int32_t unk_len = 0;
  auto flush_unk = [&]() {
    if (unk_len > 0) add(*unk_id_, unk_len);
    unk_len = 0;
  };
  for (size_t i = 0; i < word.size();) {
    char32_t cp;
    int n = DecodeUtf8(word, i, &cp);
    std::string_view ch = word.substr(i, n);
    const bool first = i == 0, last = i + n == word.size();
    int32_t id = -1;
    if (last && !end_of_word_suffix_.empty()) {
      std::string key = (first ? std::string() : continuing_subword_prefix_);
      key.append(ch).append(end_of_word_suffix_);
      const auto it = vocab_.find(key);
      id = it == vocab_.end() ? -1 : it->second;
    } else {
      id = CharId(ch, cp, first);
    }
    i += n;
    if (id >= 0) {
      flush_unk();
      add(id, n);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : ch) all = all && byte_id_[static_cast<uint8_t>(c)] >= 0;
      if (all) {
        flush_unk();
        for (char c : ch) add(byte_id_[static_cast<uint8_t>(c)], 1);
        continue;
      }
    }
    if (!unk_id_) continue;  // HF drops characters it cannot represent
    if (!fuse_unk_) flush_unk();
    unk_len += n;
  }
  flush_unk();

  std::priority_queue<Candidate> heap;
  auto consider = [&](int32_t pos) {
    const int32_t next = syms[pos].next;
    if (next < 0) return;
    if (const MergeEntry* e = FindMerge(syms[pos].id, syms[next].id)) {
      heap.push(Candidate{e->rank, pos, e->new_id});
    }
  };
  for (int32_t p = 0; p + 1 < static_cast<int32_t>(syms.size()); ++p) consider(p);
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& s = syms[top.pos];
    if (s.len == 0 || s.next < 0) continue;
    const MergeEntry* e = FindMerge(s.id, syms[s.next].id);
    if (e == nullptr || e->new_id != top.new_id) continue;  // stale candidate
    Symbol& right = syms[s.next];
    s.id = top.new_id;
    s.len += right.len;
    right.len = 0;
    s.next = right.next;
    if (s.next >= 0) syms[s.next].prev = top.pos;
    if (s.prev >= 0) consider(s.prev);
    consider(top.pos);
  }
  for (int32_t p = syms.empty() ? -1 : 0; p >= 0; p = syms[p].next) ids->push_back(syms[p].id);
}

}  // namespace cpm
