// Structured outputs: schema compilation, the byte matcher (against nlohmann's JSON parser as
// the reference for what JSON is), and token masks (against trying every token).
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "structured/json_matcher.h"
#include "structured/json_schema.h"
#include "structured/lark.h"
#include "structured/number_ranges.h"
#include "structured/regex.h"
#include "structured/token_table.h"

namespace cpm::structured {
namespace {

using Json = nlohmann::ordered_json;

std::shared_ptr<const Schema> Compile(const std::string& schema) {
  auto s = Schema::FromJsonSchema(Json::parse(schema));
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? *s : nullptr;
}

// The whole text is a value of the schema.
bool Matches(const std::shared_ptr<const Schema>& schema, const std::string& text) {
  Matcher m(schema);
  return m.Advance(text) && m.Complete();
}

TEST(JsonSchema, RejectsWhatItCannotEnforce) {
  const auto error = [](const std::string& schema) {
    auto s = Schema::FromJsonSchema(Json::parse(schema));
    EXPECT_FALSE(s.ok()) << schema;
    return s.ok() ? std::string() : s.status().message();
  };
  EXPECT_NE(error(R"({"type": "string", "pattern": "(a"})")
                .find("'pattern' (regex: missing ), unterminated subpattern at offset 0) at '#'"),
            std::string::npos);
  EXPECT_NE(error(R"({"type": "integer", "multipleOf": 3})").find("'multipleOf' at '#'"),
            std::string::npos);
  EXPECT_NE(error(R"({"type": "number", "maximum": 1e-40})").find("fraction digits"),
            std::string::npos);
  EXPECT_NE(error(R"({"type": "integer", "minimum": 3, "exclusiveMaximum": 4.0, "maximum": 2})")
                .find("bounds that no integer lies within"),
            std::string::npos);
  EXPECT_NE(error(R"({"type": "integer", "minimum": 1e16})").find("beyond"), std::string::npos);
  EXPECT_NE(error(R"({"properties": {"d": {"type": "number", "multipleOf": 2}}})")
                .find("'multipleOf' at '#/properties/d'"),
            std::string::npos);
  EXPECT_NE(error(R"({"type": "string", "format": "date", "pattern": "a"})")
                .find("'format' together with 'pattern'"),
            std::string::npos);
  EXPECT_NE(error(R"({"type": "string", "format": "uuid", "maxLength": 10})")
                .find("'format' with these minLength / maxLength"),
            std::string::npos);
  EXPECT_NE(error(R"({"properties": {"a": {}}, "required": ["b"]})").find("'b'"),
            std::string::npos);
  EXPECT_NE(error(R"({"type": "strin"})").find("unknown type 'strin'"), std::string::npos);
  EXPECT_NE(error(R"({"$ref": "#/$defs/missing"})").find("points at nothing"), std::string::npos);
  EXPECT_NE(error(R"({"$ref": "http://x/y"})").find("not local"), std::string::npos);
  EXPECT_NE(error(R"({"$defs": {"x": [1]}, "$ref": "#/$defs/x/99999999999999999999"})")
                .find("not a JSON pointer into the schema"),
            std::string::npos);
  EXPECT_NE(error(R"({"$ref": "#/properties/~2"})").find("not a JSON pointer"), std::string::npos);
  EXPECT_NE(error(R"({"type": "array", "minItems": 3, "maxItems": 2})").find("'maxItems'"),
            std::string::npos);
  EXPECT_NE(error(R"({"anyOf": [{"type": "string"}], "minLength": 2})").find("together"),
            std::string::npos);
  EXPECT_FALSE(Schema::Choice({}).ok());
  // A schema nested past the limit is refused, not compiled on an exhausted stack.
  std::string deep = R"({"type": "string"})";
  for (int i = 0; i < 5000; ++i) deep = R"({"type": "array", "items": )" + deep + "}";
  EXPECT_NE(error(deep).find("nesting deeper than"), std::string::npos);
  // Annotations are not constraints.
  EXPECT_TRUE(Schema::FromJsonSchema(Json::parse(
                  R"({"title": "T", "description": "d", "type": "integer", "default": 3})"))
                  .ok());
  EXPECT_NE(error(R"({"type": "array", "uniqueItems": true})").find("'uniqueItems' at '#'"),
            std::string::npos);
  // Unenforced keywords that no value can fail are taken: zod 4's records, and the like.
  for (const char* trivial :
       {R"({"type": "object", "propertyNames": {"type": "string"}, "additionalProperties": {"type": "number"}})",
        R"({"type": "object", "propertyNames": {}})", R"({"type": "array", "uniqueItems": false})",
        R"({"type": "object", "minProperties": 0})", R"({"type": "integer", "multipleOf": 1})"}) {
    EXPECT_TRUE(Schema::FromJsonSchema(Json::parse(trivial)).ok()) << trivial;
  }
  for (const char* real : {R"({"type": "object", "propertyNames": {"pattern": "^a"}})",
                           R"({"type": "number", "multipleOf": 1})",
                           R"({"type": "object", "minProperties": 1})"}) {
    EXPECT_FALSE(Schema::FromJsonSchema(Json::parse(real)).ok()) << real;
  }
  EXPECT_NE(error(R"({"allOf": [{"type": "string"}, {"maxLength": 3}]})")
                .find("'allOf' of other than one schema"),
            std::string::npos);
  EXPECT_NE(error(R"({"type": "object", "unevaluatedProperties": {"type": "string"}})")
                .find("'unevaluatedProperties' other than false"),
            std::string::npos);
  // References that loop without reaching a value match no finite text (this gave an empty
  // reply with finish_reason "stop"); a loop with a way out is a recursive schema, fine.
  for (const char* loop :
       {R"({"$ref": "#"})", R"({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}})",
        R"({"type": "object", "properties": {"next": {"$ref": "#"}}, "required": ["next"]})",
        R"({"type": "array", "minItems": 1000000000, "items": {"$ref": "#"}})"}) {
    EXPECT_NE(error(loop).find("references loop without reaching a value"), std::string::npos) << loop;
  }
  EXPECT_TRUE(Schema::FromJsonSchema(Json::parse(
                  R"({"type": "object", "properties": {"next": {"$ref": "#"}}})")).ok());
  EXPECT_TRUE(Schema::FromJsonSchema(Json::parse(
                  R"({"anyOf": [{"type": "null"}, {"type": "array", "minItems": 1, "items": {"$ref": "#"}}]})")).ok());
}

// Keywords JSON Schema or its dialects use only to describe (OpenAPI's discriminator, vendor
// x-* keys, content*, pydantic's examples) are ignored, as xgrammar ignores them; a one-schema
// allOf is that schema; unevaluatedProperties false is strict mode's rule already.
TEST(JsonSchema, DescriptiveKeywordsAndOneSchemaAllOf) {
  const auto pets = Compile(R"({
    "$defs": {"Cat": {"type": "object", "properties": {"pet_type": {"const": "cat"}},
                      "required": ["pet_type"], "x-order": 1},
              "Dog": {"type": "object", "properties": {"pet_type": {"const": "dog"}},
                      "required": ["pet_type"], "example": {"pet_type": "dog"}}},
    "type": "object",
    "properties": {"pet": {"oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}],
                           "discriminator": {"propertyName": "pet_type"}},
                   "photo": {"type": "string", "contentEncoding": "base64"},
                   "owner": {"allOf": [{"$ref": "#/$defs/Cat"}], "description": "d"}},
    "required": ["pet", "photo", "owner"], "unevaluatedProperties": false, "strict": true})");
  ASSERT_NE(pets, nullptr);
  EXPECT_TRUE(Matches(pets, R"({"pet": {"pet_type": "dog"}, "photo": "", "owner": {"pet_type": "cat"}})"));
  EXPECT_FALSE(Matches(pets, R"({"pet": {"pet_type": "cow"}, "photo": "", "owner": {"pet_type": "cat"}})"));
  EXPECT_FALSE(Matches(pets, R"({"pet": {"pet_type": "dog"}, "photo": "", "owner": {"pet_type": "dog"}})"));
  EXPECT_FALSE(Matches(pets, R"({"pet": {"pet_type": "dog"}, "photo": "", "owner": {"pet_type": "cat"}, "x": 1})"));
}

TEST(JsonMatcher, AnyObject) {
  const auto any = Schema::AnyObject();
  for (const char* ok : {"{}", R"({"a": [1, 2.5e-3, -0, "x\n\u00e9", true, null, {"b": {}}]})",
                         "{ \"k\" :\t\"v\"\n}", R"({"a":{"b":[[],[{}]]}})"}) {
    EXPECT_TRUE(Matches(any, ok)) << ok;
  }
  for (const char* bad : {"[]", "\"s\"", R"({"a"})", "{a: 1}", R"({"a": 01})", "{} x",
                          "{\"a\": \"\x01\"}", R"({"a": 1,})", R"({"a": tru})", R"({"a": .5})",
                          R"({"a": "\q"})", R"({"a": 1.})", R"({"a": 1e})",
                          // xgrammar's whitespace: none around the root value, no \r.
                          "\n{}", "{}\n", " {}", "{\r}"}) {
    EXPECT_FALSE(Matches(any, bad)) << bad;
  }
  // A prefix of a value is alive but not complete.
  Matcher m(any);
  EXPECT_TRUE(m.Advance(R"({"a": [1)"));
  EXPECT_FALSE(m.Complete());
  EXPECT_TRUE(m.Accepts("]"));
  EXPECT_TRUE(m.Accepts("]}"));
  EXPECT_FALSE(m.Accepts("}"));  // the array is still open
}

TEST(JsonMatcher, ObjectProperties) {
  const auto s = Compile(R"({
    "type": "object",
    "properties": {
      "name": {"type": "string", "maxLength": 5},
      "age": {"type": "integer"},
      "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2}
    },
    "required": ["name", "age"]})");
  for (const char* ok : {R"({"name": "Bob", "age": 42})", R"({"name":"","age":-1,"tags":["a"]})",
                         R"({"name": "\u00e9\n", "age": 0, "tags": ["a", "b"]})"}) {
    EXPECT_TRUE(Matches(s, ok)) << ok;
  }
  for (const char* bad : {R"({"name": "Bob"})", R"({"age": 1, "name": "x"})",
                          R"({"name": "Robert", "age": 1})", R"({"name": "a", "age": 1.5})",
                          R"({"name": "a", "age": 1, "tags": []})",
                          R"({"name": "a", "age": 1, "tags": ["a", "b", "c"]})",
                          R"({"name": "a", "age": 1, "x": 1})", R"({"name": "a", "age": 1,})",
                          R"({"nam": "a", "age": 1})"}) {
    EXPECT_FALSE(Matches(s, bad)) << bad;
  }
}

// Names are matched escaped: a quote, a backslash or a control character inside a name.
TEST(JsonMatcher, EscapedPropertyNames) {
  const auto s = Compile(R"({"properties": {"d\"q": {"type": "integer"}, "b\\": {"type": "null"},
                                            "t\tx": {"type": "boolean"}},
                             "required": ["d\"q"]})");
  EXPECT_TRUE(Matches(s, R"({"d\"q": 1})"));
  EXPECT_TRUE(Matches(s, R"({"d\"q": 1, "b\\": null, "t\tx": true})"));
  EXPECT_FALSE(Matches(s, R"({"d\": 1})"));
  EXPECT_FALSE(Matches(s, R"({"d": 1})"));
  EXPECT_FALSE(Matches(s, R"({"d\"q": 1, "b\": null})"));
}

TEST(JsonMatcher, OptionalPropertiesAndAdditional) {
  const auto s = Compile(R"({"properties": {"a": {"type": "integer"}, "b": {"type": "boolean"}},
                             "additionalProperties": {"type": "null"}})");
  for (const char* ok : {"{}", R"({"b": true})", R"({"a": 1, "b": false})", R"({"z": null})",
                         R"({"a": 1, "z": null, "b": true})"}) {
    EXPECT_TRUE(Matches(s, ok)) << ok;
  }
  for (const char* bad : {R"({"b": true, "a": 1})", R"({"z": 1})", R"({"a": true})"}) {
    EXPECT_FALSE(Matches(s, bad)) << bad;
  }
}

// xgrammar's strict mode closes an object that declares properties, an empty "properties" too
// (pydantic's schema of an empty model: a tool without parameters gets {} only); a bare
// {"type": "object"} is any object (xgrammar's built-in object rule).
TEST(JsonMatcher, EmptyPropertiesAllowOnlyTheEmptyObject) {
  const auto empty = Compile(R"({"type": "object", "properties": {}, "title": "Empty"})");
  EXPECT_TRUE(Matches(empty, "{}"));
  EXPECT_TRUE(Matches(empty, "{ }"));
  EXPECT_FALSE(Matches(empty, R"({"a": 1})"));
  const auto open = Compile(R"({"type": "object", "properties": {}, "additionalProperties": true})");
  EXPECT_TRUE(Matches(open, R"({"a": 1})"));
  EXPECT_TRUE(Matches(Compile(R"({"type": "object"})"), R"({"a": [1, {"b": null}]})"));
}

// "type" beside a keyword that replaces the schema ($ref, anyOf, oneOf, allOf) is ignored, as
// xgrammar ignores it: generated schemas restate the type there.
TEST(JsonSchema, TypeBesideAReplacingKeywordIsIgnored) {
  const auto ref = Compile(R"({"$defs": {"X": {"type": "object", "properties": {"a": {"type": "integer"}},
                                               "required": ["a"]}},
                               "type": "object", "$ref": "#/$defs/X"})");
  EXPECT_TRUE(Matches(ref, R"({"a": 1})"));
  EXPECT_FALSE(Matches(ref, R"({"b": 1})"));
  const auto any_of = Compile(R"({"type": "object", "anyOf": [{"type": "object", "properties":
                                  {"a": {"type": "integer"}}, "required": ["a"]}, {"type": "null"}]})");
  EXPECT_TRUE(Matches(any_of, R"({"a": 1})"));
  EXPECT_TRUE(Matches(any_of, "null"));  // xgrammar follows anyOf and ignores the type
  ASSERT_NE(Compile(R"({"type": "object", "allOf": [{"type": "object"}]})"), nullptr);
  ASSERT_NE(Compile(R"({"type": "string", "oneOf": [{"const": "a"}, {"const": "b"}]})"), nullptr);
}

TEST(JsonMatcher, LiteralsAlternativesAndReferences) {
  const auto e = Compile(R"({"enum": ["red", "green", 1, 12, null, {"k": [true]}]})");
  for (const char* ok : {R"("red")", "1", "12", "null", R"({"k":[true]})"}) {
    EXPECT_TRUE(Matches(e, ok)) << ok;
  }
  for (const char* bad : {R"("blue")", "2", "123", R"({"k": [true]})", "nul", " 1", "1 "}) {
    EXPECT_FALSE(Matches(e, bad)) << bad;
  }
  const auto opt = Compile(R"({"type": ["string", "null"], "maxLength": 2})");
  EXPECT_TRUE(Matches(opt, R"("ab")"));
  EXPECT_TRUE(Matches(opt, "null"));
  EXPECT_FALSE(Matches(opt, R"("abc")"));
  EXPECT_FALSE(Matches(opt, "0"));
  const auto list = Compile(R"({
    "$defs": {"node": {"type": "object",
                       "properties": {"v": {"type": "integer"},
                                      "next": {"anyOf": [{"$ref": "#/$defs/node"},
                                                         {"type": "null"}]}},
                       "required": ["v", "next"]}},
    "$ref": "#/$defs/node"})");
  EXPECT_TRUE(Matches(list, R"({"v": 1, "next": {"v": 2, "next": {"v": 3, "next": null}}})"));
  EXPECT_FALSE(Matches(list, R"({"v": 1, "next": {"v": 2}})"));
  EXPECT_FALSE(Matches(list, R"({"v": 1, "next": {"v": "2", "next": null}})"));
  // {"$ref": "#"}, a cycle with no bytes, is refused: see RejectsWhatItCannotEnforce.
}

// Two anyOf options that read an item alike meet again once it ends: one reading each, or
// every item would double them until the bound dropped the other alternative's readings (here
// the 12-item arrays).
TEST(JsonMatcher, ReadingsThatMeetAgainAreMerged) {
  const auto s = Compile(R"({"anyOf": [
    {"type": "array", "minItems": 10, "maxItems": 10,
     "items": {"anyOf": [{"type": "integer"}, {"type": "integer", "maxLength": 5}]}},
    {"type": "array", "minItems": 12, "items": {"type": "integer"}}]})");
  std::string ten = "[1", twelve;
  for (int i = 1; i < 10; ++i) ten += ", 1";
  twelve = ten + ", 1, 1]";
  ten += "]";
  EXPECT_TRUE(Matches(s, ten));
  EXPECT_TRUE(Matches(s, twelve));
  std::string many = "[1";
  for (int i = 1; i < 40; ++i) many += ", 1";
  EXPECT_TRUE(Matches(s, many + "]"));
}

TEST(JsonMatcher, NumbersStringsChoiceAndWhitespace) {
  const auto num = Compile(R"({"type": "number"})");
  for (const char* ok : {"0", "-12", "0.5e+3", "1E9", "3.25"}) EXPECT_TRUE(Matches(num, ok)) << ok;
  for (const char* bad : {"-", "01", "1.", ".5", "+1", "1e+", "NaN"}) {
    EXPECT_FALSE(Matches(num, bad)) << bad;
  }
  const auto integer = Compile(R"({"type": "integer"})");
  EXPECT_TRUE(Matches(integer, "-7"));
  EXPECT_FALSE(Matches(integer, "7.0"));
  const auto str = Compile(R"({"type": "string", "minLength": 2, "maxLength": 3})");
  EXPECT_TRUE(Matches(str, R"("ab")"));
  EXPECT_TRUE(Matches(str, R"("\t\u0041é")"));  // escapes and a 2-byte character count once
  EXPECT_FALSE(Matches(str, R"("a")"));
  EXPECT_FALSE(Matches(str, R"("abcd")"));
  auto choice = Schema::Choice({"yes", "no", "not sure"});
  ASSERT_TRUE(choice.ok());
  EXPECT_TRUE(Matches(*choice, "yes"));
  EXPECT_TRUE(Matches(*choice, "not sure"));
  EXPECT_FALSE(Matches(*choice, " yes"));
  EXPECT_FALSE(Matches(*choice, "\"yes\""));
  EXPECT_FALSE(Matches(*choice, "ye"));
  const auto any = Schema::AnyObject();
  EXPECT_TRUE(Matches(any, "{" + std::string(kMaxWhitespace, ' ') + "}"));
  EXPECT_FALSE(Matches(any, "{" + std::string(kMaxWhitespace + 1, ' ') + "}"));
  // Compact: xgrammar's separators without an indent, ", " and ": ", and no other whitespace.
  const auto compact = Schema::AnyObject(0);
  EXPECT_TRUE(Matches(compact, R"({"a": [1, {"b": null}], "c": "x, y"})"));
  EXPECT_TRUE(Matches(compact, R"({"a": [], "b": {}})"));
  for (const char* bad : {R"({"a":[1,{"b":null}]})", R"({"a":1})", R"({"a": 1,"b": 2})",
                          R"({"a":  1})", R"({ "a": 1})", R"({"a" : 1})", R"({"a": [1 ,2]})",
                          R"({"a": 1 })", "{}\n"}) {
    EXPECT_FALSE(Matches(compact, bad)) << bad;
  }
  const auto typed = Compile(R"({"type": "object", "properties": {"n": {"type": "integer"},
                                 "t": {"type": "array", "items": {"type": "string"}}}})");
  const auto typed_compact = Schema::FromJsonSchema(Json::parse(R"({"type": "object",
      "properties": {"n": {"type": "integer"}, "t": {"type": "array", "items": {"type": "string"}}}})"), 0);
  ASSERT_TRUE(typed_compact.ok());
  EXPECT_TRUE(Matches(*typed_compact, R"({"n": 3, "t": ["a", "b"]})"));
  EXPECT_FALSE(Matches(*typed_compact, R"({"n":3,"t":["a","b"]})"));
  EXPECT_TRUE(Matches(typed, R"({"n":3,"t":["a","b"]})"));
}

// Strings are well-formed UTF-8, a character's bytes possibly split between tokens.
TEST(JsonMatcher, Utf8InStrings) {
  const auto s = Compile(R"({"type": "string", "maxLength": 2})");
  for (const char* ok : {"\"é\"", "\"\xe4\xb8\xad\xf0\x9f\x98\x80\"", "\"\xed\x9f\xbf\""}) {
    EXPECT_TRUE(Matches(s, ok)) << ok;
  }
  for (const char* bad : {"\"\x80\"", "\"\xc3\"", "\"\xc0\xaf\"", "\"\xe0\x80\x80\"",
                          "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"", "\"\xff\"",
                          "\"\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\""}) {
    EXPECT_FALSE(Matches(s, bad)) << bad;
  }
  Matcher m(Compile(R"({"type": "string"})"));
  EXPECT_TRUE(m.InFreeString() == false && m.Advance("\"") && m.InFreeString());
  EXPECT_TRUE(m.Advance("\xe4"));
  EXPECT_FALSE(m.InFreeString());  // inside a character
  EXPECT_FALSE(m.Accepts("\""));
  EXPECT_TRUE(m.Accepts("\xb8\xad\""));
}

// Random texts over JSON's punctuation: the matcher for "any value" says what nlohmann's
// parser says (whitespace runs are short here, so kMaxWhitespace does not come into it).
TEST(JsonMatcher, AgreesWithJsonParser) {
  const auto any = Compile("{}");
  const std::string alphabet = "{}[]\",:0123456789-.eE+ truefalsn\\ab";
  std::mt19937 rng(7);
  int valid = 0;
  for (int i = 0; i < 40000; ++i) {
    std::string text;
    const int len = 1 + static_cast<int>(rng() % 12);
    for (int j = 0; j < len; ++j) text += alphabet[rng() % alphabet.size()];
    // JSON's grammar, less whitespace around the root value (xgrammar's root rule).
    const bool padded = text.front() == ' ' || text.back() == ' ';
    const bool expected = Json::accept(text) && !padded;
    if (!Json::accept(text)) {
      // nlohmann stops at a number beyond double's range (out_of_range.406), which JSON's
      // grammar allows: such texts are not compared.
      bool overflow = false;
      try {
        const Json parsed = Json::parse(text);
        ADD_FAILURE() << "accept() and parse() disagree on '" << text << "': " << parsed.dump();
      } catch (const Json::out_of_range&) {
        overflow = true;
      } catch (const Json::exception&) {
      }
      if (overflow) continue;
    }
    valid += expected;
    ASSERT_EQ(Matches(any, text), expected) << "'" << text << "'";
  }
  EXPECT_GT(valid, 100);  // the alphabet makes enough valid documents to test acceptance
  // And serialized random documents, compact and indented.
  for (int i = 0; i < 300; ++i) {
    std::function<Json(int)> gen = [&](int depth) -> Json {
      switch (rng() % (depth > 3 ? 4 : 6)) {
        case 0: return Json(static_cast<int>(rng() % 2000) - 1000);
        case 1: return Json(static_cast<double>(rng() % 1000) / 7.0);
        case 2: return Json(std::string(rng() % 4, 'x') + "\"\\\n\t" + "\u00e9");
        case 3: return rng() % 2 ? Json(nullptr) : Json(rng() % 2 == 0);
        case 4: {
          Json a = Json::array();
          for (int k = static_cast<int>(rng() % 4); k > 0; --k) a.push_back(gen(depth + 1));
          return a;
        }
        default: {
          Json o = Json::object();
          for (int k = static_cast<int>(rng() % 4); k > 0; --k) {
            o["k" + std::to_string(rng() % 10)] = gen(depth + 1);
          }
          return o;
        }
      }
    };
    const Json doc = gen(0);
    EXPECT_TRUE(Matches(any, doc.dump())) << doc.dump();
    EXPECT_TRUE(Matches(any, doc.dump(2))) << doc.dump(2);
  }
}

// The mask equals trying every token's bytes, in every state a random walk reaches.
TEST(JsonMatcher, PatternStrings) {
  // The value, escapes decoded, must match the whole pattern. \u escapes are taken for control
  // characters only; others are written as themselves.
  const auto s = Compile(R"({"type": "string", "pattern": "[a-c]+\"?é\n?", "maxLength": 6})");
  for (const char* yes : {R"("abé")", R"("ab\"é")", R"("cé\u000A")", R"("bé\n")"}) {
    EXPECT_TRUE(Matches(s, yes)) << yes;
  }
  for (const char* no : {R"("ab")", R"("é")", R"("abé\n\n")", R"("ab\\é")", R"("abcdeé\n")",
                         R"("a\u0062é")", R"("ab\ud83d")"}) {
    EXPECT_FALSE(Matches(s, no)) << no;
  }
  // The pattern refuses a byte at once, not at the closing quote: an escape none of whose
  // characters fits, a \u escape past what the digits allow.
  Matcher m(s);
  EXPECT_TRUE(m.Advance("\"ab"));
  EXPECT_FALSE(m.Accepts("d"));
  EXPECT_FALSE(m.Accepts("\""));
  EXPECT_TRUE(m.Accepts("\\\""));
  EXPECT_FALSE(m.Accepts("\\t"));
  EXPECT_FALSE(m.InFreeString());
  const auto tab = Compile(R"({"pattern": "a\tb"})");
  EXPECT_TRUE(Matches(tab, R"("a\tb")"));
  EXPECT_TRUE(Matches(tab, R"("a\u0009b")"));
  Matcher t(tab);
  EXPECT_TRUE(t.Advance("\"a\\u00"));
  EXPECT_FALSE(t.Accepts("1"));  // U+001x: no tab among them
  EXPECT_TRUE(t.Accepts("0"));
  const auto letters = Compile(R"({"pattern": "[a-c]+"})");
  EXPECT_FALSE(Matcher(letters).Accepts("\"a\\"));  // no escape's character fits
  // With length bounds: no character after which the value cannot end within them.
  const auto most3 = Compile(R"({"pattern": "ab|cdefgh", "maxLength": 3})");
  EXPECT_TRUE(Matches(most3, R"("ab")"));
  EXPECT_FALSE(Matcher(most3).Accepts("\"c"));
  const auto least3 = Compile(R"({"pattern": "a|bbbb", "minLength": 3})");
  EXPECT_TRUE(Matches(least3, R"("bbbb")"));
  EXPECT_FALSE(Matcher(least3).Accepts("\"a"));
  EXPECT_NE(Schema::FromJsonSchema(Json::parse(R"({"pattern": "a{5}", "maxLength": 4})"))
                .status()
                .message()
                .find("no string"),
            std::string::npos);
  // Untyped with a pattern: a string; inside objects as anywhere.
  const auto o =
      Compile(R"({"properties": {"id": {"pattern": "^[0-9]{3}$"}}, "required": ["id"]})");
  EXPECT_TRUE(Matches(o, R"({"id": "042"})"));
  EXPECT_FALSE(Matches(o, R"({"id": "42"})"));
  EXPECT_FALSE(Matches(o, R"({"id": 42})"));
}

TEST(JsonMatcher, PrefixItems) {
  // A tuple as Pydantic writes one: exactly the prefix.
  const auto pair = Compile(R"({"type": "array", "prefixItems": [{"type": "integer"},
      {"type": "string"}], "items": false, "minItems": 2})");
  EXPECT_TRUE(Matches(pair, R"([1, "a"])"));
  for (const char* no : {"[1]", R"(["a", 1])", R"([1, "a", 2])", "[]"}) {
    EXPECT_FALSE(Matches(pair, no)) << no;
  }
  // A prefix, then items of another schema.
  const auto head = Compile(R"({"prefixItems": [{"const": "id"}], "items": {"type": "integer"}})");
  EXPECT_TRUE(Matches(head, R"(["id", 1, 2])"));
  EXPECT_TRUE(Matches(head, "[]"));
  EXPECT_FALSE(Matches(head, R"([1, 2])"));
  EXPECT_FALSE(Matches(head, R"(["id", "x"])"));
  EXPECT_FALSE(Schema::FromJsonSchema(Json::parse(
                   R"({"prefixItems": [{}], "items": false, "minItems": 2})")).ok());
  const auto none = Compile(R"({"type": "array", "items": false})");
  EXPECT_TRUE(Matches(none, "[]"));
  EXPECT_FALSE(Matches(none, "[1]"));
}

TEST(JsonMatcher, StringFormats) {
  const auto value = [](const std::string& format, const std::string& v) {
    const auto s = Compile(R"({"type": "string", "format": ")" + format + R"("})");
    return Matches(s, Json(v).dump());
  };
  for (const char* yes : {"2024-02-29", "2000-02-29", "0004-02-29", "1999-12-31", "0001-01-01"}) {
    EXPECT_TRUE(value("date", yes)) << yes;
  }
  for (const char* no : {"2023-02-29", "1900-02-29", "2023-04-31", "0000-01-01", "2023-13-01",
                         "2023-1-01", "20230101"}) {
    EXPECT_FALSE(value("date", no)) << no;
  }
  EXPECT_TRUE(value("time", "23:59:59.123456+05:30"));
  EXPECT_TRUE(value("time", "00:00:00Z"));
  EXPECT_FALSE(value("time", "24:00:00Z"));
  EXPECT_FALSE(value("time", "12:00:00"));  // RFC 3339 full-time has an offset
  EXPECT_TRUE(value("date-time", "2026-12-02T04:20:00Z"));
  EXPECT_FALSE(value("date-time", "2026-12-02 04:20:00Z"));
  for (const char* yes : {"P1Y2M3DT4H5M6S", "PT0S", "P3W", "P1M", "PT5M30S"}) {
    EXPECT_TRUE(value("duration", yes)) << yes;
  }
  for (const char* no : {"P", "PT", "P1S", "P1W2D", "1Y"}) {
    EXPECT_FALSE(value("duration", no)) << no;
  }
  EXPECT_TRUE(value("uuid", "123e4567-e89b-12d3-a456-426614174000"));
  EXPECT_FALSE(value("uuid", "123e4567e89b12d3a456426614174000"));
  EXPECT_TRUE(value("ipv4", "192.168.0.255"));
  EXPECT_FALSE(value("ipv4", "192.168.0.256"));
  EXPECT_FALSE(value("ipv4", "192.168.01.1"));
  for (const char* yes : {"::", "::1", "fe80::1:2", "1:2:3:4:5:6:7:8", "1::8", "1:2:3:4:5:6:7::"}) {
    EXPECT_TRUE(value("ipv6", yes)) << yes;
  }
  for (const char* no : {"1:2:3:4:5:6:7:8:9", "1::2::3", "12345::", ":1"}) {
    EXPECT_FALSE(value("ipv6", no)) << no;
  }
  EXPECT_TRUE(value("email", "ada.lovelace+x@example.co.uk"));
  EXPECT_FALSE(value("email", "ada@localhost"));
  EXPECT_FALSE(value("email", ".ada@example.com"));
  EXPECT_TRUE(value("hostname", "a-b.example"));
  EXPECT_FALSE(value("hostname", "-a.example"));
  EXPECT_FALSE(value("hostname", std::string(64, 'a')));
  EXPECT_TRUE(value("hostname", std::string(63, 'a')));
  // RFC 3986 URIs and references, RFC 6570 templates, RFC 6901 pointers (xgrammar's formats).
  for (const char* yes : {"https://example.com", "http://user:pw@[::1]:8080/a/b?q=1&r#frag",
                          "mailto:ada@example.com", "urn:isbn:0451450523", "file:///etc/hosts",
                          "https://x.org/%E2%82%AC?a=b/c", "a:", "ftp://192.168.0.1/"}) {
    EXPECT_TRUE(value("uri", yes)) << yes;
    EXPECT_TRUE(value("uri-reference", yes)) << yes;
  }
  for (const char* no : {"not a uri", "//example.com", "/path", "1http://x", "http://ex ample.com",
                         "https://x/%zz", "http://[::1/"}) {
    EXPECT_FALSE(value("uri", no)) << no;
  }
  for (const char* yes : {"//example.com/a", "/path?x#y", "a/b", "", "#frag", "../up"}) {
    EXPECT_TRUE(value("uri-reference", yes)) << yes;
  }
  EXPECT_FALSE(value("uri-reference", "a b"));
  EXPECT_TRUE(value("uri-template", "https://api.example/{user}/repos{?page,per_page}{/x*}"));
  EXPECT_TRUE(value("uri-template", "{+path:10}/here"));
  EXPECT_FALSE(value("uri-template", "{unclosed"));
  EXPECT_FALSE(value("uri-template", "{}"));
  for (const char* yes : {"", "/", "/a~1b/0", "/m~0n", "/ é"}) {
    EXPECT_TRUE(value("json-pointer", yes)) << yes;
  }
  EXPECT_FALSE(value("json-pointer", "a"));
  EXPECT_FALSE(value("json-pointer", "/a~2"));
  EXPECT_TRUE(value("relative-json-pointer", "0"));
  EXPECT_TRUE(value("relative-json-pointer", "1/a/b"));
  EXPECT_TRUE(value("relative-json-pointer", "2#"));
  EXPECT_FALSE(value("relative-json-pointer", "01/a"));
  EXPECT_FALSE(value("relative-json-pointer", "/a"));
  // pydantic's HttpUrl: a uri of 1 to 2083 characters.
  EXPECT_TRUE(Matches(Compile(R"({"type": "string", "format": "uri", "minLength": 1,
                                  "maxLength": 2083})"), R"("https://example.com/")"));
  // Other formats, and formats of other types, are annotations.
  EXPECT_TRUE(value("binary", "not checked"));
  EXPECT_TRUE(Matches(Compile(R"({"type": "integer", "format": "int32"})"), "12"));
}

// Range patterns against the bounds themselves, on every text of a grid of integers and
// decimals, canonical or not.
TEST(NumberRanges, AgreeWithTheBounds) {
  std::vector<std::string> texts;
  for (int i = -130; i <= 130; ++i) {
    texts.push_back(std::to_string(i));
    for (const char* f : {".0", ".5", ".05", ".00", ".999"}) texts.push_back(std::to_string(i) + f);
  }
  for (const char* odd : {"-0", "-0.0", "-0.5", "007", "1e2", "+1", ".5", "1.", "-"}) {
    texts.push_back(odd);
  }
  // Canonical: no leading zeros, no "-0" however written.
  const auto canonical = [](const std::string& t) {
    const size_t digits = t[0] == '-' ? 1 : 0;
    const size_t dot = t.find('.');
    const std::string whole = t.substr(digits, dot == std::string::npos ? std::string::npos
                                                                          : dot - digits);
    if (whole.empty() || (whole.size() > 1 && whole[0] == '0')) return false;
    if (t.find_first_not_of("-0123456789.") != std::string::npos) return false;
    if (dot != std::string::npos && dot + 1 == t.size()) return false;
    return !(t[0] == '-' && std::stod(t) == 0);
  };
  // Bounds with fractions, and texts on both sides of each (and on it, with a trailing zero).
  const double fractional[] = {-99.5, -2.5, -0.75, -0.5, -0.05, 0.05, 0.25, 0.5, 1.5, 2.125,
                               99.999};
  for (double b : fractional) {
    for (double delta : {-0.0001, 0.0, 0.0001}) {
      char t[32];
      std::snprintf(t, sizeof t, "%.4f", b + delta);
      texts.push_back(t);
    }
    char t[32];
    std::snprintf(t, sizeof t, "%g", b);
    texts.push_back(t);
    texts.push_back(std::string(t) + "0");
  }
  std::mt19937 rng(5);
  for (int trial = 0; trial < 600; ++trial) {
    const bool integer = trial % 2 == 0;
    double values[2];
    bool set[2], exclusive[2];
    for (int k = 0; k < 2; ++k) {
      set[k] = rng() % 4 != 0;
      exclusive[k] = rng() % 2 == 0;
      values[k] = !integer && rng() % 2 == 0 ? fractional[rng() % std::size(fractional)]
                                             : static_cast<double>(rng() % 241) - 120;
    }
    if (set[0] && set[1] && values[0] > values[1]) std::swap(values[0], values[1]);
    std::string pattern;
    if (integer) {  // integer bounds as the schema compiler passes them (inclusive here)
      pattern = IntegerRangePattern({set[0], static_cast<int64_t>(values[0]), exclusive[0]},
                                    {set[1], static_cast<int64_t>(values[1]), exclusive[1]});
    } else {
      DecimalBound lo, hi;
      if (set[0]) lo = *DecimalBound::FromDouble(values[0], exclusive[0]);
      if (set[1]) hi = *DecimalBound::FromDouble(values[1], exclusive[1]);
      pattern = NumberRangePattern(lo, hi);
    }
    std::shared_ptr<const Regex> re;
    if (!pattern.empty()) re = *Regex::Compile(pattern);
    for (const std::string& t : texts) {
      bool want = canonical(t) && (!integer || t.find('.') == std::string::npos);
      if (want) {
        const double v = std::stod(t);
        if (set[0]) want = want && (exclusive[0] ? v > values[0] : v >= values[0]);
        if (set[1]) want = want && (exclusive[1] ? v < values[1] : v <= values[1]);
      }
      ASSERT_EQ(re != nullptr && re->Matches(t), want)
          << t << " in " << (set[0] ? std::to_string(values[0]) : "-inf")
          << (exclusive[0] ? "x" : "") << ".." << (set[1] ? std::to_string(values[1]) : "inf")
          << (exclusive[1] ? "x" : "") << (integer ? " integer " : " number ") << pattern;
    }
  }
  // A bound equal on both sides: that one number, or none when either side excludes it.
  const auto half = [](bool lo_exclusive, bool hi_exclusive) {
    return NumberRangePattern(*DecimalBound::FromDouble(0.5, lo_exclusive),
                              *DecimalBound::FromDouble(0.5, hi_exclusive));
  };
  EXPECT_EQ(half(true, false), "");
  EXPECT_EQ(half(false, true), "");
  const auto only = *Regex::Compile(half(false, false));
  EXPECT_TRUE(only->Matches("0.5"));
  EXPECT_TRUE(only->Matches("0.500"));
  EXPECT_FALSE(only->Matches("0.51"));
  EXPECT_EQ(DecimalBound::FromDouble(0.1, false)->fraction, "1");
  EXPECT_FALSE(DecimalBound::FromDouble(1e-40, false).ok());
  // Long bounds.
  const auto big = *Regex::Compile(IntegerRangePattern({true, 999'999'999'999'990, false},
                                                       {true, kMaxRangeBound, false}));
  EXPECT_TRUE(big->Matches("1000000000000000"));
  EXPECT_TRUE(big->Matches("999999999999995"));
  EXPECT_FALSE(big->Matches("1000000000000001"));
  EXPECT_FALSE(big->Matches("999999999999989"));
}

TEST(JsonMatcher, NumberRanges) {
  const auto age = Compile(R"({"type": "object", "properties": {
      "age": {"type": "integer", "minimum": 0, "maximum": 150},
      "p": {"type": "number", "exclusiveMinimum": 0, "maximum": 1}}, "required": ["age"]})");
  for (const char* yes : {R"({"age": 150})", R"({"age":0,"p":1})", R"({"age": 7, "p": 0.25 })",
                          R"({"age": 7, "p": 1.000})"}) {
    EXPECT_TRUE(Matches(age, yes)) << yes;
  }
  for (const char* no : {R"({"age": 151})", R"({"age": -1})", R"({"age": 1.5})",
                         R"({"age": 1, "p": 0})", R"({"age": 1, "p": 1.01})",
                         R"({"age": 01})"}) {
    EXPECT_FALSE(Matches(age, no)) << no;
  }
  const auto top_p = Compile(R"({"type": "number", "minimum": 0.05, "exclusiveMaximum": 0.95})");
  for (const char* yes : {"0.05", "0.050", "0.9499", "0.5"}) {
    EXPECT_TRUE(Matches(top_p, yes)) << yes;
  }
  for (const char* no : {"0.049", "0.95", "0", "1", "0.950"}) {
    EXPECT_FALSE(Matches(top_p, no)) << no;
  }
  // Draft 4's boolean exclusiveMaximum; an integer's bounds may be fractions.
  EXPECT_FALSE(Matches(Compile(R"({"type": "integer", "maximum": 5, "exclusiveMaximum": true})"),
                       "5"));
  const auto half = Compile(R"({"type": "integer", "minimum": 1.5, "exclusiveMaximum": 3.5})");
  EXPECT_FALSE(Matches(half, "1"));
  EXPECT_TRUE(Matches(half, "2"));
  EXPECT_TRUE(Matches(half, "3"));
  EXPECT_FALSE(Matches(half, "4"));
  // At the root a number ends with the text; a digit that would leave the range is refused.
  Matcher m(Compile(R"({"minimum": 10, "maximum": 99})"));
  EXPECT_TRUE(m.Advance("4"));
  EXPECT_FALSE(m.Complete());
  EXPECT_TRUE(m.Advance("2"));
  EXPECT_TRUE(m.Complete());
  EXPECT_FALSE(m.Accepts("0"));
}

TEST(JsonMatcher, RegexText) {
  auto re = Schema::FromRegex(R"((yes|no)\.( [A-Z][a-z]*)*)");
  ASSERT_TRUE(re.ok());
  EXPECT_FALSE((*re)->json());
  EXPECT_TRUE(Matches(*re, "yes."));
  EXPECT_TRUE(Matches(*re, "no. Fine Thanks"));
  EXPECT_FALSE(Matches(*re, "\"yes.\""));
  EXPECT_FALSE(Matches(*re, " yes."));
  EXPECT_FALSE(Matches(*re, "yes. fine"));
  Matcher m(*re);
  EXPECT_FALSE(m.Complete());
  EXPECT_TRUE(m.Advance("yes."));
  EXPECT_TRUE(m.Complete());
  int32_t state = -5;
  EXPECT_NE(m.RawRegex(&state), nullptr);
  EXPECT_GE(state, 0);
  EXPECT_NE(Schema::FromRegex("(?=x)").status().message().find(
                "structured_outputs.regex: lookahead is not supported"),
            std::string::npos);
}

// Generated texts of a schema with patterned strings: JSON whose values match the patterns,
// and never a dead end on the way (some byte goes on, or the text is complete).
TEST(JsonMatcher, PatternWalksGiveMatchingValues) {
  const char* kPattern = R"([a\-"\\/é\n]{1,4}(x|\u4e2d)?)";
  const auto schema = Compile(std::string(R"({"type": "array", "items": {"type": "string",
      "pattern": )") + Json(kPattern).dump() + R"(, "maxLength": 3}})");
  const auto re = *Regex::Compile(kPattern);
  const std::vector<std::string> pieces = {
      "[",  "]",       ",",  "\"",       "a",    "-",  "\\\"",  "\\\\", "\\/",    "/",
      "é",  "\\u00e9", "\\n", "x",        "中",   "\\u4e2d", "\\u0061", "\\t", " ",
      "b",  "\n",      "\\u000a", "\\u00", "0a", "\\u001", "\\", "\xe4", "\xb8\xad"};
  std::mt19937 rng(11);
  int complete = 0;
  for (int walk = 0; walk < 600; ++walk) {
    Matcher m(schema);
    std::string text;
    for (int step = 0; step < 40 && !(m.Complete() && rng() % 3 == 0); ++step) {
      bool goes_on = m.Complete();
      for (int b = 0; b < 256 && !goes_on; ++b) goes_on = m.Accepts(std::string(1, char(b)));
      ASSERT_TRUE(goes_on) << "dead end after " << text;
      std::vector<const std::string*> ok;
      for (const std::string& p : pieces) {
        if (m.Accepts(p)) ok.push_back(&p);
      }
      if (ok.empty()) break;
      const std::string& p = *ok[rng() % ok.size()];
      ASSERT_TRUE(m.Advance(p));
      text += p;
    }
    if (!m.Complete()) continue;
    ++complete;
    const Json doc = Json::parse(text, nullptr, false);
    ASSERT_FALSE(doc.is_discarded()) << text;
    for (const Json& v : doc) {
      const std::string value = v.get<std::string>();
      ASSERT_TRUE(re->Matches(value)) << text;
      int chars = 0;
      for (char ch : value) chars += (static_cast<uint8_t>(ch) & 0xC0) != 0x80;
      ASSERT_LE(chars, 3) << text;  // maxLength
    }
  }
  EXPECT_GT(complete, 100);
}

TEST(TokenTable, AllowedEqualsTryingEveryToken) {
  const std::vector<std::string> bytes = {
      "{", "}", "\"", "a", "\"a\"", ":", "1", " ", "{\"", "ab\"", "\\", "x", "\":", "\",", ",",
      "[", "]", "true", "tr", "ue", "null", "-", "0", ".5", "e", "\n", "\\n", "\"}", "", "<eos>",
      "name", "\"name\": \"", "é", "\xc3", "\xa9", "12", "\"age\":", "b", "\x80", "a\xc3",
      "\xff", "\xed\xa0\x80", "\xe4\xb8", "\xad", "\xf0\x9f\x98\x80", "\"\xc3\xa9",
      "c", "bc\"", "\xc3\xa9\"", "\\u00", "\\\"", "x\\n", "\\u000a"};
  std::vector<bool> excluded(bytes.size(), false);
  excluded[29] = true;  // a special token
  // Every raw regex mask cached (over 0 nodes walked): a state seen again is served from the
  // cache, which must tell the two regexes' states apart.
  const TokenTable table(bytes, excluded, /*cache_walks_over=*/0);
  const auto json = Compile(R"({"type": "object",
      "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                     "code": {"pattern": "[a-c]+é?"},
                     "tags": {"type": "array", "items": {}}},
      "required": ["name"], "additionalProperties": true})");
  // Raw text under a regex takes the automaton's own walk (Matcher::RawRegex); strings with a
  // pattern or a maxLength step their frame (Matcher::InString).
  const auto regex = *Schema::FromRegex(R"((ab|"é|\d{2})+\n?(null|tr[aeiu]e)?)");
  const auto patterned = Compile(R"({"type": "string", "pattern": "(ab|\"é|\n|x)+c?",
                                     "maxLength": 6})");
  const auto bounded = Compile(R"({"type": "string", "maxLength": 3})");
  const auto regex2 = *Schema::FromRegex(R"((ba|\d|中)+x?)");
  const std::shared_ptr<const Schema> schemas[] = {json, json, regex, patterned, bounded, regex2};
  std::mt19937 rng(3);
  int walks_with_free_strings = 0, regex_walks = 0, bounded_string_steps = 0;
  for (int walk = 0; walk < 300; ++walk) {
    Matcher m(schemas[walk % 6]);
    int32_t state = 0;
    regex_walks += m.RawRegex(&state) != nullptr;
    for (int step = 0; step < 30; ++step) {
      std::vector<uint8_t> allowed;
      table.Allowed(m, &allowed);
      std::vector<int32_t> ok;
      for (size_t id = 0; id < bytes.size(); ++id) {
        const bool expected = !bytes[id].empty() && !excluded[id] && m.Accepts(bytes[id]);
        ASSERT_EQ(allowed[id] != 0, expected) << "token '" << bytes[id] << "' walk " << walk;
        if (expected) ok.push_back(static_cast<int32_t>(id));
      }
      walks_with_free_strings += m.InFreeString();
      const Matcher::Frame* f = m.InString();
      bounded_string_steps += f != nullptr && f->node != nullptr &&
                              (f->node->pattern != nullptr || f->node->max_length >= 0);
      if (ok.empty()) break;
      ASSERT_TRUE(m.Advance(bytes[ok[rng() % ok.size()]]));
    }
  }
  EXPECT_GT(walks_with_free_strings, 50);  // the shortcut paths were exercised
  EXPECT_EQ(regex_walks, 100);
  EXPECT_GT(table.cache_hits(), 100);
  EXPECT_GE(bounded_string_steps, 50);
}

// A grammar without `::=` is Lark's notation, rewritten into EBNF as vLLM does before compiling.
TEST(LarkGrammar, RewrittenAsVllmDoes) {
  EXPECT_TRUE(GrammarIsLikelyLark("start: 'yes' | 'no'"));
  EXPECT_FALSE(GrammarIsLikelyLark("root ::= \"a\""));
  EXPECT_FALSE(GrammarIsLikelyLark("# a comment\nroot ::= x\nx ::= \"a\""));
  EXPECT_FALSE(GrammarIsLikelyLark(""));
  EXPECT_EQ(*LarkToEbnf("?start: item+   // the items\nitem: 'a' | 'b'\n    | 'c' # or c\n"),
            "root ::= start\nstart ::= item+\nitem ::= \"a\" | \"b\" | \"c\"\n");
  EXPECT_EQ(*LarkToEbnf("greeting: 'hi' name\nname: [a-z]+"),
            "root ::= greeting\ngreeting ::= \"hi\" name\nname ::= [a-z]+\n");
  EXPECT_NE(LarkToEbnf("start: item\n").status().message().find("does not define: item"),
            std::string::npos);
  EXPECT_NE(LarkToEbnf("start: 'a\n").status().message().find("mismatched quotes"),
            std::string::npos);
  auto yes_no = Schema::FromGrammar("start: 'yes' | 'no'");
  ASSERT_TRUE(yes_no.ok()) << yes_no.status().message();
  EXPECT_TRUE(Matches(*yes_no, "yes"));
  EXPECT_TRUE(Matches(*yes_no, "no"));
  EXPECT_FALSE(Matches(*yes_no, "maybe"));
}

// What vLLM's auto backend hands to llguidance when xgrammar cannot read the rewritten text:
// /regex/ terminals (vLLM's own docs' SQL example), Lark's common terminals, "a".."z" ranges,
// aliases, quotes of the other kind inside a string. %ignore and regex flags are 400s that
// name them.
TEST(LarkGrammar, RegexTerminalsImportsAndRanges) {
  const auto compiled = [](const std::string& lark) {
    auto schema = Schema::FromGrammar(lark);
    EXPECT_TRUE(schema.ok()) << lark << "\n" << schema.status().message();
    return schema.ok() ? *schema : nullptr;
  };
  auto sql = compiled(
      "?start: select_statement\n"
      "?select_statement: \"SELECT \" column_list \" FROM \" table_name\n"
      "?column_list: column_name (\",\" column_name)*\n"
      "?table_name: identifier\n"
      "?column_name: identifier\n"
      "?identifier: /[a-zA-Z_][a-zA-Z0-9_]*/\n");
  ASSERT_NE(sql, nullptr);
  EXPECT_TRUE(Matches(sql, "SELECT col_1,b FROM t2"));
  EXPECT_FALSE(Matches(sql, "SELECT 1col FROM t"));
  auto number = compiled("start: NUMBER \"/\" SIGNED_INT\n%import common.NUMBER\n"
                         "%import common (SIGNED_INT)");
  ASSERT_NE(number, nullptr);
  for (const char* ok : {"3.14/-2", "1e5/7", ".5/+1", "12/0"}) EXPECT_TRUE(Matches(number, ok)) << ok;
  for (const char* bad : {"-3/1", "3./", "e5/1"}) EXPECT_FALSE(Matches(number, bad)) << bad;
  auto words = compiled("start: WORD (WS_INLINE NAME)*\n%import common.WORD\n"
                        "%import common.WS_INLINE\n%import common.CNAME -> NAME");
  ASSERT_NE(words, nullptr);
  EXPECT_TRUE(Matches(words, "hello _x1 y"));
  EXPECT_FALSE(Matches(words, "hello 1x"));
  auto comment = compiled("start: C_COMMENT SH_COMMENT?\n%import common (C_COMMENT, SH_COMMENT)");
  ASSERT_NE(comment, nullptr);
  EXPECT_TRUE(Matches(comment, "/* a * b **/# c"));
  EXPECT_FALSE(Matches(comment, "/* a */ b */"));
  EXPECT_NE(Schema::FromGrammar("start: N\n%import common.NUMBER -> N extra").status().message()
                .find("malformed %import"),
            std::string::npos);
  auto quoted = compiled("start: ESCAPED_STRING\n%import common.ESCAPED_STRING");
  ASSERT_NE(quoted, nullptr);
  EXPECT_TRUE(Matches(quoted, R"("a \"b\" c")"));
  EXPECT_FALSE(Matches(quoted, R"("a "b")"));
  auto range = compiled("start: (\"a\"..\"c\")+ \"/\" ('x' -> ex | 'say \"hi\"') (\"0\" .. \"2\")?");
  ASSERT_NE(range, nullptr);
  EXPECT_TRUE(Matches(range, "abca/x"));
  EXPECT_TRUE(Matches(range, "b/say \"hi\""));
  EXPECT_FALSE(Matches(range, "abd/x"));
  EXPECT_TRUE(Matches(range, "a/x2"));
  EXPECT_FALSE(Matches(range, "a/x.2"));  // blanks around the dots: still a range
  // A '#' or '//' inside a string or a regex is not a comment.
  auto hash = compiled("start: \"#\" /[0-9]+/ \"//\"  // a comment");
  ASSERT_NE(hash, nullptr);
  EXPECT_TRUE(Matches(hash, "#12//"));
  const auto error = [](const std::string& lark) {
    return Schema::FromGrammar(lark).status().message();
  };
  EXPECT_NE(error("start: WS\n%import common.WS\n%ignore WS").find(
                "the Lark directive '%ignore' is not supported"),
            std::string::npos);
  EXPECT_NE(error("start: /abc/i").find("regex flags are not supported"), std::string::npos);
  EXPECT_NE(error("start: \"abc\"i").find("Lark string flags ('i')"), std::string::npos);
  EXPECT_NE(error("start: X\n%import common.NOPE -> X").find("has no terminal 'NOPE'"),
            std::string::npos);
  EXPECT_NE(error("start: x\n%import other.x").find("only Lark's common library"),
            std::string::npos);
  EXPECT_NE(error("start: /abc").find("unterminated /regex/"), std::string::npos);
}

}  // namespace
}  // namespace cpm::structured
