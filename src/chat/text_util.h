// UTF-8 helpers that give Python str semantics (code points, Unicode whitespace, case mapping)
// to the interpreter's std::string values.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cpm::jinja {

// Splits into code points, each kept as its UTF-8 bytes. Invalid bytes become one piece each,
// so nothing is lost.
std::vector<std::string> SplitCodePoints(std::string_view s);
size_t CodePointCount(std::string_view s);
// Decodes the code point starting at s[i]; sets `len` to its byte length (1 for invalid bytes).
char32_t DecodeAt(std::string_view s, size_t i, size_t* len);
void AppendUtf8(std::string* out, char32_t cp);

// str.isspace() for one code point.
bool IsPyWhitespace(char32_t cp);

// str.strip/lstrip/rstrip: Unicode whitespace when `chars` is empty, else any of its code points.
std::string PyStrip(std::string_view s, const std::optional<std::string>& chars, bool left,
                    bool right);

// str.upper()/lower()/title()/capitalize() through utf8proc's simple case mappings.
std::string PyUpper(std::string_view s);
std::string PyLower(std::string_view s);
std::string PyTitle(std::string_view s);
std::string PyCapitalize(std::string_view s);
std::string PySwapCase(std::string_view s);
// str.casefold(): full Unicode case folding ('ß' -> 'ss') through utf8proc.
std::string PyCasefold(std::string_view s);
// str.islower()/isupper(): at least one cased character, and none of the other case (a
// titlecase letter counts against both).
bool PyIsLower(std::string_view s);
bool PyIsUpper(std::string_view s);

// str.center/ljust/rjust(width, fillchar): `align` is '^', '<' or '>'. CPython puts the odd
// pad character of center() on the left when `width` is odd.
std::string PyJustify(std::string_view s, int64_t width, std::string_view fill, char align);

// The indices a Python slice [start:stop:step] selects from a sequence of `len` items.
std::vector<size_t> SliceIndices(int64_t len, std::optional<int64_t> start,
                                 std::optional<int64_t> stop, int64_t step);

}  // namespace cpm::jinja
