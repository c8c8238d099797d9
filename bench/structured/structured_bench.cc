// One token mask (TokenTable::Allowed) over MiniCPM4-0.5B's vocabulary (73448 tokens),
// in the states a JSON document passes through: between values (structure), inside a string
// (most of the bytes), in a number, in a declared key, in a string with a pattern; under a
// regex (raw text); and under a recursive grammar (the pushdown matcher). A decode step of a constrained request pays one of these on the engine
// thread. The regexes' compile time is measured too (it runs on the HTTP thread).
#include <benchmark/benchmark.h>

#include <limits>
#include <memory>
#include <utility>

#include "structured/json_matcher.h"
#include "structured/regex.h"
#include "structured/token_table.h"
#include "tokenizer/tokenizer.h"

namespace cpm::structured {
namespace {

// The vocabulary's table; `cached`: with the raw-regex mask cache (as served), else without
// (every mask walks the trie, as the first time a state is seen).
const TokenTable& Table(bool cached = true) {
  static std::unique_ptr<TokenTable> tables[2];
  std::unique_ptr<TokenTable>& table = tables[cached];
  if (!table) {
    auto tok = Tokenizer::Load(CPM_SOURCE_DIR "/../shared/models/MiniCPM4-0.5B");
    if (!tok.ok()) {
      fprintf(stderr, "%s\n", tok.status().message().c_str());
      std::abort();
    }
    const Tokenizer& t = **tok;
    std::vector<std::string> bytes(t.vocab_size());
    std::vector<bool> excluded(t.vocab_size());
    for (int32_t id = 0; id < t.vocab_size(); ++id) {
      bytes[id] = t.TokenBytes(id);
      excluded[id] = t.IsAdded(id);
    }
    table = std::make_unique<TokenTable>(std::move(bytes), excluded,
                                         cached ? 4096 : std::numeric_limits<int64_t>::max());
  }
  return *table;
}

// Times the mask in the matcher's state; counts the tokens it allows.
void TimeMasks(benchmark::State& state, const Matcher& m, bool cached = true) {
  const TokenTable& table = Table(cached);
  std::vector<uint8_t> allowed;
  for (auto _ : state) table.Allowed(m, &allowed);
  int64_t n = 0;
  for (uint8_t a : allowed) n += a;
  state.counters["allowed"] = static_cast<double>(n);
}

void BM_TokenMask(benchmark::State& state) {
  auto schema = Schema::FromJsonSchema(nlohmann::ordered_json::parse(R"({
      "type": "object",
      "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                     "tags": {"type": "array", "items": {"type": "string"}},
                     "mail": {"type": "string",
                              "pattern": "[a-z0-9._%+-]+@[a-z0-9.-]+\\.[a-z]{2,}"}},
      "required": ["name", "age", "tags", "mail"]})"));
  Matcher m(*schema);
  const char* prefixes[] = {R"({"name": "Ada", "age": 36, "tags": [)", R"({"name": "Ada Lov)",
                            R"({"name": "Ada", "age": 3)", R"({"na)",
                            R"({"name": "Ada", "age": 36, "tags": [], "mail": "ada.lo)"};
  if (!m.Advance(prefixes[state.range(0)])) std::abort();
  TimeMasks(state, m);
}
BENCHMARK(BM_TokenMask)
    ->ArgNames({"state"})
    ->DenseRange(0, 4)
    ->Unit(benchmark::kMicrosecond);

// Regexes of the kinds clients send: a date, free text with any characters, a phone number.
const char* const kRegexes[] = {R"(\d{4}-\d{2}-\d{2})", R"((.|\n){0,200}\.)",
                                R"(\(\d{3}\) \d{3}-\d{4})"};

// cached 0: every mask walks the trie (a state's first mask); 1: as served, where a state seen
// again after a long walk is served from the table's cache.
void BM_RegexMask(benchmark::State& state) {
  auto schema = Schema::FromRegex(kRegexes[state.range(0)]);
  Matcher m(*schema);
  const char* prefixes[] = {"2026-1", "Some text, ", "(555) 12"};
  if (!m.Advance(prefixes[state.range(0)])) std::abort();
  TimeMasks(state, m, state.range(1) != 0);
}
BENCHMARK(BM_RegexMask)
    ->ArgNames({"regex", "cached"})
    ->ArgsProduct({{0, 1, 2}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

// A recursive grammar (arithmetic: the pushdown matcher) in the states of an expression: after
// an operator (a factor next), inside a number, and three parentheses deep.
void BM_RecursiveGrammarMask(benchmark::State& state) {
  auto schema = Schema::FromGrammar(R"g(
    root ::= expr
    expr ::= term (("+" | "-") term)*
    term ::= factor (("*" | "/") factor)*
    factor ::= [0-9]+ ("." [0-9]+)? | "(" expr ")" | "-" factor
  )g");
  if (!schema.ok()) std::abort();
  Matcher m(*schema);
  const char* prefixes[] = {"12*", "12*3.1", "((1+(2"};
  if (!m.Advance(prefixes[state.range(0)])) std::abort();
  TimeMasks(state, m);
}
BENCHMARK(BM_RecursiveGrammarMask)
    ->ArgNames({"state"})
    ->DenseRange(0, 2)
    ->Unit(benchmark::kMicrosecond);

void BM_RegexCompile(benchmark::State& state) {
  for (auto _ : state) {
    benchmark::DoNotOptimize(Regex::Compile(kRegexes[state.range(0)], /*cached=*/false));
  }
}
BENCHMARK(BM_RegexCompile)->ArgNames({"regex"})->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace cpm::structured
