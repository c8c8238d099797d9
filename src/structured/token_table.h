// TokenTable: a vocabulary as the bytes each token adds to the text, in a trie, to find the
// tokens a Matcher takes next (the mask of constrained decoding). Tokens that share a prefix
// share its steps, and a prefix the matcher rejects prunes all of them. Inside a string of
// unbounded length, which is most of a JSON document's bytes, the tokens without '"', '\' or
// control bytes are taken whole without a walk, and only the others are tried. Inside other
// strings (a pattern, a maxLength) and under a regex (raw text) the walk steps the string's
// frame or the regex's automaton alone, without copying the matcher but at '"', '\\' and
// control bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "structured/json_matcher.h"

namespace cpm::structured {

class TokenTable {
 public:
  // bytes[id]: what token `id` adds to decoded text. Excluded tokens (special and control
  // tokens, empty ones) are never allowed as text; the caller allows EOS when the text is
  // complete. A raw regex's mask that took a walk of more than `cache_walks_over` trie nodes
  // is kept (the last kMaskCacheSize of them) for the next time its automaton is in that state:
  // free text (".*", "[^\n]*") walks the whole trie, ~1.6 ms for MiniCPM4's vocabulary, and
  // stays in one state.
  TokenTable(std::vector<std::string> bytes, const std::vector<bool>& excluded,
             int64_t cache_walks_over = 4096);
  ~TokenTable();

  int32_t size() const { return size_; }
  const std::string& bytes(int32_t id) const { return bytes_[id]; }
  // allowed[id] = 1 for every token `m` accepts whole, 0 for the others ([size()]). Safe to
  // call from several threads.
  void Allowed(const Matcher& m, std::vector<uint8_t>* allowed) const;
  // Masks served from the cache so far.
  int64_t cache_hits() const;

  static constexpr size_t kMaskCacheSize = 32;

 private:
  struct Node {
    uint32_t first_edge = 0, num_edges = 0;
    uint32_t first_end = 0, num_ends = 0;  // tokens that end here
  };
  struct Edge {
    uint8_t byte;
    uint32_t child;
  };
  struct Trie {
    std::vector<Node> nodes;  // nodes[0]: the root
    std::vector<Edge> edges;
    std::vector<int32_t> ends;
  };

  // The trie of `sorted` (token ids in the order of their bytes).
  static Trie Build(const std::vector<std::string>& bytes, const std::vector<int32_t>& sorted);
  static void Visit(const Trie& t, uint32_t node, const Matcher& m, std::vector<uint8_t>* allowed);
  static void VisitRegex(const Trie& t, uint32_t node, const Regex& re, int32_t state,
                         std::vector<uint8_t>* allowed, int64_t* walked);
  void RegexAllowed(const Regex& re, int32_t state, std::vector<uint8_t>* allowed) const;
  static void VisitString(const Trie& t, uint32_t node, const Matcher& base,
                          const Matcher::Frame& f, std::string* path,
                          std::vector<uint8_t>* allowed);

  int32_t size_;
  std::vector<std::string> bytes_;
  struct MaskCache;
  int64_t cache_walks_over_;
  std::unique_ptr<MaskCache> cache_;
  Trie all_;                    // every token that is not excluded
  Trie others_;                 // those a free string does not take whole
  std::vector<int32_t> plain_;  // those it does
};

}  // namespace cpm::structured
