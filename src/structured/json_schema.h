// JSON Schema compiled for constrained decoding (vLLM's structured outputs: response_format
// json_object / json_schema, structured_outputs json / choice / json_object / regex): a tree of
// nodes that the matcher (json_matcher.h) walks byte by byte. A regex constraint is a schema of
// one node that is not JSON: the text itself must match.
//
// The subset: type (one or a list), properties / required / additionalProperties,
// prefixItems / items (false: nothing past the prefix) / minItems / maxItems, minLength /
// maxLength, pattern (regex.h: the whole string value must match, as xgrammar and llguidance
// anchor it), format (string_formats.h: date, time, date-time, duration, uuid, ipv4, ipv6,
// email, hostname enforced; others annotations, as JSON Schema 2020-12 has them by default),
// minimum / maximum / exclusiveMinimum / exclusiveMaximum (number_ranges.h), enum, const,
// anyOf / oneOf (as anyOf: exclusivity is not enforced), $ref to local definitions
// (#/$defs/..., #/definitions/..., recursion allowed). Annotations (title, description,
// default, examples, ...) are ignored; any other keyword that constrains values (multipleOf,
// uniqueItems, ...) is an error, so that a client never gets output that the schema it sent
// would reject. As xgrammar's strict mode (vLLM's default backend): properties come in the
// schema's order (optional ones may be left out), and an object with declared properties takes
// no others unless additionalProperties says so.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "structured/grammar.h"
#include "structured/regex.h"

namespace cpm::structured {

enum class Kind : uint8_t {
  kAny,       // any JSON value
  kObject,
  kArray,
  kString,
  kNumber,
  kInteger,
  kBoolean,
  kNull,
  kLiterals,  // one of the serialized values in `literals` (enum, const, choice)
  kAnyOf,     // one of `options`
  kRegex,     // raw text (not JSON) that `pattern` matches whole (structured_outputs regex,
              // grammar without recursion)
  kGrammar,   // raw text that `grammar` (recursive rules) derives
};

struct SchemaNode;

struct Property {
  std::string key;  // the name as it appears between the quotes of JSON (escaped)
  const SchemaNode* value = nullptr;
  bool required = false;
};

struct SchemaNode {
  Kind kind = Kind::kAny;
  // kObject: the declared properties in order; other keys (any name) may follow with values
  // of `additional` when it is set.
  std::vector<Property> properties;
  const SchemaNode* additional = nullptr;
  // kArray: the first items' schemas (prefixItems), the others' (items; null: any value), count
  // bounds (max -1: none).
  std::vector<const SchemaNode*> prefix_items;
  const SchemaNode* items = nullptr;
  int64_t min_items = 0, max_items = -1;
  // kString: length bounds in characters (an escape sequence is one; max -1: none).
  int64_t min_length = 0, max_length = -1;
  // kString: what the value (its characters, escapes decoded) must match, if set; kNumber,
  // kInteger: what its text must match (its range), if set; kRegex: the text.
  std::shared_ptr<const Regex> pattern;
  // kLiterals: the exact bytes of each alternative.
  std::vector<std::string> literals;
  // kAnyOf.
  std::vector<const SchemaNode*> options;
  // kGrammar.
  std::shared_ptr<const RecursiveGrammar> grammar;
};

// The most declared properties an object may have (the matcher tracks candidates in 64 bits).
constexpr size_t kMaxProperties = 64;

// Longest run of whitespace between two tokens of JSON by default: enough for pretty-printed
// text, and a bound on a model that would otherwise emit blanks until max_tokens.
constexpr int kMaxWhitespace = 20;

class Schema {
 public:
  // A JSON Schema (draft 2020-12 keywords of the subset above). Errors name the keyword and its
  // JSON pointer. `max_whitespace`: 0 for compact JSON (vLLM's disable_any_whitespace).
  static StatusOr<std::shared_ptr<const Schema>> FromJsonSchema(
      const nlohmann::ordered_json& s, int max_whitespace = kMaxWhitespace);
  // Any JSON object (response_format json_object).
  static std::shared_ptr<const Schema> AnyObject(int max_whitespace = kMaxWhitespace);
  // Exactly one of `choices`, as raw text (structured_outputs choice): no quotes, no whitespace.
  static StatusOr<std::shared_ptr<const Schema>> Choice(const std::vector<std::string>& choices);
  // Raw text that `pattern` matches whole (structured_outputs regex).
  static StatusOr<std::shared_ptr<const Schema>> FromRegex(std::string_view pattern);
  // Raw text that derives from an EBNF grammar's root (structured_outputs grammar, grammar.h).
  static StatusOr<std::shared_ptr<const Schema>> FromGrammar(std::string_view grammar);

  const SchemaNode* root() const { return root_; }
  // JSON text: whitespace may surround values. Raw text (Choice, FromRegex): only the bytes
  // themselves.
  bool json() const { return json_; }
  // Whitespace bytes in a row that JSON text may have between tokens (0 for raw text).
  int max_whitespace() const { return json_ ? max_whitespace_ : 0; }

 private:
  friend class SchemaCompiler;
  SchemaNode* NewNode(Kind kind);
  // A schema of raw text that `re` matches whole.
  static std::shared_ptr<const Schema> RawText(std::shared_ptr<const Regex> re);

  std::vector<std::unique_ptr<SchemaNode>> nodes_;
  const SchemaNode* root_ = nullptr;
  bool json_ = true;
  int max_whitespace_ = kMaxWhitespace;
};

}  // namespace cpm::structured
