// Value: the dynamic type the Jinja interpreter computes with. It mirrors the Python objects
// jinja2 sees when transformers renders a chat template (None, bool, int, float, str, list,
// tuple, dict with insertion order, jinja2 Namespace, callables) plus jinja2's Undefined.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace cpm::jinja {

class Value;
class Interpreter;

using ValueList = std::vector<Value>;

// Insertion-ordered mapping, as Python dicts are. Chat-template dicts are small (message
// fields, JSON schemas), so linear lookup beats hashing here and keeps order for free.
struct ValueDict {
  std::vector<std::pair<Value, Value>> items;

  const Value* Find(const Value& key) const;
  const Value* Find(std::string_view key) const;
  // Inserts or replaces, keeping the original position on replace (Python semantics).
  void Set(Value key, Value value);
};

// Positional and keyword arguments of one call.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  // Python-style binding: argument `index` by position, else by `name`; nullptr when absent.
  const Value* Get(size_t index, std::string_view name) const;
};

// Anything callable from a template: macros, globals such as range(), bound str/dict methods.
class Callable {
 public:
  virtual ~Callable() = default;
  virtual StatusOr<Value> Call(Interpreter& interp, const CallArgs& args) const = 0;
  virtual std::string Name() const = 0;
};

class Value {
 public:
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kCallable };

  Value() = default;  // Undefined.
  static Value Undefined(std::string hint = {});
  static Value None();
  static Value Bool(bool b);
  static Value Int(int64_t i);
  static Value Float(double d);
  static Value String(std::string s);
  static Value List(ValueList items, bool is_tuple = false);
  // groupby's result items: a (grouper, list) tuple whose fields are also attributes.
  static Value GroupTuple(Value grouper, ValueList list);
  static Value Dict(ValueDict dict);
  static Value Namespace(ValueDict attrs);
  static Value Function(std::shared_ptr<const Callable> fn);
  // Converts parsed JSON (the request) into Values; object key order is kept.
  static Value FromJson(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool IsUndefined() const { return kind_ == Kind::kUndefined; }
  bool IsNone() const { return kind_ == Kind::kNone; }
  bool IsBool() const { return kind_ == Kind::kBool; }
  bool IsInt() const { return kind_ == Kind::kInt; }
  bool IsFloat() const { return kind_ == Kind::kFloat; }
  // int, float or bool (bool is an int in Python).
  bool IsNumber() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat || kind_ == Kind::kBool; }
  bool IsString() const { return kind_ == Kind::kString; }
  bool IsList() const { return kind_ == Kind::kList; }
  bool IsTuple() const { return kind_ == Kind::kList && is_tuple_; }
  bool IsGroupTuple() const { return kind_ == Kind::kList && is_group_; }
  bool IsDict() const { return kind_ == Kind::kDict; }
  bool IsNamespace() const { return kind_ == Kind::kNamespace; }
  bool IsCallable() const { return kind_ == Kind::kCallable; }

  bool AsBool() const { return std::get<bool>(data_); }
  int64_t AsInt() const;      // int or bool
  double AsDouble() const;    // int, float or bool
  const std::string& AsString() const { return std::get<std::string>(data_); }
  const ValueList& AsList() const { return *std::get<std::shared_ptr<const ValueList>>(data_); }
  const ValueDict& AsDict() const { return *std::get<std::shared_ptr<const ValueDict>>(data_); }
  // Namespaces are the one mutable object templates can reach (`{% set ns.x = ... %}`).
  ValueDict& NamespaceAttrs() const { return *std::get<std::shared_ptr<ValueDict>>(data_); }
  const Callable& AsCallable() const { return *std::get<std::shared_ptr<const Callable>>(data_); }
  // For error messages about undefined values: what was looked up.
  const std::string& undefined_hint() const;

  // Python truthiness (Undefined is false).
  bool Truthy() const;
  // Python str(): what `{{ x }}` prints. Undefined prints as "".
  std::string ToStr() const;
  // Python repr(), used for containers' str().
  std::string Repr() const;
  // Python type name for error messages ("str", "int", "dict", ...).
  std::string TypeName() const;

 private:
  // What an Undefined was looked up as; kept in the variant so other Values stay small.
  struct Hint {
    std::string text;
  };

  Kind kind_ = Kind::kUndefined;
  bool is_tuple_ = false;
  bool is_group_ = false;
  std::variant<std::monostate, Hint, bool, int64_t, double, std::string, std::shared_ptr<const ValueList>,
               std::shared_ptr<const ValueDict>, std::shared_ptr<ValueDict>,
               std::shared_ptr<const Callable>>
      data_;
};

// Python ==, which never fails (int/float/bool compare numerically; Undefined equals Undefined).
bool Equals(const Value& a, const Value& b);
// Python <, for numbers with numbers and str with str (and lists element-wise); other pairs are
// a TypeError.
StatusOr<bool> LessThan(const Value& a, const Value& b);

// Python float repr ("1.0", "0.1", "1e+16", "inf", "nan").
std::string FormatPythonFloat(double d);

}  // namespace cpm::jinja
