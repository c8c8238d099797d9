// Pattern -> syntax tree (regex_parser.cc) -> Thompson NFA over byte ranges -> DFA by subset
// construction -> states from which no match is reachable cut off.
#include "structured/regex.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <list>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "structured/regex_parser.h"

namespace cpm::structured {
namespace {

using regex::Ast;
using regex::Node;

// ---- Code point ranges as UTF-8 byte ranges ----

using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;  // one range per byte position

int EncodedLength(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

void Encode(uint32_t cp, uint8_t* out) {
  switch (EncodedLength(cp)) {
    case 1: out[0] = static_cast<uint8_t>(cp); return;
    case 2:
      out[0] = static_cast<uint8_t>(0xC0 | cp >> 6);
      out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      return;
    case 3:
      out[0] = static_cast<uint8_t>(0xE0 | cp >> 12);
      out[1] = static_cast<uint8_t>(0x80 | (cp >> 6 & 0x3F));
      out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
      return;
    default:
      out[0] = static_cast<uint8_t>(0xF0 | cp >> 18);
      out[1] = static_cast<uint8_t>(0x80 | (cp >> 12 & 0x3F));
      out[2] = static_cast<uint8_t>(0x80 | (cp >> 6 & 0x3F));
      out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  }
}

// Appends byte-range sequences whose texts are exactly the UTF-8 encodings of [lo, hi] (no
// surrogates in it). Split until both ends have one length and, at every byte position, either
// share the bytes before it or span its whole continuation range: then each position's bytes
// range independently of the others.
void Utf8Sequences(uint32_t lo, uint32_t hi, std::vector<ByteRanges>* out) {
  if (lo > hi) return;
  for (uint32_t boundary : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (lo <= boundary && boundary < hi) {
      Utf8Sequences(lo, boundary, out);
      Utf8Sequences(boundary + 1, hi, out);
      return;
    }
  }
  const int n = EncodedLength(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;  // the low i continuation bytes' bits
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        Utf8Sequences(lo, lo | m, out);
        Utf8Sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        Utf8Sequences(lo, (hi & ~m) - 1, out);
        Utf8Sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  uint8_t a[4], b[4];
  Encode(lo, a);
  Encode(hi, b);
  ByteRanges seq;
  for (int i = 0; i < n; ++i) seq.push_back({a[i], b[i]});
  out->push_back(std::move(seq));
}

// ---- NFA ----

struct Edge {
  enum class Kind : uint8_t {
    kByte,     // one byte in [lo, hi]
    kEpsilon,  // no byte
    kBegin,    // no byte, at the start of the text only
    kEnd,      // no byte, at the end of the text only
  };
  Kind kind;
  uint8_t lo = 0, hi = 0;
  int32_t to;
};

// Thompson's construction. Build(node, from) adds the paths that read `node` from state `from`
// and returns where they end; it only adds edges out of `from`, never into it, so that
// alternatives sharing `from` and loops built after it cannot run into one another.
class NfaBuilder {
 public:
  explicit NfaBuilder(const Ast& ast) : ast_(ast) {}

  // The NFA of the whole pattern from state 0; false if it grew past kMaxRegexNfaStates.
  bool Run() {
    const int32_t start = New();
    match_ = Build(ast_.root, start);
    return !too_big_;
  }
  const std::vector<std::vector<Edge>>& edges() const { return edges_; }
  int32_t match() const { return match_; }

 private:
  int32_t New() {
    if (edges_.size() >= static_cast<size_t>(kMaxRegexNfaStates)) too_big_ = true;
    if (too_big_) return 0;
    edges_.emplace_back();
    return static_cast<int32_t>(edges_.size()) - 1;
  }
  void Add(int32_t from, Edge e) {
    if (!too_big_) edges_[from].push_back(e);
  }
  void Epsilon(int32_t from, int32_t to) { Add(from, {Edge::Kind::kEpsilon, 0, 0, to}); }

  int32_t Build(int index, int32_t from) {
    if (too_big_) return 0;
    const Node& n = ast_.nodes[index];
    switch (n.op) {
      case Node::Op::kEmpty: return from;
      case Node::Op::kBegin:
      case Node::Op::kEnd: {
        const int32_t to = New();
        Add(from, {n.op == Node::Op::kBegin ? Edge::Kind::kBegin : Edge::Kind::kEnd, 0, 0, to});
        return to;
      }
      case Node::Op::kChars: {
        const int32_t end = New();
        std::vector<ByteRanges> seqs;
        for (auto [lo, hi] : n.chars) Utf8Sequences(lo, hi, &seqs);
        for (const ByteRanges& seq : seqs) {
          int32_t at = from;
          for (size_t i = 0; i < seq.size(); ++i) {
            const int32_t to = i + 1 == seq.size() ? end : New();
            Add(at, {Edge::Kind::kByte, seq[i].first, seq[i].second, to});
            at = to;
          }
        }
        return end;
      }
      case Node::Op::kConcat: {
        int32_t at = from;
        for (int child : n.children) at = Build(child, at);
        return at;
      }
      case Node::Op::kAlt: {
        const int32_t end = New();
        for (int child : n.children) Epsilon(Build(child, from), end);
        return end;
      }
      case Node::Op::kRepeat: {
        const int child = n.children[0];
        int32_t at = from;
        for (int i = 0; i < n.min && !too_big_; ++i) at = Build(child, at);
        if (n.max < 0) {
          const int32_t loop = New();
          Epsilon(at, loop);
          Epsilon(Build(child, loop), loop);
          return loop;
        }
        const int32_t end = New();
        Epsilon(at, end);
        for (int i = n.min; i < n.max && !too_big_; ++i) {
          at = Build(child, at);
          Epsilon(at, end);
        }
        return end;
      }
    }
    return from;
  }

  const Ast& ast_;
  std::vector<std::vector<Edge>> edges_;
  int32_t match_ = 0;
  bool too_big_ = false;
};

// ---- DFA ----

// Subset construction: a DFA state is the set of NFA states that the text so far can reach
// through byte edges and then empty ones (kBegin only before any byte; kEnd only where the text
// ends, i.e. when deciding whether a state accepts).
class DfaBuilder {
 public:
  explicit DfaBuilder(const NfaBuilder& nfa)
      : edges_(nfa.edges()), match_(nfa.match()), mark_(edges_.size(), 0) {}

  // The automaton, as Regex holds it.
  std::array<uint8_t, 256> class_of{};
  int32_t num_classes = 0;
  std::vector<int32_t> next;
  std::vector<uint8_t> accepting;
  std::vector<int32_t> min_chars, max_chars;

  Status Run() {
    ByteClasses();
    const std::vector<int32_t> start = Closure({0}, /*begin=*/true, /*end=*/false);
    // The states after the start (its own id), each NFA set held once, as a key of `ids`.
    std::map<std::vector<int32_t>, int32_t> ids;
    std::vector<const std::vector<int32_t>*> sets = {&start};
    int64_t held = static_cast<int64_t>(start.size());  // NFA states in all the sets
    for (size_t s = 0; s < sets.size(); ++s) {
      accepting.push_back(Accepts(*sets[s], s == 0));
      for (int32_t k = 0; k < num_classes; ++k) {
        std::vector<int32_t> to = Move(*sets[s], representative_[k]);
        int32_t id = Regex::kDead;
        if (!to.empty()) {
          const auto [it, inserted] = ids.emplace(std::move(to), static_cast<int32_t>(sets.size()));
          if (inserted) {
            held += static_cast<int64_t>(it->first.size());
            CPM_RETURN_IF_ERROR(CheckSize(sets.size() + 1, held));
            sets.push_back(&it->first);
          }
          id = it->second;
        }
        next.push_back(id);
      }
    }
    CPM_RETURN_IF_ERROR(CutDeadEnds());
    CountMostChars();
    return OkStatus();
  }

 private:
  // Refuses an automaton of `states` states whose NFA sets hold `held` NFA states in all.
  Status CheckSize(size_t states, int64_t held) const {
    if (states > static_cast<size_t>(kMaxRegexDfaStates) ||
        static_cast<int64_t>(states) * num_classes > kMaxRegexTableEntries) {
      return InvalidArgument(
          "regex: too complex (its automaton has more than " +
          std::to_string(std::min<int64_t>(kMaxRegexDfaStates,
                                           kMaxRegexTableEntries / num_classes)) +
          " states)");
    }
    if (held > kMaxRegexSubsetElements) {
      return InvalidArgument("regex: too complex (its automaton's states stand for more than " +
                             std::to_string(kMaxRegexSubsetElements) + " NFA states in all)");
    }
    return OkStatus();
  }

  // Bytes split into classes that no byte edge tells apart.
  void ByteClasses() {
    std::array<bool, 257> starts{};
    // Continuation bytes (80-BF) never share a class with others: a class either starts a
    // character or goes on with one (CountFewestChars, CountMostChars).
    starts[0] = starts[0x80] = starts[0xC0] = true;
    for (const auto& state : edges_) {
      for (const Edge& e : state) {
        if (e.kind != Edge::Kind::kByte) continue;
        starts[e.lo] = true;
        starts[e.hi + 1] = true;
      }
    }
    int32_t k = -1;
    for (int b = 0; b < 256; ++b) {
      if (starts[b]) {
        ++k;
        representative_.push_back(static_cast<uint8_t>(b));
      }
      class_of[b] = static_cast<uint8_t>(k);
    }
    num_classes = k + 1;
  }

  // `seeds` and every state their empty edges reach, sorted.
  std::vector<int32_t> Closure(std::vector<int32_t> seeds, bool begin, bool end) {
    ++stamp_;
    std::vector<int32_t> out;
    while (!seeds.empty()) {
      const int32_t s = seeds.back();
      seeds.pop_back();
      if (mark_[s] == stamp_) continue;
      mark_[s] = stamp_;
      out.push_back(s);
      for (const Edge& e : edges_[s]) {
        if (e.kind == Edge::Kind::kEpsilon || (begin && e.kind == Edge::Kind::kBegin) ||
            (end && e.kind == Edge::Kind::kEnd)) {
          seeds.push_back(e.to);
        }
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  }

  std::vector<int32_t> Move(const std::vector<int32_t>& set, uint8_t byte) {
    std::vector<int32_t> targets;
    for (int32_t s : set) {
      for (const Edge& e : edges_[s]) {
        if (e.kind == Edge::Kind::kByte && e.lo <= byte && byte <= e.hi) targets.push_back(e.to);
      }
    }
    if (targets.empty()) return targets;
    return Closure(std::move(targets), false, false);
  }

  bool Accepts(const std::vector<int32_t>& set, bool at_start) {
    const std::vector<int32_t> ends = Closure(set, at_start, true);
    return std::binary_search(ends.begin(), ends.end(), match_);
  }

  // Transitions into states that reach no accepting state (no fewest count) become kDead.
  Status CutDeadEnds() {
    CountFewestChars();
    if (min_chars[Regex::kStart] == Regex::kUnbounded) {
      return InvalidArgument("regex: the pattern matches no text");
    }
    for (int32_t& t : next) {
      if (t != Regex::kDead && min_chars[t] == Regex::kUnbounded) t = Regex::kDead;
    }
    return OkStatus();
  }

  // A byte below 80 or from C0 up starts a character (costs 1), a continuation byte costs 0.
  int32_t Cost(int32_t c) const { return (representative_[c] & 0xC0) == 0x80 ? 0 : 1; }

  // min_chars of every state, kUnbounded where no accepting state is reachable: a 0-1
  // breadth-first search back from the accepting states.
  void CountFewestChars() {
    const int32_t n = static_cast<int32_t>(accepting.size()), k = num_classes;
    std::vector<std::vector<std::pair<int32_t, int32_t>>> from(n);  // (state, class) into it
    for (int32_t s = 0; s < n; ++s) {
      for (int32_t c = 0; c < k; ++c) {
        const int32_t t = next[s * k + c];
        if (t != Regex::kDead) from[t].push_back({s, c});
      }
    }
    min_chars.assign(n, Regex::kUnbounded);
    std::deque<int32_t> queue;
    for (int32_t s = 0; s < n; ++s) {
      if (accepting[s]) {
        min_chars[s] = 0;
        queue.push_back(s);
      }
    }
    while (!queue.empty()) {
      const int32_t t = queue.front();
      queue.pop_front();
      for (auto [s, c] : from[t]) {
        const int32_t d = min_chars[t] + Cost(c);
        if (d >= min_chars[s]) continue;
        min_chars[s] = d;
        if (Cost(c) == 0) queue.push_front(s);
        else queue.push_back(s);
      }
    }
  }

  // max_chars of every live state (dead ends already cut).
  void CountMostChars() {
    const int32_t n = static_cast<int32_t>(accepting.size()), k = num_classes;
    // Most: the longest path to an accepting state, unbounded from any state that reaches a
    // loop (every live state reaches a match). Depth-first, iteratively, in post-order.
    max_chars.assign(n, -1);
    std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the stack, 2 done
    for (int32_t root = 0; root < n; ++root) {
      if (color[root] != 0 || min_chars[root] == Regex::kUnbounded) continue;
      std::vector<std::pair<int32_t, int32_t>> stack = {{root, 0}};  // (state, next class)
      color[root] = 1;
      while (!stack.empty()) {
        auto& [s, c] = stack.back();
        if (c < k) {
          const int32_t t = next[s * k + c++];
          if (t == Regex::kDead) continue;
          if (color[t] == 1) {
            max_chars[s] = Regex::kUnbounded;  // a loop
          } else if (color[t] == 0) {
            color[t] = 1;
            stack.push_back({t, 0});
          }
          continue;
        }
        // All successors done: the longest of them, or 0 if this state accepts.
        int64_t best = max_chars[s] == Regex::kUnbounded ? Regex::kUnbounded
                       : accepting[s]                     ? 0
                                                          : -1;
        for (int32_t cc = 0; cc < k && best < Regex::kUnbounded; ++cc) {
          const int32_t t = next[s * k + cc];
          if (t == Regex::kDead || max_chars[t] < 0) continue;
          best = std::max<int64_t>(best, max_chars[t] == Regex::kUnbounded
                                             ? Regex::kUnbounded
                                             : std::min<int64_t>(Regex::kUnbounded,
                                                                 max_chars[t] + Cost(cc)));
        }
        max_chars[s] = static_cast<int32_t>(best);
        color[s] = 2;
        stack.pop_back();
      }
    }
  }

  const std::vector<std::vector<Edge>>& edges_;
  const int32_t match_;
  std::vector<uint8_t> representative_;  // a byte of each class
  std::vector<uint32_t> mark_;           // Closure's visited marks: == stamp_
  uint32_t stamp_ = 0;
};

// The last automata compiled, by pattern, up to kRegexCacheBytes of tables: requests that send
// one pattern again (a client's fixed format, a benchmark) share its automaton, its compile
// time and, through its id, the token masks cached for its states (token_table.h).
class CompiledCache {
 public:
  std::shared_ptr<const Regex> Find(std::string_view pattern) {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      if (it->pattern == pattern) {
        entries_.splice(entries_.begin(), entries_, it);
        return it->regex;
      }
    }
    return nullptr;
  }
  void Add(std::string_view pattern, std::shared_ptr<const Regex> regex, size_t bytes) {
    if (bytes > kRegexCacheBytes) return;
    std::lock_guard<std::mutex> lock(mutex_);
    entries_.push_front({std::string(pattern), std::move(regex), bytes});
    bytes_ += bytes;
    while (bytes_ > kRegexCacheBytes) {
      bytes_ -= entries_.back().bytes;
      entries_.pop_back();
    }
  }

 private:
  struct Entry {
    std::string pattern;
    std::shared_ptr<const Regex> regex;
    size_t bytes;
  };
  std::mutex mutex_;
  std::list<Entry> entries_;  // most recently used first
  size_t bytes_ = 0;
};

CompiledCache& Compiled() {
  static CompiledCache cache;
  return cache;
}

}  // namespace

StatusOr<std::shared_ptr<const Regex>> Regex::Compile(std::string_view pattern, bool cached) {
  if (auto hit = cached ? Compiled().Find(pattern) : nullptr) return hit;
  CPM_ASSIGN_OR_RETURN(const Ast ast, regex::Parse(pattern));
  CPM_ASSIGN_OR_RETURN(std::shared_ptr<const Regex> compiled, FromAst(ast));
  if (cached) {
    const size_t bytes = pattern.size() + compiled->next_.size() * sizeof(int32_t) +
                         compiled->accepting_.size() * (1 + 2 * sizeof(int32_t));
    Compiled().Add(pattern, compiled, bytes);
  }
  return compiled;
}

StatusOr<std::shared_ptr<const Regex>> Regex::FromAst(const regex::Ast& ast) {
  NfaBuilder nfa(ast);
  if (!nfa.Run()) {
    return InvalidArgument("regex: too complex (more than " +
                           std::to_string(kMaxRegexNfaStates) + " NFA states)");
  }
  DfaBuilder dfa(nfa);
  CPM_RETURN_IF_ERROR(dfa.Run());
  auto re = std::make_shared<Regex>();
  re->class_of_ = dfa.class_of;
  re->num_classes_ = dfa.num_classes;
  re->next_ = std::move(dfa.next);
  re->accepting_ = std::move(dfa.accepting);
  re->min_chars_ = std::move(dfa.min_chars);
  re->max_chars_ = std::move(dfa.max_chars);
  static std::atomic<uint64_t> next_id{1};
  re->id_ = next_id.fetch_add(1, std::memory_order_relaxed);
  return std::shared_ptr<const Regex>(std::move(re));
}

bool Regex::Matches(std::string_view text) const {
  int32_t s = kStart;
  for (char c : text) {
    s = Next(s, static_cast<uint8_t>(c));
    if (s == kDead) return false;
  }
  return Accepting(s);
}

}  // namespace cpm::structured
