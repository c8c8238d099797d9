// ParseOrderedJson against nlohmann's own ordered_json::parse, the behaviour it must keep.
#include "server/json_parse.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace cpm::protocol {
namespace {

using Json = nlohmann::ordered_json;

// Same value, same key order (dump shows the order), or both rejected.
void ExpectAsLibrary(const std::string& text) {
  const Json expected = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  const Json got = ParseOrderedJson(text);
  ASSERT_EQ(got.is_discarded(), expected.is_discarded()) << text;
  if (!expected.is_discarded()) {
    EXPECT_EQ(got.dump(), expected.dump()) << text;
  }
}

TEST(ParseOrderedJson, AgreesWithTheLibrary) {
  for (const char* text : {
           "{}", "[]", "null", "true", "0", "-0", "-12", "18446744073709551615",
           "-9223372036854775808", "1.5e-7", "\"\\u00e9\\ud83d\\ude00\\n\"", " { \"b\" : 1 , \"a\" : [ ] } ",
           R"({"z": 1, "a": {"y": [1, {"k": null}], "x": "s"}, "m": [[], {}, [[1]]]})",
           R"({"a": 1, "b": 2, "a": 3})",                      // a repeat: last value, first place
           R"({"a": {"p": 1}, "a": [2]})",                     // a repeat of another type
           R"([{"a": 1, "a": {"b": 1, "b": 2}}, {"a": 2}])",  // repeats inside arrays
       }) {
    ExpectAsLibrary(text);
  }
}

TEST(ParseOrderedJson, RejectsWhatTheLibraryRejects) {
  for (const char* text : {"", " ", "{", "}", "[1,]", "{\"a\" 1}", "{\"a\": 1,}", "1 2", "tru",
                           "1e400", "\"\\ud800\"", "{\"a\": [}", "[\"\x01\"]", "01", "\xff"}) {
    ExpectAsLibrary(text);
    EXPECT_TRUE(ParseOrderedJson(text).is_discarded()) << text;
  }
  ExpectAsLibrary(std::string(100000, '['));  // unclosed, deep
}

// Valid JSON nested deeper than kMaxJsonDepth is refused (the walks after parsing recurse);
// at the limit it is read.
TEST(ParseOrderedJson, RefusesNestingBeyondTheLimit) {
  const auto nested = [](int depth) {
    return std::string(depth, '[') + std::string(depth, ']');
  };
  ExpectAsLibrary(nested(kMaxJsonDepth));
  std::string error;
  EXPECT_TRUE(ParseOrderedJson(nested(kMaxJsonDepth + 1), &error).is_discarded());
  EXPECT_NE(error.find("deeper than 200"), std::string::npos) << error;
  EXPECT_TRUE(ParseOrderedJson("{\"a\": " + nested(100000) + "}", &error).is_discarded());
  EXPECT_TRUE(ParseOrderedJson("[1,", &error).is_discarded());
  EXPECT_EQ(error, "is not valid JSON");
}

// Random texts whose objects repeat keys often, of up to 60 members (across the size where an
// object gets its hash index).
std::string RandomText(std::mt19937& rng, int depth) {
  const int kind = depth > 3 ? static_cast<int>(rng() % 3) : static_cast<int>(rng() % 5);
  switch (kind) {
    case 0: return std::to_string(static_cast<int>(rng() % 2001) - 1000);
    case 1: return "\"s" + std::to_string(rng() % 5) + "\"";
    case 2: return rng() % 2 ? "null" : "1.25";
    case 3: {
      std::string out = "[";
      for (int i = 0, n = static_cast<int>(rng() % 5); i < n; ++i) {
        out += (i ? "," : "") + RandomText(rng, depth + 1);
      }
      return out + "]";
    }
    default: {
      const int n = static_cast<int>(rng() % 61), keys = 1 + static_cast<int>(rng() % 40);
      std::string out = "{";
      for (int i = 0; i < n; ++i) {
        out += (i ? "," : "") + std::string("\"k") + std::to_string(rng() % keys) + "\":" +
               RandomText(rng, depth + 1);
      }
      return out + "}";
    }
  }
}

TEST(ParseOrderedJson, AgreesWithTheLibraryOnRandomTexts) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2000; ++i) ExpectAsLibrary(RandomText(rng, 0));
}

TEST(ParseOrderedJson, ReadsAnObjectOfManyKeys) {
  constexpr int kKeys = 200000;
  std::string text = "{";
  for (int i = 0; i < kKeys; ++i) text += "\"" + std::to_string(i) + "\": " + std::to_string(i) + ",";
  text += "\"5\": -5}";  // a repeat of an early key
  const Json j = ParseOrderedJson(text);
  ASSERT_TRUE(j.is_object());
  ASSERT_EQ(j.size(), static_cast<size_t>(kKeys));
  const Json::object_t& members = j.get_ref<const Json::object_t&>();
  EXPECT_EQ(members.front().first, "0");
  EXPECT_EQ(members.back().first, std::to_string(kKeys - 1));
  EXPECT_EQ(j["5"], -5);
  EXPECT_EQ(j["123456"], 123456);
}

}  // namespace
}  // namespace cpm::protocol
