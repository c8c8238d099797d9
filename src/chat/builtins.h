// The interpreter's built-in library: filters, tests, str/dict methods, global functions,
// operators and Python-compatible json.dumps. Each group lives in its own .cc file.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "base/status.h"
#include "chat/value.h"

namespace cpm::jinja {

class Interpreter;

// filters.cc: jinja2's builtin filters as transformers sees them (tojson overridden).
bool IsKnownFilter(std::string_view name);
StatusOr<Value> ApplyFilter(Interpreter& interp, const std::string& name, const Value& value,
                            const CallArgs& args);

// jinja_tests.cc: `x is name(args)`.
bool IsKnownTest(std::string_view name);
StatusOr<bool> ApplyTest(Interpreter& interp, const std::string& name, const Value& value,
                         const CallArgs& args);

// methods.cc: bound methods of str and dict (`s.startswith(...)`, `d.items()`); Undefined when
// the object has no such (sandbox-safe) method.
Value GetMethod(const Value& obj, const std::string& name);

// globals.cc: range, namespace, dict, raise_exception, strftime_now.
std::unordered_map<std::string, Value> MakeGlobals();

// operators.cc: + - * / // % ** ~ with Python semantics, and `in`.
StatusOr<Value> BinaryOp(const Interpreter& interp, const std::string& op, const Value& left,
                         const Value& right);
StatusOr<bool> Contains(const Value& container, const Value& item);

// format.cc: printf-style `format % args` (a tuple is the argument list, anything else one
// argument) and format(value, spec) with the str.format mini-language.
StatusOr<std::string> PercentFormat(const std::string& format, const Value& args);
StatusOr<std::string> FormatWithSpec(const Value& value, const std::string& spec);

// json_dumps.cc: Python's json.dumps.
struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: single line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};
StatusOr<std::string> JsonDumps(const Value& value, const JsonDumpOptions& options);

// Shared by the files above: the error jinja2 raises when an Undefined is used.
Status UndefinedError(const Value& undefined);

}  // namespace cpm::jinja
