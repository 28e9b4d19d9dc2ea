#include "chat/builtins.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <functional>
#include <limits>
#include <unordered_map>

#include "chat/fault.hpp"
#include "chat/json_dump.hpp"
#include "chat/py_string.hpp"
#include "chat/renderer.hpp"

namespace neuron::chat::builtins {

namespace {

// Binds a call's positional and keyword arguments to parameter names and
// rejects leftovers, so a misspelt keyword is an error rather than ignored.
class ArgReader {
 public:
  ArgReader(std::string what, CallArgs& args) : what_(std::move(what)), args_(args), used_kw_(args.keyword.size()) {}

  std::optional<Value> get(std::size_t position, std::string_view name) {
    if (position < args_.positional.size()) {
      max_positional_ = std::max(max_positional_, position + 1);
      return args_.positional[position];
    }
    for (std::size_t i = 0; i < args_.keyword.size(); ++i) {
      if (args_.keyword[i].first == name) {
        used_kw_[i] = true;
        return args_.keyword[i].second;
      }
    }
    return std::nullopt;
  }

  Value value(std::size_t position, std::string_view name, Value fallback = Value{}) {
    auto v = get(position, name);
    return v ? *v : fallback;
  }

  std::optional<std::string> string(std::size_t position, std::string_view name) {
    auto v = get(position, name);
    if (!v || v->is_none() || v->is_undefined()) return std::nullopt;
    if (!v->is_string()) fault(what_ + ": argument '" + std::string(name) + "' must be a string, got " + v->type_name());
    return v->as_string();
  }

  std::int64_t integer(std::size_t position, std::string_view name, std::int64_t fallback) {
    auto v = get(position, name);
    if (!v || v->is_none() || v->is_undefined()) return fallback;
    if (!v->is_int() && !v->is_bool()) {
      fault(what_ + ": argument '" + std::string(name) + "' must be an integer, got " + v->type_name());
    }
    return v->as_integer();
  }

  bool boolean(std::size_t position, std::string_view name, bool fallback) {
    auto v = get(position, name);
    return v ? v->truthy() : fallback;
  }

  // Arguments past `position`, for select/selectattr/map's pass-through.
  CallArgs rest(std::size_t position) {
    CallArgs out;
    for (std::size_t i = position; i < args_.positional.size(); ++i) out.positional.push_back(args_.positional[i]);
    max_positional_ = std::max(max_positional_, args_.positional.size());
    for (std::size_t i = 0; i < args_.keyword.size(); ++i) {
      if (!used_kw_[i]) {
        out.keyword.push_back(args_.keyword[i]);
        used_kw_[i] = true;
      }
    }
    return out;
  }

  void finish() const {
    if (args_.positional.size() > max_positional_) {
      fault(what_ + " takes at most " + std::to_string(max_positional_) + " positional argument(s), got " +
            std::to_string(args_.positional.size()));
    }
    for (std::size_t i = 0; i < args_.keyword.size(); ++i) {
      if (!used_kw_[i]) fault(what_ + " got an unexpected keyword argument '" + args_.keyword[i].first + "'");
    }
  }

 private:
  std::string what_;
  CallArgs& args_;
  std::vector<bool> used_kw_;
  std::size_t max_positional_ = 0;
};

void check_string_size(std::size_t bytes, const Limits& limits) {
  if (bytes > limits.max_output_bytes) {
    fault("string of " + std::to_string(bytes) + " bytes exceeds the template output limit of " +
          std::to_string(limits.max_output_bytes) + " bytes");
  }
}

void check_list_size(std::size_t items, const Limits& limits) {
  if (items > limits.max_list_items) {
    fault("list of " + std::to_string(items) + " items exceeds the template limit of " +
          std::to_string(limits.max_list_items) + " items");
  }
}

std::size_t length_of(const Value& v) {
  if (v.is_string()) return py::length(v.as_string());
  if (v.is_list()) return v.as_list().size();
  if (v.is_dict()) return v.as_dict().size();
  if (v.is_undefined()) return 0;
  fault("object of type '" + v.type_name() + "' has no len()");
}

// The items a for loop or a filter walks: list elements, dict keys, string
// characters; Undefined is empty (jinja2's Undefined iterates as nothing).
Value::List iterate(const Value& v, const std::string& what) {
  if (v.is_list()) return v.as_list();
  if (v.is_undefined()) return {};
  Value::List out;
  if (v.is_dict()) {
    for (const auto& [key, value] : v.as_dict().items()) out.emplace_back(key);
    return out;
  }
  if (v.is_string()) {
    for (char32_t cp : py::decode(v.as_string())) {
      std::string s;
      py::append_utf8(s, cp);
      out.emplace_back(std::move(s));
    }
    return out;
  }
  fault(what + ": '" + v.type_name() + "' object is not iterable");
}

// jinja2's sort/min/max/unique compare strings case-insensitively by default.
Value sort_key(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return py::lower(v.as_string());
  return v;
}

bool ordered_less(const Value& a, const Value& b) {
  bool comparable = true;
  const bool lt = Value::less(a, b, comparable);
  if (!comparable) fault("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
  return lt;
}

Value to_int(const Value& v, const Value& fallback) {
  if (v.is_int()) return v;
  if (v.is_bool()) return v.as_integer();
  if (v.is_float()) {
    const double d = v.as_float();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return fallback;
    return static_cast<std::int64_t>(d);
  }
  if (v.is_string()) {
    const std::string s = py::strip(v.as_string(), std::nullopt, true, true);
    std::string digits;
    for (char c : s) {
      if (c != '_') digits += c;
    }
    if (digits.empty()) return fallback;
    char* end = nullptr;
    errno = 0;
    const long long i = std::strtoll(digits.c_str(), &end, 10);
    if (end && *end == '\0' && errno == 0) return static_cast<std::int64_t>(i);
    const double d = std::strtod(digits.c_str(), &end);
    if (end && *end == '\0' && std::isfinite(d) && std::fabs(d) < 9.2e18) return static_cast<std::int64_t>(d);
  }
  return fallback;
}

Value to_float(const Value& v, const Value& fallback) {
  if (v.is_number()) return v.as_double();
  if (v.is_string()) {
    const std::string s = py::strip(v.as_string(), std::nullopt, true, true);
    if (s.empty()) return fallback;
    char* end = nullptr;
    const double d = std::strtod(s.c_str(), &end);
    if (end && *end == '\0') return d;
  }
  return fallback;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

// jinja2's title filter: words start after whitespace, '-', or an opening bracket.
std::string jinja_title(const std::string& s) {
  std::string out;
  bool word_start = true;
  for (char32_t cp : py::decode(s)) {
    const bool boundary = py::is_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
    std::string one;
    py::append_utf8(one, cp);
    out += boundary ? one : (word_start ? py::upper(one) : py::lower(one));
    word_start = boundary;
  }
  return out;
}

std::string indent_text(const std::string& s, const std::string& pad, bool first, bool blank) {
  std::vector<std::string> lines = py::split(s, std::string("\n"), -1);
  std::string out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i) out += '\n';
    const bool is_blank = py::strip(lines[i], std::nullopt, true, true).empty();
    if ((i > 0 || first) && (blank || !is_blank)) out += pad;
    out += lines[i];
  }
  return out;
}

double round_half_even(double value, std::int64_t precision) {
  const double scale = std::pow(10.0, static_cast<double>(precision));
  return std::nearbyint(value * scale) / scale;
}

using FilterFn = std::function<Value(const Value&, ArgReader&, const Limits&)>;

Value filter_select(const Value& subject, ArgReader& args, const Limits& limits, bool by_attribute, bool keep) {
  std::size_t next = 0;
  std::string attribute;
  if (by_attribute) {
    auto a = args.string(next++, "attribute");
    if (!a) fault("selectattr/rejectattr: missing attribute name");
    attribute = *a;
  }
  auto test_name = args.string(next, "test");
  CallArgs test_args = args.rest(next + 1);
  Value::List out;
  for (const Value& item : iterate(subject, by_attribute ? "selectattr" : "select")) {
    const Value probe = by_attribute ? get_attribute(item, attribute) : item;
    CallArgs a = test_args;
    const bool passed = test_name ? test(*test_name, probe, a) : probe.truthy();
    if (passed == keep) out.push_back(item);
  }
  check_list_size(out.size(), limits);
  return out;
}

const std::unordered_map<std::string, FilterFn>& filters() {
  static const std::unordered_map<std::string, FilterFn> table = [] {
    std::unordered_map<std::string, FilterFn> t;
    t["length"] = [](const Value& v, ArgReader&, const Limits&) {
      return Value(static_cast<std::int64_t>(length_of(v)));
    };
    t["count"] = t["length"];
    t["string"] = [](const Value& v, ArgReader&, const Limits&) { return Value(v.str()); };
    t["safe"] = [](const Value& v, ArgReader&, const Limits&) { return v; };
    t["escape"] = [](const Value& v, ArgReader&, const Limits&) { return Value(html_escape(v.str())); };
    t["e"] = t["escape"];
    t["upper"] = [](const Value& v, ArgReader&, const Limits&) { return Value(py::upper(v.str())); };
    t["lower"] = [](const Value& v, ArgReader&, const Limits&) { return Value(py::lower(v.str())); };
    t["capitalize"] = [](const Value& v, ArgReader&, const Limits&) { return Value(py::capitalize(v.str())); };
    t["title"] = [](const Value& v, ArgReader&, const Limits&) { return Value(jinja_title(v.str())); };
    t["trim"] = [](const Value& v, ArgReader& a, const Limits&) {
      return Value(py::strip(v.str(), a.string(0, "chars"), true, true));
    };
    t["replace"] = [](const Value& v, ArgReader& a, const Limits& limits) {
      auto old_text = a.string(0, "old");
      auto new_text = a.string(1, "new");
      if (!old_text || !new_text) fault("replace: needs the old and the new string");
      const std::string s = v.str();
      const std::int64_t n = a.integer(2, "count", -1);
      const std::int64_t hits = old_text->empty() ? static_cast<std::int64_t>(py::length(s)) + 1 : py::count(s, *old_text);
      const std::int64_t done = n < 0 ? hits : std::min(n, hits);
      const auto growth = static_cast<double>(new_text->size()) - static_cast<double>(old_text->size());
      check_string_size(static_cast<std::size_t>(std::max(0.0, static_cast<double>(s.size()) + growth * static_cast<double>(done))), limits);
      return Value(py::replace(s, *old_text, *new_text, n));
    };
    t["default"] = [](const Value& v, ArgReader& a, const Limits&) {
      const Value fallback = a.value(0, "default_value", Value(""));
      const bool boolean = a.boolean(1, "boolean", false);
      if (v.is_undefined() || (boolean && !v.truthy())) return fallback;
      return v;
    };
    t["d"] = t["default"];
    t["first"] = [](const Value& v, ArgReader&, const Limits&) {
      Value::List items = iterate(v, "first");
      return items.empty() ? Value(Undefined{"first item"}) : items.front();
    };
    t["last"] = [](const Value& v, ArgReader&, const Limits&) {
      Value::List items = iterate(v, "last");
      return items.empty() ? Value(Undefined{"last item"}) : items.back();
    };
    t["list"] = [](const Value& v, ArgReader&, const Limits&) { return Value(iterate(v, "list")); };
    t["int"] = [](const Value& v, ArgReader& a, const Limits&) { return to_int(v, a.value(0, "default", Value(0))); };
    t["float"] = [](const Value& v, ArgReader& a, const Limits&) {
      return to_float(v, a.value(0, "default", Value(0.0)));
    };
    t["abs"] = [](const Value& v, ArgReader&, const Limits&) {
      if (v.is_float()) return Value(std::fabs(v.as_float()));
      if (v.is_int() || v.is_bool()) {
        const std::int64_t i = v.as_integer();
        if (i == std::numeric_limits<std::int64_t>::min()) fault("abs: integer overflow");
        return Value(i < 0 ? -i : i);
      }
      fault("abs: bad operand type '" + v.type_name() + "'");
    };
    t["round"] = [](const Value& v, ArgReader& a, const Limits&) {
      if (!v.is_number()) fault("round: bad operand type '" + v.type_name() + "'");
      if (!v.is_float()) return Value(v.as_integer());  // Python's round(int) stays an int
      const std::int64_t precision = std::clamp<std::int64_t>(a.integer(0, "precision", 0), -20, 20);
      const std::string method = a.string(1, "method").value_or("common");
      const double scale = std::pow(10.0, static_cast<double>(precision));
      const double x = v.as_double() * scale;
      if (method == "common") return Value(round_half_even(v.as_double(), precision));
      if (method == "floor") return Value(std::floor(x) / scale);
      if (method == "ceil") return Value(std::ceil(x) / scale);
      fault("round: method must be 'common', 'ceil' or 'floor'");
    };
    t["join"] = [](const Value& v, ArgReader& a, const Limits& limits) {
      const std::string sep = a.string(0, "d").value_or("");
      const auto attribute = a.string(1, "attribute");
      std::string out;
      bool first = true;
      for (const Value& item : iterate(v, "join")) {
        if (!first) out += sep;
        first = false;
        out += attribute ? get_attribute(item, *attribute).str() : item.str();
        check_string_size(out.size(), limits);
      }
      return Value(std::move(out));
    };
    t["items"] = [](const Value& v, ArgReader&, const Limits&) {
      Value::List out;
      if (v.is_undefined()) return Value(std::move(out));
      if (!v.is_dict()) fault("items: expected a mapping, got " + v.type_name());
      for (const auto& [key, value] : v.as_dict().items()) out.emplace_back(Value::tuple(Value::List{Value(key), value}));
      return Value(std::move(out));
    };
    t["dictsort"] = [](const Value& v, ArgReader& a, const Limits&) {
      if (!v.is_dict()) fault("dictsort: expected a mapping, got " + v.type_name());
      const bool case_sensitive = a.boolean(0, "case_sensitive", false);
      const std::string by = a.string(1, "by").value_or("key");
      const bool reverse = a.boolean(2, "reverse", false);
      Value::List out;
      for (const auto& [key, value] : v.as_dict().items()) out.emplace_back(Value::tuple(Value::List{Value(key), value}));
      const std::size_t pos = by == "value" ? 1 : 0;
      std::stable_sort(out.begin(), out.end(), [&](const Value& x, const Value& y) {
        const Value kx = sort_key(x.as_list()[pos], case_sensitive), ky = sort_key(y.as_list()[pos], case_sensitive);
        return reverse ? ordered_less(ky, kx) : ordered_less(kx, ky);
      });
      return Value(std::move(out));
    };
    t["reverse"] = [](const Value& v, ArgReader&, const Limits&) {
      if (v.is_string()) {
        std::u32string cps = py::decode(v.as_string());
        std::reverse(cps.begin(), cps.end());
        return Value(py::encode(cps));
      }
      Value::List items = iterate(v, "reverse");
      std::reverse(items.begin(), items.end());
      return Value(std::move(items));
    };
    t["sort"] = [](const Value& v, ArgReader& a, const Limits&) {
      const bool reverse = a.boolean(0, "reverse", false);
      const bool case_sensitive = a.boolean(1, "case_sensitive", false);
      const auto attribute = a.string(2, "attribute");
      Value::List items = iterate(v, "sort");
      auto key = [&](const Value& x) { return sort_key(attribute ? get_attribute(x, *attribute) : x, case_sensitive); };
      std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        return reverse ? ordered_less(key(y), key(x)) : ordered_less(key(x), key(y));
      });
      return Value(std::move(items));
    };
    t["unique"] = [](const Value& v, ArgReader& a, const Limits&) {
      const bool case_sensitive = a.boolean(0, "case_sensitive", false);
      const auto attribute = a.string(1, "attribute");
      Value::List out, seen;
      for (const Value& item : iterate(v, "unique")) {
        const Value k = sort_key(attribute ? get_attribute(item, *attribute) : item, case_sensitive);
        if (std::find(seen.begin(), seen.end(), k) != seen.end()) continue;
        seen.push_back(k);
        out.push_back(item);
      }
      return Value(std::move(out));
    };
    auto extreme = [](bool want_max) {
      return [want_max](const Value& v, ArgReader& a, const Limits&) {
        const bool case_sensitive = a.boolean(0, "case_sensitive", false);
        const auto attribute = a.string(1, "attribute");
        Value best = Undefined{"empty sequence"};
        Value best_key;
        for (const Value& item : iterate(v, want_max ? "max" : "min")) {
          const Value k = sort_key(attribute ? get_attribute(item, *attribute) : item, case_sensitive);
          if (best.is_undefined() || (want_max ? ordered_less(best_key, k) : ordered_less(k, best_key))) {
            best = item;
            best_key = k;
          }
        }
        return best;
      };
    };
    t["max"] = extreme(true);
    t["min"] = extreme(false);
    t["sum"] = [](const Value& v, ArgReader& a, const Limits&) {
      const auto attribute = a.string(0, "attribute");
      Value total = a.value(1, "start", Value(0));
      for (const Value& item : iterate(v, "sum")) {
        const Value x = attribute ? get_attribute(item, *attribute) : item;
        if (!x.is_number() || !total.is_number()) fault("sum: unsupported operand type '" + x.type_name() + "'");
        if (x.is_float() || total.is_float()) {
          total = total.as_double() + x.as_double();
        } else {
          std::int64_t r = 0;
          if (__builtin_add_overflow(total.as_integer(), x.as_integer(), &r)) fault("sum: integer overflow");
          total = r;
        }
      }
      return total;
    };
    t["tojson"] = [](const Value& v, ArgReader& a, const Limits& limits) {
      JsonStyle style;
      style.ensure_ascii = a.boolean(0, "ensure_ascii", false);
      const Value indent = a.value(1, "indent", Value(None{}));
      if (indent.is_int()) {
        style.indent = std::string(static_cast<std::size_t>(std::clamp<std::int64_t>(indent.as_int(), 0, 64)), ' ');
      } else if (indent.is_string()) {
        style.indent = indent.as_string();
      } else if (!indent.is_none() && !indent.is_undefined()) {
        fault("tojson: indent must be an integer or a string");
      }
      const Value separators = a.value(2, "separators", Value(None{}));
      if (separators.is_list()) {
        const auto& seps = separators.as_list();
        if (seps.size() != 2 || !seps[0].is_string() || !seps[1].is_string()) {
          fault("tojson: separators must be a pair of strings");
        }
        style.item_separator = seps[0].as_string();
        style.key_separator = seps[1].as_string();
      } else if (!separators.is_none() && !separators.is_undefined()) {
        fault("tojson: separators must be a pair of strings");
      }
      style.sort_keys = a.boolean(3, "sort_keys", false);
      std::string out = to_json(v, style);
      check_string_size(out.size(), limits);
      return Value(std::move(out));
    };
    t["indent"] = [](const Value& v, ArgReader& a, const Limits& limits) {
      const Value width = a.value(0, "width", Value(4));
      std::string pad;
      if (width.is_string()) {
        pad = width.as_string();
      } else if (width.is_int()) {
        pad = std::string(static_cast<std::size_t>(std::clamp<std::int64_t>(width.as_int(), 0, 256)), ' ');
      } else {
        fault("indent: width must be an integer or a string");
      }
      std::string out = indent_text(v.str(), pad, a.boolean(1, "first", false), a.boolean(2, "blank", false));
      check_string_size(out.size(), limits);
      return Value(std::move(out));
    };
    t["wordcount"] = [](const Value& v, ArgReader&, const Limits&) {
      return Value(static_cast<std::int64_t>(py::split(v.str(), std::nullopt, -1).size()));
    };
    t["select"] = [](const Value& v, ArgReader& a, const Limits& l) { return filter_select(v, a, l, false, true); };
    t["reject"] = [](const Value& v, ArgReader& a, const Limits& l) { return filter_select(v, a, l, false, false); };
    t["selectattr"] = [](const Value& v, ArgReader& a, const Limits& l) { return filter_select(v, a, l, true, true); };
    t["rejectattr"] = [](const Value& v, ArgReader& a, const Limits& l) { return filter_select(v, a, l, true, false); };
    t["map"] = [](const Value& v, ArgReader& a, const Limits& limits) {
      Value::List out;
      if (auto attribute = a.get(std::numeric_limits<std::size_t>::max(), "attribute")) {
        if (!attribute->is_string()) fault("map: attribute must be a string");
        const Value fallback = a.value(std::numeric_limits<std::size_t>::max(), "default");
        for (const Value& item : iterate(v, "map")) {
          Value x = get_attribute(item, attribute->as_string());
          out.push_back(x.is_undefined() && !fallback.is_undefined() ? fallback : x);
        }
        return Value(std::move(out));
      }
      auto name = a.string(0, "name");
      if (!name) fault("map: needs a filter name or attribute=");
      CallArgs rest = a.rest(1);
      for (const Value& item : iterate(v, "map")) {
        CallArgs args = rest;
        out.push_back(filter(*name, item, args, limits));
      }
      return Value(std::move(out));
    };
    return t;
  }();
  return table;
}

using TestFn = std::function<bool(const Value&, ArgReader&)>;

const std::unordered_map<std::string, TestFn>& tests() {
  static const std::unordered_map<std::string, TestFn> table = [] {
    std::unordered_map<std::string, TestFn> t;
    t["defined"] = [](const Value& v, ArgReader&) { return !v.is_undefined(); };
    t["undefined"] = [](const Value& v, ArgReader&) { return v.is_undefined(); };
    t["none"] = [](const Value& v, ArgReader&) { return v.is_none(); };
    t["boolean"] = [](const Value& v, ArgReader&) { return v.is_bool(); };
    t["true"] = [](const Value& v, ArgReader&) { return v.is_bool() && v.as_bool(); };
    t["false"] = [](const Value& v, ArgReader&) { return v.is_bool() && !v.as_bool(); };
    t["string"] = [](const Value& v, ArgReader&) { return v.is_string(); };
    t["number"] = [](const Value& v, ArgReader&) { return v.is_number(); };
    t["integer"] = [](const Value& v, ArgReader&) { return v.is_int(); };
    t["float"] = [](const Value& v, ArgReader&) { return v.is_float(); };
    t["mapping"] = [](const Value& v, ArgReader&) { return v.is_dict(); };
    // Undefined iterates (as nothing) and has len() in jinja2.
    t["iterable"] = [](const Value& v, ArgReader&) {
      return v.is_list() || v.is_dict() || v.is_string() || v.is_undefined();
    };
    t["sequence"] = t["iterable"];
    t["callable"] = [](const Value& v, ArgReader&) { return v.is_callable() || v.is_undefined(); };
    t["lower"] = [](const Value& v, ArgReader&) {
      return v.is_string() && py::lower(v.as_string()) == v.as_string() && py::upper(v.as_string()) != v.as_string();
    };
    t["upper"] = [](const Value& v, ArgReader&) {
      return v.is_string() && py::upper(v.as_string()) == v.as_string() && py::lower(v.as_string()) != v.as_string();
    };
    // jinja2 computes `value % n`, so floats work too (2.5 is odd -> False).
    auto remainder = [](const Value& v, std::int64_t n, const char* test) -> double {
      if (!v.is_number()) fault(std::string(test) + ": expected a number, got " + v.type_name());
      if (v.is_float()) {
        double r = std::fmod(v.as_float(), static_cast<double>(n));
        if (r != 0 && ((r < 0) != (n < 0))) r += static_cast<double>(n);
        return r;
      }
      if (n == -1) return 0;
      std::int64_t r = v.as_integer() % n;
      if (r != 0 && ((r < 0) != (n < 0))) r += n;
      return static_cast<double>(r);
    };
    t["even"] = [remainder](const Value& v, ArgReader&) { return remainder(v, 2, "even") == 0; };
    t["odd"] = [remainder](const Value& v, ArgReader&) { return remainder(v, 2, "odd") == 1; };
    t["divisibleby"] = [remainder](const Value& v, ArgReader& a) {
      const Value num = a.value(0, "num");
      if (!num.is_number()) fault("divisibleby: expected a number, got " + num.type_name());
      if (num.as_double() == 0) fault("divisibleby: division by zero");
      if (!num.is_float()) return remainder(v, num.as_integer(), "divisibleby") == 0;
      if (!v.is_number()) fault("divisibleby: expected a number, got " + v.type_name());
      return std::fmod(v.as_double(), num.as_float()) == 0;
    };
    t["eq"] = [](const Value& v, ArgReader& a) { return v == a.value(0, "other"); };
    t["equalto"] = t["eq"];
    t["=="] = t["eq"];
    t["ne"] = [](const Value& v, ArgReader& a) { return !(v == a.value(0, "other")); };
    t["!="] = t["ne"];
    t["lt"] = [](const Value& v, ArgReader& a) { return ordered_less(v, a.value(0, "other")); };
    t["lessthan"] = t["lt"];
    t["<"] = t["lt"];
    t["gt"] = [](const Value& v, ArgReader& a) { return ordered_less(a.value(0, "other"), v); };
    t["greaterthan"] = t["gt"];
    t[">"] = t["gt"];
    t["le"] = [](const Value& v, ArgReader& a) { return !ordered_less(a.value(0, "other"), v); };
    t["<="] = t["le"];
    t["ge"] = [](const Value& v, ArgReader& a) { return !ordered_less(v, a.value(0, "other")); };
    t[">="] = t["ge"];
    t["in"] = [](const Value& v, ArgReader& a) { return contains(a.value(0, "seq"), v); };
    t["sameas"] = [](const Value& v, ArgReader& a) {
      const Value other = a.value(0, "other");
      if (v.is_none() || v.is_bool() || v.is_undefined()) return v.type_name() == other.type_name() && v == other;
      return v.type_name() == other.type_name() && v == other && (v.is_int() || v.is_string());
    };
    return t;
  }();
  return table;
}

// Python slice index normalisation (PySlice_AdjustIndices).
Value::List slice_items(const Value::List& items, const Value& start_v, const Value& stop_v, const Value& step_v) {
  auto bound = [](const Value& v, const char* what) -> std::optional<std::int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) fault(std::string("slice ") + what + " must be an integer, got " + v.type_name());
    return v.as_integer();
  };
  const auto n = static_cast<std::int64_t>(items.size());
  const std::int64_t step = bound(step_v, "step").value_or(1);
  if (step == 0) fault("slice step cannot be zero");
  auto adjust = [&](std::optional<std::int64_t> v, std::int64_t dflt) {
    if (!v) return dflt;
    std::int64_t i = *v;
    if (i < 0) {
      i += n;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step < 0 ? n - 1 : n;
    }
    return i;
  };
  const std::int64_t start = adjust(bound(start_v, "start"), step < 0 ? n - 1 : 0);
  const std::int64_t stop = adjust(bound(stop_v, "stop"), step < 0 ? -1 : n);
  Value::List out;
  if (step > 0) {
    for (std::int64_t i = start; i < stop; i += step) {
      out.push_back(items[static_cast<std::size_t>(i)]);
      if (step > n) break;
    }
  } else {
    for (std::int64_t i = start; i > stop; i += step) {
      out.push_back(items[static_cast<std::size_t>(i)]);
      if (step < -n) break;
    }
  }
  return out;
}

Value str_format(const std::string& fmt, CallArgs& args) {
  std::string out;
  std::size_t auto_index = 0;
  for (std::size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}' ) {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') ++i;
      else fault("format: single '}' encountered in format string");
      out += '}';
      continue;
    }
    if (c != '{') {
      out += c;
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out += '{';
      ++i;
      continue;
    }
    const std::size_t close = fmt.find('}', i);
    if (close == std::string::npos) fault("format: unmatched '{' in format string");
    const std::string field = fmt.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!") != std::string::npos) fault("format: format specs and conversions are not supported");
    Value v;
    if (field.empty()) {
      if (auto_index >= args.positional.size()) fault("format: not enough arguments");
      v = args.positional[auto_index++];
    } else if (std::all_of(field.begin(), field.end(), [](char d) { return d >= '0' && d <= '9'; })) {
      const std::size_t idx = std::stoul(field.substr(0, 9));
      if (idx >= args.positional.size()) fault("format: replacement index " + field + " out of range");
      v = args.positional[idx];
    } else {
      bool found = false;
      for (const auto& [key, value] : args.keyword) {
        if (key == field) v = value, found = true;
      }
      if (!found) fault("format: missing keyword argument '" + field + "'");
    }
    out += v.str();
    i = close;
  }
  return out;
}

bool affix_match(const std::string& s, const Value& affix, bool prefix, const char* what) {
  auto one = [&](const Value& a) {
    if (!a.is_string()) fault(std::string(what) + ": argument must be str or a tuple of str, not " + a.type_name());
    const std::string& x = a.as_string();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_list()) {
    for (const Value& a : affix.as_list()) {
      if (one(a)) return true;
    }
    return false;
  }
  return one(affix);
}

std::optional<Value> string_method(const std::string& s, const std::string& name, CallArgs& call, const Limits& limits) {
  ArgReader a("str." + name + "()", call);
  Value result;
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    result = py::strip(s, a.string(0, "chars"), name != "rstrip", name != "lstrip");
  } else if (name == "split" || name == "rsplit") {
    const auto sep = a.string(0, "sep");
    if (sep && sep->empty()) fault("str." + name + "(): empty separator");
    const std::int64_t maxsplit = a.integer(1, "maxsplit", -1);
    Value::List out;
    for (auto& part : name == "split" ? py::split(s, sep, maxsplit) : py::rsplit(s, sep, maxsplit)) {
      out.emplace_back(std::move(part));
    }
    check_list_size(out.size(), limits);
    result = std::move(out);
  } else if (name == "splitlines") {
    const bool keepends = a.boolean(0, "keepends", false);
    Value::List out;
    std::size_t start = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (s[i] == '\n' || s[i] == '\r') {
        std::size_t end = i;
        if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        out.emplace_back(s.substr(start, (keepends ? i + 1 : end) - start));
        start = i + 1;
      }
    }
    if (start < s.size()) out.emplace_back(s.substr(start));
    result = std::move(out);
  } else if (name == "startswith" || name == "endswith") {
    const auto affix = a.get(0, "prefix");
    if (!affix) fault("str." + name + "() takes at least 1 argument");
    result = affix_match(s, *affix, name == "startswith", name.c_str());
  } else if (name == "upper") {
    result = py::upper(s);
  } else if (name == "lower") {
    result = py::lower(s);
  } else if (name == "title") {
    result = py::title(s);
  } else if (name == "capitalize") {
    result = py::capitalize(s);
  } else if (name == "replace") {
    auto old_text = a.string(0, "old");
    auto new_text = a.string(1, "new");
    if (!old_text || !new_text) fault("str.replace() needs the old and the new string");
    CallArgs filter_args{{Value(*old_text), Value(*new_text), Value(a.integer(2, "count", -1))}, {}};
    a.finish();
    return filter("replace", Value(s), filter_args, limits);
  } else if (name == "join") {
    auto items = a.get(0, "iterable");
    if (!items) fault("str.join() takes exactly one argument");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(*items, "str.join()")) {
      if (!item.is_string()) fault("str.join(): expected str instance, " + item.type_name() + " found");
      if (!first) out += s;
      first = false;
      out += item.as_string();
      check_string_size(out.size(), limits);
    }
    result = std::move(out);
  } else if (name == "find") {
    auto needle = a.string(0, "sub");
    if (!needle) fault("str.find() takes a string argument");
    result = py::find(s, *needle);
  } else if (name == "count") {
    auto needle = a.string(0, "sub");
    if (!needle) fault("str.count() takes a string argument");
    result = py::count(s, *needle);
  } else if (name == "format") {
    return str_format(s, call);
  } else if (name == "isdigit" || name == "isalpha" || name == "isalnum" || name == "isspace") {
    bool ok = !s.empty();
    for (char32_t cp : py::decode(s)) {
      const bool digit = cp >= '0' && cp <= '9';
      const bool alpha = (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z');
      if (name == "isdigit") ok = ok && digit;
      else if (name == "isalpha") ok = ok && alpha;
      else if (name == "isalnum") ok = ok && (digit || alpha);
      else ok = ok && py::is_space(cp);
    }
    result = ok;
  } else if (name == "islower" || name == "isupper") {
    const bool lower = py::lower(s) == s, upper = py::upper(s) == s;
    result = name == "islower" ? (lower && !upper) : (upper && !lower);
  } else {
    return std::nullopt;
  }
  a.finish();
  return result;
}

std::optional<Value> dict_method(const Dict& d, const std::string& name, CallArgs& call) {
  ArgReader a("dict." + name + "()", call);
  Value result;
  if (name == "get") {
    auto key = a.get(0, "key");
    if (!key) fault("dict.get() takes at least 1 argument");
    const Value fallback = a.value(1, "default", Value(None{}));
    const Value* found = key->is_string() ? d.find(key->as_string()) : nullptr;
    result = found ? *found : fallback;
  } else if (name == "items" || name == "keys" || name == "values") {
    Value::List out;
    for (const auto& [key, value] : d.items()) {
      if (name == "items") out.emplace_back(Value::tuple(Value::List{Value(key), value}));
      else if (name == "keys") out.emplace_back(key);
      else out.push_back(value);
    }
    result = std::move(out);
  } else {
    return std::nullopt;
  }
  a.finish();
  return result;
}

std::optional<Value> list_method(const Value::List& list, const std::string& name, CallArgs& call) {
  ArgReader a("list." + name + "()", call);
  Value result;
  if (name == "index" || name == "count") {
    auto needle = a.get(0, "value");
    if (!needle) fault("list." + name + "() takes exactly one argument");
    if (name == "count") {
      result = static_cast<std::int64_t>(std::count(list.begin(), list.end(), *needle));
    } else {
      const auto it = std::find(list.begin(), list.end(), *needle);
      if (it == list.end()) fault("list.index(x): x not in list");
      result = static_cast<std::int64_t>(it - list.begin());
    }
  } else if (name == "append" || name == "extend" || name == "pop" || name == "insert" || name == "remove" ||
             name == "clear" || name == "sort" || name == "reverse") {
    // transformers renders in jinja2's ImmutableSandboxedEnvironment.
    fault("access to list." + name + "() is unsafe: lists are immutable in chat templates");
  } else {
    return std::nullopt;
  }
  a.finish();
  return result;
}

Value make_global(std::string name, std::function<Value(CallArgs&, const Limits&)> fn) {
  auto callable = std::make_shared<Callable>();
  callable->name = name;
  callable->call = [fn = std::move(fn)](Renderer& r, CallArgs& args, int) { return fn(args, r.limits()); };
  return Value(Value::CallablePtr(std::move(callable)));
}

const std::unordered_map<std::string, Value>& globals() {
  static const std::unordered_map<std::string, Value> table = [] {
    std::unordered_map<std::string, Value> t;
    t.emplace("range", make_global("range", [](CallArgs& call, const Limits& limits) {
      ArgReader a("range()", call);
      if (call.positional.empty()) fault("range() expects at least 1 argument");
      std::int64_t start = 0, stop = 0, step = 1;
      if (call.positional.size() == 1) {
        stop = a.integer(0, "stop", 0);
      } else {
        start = a.integer(0, "start", 0);
        stop = a.integer(1, "stop", 0);
        step = a.integer(2, "step", 1);
      }
      a.finish();
      if (step == 0) fault("range() arg 3 must not be zero");
      // Exact in 128 bits, so bounds near the int64 limits neither overflow nor round.
      const __int128 span = static_cast<__int128>(stop) - start;
      const __int128 count = step > 0 ? (span > 0 ? (span + step - 1) / step : 0) : (span < 0 ? (span + step + 1) / step : 0);
      if (count > static_cast<__int128>(limits.max_list_items)) {
        fault("range() of " + std::to_string(static_cast<long long>(std::min<__int128>(count, INT64_MAX))) +
              " items exceeds the template limit");
      }
      Value::List out;
      for (__int128 k = 0; k < count; ++k) out.emplace_back(static_cast<std::int64_t>(start + k * step));
      return Value(std::move(out));
    }));
    t.emplace("namespace", make_global("namespace", [](CallArgs& call, const Limits&) {
      for (const Value& v : call.positional) {
        if (v.holds_namespace() && !v.is_dict()) fault("namespace() cannot hold another namespace");
      }
      for (const auto& kv : call.keyword) {
        if (kv.second.holds_namespace()) fault("namespace() cannot hold another namespace");
      }
      auto ns = std::make_shared<Namespace>();
      for (const Value& init : call.positional) {
        if (!init.is_dict()) fault("namespace() positional argument must be a mapping");
        if (init.holds_namespace()) fault("namespace() cannot hold another namespace");
        for (const auto& [key, value] : init.as_dict().items()) ns->attributes.set(key, value);
      }
      for (const auto& [key, value] : call.keyword) ns->attributes.set(key, value);
      return Value(Value::NamespacePtr(std::move(ns)));
    }));
    t.emplace("dict", make_global("dict", [](CallArgs& call, const Limits&) {
      Dict d;
      for (const Value& init : call.positional) {
        if (!init.is_dict()) fault("dict() positional argument must be a mapping");
        for (const auto& [key, value] : init.as_dict().items()) d.set(key, value);
      }
      for (const auto& [key, value] : call.keyword) d.set(key, value);
      return Value(std::move(d));
    }));
    t.emplace("raise_exception", make_global("raise_exception", [](CallArgs& call, const Limits&) -> Value {
      const std::string message = call.positional.empty() ? std::string("raise_exception() called") : call.positional[0].str();
      fault(message);
    }));
    t.emplace("strftime_now", make_global("strftime_now", [](CallArgs& call, const Limits&) {
      ArgReader a("strftime_now()", call);
      const auto format = a.string(0, "format");
      a.finish();
      if (!format) fault("strftime_now() needs a format string");
      const std::time_t now = std::time(nullptr);
      std::tm local{};
      localtime_r(&now, &local);
      char buf[512];
      const std::size_t n = std::strftime(buf, sizeof buf, format->c_str(), &local);
      return Value(std::string(buf, n));
    }));
    return t;
  }();
  return table;
}

}  // namespace

Value filter(const std::string& name, const Value& subject, CallArgs& args, const Limits& limits) {
  const auto& table = filters();
  const auto it = table.find(name);
  if (it == table.end()) fault("no filter named '" + name + "'");
  ArgReader reader("filter '" + name + "'", args);
  Value result = it->second(subject, reader, limits);
  reader.finish();
  return result;
}

bool test(const std::string& name, const Value& subject, CallArgs& args) {
  const auto& table = tests();
  const auto it = table.find(name);
  if (it == table.end()) fault("no test named '" + name + "'");
  ArgReader reader("test '" + name + "'", args);
  const bool result = it->second(subject, reader);
  reader.finish();
  return result;
}

std::optional<Value> method(const Value& object, const std::string& name, CallArgs& args, const Limits& limits) {
  if (object.is_string()) return string_method(object.as_string(), name, args, limits);
  if (object.is_dict()) return dict_method(object.as_dict(), name, args);
  if (object.is_list()) return list_method(object.as_list(), name, args);
  return std::nullopt;
}

const Value* global(const std::string& name) {
  const auto& table = globals();
  const auto it = table.find(name);
  return it == table.end() ? nullptr : &it->second;
}

Value get_attribute(const Value& object, const std::string& path) {
  Value current = object;
  std::size_t start = 0;
  while (true) {
    const std::size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (current.is_dict()) {
      const Value* v = current.as_dict().find(part);
      current = v ? *v : Value(Undefined{part});
    } else if (current.is_namespace()) {
      const Value* v = current.as_namespace().attributes.find(part);
      current = v ? *v : Value(Undefined{part});
    } else if (current.is_list() && !part.empty() &&
               std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      current = get_item(current, Value(static_cast<std::int64_t>(std::stoll(part.substr(0, 18)))));
    } else {
      return Undefined{part};
    }
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

Value get_item(const Value& object, const Value& index) {
  if (object.is_dict()) {
    if (!index.is_string()) return Undefined{index.str()};
    const Value* v = object.as_dict().find(index.as_string());
    return v ? *v : Value(Undefined{index.as_string()});
  }
  if (object.is_namespace()) {
    if (!index.is_string()) return Undefined{index.str()};
    return get_attribute(object, index.as_string());
  }
  if (object.is_list() || object.is_string()) {
    if (!index.is_int() && !index.is_bool()) return Undefined{index.str()};
    std::int64_t i = index.as_integer();
    if (object.is_list()) {
      const auto& list = object.as_list();
      const auto n = static_cast<std::int64_t>(list.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Undefined{"index " + std::to_string(index.as_integer())};
      return list[static_cast<std::size_t>(i)];
    }
    const std::u32string cps = py::decode(object.as_string());
    const auto n = static_cast<std::int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Undefined{"index " + std::to_string(index.as_integer())};
    std::string out;
    py::append_utf8(out, cps[static_cast<std::size_t>(i)]);
    return out;
  }
  return Undefined{index.str()};
}

Value slice(const Value& object, const Value& start, const Value& stop, const Value& step) {
  if (object.is_list()) {
    Value::List items = slice_items(object.as_list(), start, stop, step);
    return object.is_tuple() ? Value::tuple(std::move(items)) : Value(std::move(items));
  }
  if (object.is_string()) {
    std::u32string cps = py::decode(object.as_string());
    Value::List chars;
    chars.reserve(cps.size());
    for (char32_t cp : cps) chars.emplace_back(static_cast<std::int64_t>(cp));
    std::u32string out;
    for (const Value& c : slice_items(chars, start, stop, step)) out.push_back(static_cast<char32_t>(c.as_int()));
    return py::encode(out);
  }
  // jinja2 turns a failed subscript into Undefined.
  if (object.is_undefined()) return object;
  return Undefined{"slice of " + object.type_name()};
}

Value percent_format(const std::string& format, const Value& args, const Limits& limits) {
  // A tuple supplies one value per conversion; anything else is one value
  // (or, for a dict, the source of %(key)s lookups).
  const bool tuple = args.is_tuple();
  const Value::List single{args};
  const Value::List& values = tuple ? args.as_list() : single;
  std::size_t next = 0;
  bool used_mapping = false;
  std::string out;
  for (std::size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out += format[i];
      continue;
    }
    if (++i >= format.size()) fault("incomplete format");
    Value arg;
    bool have_arg = false;
    if (format[i] == '(') {
      const std::size_t close = format.find(')', i);
      if (close == std::string::npos) fault("incomplete format key");
      if (!args.is_dict()) fault("format requires a mapping");
      const std::string key = format.substr(i + 1, close - i - 1);
      const Value* v = args.as_dict().find(key);
      if (!v) fault("format key '" + key + "' not found");
      arg = *v;
      have_arg = used_mapping = true;
      i = close + 1;
    }
    std::string flags;
    while (i < format.size() && std::string_view("-+ 0#").find(format[i]) != std::string_view::npos) flags += format[i++];
    auto number = [&](void) -> int {
      if (i < format.size() && format[i] == '*') {
        ++i;
        if (next >= values.size()) fault("not enough arguments for format string");
        const Value& w = values[next++];
        if (!w.is_int()) fault("* wants int");
        return static_cast<int>(std::clamp<std::int64_t>(w.as_int(), -4096, 4096));
      }
      int n = 0;
      while (i < format.size() && format[i] >= '0' && format[i] <= '9') n = std::min(n * 10 + (format[i++] - '0'), 4096);
      return n;
    };
    int width = number();
    int precision = -1;
    if (i < format.size() && format[i] == '.') {
      ++i;
      precision = number();
    }
    while (i < format.size() && (format[i] == 'h' || format[i] == 'l' || format[i] == 'L')) ++i;
    if (i >= format.size()) fault("incomplete format");
    const char type = format[i];
    if (type == '%') {
      out += '%';
      continue;
    }
    if (!have_arg) {
      if (next >= values.size()) fault("not enough arguments for format string");
      arg = values[next++];
    }
    std::string text;
    switch (type) {
      case 's':
      case 'r':
      case 'a': {
        text = type == 's' ? arg.str() : arg.repr();
        if (precision >= 0) text = py::encode(py::decode(text).substr(0, static_cast<std::size_t>(precision)));
        break;
      }
      case 'c': {
        if (arg.is_string() && py::length(arg.as_string()) == 1) text = arg.as_string();
        else if (arg.is_int() && arg.as_int() >= 0 && arg.as_int() <= 0x10FFFF) py::append_utf8(text, static_cast<char32_t>(arg.as_int()));
        else fault("%c requires int or char");
        break;
      }
      case 'd': case 'i': case 'u': case 'x': case 'X': case 'o':
      case 'f': case 'F': case 'e': case 'E': case 'g': case 'G': {
        if (!arg.is_number()) fault(std::string("%") + type + " format: a real number is required, not " + arg.type_name());
        const bool integral = type == 'd' || type == 'i' || type == 'u' || type == 'x' || type == 'X' || type == 'o';
        std::string spec = "%" + flags;
        if (precision >= 0) spec += "." + std::to_string(std::min(precision, 512));
        char buf[1200];
        if (integral) {
          const double d = arg.as_double();
          if (arg.is_float() && (!std::isfinite(d) || std::fabs(d) >= 9.2e18)) fault("%d format: number out of range");
          const long long v = arg.is_float() ? static_cast<long long>(d) : static_cast<long long>(arg.as_integer());
          spec += "ll";
          spec += type == 'u' || type == 'i' ? 'd' : type;
          if ((type == 'x' || type == 'X' || type == 'o') && v < 0) {
            std::snprintf(buf, sizeof buf, spec.c_str(), -static_cast<unsigned long long>(v));
            text = std::string("-") + buf;
          } else {
            std::snprintf(buf, sizeof buf, spec.c_str(), v);
            text = buf;
          }
        } else {
          spec += type;
          std::snprintf(buf, sizeof buf, spec.c_str(), arg.as_double());
          text = buf;
          if (text == "nan" || text == "-nan" || text == "NAN" || text == "-NAN") text = type < 'a' ? "NAN" : "nan";
        }
        break;
      }
      default:
        fault(std::string("unsupported format character '") + type + "'");
    }
    const auto len = static_cast<int>(py::length(text));
    if (width > len) {
      const bool left = flags.find('-') != std::string::npos;
      const bool zero = flags.find('0') != std::string::npos && type != 's' && type != 'r' && type != 'c';
      const std::string pad(static_cast<std::size_t>(width - len), zero && !left ? '0' : ' ');
      if (left) {
        text += pad;
      } else if (zero && !text.empty() && (text[0] == '-' || text[0] == '+' || text[0] == ' ')) {
        text = text.substr(0, 1) + pad + text.substr(1);
      } else {
        text = pad + text;
      }
    }
    out += text;
    check_string_size(out.size(), limits);
  }
  if (tuple && next < values.size()) fault("not all arguments converted during string formatting");
  // Python treats any non-tuple, non-str object with __getitem__ (dict, list) as a mapping.
  if (!tuple && !used_mapping && next == 0 && !args.is_dict() && !args.is_list() && !args.is_undefined()) {
    fault("not all arguments converted during string formatting");
  }
  return out;
}

bool contains(const Value& haystack, const Value& needle) {
  if (haystack.is_string()) {
    if (!needle.is_string()) fault("'in <string>' requires string as left operand, not " + needle.type_name());
    return haystack.as_string().find(needle.as_string()) != std::string::npos;
  }
  if (haystack.is_list()) {
    const auto& list = haystack.as_list();
    return std::find(list.begin(), list.end(), needle) != list.end();
  }
  if (haystack.is_dict()) return needle.is_string() && haystack.as_dict().find(needle.as_string()) != nullptr;
  if (haystack.is_undefined()) return false;
  fault("argument of type '" + haystack.type_name() + "' is not iterable");
}

}  // namespace neuron::chat::builtins
