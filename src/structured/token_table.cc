#include "structured/token_table.h"

#include <algorithm>
#include <list>
#include <mutex>
#include <utility>

#include "structured/utf8.h"

namespace cpm::structured {
namespace {

// Whether a string of unbounded length, between two characters, takes `b` whole: no byte that
// ends the string, starts an escape or is a raw control character, and well-formed UTF-8 (its
// last character may be incomplete), as the matcher reads strings.
bool Plain(const std::string& b) {
  int more = 0;
  uint8_t lo = 0x80, hi = 0xbf;
  for (char ch : b) {
    const uint8_t c = static_cast<uint8_t>(ch);
    if (more > 0) {
      if (c < lo || c > hi) return false;
      --more;
      lo = 0x80;
      hi = 0xbf;
      continue;
    }
    if (c == '"' || c == '\\' || c < 0x20) return false;
    const Utf8Lead lead = LeadByte(c);
    if (!lead.valid) return false;
    more = lead.more;
    lo = lead.lo;
    hi = lead.hi;
  }
  return true;
}

}  // namespace

// The last raw-regex masks worth keeping, most recent first, by (Regex::id, state).
struct TokenTable::MaskCache {
  struct Entry {
    uint64_t regex;
    int32_t state;
    std::vector<uint8_t> allowed;
  };
  std::mutex mutex;
  std::list<Entry> entries;
  int64_t hits = 0;
};

TokenTable::TokenTable(std::vector<std::string> token_bytes, const std::vector<bool>& excluded,
                       int64_t cache_walks_over)
    : size_(static_cast<int32_t>(token_bytes.size())),
      bytes_(std::move(token_bytes)),
      cache_walks_over_(cache_walks_over),
      cache_(std::make_unique<MaskCache>()) {
  const std::vector<std::string>& bytes = bytes_;
  // Sorted by their bytes once, for both tries (Build).
  std::vector<int32_t> all, others;
  for (int32_t id = 0; id < size_; ++id) {
    if (bytes[id].empty() || (static_cast<size_t>(id) < excluded.size() && excluded[id])) continue;
    all.push_back(id);
  }
  std::sort(all.begin(), all.end(), [&](int32_t a, int32_t b) { return bytes[a] < bytes[b]; });
  for (int32_t id : all) (Plain(bytes[id]) ? plain_ : others).push_back(id);
  all_ = Build(bytes, all);
  others_ = Build(bytes, others);
}

TokenTable::Trie TokenTable::Build(const std::vector<std::string>& bytes,
                                   const std::vector<int32_t>& sorted) {
  // `sorted` by their bytes, the tokens under any trie node are one contiguous range, those
  // that end there first. Nodes are numbered breadth-first, so that each one's edges are
  // contiguous: node k is the k-th range taken from the queue. (A pointer trie took ~1/3 s for
  // 73k tokens.)
  struct Range {
    size_t lo, hi, depth;
  };
  std::vector<Range> queue = {{0, sorted.size(), 0}};
  Trie t;
  for (size_t k = 0; k < queue.size(); ++k) {
    const Range r = queue[k];
    Node node;
    size_t i = r.lo;
    node.first_end = static_cast<uint32_t>(t.ends.size());
    for (; i < r.hi && bytes[sorted[i]].size() == r.depth; ++i) t.ends.push_back(sorted[i]);
    node.num_ends = static_cast<uint32_t>(t.ends.size()) - node.first_end;
    node.first_edge = static_cast<uint32_t>(t.edges.size());
    while (i < r.hi) {
      const uint8_t byte = static_cast<uint8_t>(bytes[sorted[i]][r.depth]);
      size_t end = i + 1;
      while (end < r.hi && static_cast<uint8_t>(bytes[sorted[end]][r.depth]) == byte) ++end;
      t.edges.push_back({byte, static_cast<uint32_t>(queue.size())});
      queue.push_back({i, end, r.depth + 1});
      i = end;
    }
    node.num_edges = static_cast<uint32_t>(t.edges.size()) - node.first_edge;
    t.nodes.push_back(node);
  }
  return t;
}

void TokenTable::Visit(const Trie& t, uint32_t node, const Matcher& m,
                       std::vector<uint8_t>* allowed) {
  const Node& n = t.nodes[node];
  for (uint32_t i = 0; i < n.num_ends; ++i) (*allowed)[t.ends[n.first_end + i]] = 1;
  for (uint32_t e = 0; e < n.num_edges; ++e) {
    const Edge& edge = t.edges[n.first_edge + e];
    Matcher next = m;
    if (next.Step(edge.byte)) Visit(t, edge.child, next, allowed);
  }
}

TokenTable::~TokenTable() = default;

// The same walk as Visit's with the automaton's state for the matcher (Matcher::RawRegex);
// counts the nodes it visits into *walked.
void TokenTable::VisitRegex(const Trie& t, uint32_t node, const Regex& re, int32_t state,
                            std::vector<uint8_t>* allowed, int64_t* walked) {
  ++*walked;
  const Node& n = t.nodes[node];
  for (uint32_t i = 0; i < n.num_ends; ++i) (*allowed)[t.ends[n.first_end + i]] = 1;
  for (uint32_t e = 0; e < n.num_edges; ++e) {
    const Edge& edge = t.edges[n.first_edge + e];
    const int32_t next = re.Next(state, edge.byte);
    if (next != Regex::kDead) VisitRegex(t, edge.child, re, next, allowed, walked);
  }
}

void TokenTable::RegexAllowed(const Regex& re, int32_t state,
                              std::vector<uint8_t>* allowed) const {
  {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    auto& entries = cache_->entries;
    for (auto it = entries.begin(); it != entries.end(); ++it) {
      if (it->regex == re.id() && it->state == state) {
        *allowed = it->allowed;
        entries.splice(entries.begin(), entries, it);
        ++cache_->hits;
        return;
      }
    }
  }
  allowed->assign(static_cast<size_t>(size_), 0);  // a hit copies the whole mask instead
  int64_t walked = 0;
  VisitRegex(all_, 0, re, state, allowed, &walked);
  if (walked <= cache_walks_over_) return;
  std::lock_guard<std::mutex> lock(cache_->mutex);
  cache_->entries.push_front({re.id(), state, *allowed});
  if (cache_->entries.size() > kMaskCacheSize) cache_->entries.pop_back();
}

int64_t TokenTable::cache_hits() const {
  std::lock_guard<std::mutex> lock(cache_->mutex);
  return cache_->hits;
}

// The same walk as Visit's inside a string (Matcher::InString): plain bytes step a copy of the
// string's frame; at '"', '\\' or a control byte the matcher takes over, replaying the bytes
// from `base` (`path`: the bytes from the root to this node).
void TokenTable::VisitString(const Trie& t, uint32_t node, const Matcher& base,
                             const Matcher::Frame& f, std::string* path,
                             std::vector<uint8_t>* allowed) {
  const Node& n = t.nodes[node];
  for (uint32_t i = 0; i < n.num_ends; ++i) (*allowed)[t.ends[n.first_end + i]] = 1;
  for (uint32_t e = 0; e < n.num_edges; ++e) {
    const Edge& edge = t.edges[n.first_edge + e];
    path->push_back(static_cast<char>(edge.byte));
    if (edge.byte == '"' || edge.byte == '\\' || edge.byte < 0x20) {
      Matcher m = base;
      if (m.Advance(*path)) Visit(t, edge.child, m, allowed);
    } else {
      Matcher::Frame g = f;
      if (Matcher::StepStringByte(g, edge.byte)) VisitString(t, edge.child, base, g, path, allowed);
    }
    path->pop_back();
  }
}

void TokenTable::Allowed(const Matcher& m, std::vector<uint8_t>* allowed) const {
  int32_t state = 0;
  if (const Regex* re = m.RawRegex(&state)) return RegexAllowed(*re, state, allowed);
  allowed->assign(static_cast<size_t>(size_), 0);
  if (m.Dead()) return;
  if (m.InFreeString()) {
    for (int32_t id : plain_) (*allowed)[id] = 1;
    Visit(others_, 0, m, allowed);
    return;
  }
  if (const Matcher::Frame* f = m.InString()) {
    std::string path;
    VisitString(all_, 0, m, *f, &path, allowed);
    return;
  }
  Visit(all_, 0, m, allowed);
}

}  // namespace cpm::structured
