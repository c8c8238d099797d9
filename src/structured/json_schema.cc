#include "structured/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <unordered_set>

#include "structured/grammar.h"
#include "structured/lark.h"
#include "structured/number_ranges.h"
#include "structured/string_formats.h"

namespace cpm::structured {

using Json = nlohmann::ordered_json;

// Builds a Schema's nodes from JSON Schema text; `root_doc` resolves local $refs.
class SchemaCompiler {
 public:
  SchemaCompiler(Schema* out, const Json& root_doc) : out_(out), doc_(root_doc) {}

  Status Compile(const Json& s, const std::string& path, SchemaNode* node);

 private:
  Status CompileNode(const Json& s, const std::string& path, SchemaNode* node);
  Status CompileTyped(const Json& s, const std::string& path, const std::string& type,
                      SchemaNode* node);
  Status CompileString(const Json& s, const std::string& path, SchemaNode* node);
  Status CompileNumber(const Json& s, const std::string& path, const std::string& type,
                       SchemaNode* node);
  Status CompileObject(const Json& s, const std::string& path, SchemaNode* node);
  Status CompileArray(const Json& s, const std::string& path, SchemaNode* node);
  StatusOr<const SchemaNode*> Child(const Json& s, const std::string& path);
  StatusOr<const SchemaNode*> Ref(const std::string& ref, const std::string& path);

  Schema* out_;
  const Json& doc_;
  std::map<std::string, const SchemaNode*> refs_;  // resolved (or being compiled) $ref targets
  int depth_ = 0;  // schemas being compiled, one inside the other
};

// Deeper schemas are refused: compiling recurses, and a request must not exhaust the stack.
constexpr int kMaxSchemaDepth = 64;

namespace {

// Keywords that are enforced.
const std::set<std::string> kSupported = {
    "type",     "properties", "required", "additionalProperties", "items",  "minItems",
    "maxItems", "minLength",  "maxLength", "enum",                "const",  "anyOf",
    "oneOf",    "$ref",       "pattern",  "format",   "minimum", "maximum", "exclusiveMinimum",
    "exclusiveMaximum", "prefixItems", "allOf", "unevaluatedProperties"};
// Keywords of JSON Schema that constrain values and are not enforced: a 400 rather than output
// that ignores them. Every other keyword (title, description, default, examples, $defs,
// OpenAPI's discriminator and nullable, pydantic's extras, x-* vendor keys, content*) only
// describes the schema and is ignored, as xgrammar (vLLM's default backend) ignores what it does
// not know.
const std::set<std::string> kUnenforced = {
    "multipleOf",      "uniqueItems",       "contains",         "minContains",
    "maxContains",     "not",               "if",               "then",
    "else",            "dependentRequired", "dependentSchemas", "dependencies",
    "patternProperties", "propertyNames",   "minProperties",    "maxProperties",
    "unevaluatedItems", "additionalItems",  "$dynamicRef",      "$recursiveRef"};

// An unenforced keyword whose value no JSON value can fail, as schema generators write them
// (zod 4 gives every record `propertyNames: {"type": "string"}`; object keys are always
// strings): nothing to enforce, so no reason to refuse the schema.
bool ConstrainsNothing(const std::string& key, const Json& value, const Json& schema) {
  if (key == "propertyNames") {
    return value == true || value == Json::object() || value == Json({{"type", "string"}});
  }
  if (key == "uniqueItems") return value == false;
  if (key == "minProperties") return value == 0;
  if (key == "multipleOf") {
    return value == 1 && schema.contains("type") && schema["type"] == "integer";
  }
  return false;
}

Status Unsupported(const std::string& what, const std::string& path) {
  return InvalidArgument("json_schema: " + what + " at '" + path +
                         "' is not supported by cpmserve's structured outputs");
}

Status Invalid(const std::string& what, const std::string& path) {
  return InvalidArgument("json_schema: " + what + " at '" + path + "'");
}

// A non-negative integer keyword, or `fallback` when absent.
StatusOr<int64_t> Count(const Json& s, const char* key, const std::string& path,
                        int64_t fallback) {
  const auto it = s.find(key);
  if (it == s.end()) return fallback;
  if (!it->is_number_integer() || it->get<int64_t>() < 0) {
    return Invalid(std::string("'") + key + "' must be a non-negative integer", path);
  }
  return it->get<int64_t>();
}

// A min / max pair of counts (minLength / maxLength, minItems / maxItems) into *min, *max:
// 0 and -1 (no bound) when absent, max below min an error.
Status Bounds(const Json& s, const char* min_key, const char* max_key, const std::string& path,
              int64_t* min, int64_t* max) {
  CPM_ASSIGN_OR_RETURN(*min, Count(s, min_key, path, 0));
  CPM_ASSIGN_OR_RETURN(*max, Count(s, max_key, path, -1));
  if (*max >= 0 && *max < *min) {
    return Invalid(std::string("'") + max_key + "' < '" + min_key + "'", path);
  }
  return OkStatus();
}

std::string Escaped(const std::string& name) {
  const std::string quoted = Json(name).dump();
  return quoted.substr(1, quoted.size() - 2);
}

}  // namespace

StatusOr<const SchemaNode*> SchemaCompiler::Child(const Json& s, const std::string& path) {
  SchemaNode* node = out_->NewNode(Kind::kAny);
  if (Status st = Compile(s, path, node); !st.ok()) return st;
  return node;
}

StatusOr<const SchemaNode*> SchemaCompiler::Ref(const std::string& ref, const std::string& path) {
  if (auto it = refs_.find(ref); it != refs_.end()) return it->second;
  // Only local JSON pointers: "#" or "#/a/b" (~0 and ~1 unescaped).
  if (ref.empty() || ref[0] != '#') return Unsupported("$ref '" + ref + "' (not local)", path);
  const Json* target = nullptr;
  try {
    const Json::json_pointer ptr(ref.substr(1));
    if (doc_.contains(ptr)) target = &doc_.at(ptr);
  } catch (const std::exception&) {
    return Invalid("$ref '" + ref + "' is not a JSON pointer into the schema", path);
  }
  if (target == nullptr) return Invalid("$ref '" + ref + "' points at nothing", path);
  // Registered before it is compiled, so that a recursive schema refers to itself.
  SchemaNode* node = out_->NewNode(Kind::kAny);
  refs_[ref] = node;
  if (Status st = Compile(*target, ref, node); !st.ok()) return st;
  return node;
}

Status SchemaCompiler::Compile(const Json& s, const std::string& path, SchemaNode* node) {
  if (depth_ >= kMaxSchemaDepth) {
    return Unsupported("nesting deeper than " + std::to_string(kMaxSchemaDepth) + " schemas",
                       path);
  }
  ++depth_;
  Status st = CompileNode(s, path, node);
  --depth_;
  return st;
}

Status SchemaCompiler::CompileNode(const Json& s, const std::string& path, SchemaNode* node) {
  if (s.is_boolean()) {
    if (!s.get<bool>()) return Unsupported("the schema 'false' (nothing matches)", path);
    node->kind = Kind::kAny;
    return OkStatus();
  }
  if (!s.is_object()) return Invalid("a schema must be an object or a boolean", path);
  for (const auto& [key, value] : s.items()) {
    if (kUnenforced.count(key) && !ConstrainsNothing(key, value, s)) {
      return Unsupported("keyword '" + key + "'", path);
    }
  }
  // unevaluatedProperties false says what strict mode already does (no properties beyond the
  // declared ones unless additionalProperties allows them, and then it evaluates them all, so
  // the keyword constrains nothing more).
  if (auto it = s.find("unevaluatedProperties"); it != s.end() && *it != false) {
    return Unsupported("'unevaluatedProperties' other than false", path);
  }
  // Keywords that replace the schema: $ref, enum / const, anyOf / oneOf, allOf. Combined with
  // other constraining keywords they would mean an intersection, which is not built. "type"
  // beside them is ignored, as xgrammar ignores it (it follows the replacing keyword): generated
  // schemas write {"type": "object", "$ref": ...} or {"type": "object", "anyOf": [...]}.
  const auto alone = [&](const std::string& key) -> Status {
    for (const auto& [k, v] : s.items()) {
      if (k != key && kSupported.count(k) && k != "type" &&
          k != "unevaluatedProperties") {  // a no-op under strict mode (checked above)
        return Unsupported("'" + key + "' together with '" + k + "'", path);
      }
    }
    return OkStatus();
  };
  // allOf of one schema (pydantic's wrapping of a $ref beside a description) is that schema; of
  // more it is an intersection, which is not built (xgrammar takes one too).
  if (auto it = s.find("allOf"); it != s.end()) {
    if (!it->is_array() || it->size() != 1) {
      return Unsupported("'allOf' of other than one schema", path);
    }
    if (Status st = alone("allOf"); !st.ok()) return st;
    return Compile((*it)[0], path + "/allOf/0", node);
  }
  if (auto it = s.find("$ref"); it != s.end()) {
    if (!it->is_string()) return Invalid("'$ref' must be a string", path);
    if (Status st = alone("$ref"); !st.ok()) return st;
    auto target = Ref(it->get<std::string>(), path);
    if (!target.ok()) return target.status();
    node->kind = Kind::kAnyOf;
    node->options = {*target};
    return OkStatus();
  }
  if (s.contains("enum") || s.contains("const")) {
    const bool is_enum = s.contains("enum");
    const char* key = is_enum ? "enum" : "const";
    if (Status st = alone(key); !st.ok()) return st;
    const Json& values = s.at(key);
    if (is_enum && (!values.is_array() || values.empty())) {
      return Invalid("'enum' must be a non-empty array", path);
    }
    node->kind = Kind::kLiterals;
    if (is_enum) {
      for (const Json& v : values) node->literals.push_back(v.dump());
    } else {
      node->literals.push_back(values.dump());
    }
    return OkStatus();
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    auto it = s.find(key);
    if (it == s.end()) continue;
    if (Status st = alone(key); !st.ok()) return st;
    if (!it->is_array() || it->empty()) {
      return Invalid(std::string("'") + key + "' must be a non-empty array", path);
    }
    node->kind = Kind::kAnyOf;
    for (size_t i = 0; i < it->size(); ++i) {
      auto option = Child((*it)[i], path + "/" + key + "/" + std::to_string(i));
      if (!option.ok()) return option.status();
      node->options.push_back(*option);
    }
    return OkStatus();
  }
  auto type = s.find("type");
  if (type == s.end()) {
    // Untyped: the kind its keywords imply, else any value.
    std::string implied;
    if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) {
      implied = "object";
    } else if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") ||
               s.contains("maxItems")) {
      implied = "array";
    } else if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern") ||
               s.contains("format")) {
      implied = "string";
    }
    if (implied.empty() && (s.contains("minimum") || s.contains("maximum") ||
                            s.contains("exclusiveMinimum") || s.contains("exclusiveMaximum"))) {
      implied = "number";
    }
    if (implied.empty()) {
      node->kind = Kind::kAny;
      return OkStatus();
    }
    return CompileTyped(s, path, implied, node);
  }
  if (type->is_string()) return CompileTyped(s, path, type->get<std::string>(), node);
  if (!type->is_array() || type->empty()) {
    return Invalid("'type' must be a string or a non-empty array of strings", path);
  }
  node->kind = Kind::kAnyOf;
  for (const Json& t : *type) {
    if (!t.is_string()) return Invalid("'type' must be a string or an array of strings", path);
    SchemaNode* option = out_->NewNode(Kind::kAny);
    if (Status st = CompileTyped(s, path, t.get<std::string>(), option); !st.ok()) return st;
    node->options.push_back(option);
  }
  return OkStatus();
}

Status SchemaCompiler::CompileTyped(const Json& s, const std::string& path,
                                    const std::string& type, SchemaNode* node) {
  if (type == "object") return CompileObject(s, path, node);
  if (type == "array") return CompileArray(s, path, node);
  if (type == "string") return CompileString(s, path, node);
  if (type == "number" || type == "integer") return CompileNumber(s, path, type, node);
  static const std::map<std::string, Kind> kScalars = {{"boolean", Kind::kBoolean},
                                                       {"null", Kind::kNull}};
  const auto it = kScalars.find(type);
  if (it == kScalars.end()) return Invalid("unknown type '" + type + "'", path);
  node->kind = it->second;
  return OkStatus();
}

// A string's bounds, pattern and format. A known format is a pattern (string_formats.h),
// so the two together would be an intersection, which is not built; other formats (and
// "format" on other types, as OpenAPI's int32) are annotations.
Status SchemaCompiler::CompileString(const Json& s, const std::string& path, SchemaNode* node) {
  node->kind = Kind::kString;
  CPM_RETURN_IF_ERROR(
      Bounds(s, "minLength", "maxLength", path, &node->min_length, &node->max_length));
  if (auto it = s.find("pattern"); it != s.end()) {
    if (!it->is_string()) return Invalid("'pattern' must be a string", path);
    auto re = Regex::Compile(it->get<std::string>());
    if (!re.ok()) return Invalid("'pattern' (" + re.status().message() + ")", path);
    node->pattern = *re;
  }
  if (auto it = s.find("format"); it != s.end()) {
    if (!it->is_string()) return Invalid("'format' must be a string", path);
    if (const StringFormat* format = FindStringFormat(it->get<std::string>())) {
      if (node->pattern) return Unsupported("'format' together with 'pattern'", path);
      node->pattern = format->pattern;
      if (format->max_length >= 0 &&
          (node->max_length < 0 || node->max_length > format->max_length)) {
        node->max_length = format->max_length;
      }
    }
  }
  if (const Regex* re = node->pattern.get(); re != nullptr) {
    const int64_t fewest = re->MinChars(Regex::kStart), most = re->MaxChars(Regex::kStart);
    if ((node->max_length >= 0 && fewest > node->max_length) || most < node->min_length) {
      return Unsupported("'" + std::string(s.contains("pattern") ? "pattern" : "format") +
                             "' with these minLength / maxLength (no string has both)",
                         path);
    }
  }
  return OkStatus();
}

// A number's or integer's range (minimum, maximum, exclusiveMinimum, exclusiveMaximum, and
// draft 4's boolean exclusiveMinimum / exclusiveMaximum beside them) as a pattern over its text
// (number_ranges.h): an integer's rounded inward, a number's as their decimal digits.
Status SchemaCompiler::CompileNumber(const Json& s, const std::string& path,
                                     const std::string& type, SchemaNode* node) {
  const bool integer = type == "integer";
  node->kind = integer ? Kind::kInteger : Kind::kNumber;
  struct Limit {
    bool set = false;
    double value = 0;
    bool exclusive = false;
  };
  // The inclusive keyword, then its exclusive twin where that is the stricter.
  const auto read = [&](const char* key, const char* exclusive_key, bool lower,
                        Limit* out) -> Status {
    const auto exclusive = s.find(exclusive_key);
    if (auto it = s.find(key); it != s.end()) {
      if (!it->is_number()) return Invalid(std::string("'") + key + "' must be a number", path);
      *out = {true, it->get<double>(),
              exclusive != s.end() && exclusive->is_boolean() && exclusive->get<bool>()};
    }
    if (exclusive == s.end() || exclusive->is_boolean()) return OkStatus();
    if (!exclusive->is_number()) {
      return Invalid(std::string("'") + exclusive_key + "' must be a number", path);
    }
    const double x = exclusive->get<double>();
    if (!out->set || (lower ? x >= out->value : x <= out->value)) *out = {true, x, true};
    return OkStatus();
  };
  Limit lo, hi;
  CPM_RETURN_IF_ERROR(read("minimum", "exclusiveMinimum", true, &lo));
  CPM_RETURN_IF_ERROR(read("maximum", "exclusiveMaximum", false, &hi));
  if (!lo.set && !hi.set) return OkStatus();
  std::string text;
  if (integer) {
    NumberBound low, high;
    for (auto [limit, bound, lower] :
         {std::tuple{&lo, &low, true}, std::tuple{&hi, &high, false}}) {
      if (!limit->set) continue;
      if (!(std::fabs(limit->value) <= static_cast<double>(kMaxRangeBound))) {
        return Unsupported("a bound beyond ±1e15", path);
      }
      const double v = limit->value;  // the nearest integer within, inclusive
      const double within = lower ? (limit->exclusive ? std::floor(v) + 1 : std::ceil(v))
                                  : (limit->exclusive ? std::ceil(v) - 1 : std::floor(v));
      *bound = {true, static_cast<int64_t>(within), false};
    }
    if (!(low.set && high.set && low.value > high.value)) text = IntegerRangePattern(low, high);
  } else {
    DecimalBound low, high;
    for (auto [limit, bound] : {std::pair{&lo, &low}, std::pair{&hi, &high}}) {
      if (!limit->set) continue;
      auto b = DecimalBound::FromDouble(limit->value, limit->exclusive);
      if (!b.ok()) return Unsupported(b.status().message(), path);
      *bound = *b;
    }
    text = NumberRangePattern(low, high);
  }
  if (text.empty()) return Unsupported("bounds that no " + type + " lies within", path);
  auto re = Regex::Compile(text);
  if (!re.ok()) return Invalid("bounds (" + re.status().message() + ")", path);
  node->pattern = *re;
  return OkStatus();
}

Status SchemaCompiler::CompileObject(const Json& s, const std::string& path, SchemaNode* node) {
  node->kind = Kind::kObject;
  std::set<std::string> required;
  if (auto it = s.find("required"); it != s.end()) {
    if (!it->is_array()) return Invalid("'required' must be an array of strings", path);
    for (const Json& name : *it) {
      if (!name.is_string()) return Invalid("'required' must be an array of strings", path);
      required.insert(name.get<std::string>());
    }
  }
  bool declared = false;
  if (auto it = s.find("properties"); it != s.end()) {
    if (!it->is_object()) return Invalid("'properties' must be an object", path);
    if (it->size() > kMaxProperties) {
      return Unsupported("an object of more than " + std::to_string(kMaxProperties) +
                             " properties",
                         path);
    }
    // Declared, even when empty: strict mode then allows no other members, so pydantic's schema
    // of an empty model (a tool without parameters) is {} only, as xgrammar's. A bare
    // {"type": "object"} is any object (xgrammar's built-in object rule).
    declared = true;
    for (const auto& [name, sub] : it->items()) {
      auto value = Child(sub, path + "/properties/" + name);
      if (!value.ok()) return value.status();
      node->properties.push_back({Escaped(name), *value, required.erase(name) > 0});
    }
  }
  if (!required.empty()) {
    return Unsupported("required property '" + *required.begin() +
                           "' that 'properties' does not declare",
                       path);
  }
  if (auto it = s.find("additionalProperties"); it != s.end()) {
    if (!(it->is_boolean() && !it->get<bool>())) {
      auto value = Child(*it, path + "/additionalProperties");
      if (!value.ok()) return value.status();
      node->additional = *value;
    }
  } else if (!declared) {
    node->additional = out_->NewNode(Kind::kAny);  // {"type": "object"}: any members
  }
  return OkStatus();
}

Status SchemaCompiler::CompileArray(const Json& s, const std::string& path, SchemaNode* node) {
  node->kind = Kind::kArray;
  if (auto it = s.find("prefixItems"); it != s.end()) {
    if (!it->is_array()) return Invalid("'prefixItems' must be an array of schemas", path);
    for (size_t i = 0; i < it->size(); ++i) {
      auto item = Child((*it)[i], path + "/prefixItems/" + std::to_string(i));
      if (!item.ok()) return item.status();
      node->prefix_items.push_back(*item);
    }
  }
  CPM_RETURN_IF_ERROR(Bounds(s, "minItems", "maxItems", path, &node->min_items, &node->max_items));
  if (auto it = s.find("items"); it != s.end()) {
    if (it->is_boolean() && !it->get<bool>()) {
      // No items past the prefix (a tuple, as Pydantic writes one; without one, []).
      const int64_t n = static_cast<int64_t>(node->prefix_items.size());
      if (node->max_items < 0 || node->max_items > n) node->max_items = n;
      if (node->min_items > node->max_items) {
        return Unsupported("'minItems' beyond the prefixItems that 'items': false allows", path);
      }
    } else {
      auto items = Child(*it, path + "/items");
      if (!items.ok()) return items.status();
      node->items = *items;
    }
  }
  return OkStatus();
}

SchemaNode* Schema::NewNode(Kind kind) {
  nodes_.push_back(std::make_unique<SchemaNode>());
  nodes_.back()->kind = kind;
  return nodes_.back().get();
}

namespace {

// Whether some finite value matches `n`: the least fixpoint of "a value can be written" over the
// nodes (an object needs its required properties' values, an array its first min_items items',
// an anyOf one option's; a reference is an anyOf of its target).
bool DescribesAValue(const std::vector<std::unique_ptr<SchemaNode>>& nodes, const SchemaNode* n) {
  std::unordered_set<const SchemaNode*> done;
  const auto ok = [&](const SchemaNode* v) { return v == nullptr || done.count(v) > 0; };
  for (bool grew = true; grew;) {
    grew = false;
    for (const auto& node : nodes) {
      if (done.count(node.get())) continue;
      bool can = true;
      switch (node->kind) {
        case Kind::kObject:
          for (const Property& p : node->properties) can = can && (!p.required || ok(p.value));
          break;
        case Kind::kArray:
          // The prefix's items, then (once: they are all alike) the rest's.
          for (int64_t i = 0; i < node->min_items && can; ++i) {
            const size_t at = static_cast<size_t>(i);
            if (at >= node->prefix_items.size()) {
              can = ok(node->items);
              break;
            }
            can = ok(node->prefix_items[at]);
          }
          break;
        case Kind::kAnyOf:
          can = std::any_of(node->options.begin(), node->options.end(), ok);
          break;
        default:
          break;  // scalars, literals, text: a value at once
      }
      if (can) grew = done.insert(node.get()).second || grew;
    }
  }
  return done.count(n) > 0;
}

}  // namespace

StatusOr<std::shared_ptr<const Schema>> Schema::FromJsonSchema(const Json& s,
                                                               int max_whitespace) {
  auto schema = std::shared_ptr<Schema>(new Schema());
  schema->max_whitespace_ = max_whitespace;
  SchemaCompiler compiler(schema.get(), s);
  SchemaNode* root = schema->NewNode(Kind::kAny);
  if (Status st = compiler.Compile(s, "#", root); !st.ok()) return st;
  schema->root_ = root;
  if (!DescribesAValue(schema->nodes_, root)) {
    // {"$ref": "#"}, or $defs that refer to each other in a ring: no text completes it, and the
    // matcher would allow nothing but the end (an empty 200).
    return Invalid("a schema whose references loop without reaching a value (it matches no "
                   "finite JSON)", "#");
  }
  return std::shared_ptr<const Schema>(std::move(schema));
}

std::shared_ptr<const Schema> Schema::AnyObject(int max_whitespace) {
  auto schema = std::shared_ptr<Schema>(new Schema());
  schema->max_whitespace_ = max_whitespace;
  SchemaNode* root = schema->NewNode(Kind::kObject);
  root->additional = schema->NewNode(Kind::kAny);
  schema->root_ = root;
  return schema;
}

StatusOr<std::shared_ptr<const Schema>> Schema::Choice(const std::vector<std::string>& choices) {
  if (choices.empty()) return InvalidArgument("structured_outputs.choice must not be empty");
  for (const std::string& c : choices) {
    if (c.empty()) return InvalidArgument("structured_outputs.choice has an empty string");
  }
  auto schema = std::shared_ptr<Schema>(new Schema());
  SchemaNode* root = schema->NewNode(Kind::kLiterals);
  root->literals = choices;
  schema->root_ = root;
  schema->json_ = false;
  return std::shared_ptr<const Schema>(std::move(schema));
}

StatusOr<std::shared_ptr<const Schema>> Schema::FromRegex(std::string_view pattern) {
  auto re = Regex::Compile(pattern);
  // vLLM's text first (validate_xgrammar_grammar), then where and why.
  if (!re.ok()) {
    return InvalidArgument("Failed to transform regex into a grammar: structured_outputs." +
                           re.status().message());
  }
  return RawText(*re);
}

StatusOr<std::shared_ptr<const Schema>> Schema::FromGrammar(std::string_view grammar) {
  std::string ebnf;
  if (GrammarIsLikelyLark(grammar)) {  // rewritten into EBNF first, as vLLM does
    auto converted = LarkToEbnf(grammar);
    if (!converted.ok()) {
      return InvalidArgument("Invalid grammar specification. structured_outputs.grammar: " +
                             converted.status().message());
    }
    ebnf = std::move(*converted);
    grammar = ebnf;
  }
  auto g = CompileGrammar(grammar);
  if (!g.ok()) {
    return InvalidArgument("Invalid grammar specification. structured_outputs." +
                           g.status().message());
  }
  if (g->regex) return RawText(g->regex);
  auto schema = std::shared_ptr<Schema>(new Schema());
  SchemaNode* root = schema->NewNode(Kind::kGrammar);
  root->grammar = std::move(g->recursive);
  schema->root_ = root;
  schema->json_ = false;
  return std::shared_ptr<const Schema>(std::move(schema));
}

std::shared_ptr<const Schema> Schema::RawText(std::shared_ptr<const Regex> re) {
  auto schema = std::shared_ptr<Schema>(new Schema());
  SchemaNode* root = schema->NewNode(Kind::kRegex);
  root->pattern = std::move(re);
  schema->root_ = root;
  schema->json_ = false;
  return std::shared_ptr<const Schema>(std::move(schema));
}

}  // namespace cpm::structured
