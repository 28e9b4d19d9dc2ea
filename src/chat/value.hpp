#pragma once
// The data model of the template interpreter: what a Jinja expression evaluates
// to. It mirrors the Python objects a Hugging Face chat template sees (str, int,
// float, bool, None, list, dict, jinja2's Undefined and namespace, macros), so
// that printing, truthiness, equality and ordering follow Python's rules and a
// rendering matches transformers' byte for byte.
//
// Lists and dicts are immutable once built (transformers renders in jinja2's
// ImmutableSandboxedEnvironment) and shared by pointer, so copying a Value is
// cheap. A namespace is the one mutable container (`{% set ns.x = ... %}`).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace neuron::chat {

class Value;
class Renderer;

// Containers nest at most this deep. Templates can build nested lists in a
// loop; printing or freeing a value recurses, so depth must stay bounded.
inline constexpr int max_value_depth = 512;

// Dict with Python's insertion order (tojson must keep the caller's key order).
class Dict {
 public:
  const Value* find(std::string_view key) const;
  // Inserts or overwrites, keeping the first insertion's position.
  void set(std::string key, Value value);
  const std::vector<std::pair<std::string, Value>>& items() const { return items_; }
  std::size_t size() const;
  // Upper bound of the nesting below this dict (1 for a flat dict).
  int depth() const { return depth_; }
  // Whether a namespace is reachable from this dict.
  bool holds_namespace() const { return holds_namespace_; }

 private:
  std::vector<std::pair<std::string, Value>> items_;
  int depth_ = 1;
  bool holds_namespace_ = false;
  std::unordered_map<std::string, std::size_t> index_;  // key -> position in items_
};

// jinja2's namespace(): attributes are assigned from anywhere in the template.
struct Namespace {
  Dict attributes;
};

// Arguments of a call, a filter or a test, already evaluated.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// A macro or a built-in global function (range, namespace, raise_exception...).
// The renderer is passed so a macro can render its body with the caller's limits.
struct Callable {
  std::string name;
  std::function<Value(Renderer&, CallArgs&, int line)> call;
};

// jinja2.Undefined: remembers the missing name for error messages.
struct Undefined {
  std::string name;
};

struct None {};

class Value {
 public:
  using List = std::vector<Value>;
  // A tuple is a list that prints as (a, b); everything else treats them alike.
  struct Sequence {
    List items;
    bool tuple = false;
    int depth = 1;
    bool holds_namespace = false;
  };
  using ListPtr = std::shared_ptr<const Sequence>;
  using DictPtr = std::shared_ptr<const Dict>;
  using NamespacePtr = std::shared_ptr<Namespace>;
  using CallablePtr = std::shared_ptr<const Callable>;

  Value() : v_(Undefined{}) {}
  Value(Undefined u) : v_(std::move(u)) {}
  Value(None) : v_(None{}) {}
  Value(bool b) : v_(b) {}
  Value(int i) : v_(static_cast<std::int64_t>(i)) {}
  Value(std::int64_t i) : v_(i) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  // Throws Fault when nesting would exceed max_value_depth.
  Value(List list) : v_(make_sequence(std::move(list), false)) {}
  Value(Dict dict) : v_(std::make_shared<const Dict>(std::move(dict))) {}
  Value(NamespacePtr ns) : v_(std::move(ns)) {}
  Value(CallablePtr fn) : v_(std::move(fn)) {}
  explicit Value(ListPtr list) : v_(std::move(list)) {}

  static Value tuple(List items) { return Value(make_sequence(std::move(items), true)); }

  // JSON in: null -> None, objects keep the iteration order of the json type
  // (nlohmann::ordered_json keeps the caller's order; nlohmann::json sorts).
  // Throws Error{invalid_argument} for input nested deeper than 256 levels.
  static Value from_json(const nlohmann::json& j);
  static Value from_json(const nlohmann::ordered_json& j);

  bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
  bool is_none() const { return std::holds_alternative<None>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<std::int64_t>(v_); }
  bool is_float() const { return std::holds_alternative<double>(v_); }
  // Python's numbers.Number: bool counts (True + 1 == 2).
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_list() const { return std::holds_alternative<ListPtr>(v_); }
  bool is_dict() const { return std::holds_alternative<DictPtr>(v_); }
  bool is_namespace() const { return std::holds_alternative<NamespacePtr>(v_); }
  bool is_callable() const { return std::holds_alternative<CallablePtr>(v_); }

  bool as_bool() const { return std::get<bool>(v_); }
  std::int64_t as_int() const { return std::get<std::int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  // Numeric value of an int, float or bool.
  double as_double() const;
  // Integer value of an int or bool.
  std::int64_t as_integer() const;
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const List& as_list() const { return std::get<ListPtr>(v_)->items; }
  bool is_tuple() const { return is_list() && std::get<ListPtr>(v_)->tuple; }
  const Dict& as_dict() const { return *std::get<DictPtr>(v_); }
  Namespace& as_namespace() const { return *std::get<NamespacePtr>(v_); }
  const Callable& as_callable() const { return *std::get<CallablePtr>(v_); }
  const std::string& undefined_name() const { return std::get<Undefined>(v_).name; }

  // Container nesting: 0 for scalars, 1 for a flat list, dict or namespace.
  int depth() const;
  // Whether this is, or contains, a namespace (namespaces cannot nest: a
  // namespace holding itself would be a cycle).
  bool holds_namespace() const;

  // Python's bool(): empty containers, 0, "", None and Undefined are false.
  bool truthy() const;
  // Python's str() as jinja2 prints it: None -> "None", True -> "True",
  // 1.0 -> "1.0", lists and dicts in repr form, Undefined -> "".
  std::string str() const;
  // Python's repr() (strings quoted), used inside printed lists and dicts.
  std::string repr() const;
  // Python type name for error messages ("str", "list", "NoneType"...).
  std::string type_name() const;

  // Python ==: 1 == 1.0 == True, containers compare element-wise.
  friend bool operator==(const Value& a, const Value& b);
  // Python <: numbers, strings (code point order) and lists; false with
  // `comparable` unset when the types cannot be ordered.
  static bool less(const Value& a, const Value& b, bool& comparable);

 private:
  static ListPtr make_sequence(List items, bool tuple);

  std::variant<Undefined, None, bool, std::int64_t, double, std::string, ListPtr, DictPtr, NamespacePtr, CallablePtr> v_;
};

// Python's repr() of a float: shortest round-trip digits, "1.0", "1e-05", "inf".
std::string format_float(double d);

}  // namespace neuron::chat
