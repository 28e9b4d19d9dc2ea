#include "chat/value.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include "chat/fault.hpp"
#include "chat/py_string.hpp"
#include "util/error.hpp"

namespace neuron::chat {

const Value* Dict::find(std::string_view key) const {
  const auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &items_[it->second].second;
}

std::size_t Dict::size() const { return items_.size(); }

void Dict::set(std::string key, Value value) {
  const int d = value.depth() + 1;
  if (d > max_value_depth) fault("value nested deeper than " + std::to_string(max_value_depth) + " levels");
  depth_ = std::max(depth_, d);
  holds_namespace_ = holds_namespace_ || value.holds_namespace();
  const auto it = index_.find(key);
  if (it != index_.end()) {
    items_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(key, items_.size());
  items_.emplace_back(std::move(key), std::move(value));
}

namespace {

// JSON nested deeper than this comes from an attacker, not a chat.
constexpr int max_json_depth = 256;

template <class Json>
Value convert(const Json& j, int depth) {
  if (depth > max_json_depth) {
    throw Error(errc::invalid_argument, "template input nested deeper than " + std::to_string(max_json_depth) + " levels");
  }
  switch (j.type()) {
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded:
      return None{};
    case nlohmann::json::value_t::boolean:
      return j.template get<bool>();
    case nlohmann::json::value_t::number_integer:
      return j.template get<std::int64_t>();
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = j.template get<std::uint64_t>();
      if (u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return static_cast<std::int64_t>(u);
      return static_cast<double>(u);
    }
    case nlohmann::json::value_t::number_float:
      return j.template get<double>();
    case nlohmann::json::value_t::string:
      return j.template get<std::string>();
    case nlohmann::json::value_t::array: {
      Value::List list;
      list.reserve(j.size());
      for (const auto& item : j) list.push_back(convert(item, depth + 1));
      return list;
    }
    case nlohmann::json::value_t::object: {
      Dict dict;
      for (auto it = j.begin(); it != j.end(); ++it) dict.set(it.key(), convert(it.value(), depth + 1));
      return dict;
    }
    case nlohmann::json::value_t::binary:
      break;
  }
  return None{};
}

}  // namespace

Value Value::from_json(const nlohmann::json& j) { return convert(j, 0); }
Value Value::from_json(const nlohmann::ordered_json& j) { return convert(j, 0); }

Value::ListPtr Value::make_sequence(List items, bool tuple) {
  Sequence seq{std::move(items), tuple, 1, false};
  for (const Value& item : seq.items) {
    seq.depth = std::max(seq.depth, item.depth() + 1);
    seq.holds_namespace = seq.holds_namespace || item.holds_namespace();
  }
  if (seq.depth > max_value_depth) fault("value nested deeper than " + std::to_string(max_value_depth) + " levels");
  return std::make_shared<const Sequence>(std::move(seq));
}

int Value::depth() const {
  if (is_list()) return std::get<ListPtr>(v_)->depth;
  if (is_dict()) return as_dict().depth();
  return is_namespace() ? 1 : 0;
}

bool Value::holds_namespace() const {
  if (is_list()) return std::get<ListPtr>(v_)->holds_namespace;
  if (is_dict()) return as_dict().holds_namespace();
  return is_namespace();
}

double Value::as_double() const {
  if (is_float()) return as_float();
  if (is_int()) return static_cast<double>(as_int());
  return as_bool() ? 1.0 : 0.0;
}

std::int64_t Value::as_integer() const {
  if (is_int()) return as_int();
  return as_bool() ? 1 : 0;
}

bool Value::truthy() const {
  return std::visit(
      [](const auto& v) -> bool {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, Undefined> || std::is_same_v<T, None>) {
          return false;
        } else if constexpr (std::is_same_v<T, bool>) {
          return v;
        } else if constexpr (std::is_same_v<T, std::int64_t> || std::is_same_v<T, double>) {
          return v != 0;
        } else if constexpr (std::is_same_v<T, std::string>) {
          return !v.empty();
        } else if constexpr (std::is_same_v<T, ListPtr>) {
          return !v->items.empty();
        } else if constexpr (std::is_same_v<T, DictPtr>) {
          return v->size() != 0;
        } else {
          return true;
        }
      },
      v_);
}

std::string format_float(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  // Shortest round-trip digits, then laid out the way Python's repr does:
  // positional for 1e-4 <= |d| < 1e16, otherwise d.ddde+XX.
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  const std::size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exponent = std::stoi(sci.substr(e + 1));
  std::string sign;
  if (!mantissa.empty() && mantissa[0] == '-') {
    sign = "-";
    mantissa.erase(0, 1);
  }
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  if (exponent < -4 || exponent >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char ebuf[16];
    std::snprintf(ebuf, sizeof ebuf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return out + ebuf;
  }
  std::string out;
  if (exponent < 0) {
    out = "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
  } else {
    const auto int_digits = static_cast<std::size_t>(exponent) + 1;
    if (digits.size() <= int_digits) {
      out = digits + std::string(int_digits - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, int_digits) + "." + digits.substr(int_digits);
    }
  }
  return sign + out;
}

std::string Value::str() const {
  if (is_string()) return as_string();
  if (is_undefined()) return "";
  return repr();
}

std::string Value::repr() const {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, Undefined>) {
          return "";
        } else if constexpr (std::is_same_v<T, None>) {
          return "None";
        } else if constexpr (std::is_same_v<T, bool>) {
          return v ? "True" : "False";
        } else if constexpr (std::is_same_v<T, std::int64_t>) {
          return std::to_string(v);
        } else if constexpr (std::is_same_v<T, double>) {
          return format_float(v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          return py::repr(v);
        } else if constexpr (std::is_same_v<T, ListPtr>) {
          std::string out = v->tuple ? "(" : "[";
          for (std::size_t i = 0; i < v->items.size(); ++i) {
            if (i) out += ", ";
            out += v->items[i].repr();
          }
          if (v->tuple) return out + (v->items.size() == 1 ? ",)" : ")");
          return out + "]";
        } else if constexpr (std::is_same_v<T, DictPtr>) {
          std::string out = "{";
          bool first = true;
          for (const auto& [key, value] : v->items()) {
            if (!first) out += ", ";
            first = false;
            out += py::repr(key) + ": " + value.repr();
          }
          return out + "}";
        } else if constexpr (std::is_same_v<T, NamespacePtr>) {
          std::string out = "<Namespace {";
          bool first = true;
          for (const auto& [key, value] : v->attributes.items()) {
            if (!first) out += ", ";
            first = false;
            out += py::repr(key) + ": " + value.repr();
          }
          return out + "}>";
        } else {
          return "<function " + v->name + ">";
        }
      },
      v_);
}

std::string Value::type_name() const {
  return std::visit(
      [](const auto& v) -> std::string {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, Undefined>) return "Undefined";
        else if constexpr (std::is_same_v<T, None>) return "NoneType";
        else if constexpr (std::is_same_v<T, bool>) return "bool";
        else if constexpr (std::is_same_v<T, std::int64_t>) return "int";
        else if constexpr (std::is_same_v<T, double>) return "float";
        else if constexpr (std::is_same_v<T, std::string>) return "str";
        else if constexpr (std::is_same_v<T, ListPtr>) return v->tuple ? "tuple" : "list";
        else if constexpr (std::is_same_v<T, DictPtr>) return "dict";
        else if constexpr (std::is_same_v<T, NamespacePtr>) return "Namespace";
        else return "function";
      },
      v_);
}

bool operator==(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_integer() == b.as_integer();
  }
  if (a.v_.index() != b.v_.index()) return false;
  if (a.is_undefined() || a.is_none()) return true;
  if (a.is_string()) return a.as_string() == b.as_string();
  if (a.is_list()) {
    const auto& x = a.as_list();
    const auto& y = b.as_list();
    if (x.size() != y.size()) return false;
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (!(x[i] == y[i])) return false;
    }
    return true;
  }
  if (a.is_dict()) {
    const auto& x = a.as_dict();
    const auto& y = b.as_dict();
    if (x.size() != y.size()) return false;
    for (const auto& [key, value] : x.items()) {
      const Value* other = y.find(key);
      if (!other || !(value == *other)) return false;
    }
    return true;
  }
  if (a.is_namespace()) return std::get<Value::NamespacePtr>(a.v_) == std::get<Value::NamespacePtr>(b.v_);
  return std::get<Value::CallablePtr>(a.v_) == std::get<Value::CallablePtr>(b.v_);
}

bool Value::less(const Value& a, const Value& b, bool& comparable) {
  comparable = true;
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() < b.as_double();
    return a.as_integer() < b.as_integer();
  }
  // UTF-8 byte order is code point order.
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();
  if (a.is_list() && b.is_list()) {
    const auto& x = a.as_list();
    const auto& y = b.as_list();
    for (std::size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (x[i] == y[i]) continue;
      return less(x[i], y[i], comparable);
    }
    return x.size() < y.size();
  }
  comparable = false;
  return false;
}

}  // namespace neuron::chat
