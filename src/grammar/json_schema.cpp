#include "grammar/json_schema.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <optional>
#include <string_view>

#include "util/error.hpp"

namespace neuron::grammar {

namespace {

using json = nlohmann::ordered_json;

constexpr int kMaxIndent = 16;     // spaces after a newline in whitespace
constexpr int kMaxIntDigits = 18;  // digits of a number's integer part
constexpr int kMaxFracDigits = 18;
constexpr int kMaxExpDigits = 3;

[[noreturn]] void refuse(const std::string& where, const std::string& what) {
  fail(errc::invalid_argument, where.empty() ? what : where + ": " + what);
}

std::string dump_json(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::strict); }

// Rules every constraint shares, made on first use.
class Common {
 public:
  explicit Common(GrammarBuilder& b) : b_(b) {}

  std::uint32_t ws() {
    if (ws_) return *ws_;
    // indent_k: up to k more spaces.
    std::uint32_t indent = b_.rule("indent0");
    b_.alt(indent, {});
    for (int k = 1; k <= kMaxIndent; ++k) {
      std::uint32_t next = b_.rule("indent" + std::to_string(k));
      b_.alt(next, {});
      b_.alt(next, {lit(' '), GrammarBuilder::ref(indent)});
      indent = next;
    }
    const std::uint32_t r = b_.rule("ws");
    b_.alt(r, {});
    b_.alt(r, {lit(' ')});
    b_.alt(r, {lit('\n'), GrammarBuilder::ref(indent)});
    ws_ = r;
    return r;
  }

  // Printable ASCII a string may hold unescaped.
  static ByteSet plain() {
    ByteSet s;
    s.add_range(0x20, 0x7f);
    s.remove('"');
    s.remove('\\');
    return s;
  }

  // One character of a length-bounded string: a plain byte, an escape, or a
  // UTF-8 multi-byte character of the Basic Multilingual Plane. Characters
  // past it are left out: JSON Schema counts them as one, JavaScript (zod's
  // .max()) as two, so either count holds.
  std::uint32_t character() {
    if (char_) return *char_;
    const std::uint32_t r = b_.rule("char");
    b_.alt(r, {b_.set(plain())});
    b_.alt(r, {lit('\\'), GrammarBuilder::ref(escape())});
    for (const auto& seq : utf8_multibyte(/*astral=*/false)) b_.alt(r, seq);
    char_ = r;
    return r;
  }

  // A string's content and closing quote, any length.
  std::uint32_t string_rest() {
    if (string_rest_) return *string_rest_;
    const std::uint32_t r = b_.rule("string_rest");
    string_rest_ = r;
    const Element loop = b_.star(plain());
    b_.alt(r, {loop, lit('"')});
    b_.alt(r, {loop, lit('\\'), GrammarBuilder::ref(escape()), GrammarBuilder::ref(r)});
    for (auto seq : utf8_multibyte()) {
      seq.insert(seq.begin(), loop);
      seq.push_back(GrammarBuilder::ref(r));
      b_.alt(r, seq);
    }
    return r;
  }

  std::uint32_t string() {
    if (string_) return *string_;
    const std::uint32_t r = b_.rule("string");
    b_.alt(r, {lit('"'), GrammarBuilder::ref(string_rest())});
    string_ = r;
    return r;
  }

  // `digits` more digits at most.
  std::uint32_t digits(int max, const std::string& name) {
    std::uint32_t r = b_.rule(name + "0");
    b_.alt(r, {});
    for (int k = 1; k <= max; ++k) {
      const std::uint32_t next = b_.rule(name + std::to_string(k));
      b_.alt(next, {});
      b_.alt(next, {b_.set(digit()), GrammarBuilder::ref(r)});
      r = next;
    }
    return r;
  }

  // Unsigned integer part: 0, or up to kMaxIntDigits digits without a leading 0; `positive` excludes 0.
  std::uint32_t int_abs(bool positive) {
    std::optional<std::uint32_t>& slot = positive ? pos_int_ : nat_int_;
    if (slot) return *slot;
    if (!more_int_) more_int_ = digits(kMaxIntDigits - 1, "int_digits");
    const std::uint32_t r = b_.rule(positive ? "positive_integer" : "natural_integer");
    ByteSet nonzero;
    nonzero.add_range('1', '9');
    if (!positive) b_.alt(r, {lit('0')});
    b_.alt(r, {b_.set(nonzero), GrammarBuilder::ref(*more_int_)});
    slot = r;
    return r;
  }

  std::uint32_t integer(bool allow_negative, bool positive) {
    const std::uint32_t abs = int_abs(positive);
    if (!allow_negative) return abs;
    const std::uint32_t r = b_.rule("integer");
    b_.alt(r, {GrammarBuilder::ref(abs)});
    b_.alt(r, {lit('-'), GrammarBuilder::ref(abs)});
    return r;
  }

  std::uint32_t number(bool allow_negative) {
    std::optional<std::uint32_t>& slot = allow_negative ? number_ : nonneg_number_;
    if (slot) return *slot;
    const std::uint32_t frac_more = digits(kMaxFracDigits - 1, "frac_digits");
    const std::uint32_t exp_more = digits(kMaxExpDigits - 1, "exp_digits");
    const std::uint32_t frac = b_.rule("fraction");
    b_.alt(frac, {});
    b_.alt(frac, {lit('.'), b_.set(digit()), GrammarBuilder::ref(frac_more)});
    const std::uint32_t exp = b_.rule("exponent");
    ByteSet e, sign;
    e.add('e');
    e.add('E');
    sign.add('+');
    sign.add('-');
    b_.alt(exp, {});
    b_.alt(exp, {b_.set(e), b_.set(digit()), GrammarBuilder::ref(exp_more)});
    b_.alt(exp, {b_.set(e), b_.set(sign), b_.set(digit()), GrammarBuilder::ref(exp_more)});
    const std::uint32_t r = b_.rule(allow_negative ? "number" : "nonnegative_number");
    const std::vector<Element> tail = {GrammarBuilder::ref(int_abs(false)), GrammarBuilder::ref(frac), GrammarBuilder::ref(exp)};
    b_.alt(r, tail);
    if (allow_negative) {
      std::vector<Element> neg = {lit('-')};
      neg.insert(neg.end(), tail.begin(), tail.end());
      b_.alt(r, neg);
    }
    slot = r;
    return r;
  }

  std::uint32_t literal_rule(const std::string& text, const std::string& name) {
    const std::uint32_t r = b_.rule(name);
    std::vector<Element> seq;
    b_.literal(seq, text);
    b_.alt(r, seq);
    return r;
  }

  std::uint32_t boolean() {
    if (boolean_) return *boolean_;
    const std::uint32_t r = b_.rule("boolean");
    std::vector<Element> t, f;
    b_.literal(t, "true");
    b_.literal(f, "false");
    b_.alt(r, t);
    b_.alt(r, f);
    boolean_ = r;
    return r;
  }

  std::uint32_t null() {
    if (!null_) null_ = literal_rule("null", "null");
    return *null_;
  }

  // Any JSON value / object / array.
  std::uint32_t any_value() {
    if (!any_) build_any();
    return *any_;
  }
  std::uint32_t any_object() {
    if (!any_) build_any();
    return *any_object_;
  }
  std::uint32_t any_array() {
    if (!any_) build_any();
    return *any_array_;
  }

  Element lit(char c) { return b_.set(ByteSet::of(static_cast<std::uint8_t>(c))); }

 private:
  static ByteSet digit() {
    ByteSet s;
    s.add_range('0', '9');
    return s;
  }

  static ByteSet range(std::uint8_t lo, std::uint8_t hi) {
    ByteSet s;
    s.add_range(lo, hi);
    return s;
  }

  // Well-formed UTF-8 sequences of 2 to 4 bytes (Unicode table 3-7).
  std::vector<std::vector<Element>> utf8_multibyte(bool astral = true) {
    const Element cont = b_.set(range(0x80, 0xbf));
    ByteSet e1_ec;
    e1_ec.add_range(0xe1, 0xec);
    e1_ec.add(0xee);
    e1_ec.add(0xef);
    std::vector<std::vector<Element>> out = {
        {b_.set(range(0xc2, 0xdf)), cont},
        {b_.set(ByteSet::of(0xe0)), b_.set(range(0xa0, 0xbf)), cont},
        {b_.set(e1_ec), cont, cont},
        {b_.set(ByteSet::of(0xed)), b_.set(range(0x80, 0x9f)), cont},
    };
    if (astral) {
      out.push_back({b_.set(ByteSet::of(0xf0)), b_.set(range(0x90, 0xbf)), cont, cont});
      out.push_back({b_.set(range(0xf1, 0xf3)), cont, cont, cont});
      out.push_back({b_.set(ByteSet::of(0xf4)), b_.set(range(0x80, 0x8f)), cont, cont});
    }
    return out;
  }

  // After a backslash: a one-letter escape or \uXXXX outside the surrogates.
  std::uint32_t escape() {
    if (escape_) return *escape_;
    const std::uint32_t r = b_.rule("escape");
    ByteSet simple;
    for (char c : std::string_view("\"\\/bfnrt")) simple.add(static_cast<std::uint8_t>(c));
    b_.alt(r, {b_.set(simple)});
    ByteSet hex, lead_ok, d, low8;
    hex.add_range('0', '9');
    hex.add_range('a', 'f');
    hex.add_range('A', 'F');
    lead_ok = hex;
    lead_ok.remove('d');
    lead_ok.remove('D');
    d.add('d');
    d.add('D');
    low8.add_range('0', '7');
    const Element h = b_.set(hex);
    b_.alt(r, {lit('u'), b_.set(lead_ok), h, h, h});
    b_.alt(r, {lit('u'), b_.set(d), b_.set(low8), h, h});
    escape_ = r;
    return r;
  }

  void build_any() {
    const std::uint32_t value = b_.rule("any");
    any_ = value;
    const std::uint32_t obj = b_.rule("any_object"), obj_body = b_.rule("any_object_body"),
                        obj_rest = b_.rule("any_object_rest");
    const std::uint32_t arr = b_.rule("any_array"), arr_body = b_.rule("any_array_body"), arr_rest = b_.rule("any_array_rest");
    any_object_ = obj;
    any_array_ = arr;
    const auto R = GrammarBuilder::ref;
    const Element w = R(ws());
    b_.alt(value, {R(obj)});
    b_.alt(value, {R(arr)});
    b_.alt(value, {R(string())});
    b_.alt(value, {R(number(true))});
    b_.alt(value, {R(boolean())});
    b_.alt(value, {R(null())});
    b_.alt(obj, {lit('{'), w, R(obj_body)});
    b_.alt(obj_body, {lit('}')});
    b_.alt(obj_body, {R(string()), lit(':'), w, R(value), R(obj_rest)});
    b_.alt(obj_rest, {w, lit('}')});
    b_.alt(obj_rest, {lit(','), w, R(string()), lit(':'), w, R(value), R(obj_rest)});
    b_.alt(arr, {lit('['), w, R(arr_body)});
    b_.alt(arr_body, {lit(']')});
    b_.alt(arr_body, {R(value), R(arr_rest)});
    b_.alt(arr_rest, {w, lit(']')});
    b_.alt(arr_rest, {lit(','), w, R(value), R(arr_rest)});
  }

  GrammarBuilder& b_;
  std::optional<std::uint32_t> ws_, char_, string_rest_, string_, more_int_, pos_int_, nat_int_, number_, nonneg_number_,
      boolean_, null_, any_, any_object_, any_array_, escape_;
};

// Keywords not listed here only annotate (title, format, $defs, x-*) and are
// ignored; these constrain values in ways the grammar does not express.
bool refused_keyword(std::string_view k) {
  static constexpr std::string_view kRefused[] = {
      "pattern", "patternProperties", "propertyNames", "minProperties", "maxProperties", "dependencies",
      "dependentRequired", "dependentSchemas", "if", "then", "else", "not", "contains", "minContains",
      "maxContains", "prefixItems", "additionalItems", "unevaluatedProperties", "unevaluatedItems", "multipleOf",
      "maximum", "exclusiveMaximum", "$dynamicRef", "$recursiveRef", "$dynamicAnchor", "$recursiveAnchor"};
  return std::find(std::begin(kRefused), std::end(kRefused), k) != std::end(kRefused);
}

std::string child_path(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

// Compiles one root schema (refs resolve against it) into rules of a shared builder.
class SchemaCompiler {
 public:
  SchemaCompiler(GrammarBuilder& b, Common& common, const json& root, std::string where)
      : b_(b), c_(common), root_(root), where_(std::move(where)) {}

  // The rule for the root schema; every $ref reached is compiled before returning.
  std::uint32_t compile_root() {
    const std::uint32_t r = compile(root_, "");
    while (!pending_.empty()) {
      auto [target, rule, path] = pending_.front();
      pending_.pop_front();
      b_.alt(rule, {GrammarBuilder::ref(compile(*target, path))});
    }
    return r;
  }

 private:
  std::string at(const std::string& path) const {
    const std::string p = path.empty() ? "the schema" : path;
    return where_.empty() ? p : where_ + (path.empty() ? "" : "." + path);
  }
  [[noreturn]] void refuse_at(const std::string& path, const std::string& what) const { refuse(at(path), what); }

  std::uint32_t compile(const json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return c_.any_value();
      return b_.rule("false@" + path);  // no alternatives: admits nothing (pruned from an anyOf)
    }
    if (!s.is_object()) refuse_at(path, "a schema must be an object or a boolean, got " + std::string(s.type_name()));
    for (const auto& [k, v] : s.items()) {
      if (refused_keyword(k) || (k == "uniqueItems" && v.is_boolean() && v.get<bool>()))
        refuse_at(path, "'" + k + "' is not supported by neuron's constrained decoding");
    }
    if (auto it = s.find("nullable"); it != s.end() && it->is_boolean() && it->get<bool>()) {
      json inner = s;
      inner.erase("nullable");
      const std::uint32_t r = b_.rule("nullable@" + path);
      b_.alt(r, {GrammarBuilder::ref(compile(inner, path))});
      b_.alt(r, {GrammarBuilder::ref(c_.null())});
      return r;
    }
    if (auto it = s.find("$ref"); it != s.end()) return ref(*it, path);
    if (auto it = s.find("allOf"); it != s.end()) {
      if (!it->is_array() || it->size() != 1)
        refuse_at(path, "'allOf' is supported only with exactly one schema");
      return compile((*it)[0], child_path(path, "allOf[0]"));
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      auto it = s.find(key);
      if (it == s.end()) continue;
      if (!it->is_array() || it->empty()) refuse_at(path, std::string("'") + key + "' must be a non-empty array");
      const std::uint32_t r = b_.rule(std::string(key) + "@" + path);
      for (std::size_t i = 0; i < it->size(); ++i)
        b_.alt(r, {GrammarBuilder::ref(compile((*it)[i], child_path(path, std::string(key) + "[" + std::to_string(i) + "]")))});
      return r;
    }
    if (auto it = s.find("const"); it != s.end()) return literals({&*it}, path);
    if (auto it = s.find("enum"); it != s.end()) {
      if (!it->is_array() || it->empty()) refuse_at(path, "'enum' must be a non-empty array");
      std::vector<const json*> values;
      for (const auto& v : *it) values.push_back(&v);
      return literals(values, path);
    }
    auto type = s.find("type");
    if (type == s.end()) {
      if (s.contains("properties") || s.contains("required") || s.contains("additionalProperties")) return typed(s, "object", path);
      if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) return typed(s, "array", path);
      if (s.contains("minLength") || s.contains("maxLength")) return typed(s, "string", path);
      return c_.any_value();
    }
    if (type->is_string()) return typed(s, type->get<std::string>(), path);
    if (!type->is_array() || type->empty()) refuse_at(path, "'type' must be a string or a non-empty array of strings");
    const std::uint32_t r = b_.rule("types@" + path);
    for (const auto& t : *type) {
      if (!t.is_string()) refuse_at(path, "'type' must be a string or a non-empty array of strings");
      b_.alt(r, {GrammarBuilder::ref(typed(s, t.get<std::string>(), path))});
    }
    return r;
  }

  std::uint32_t ref(const json& target, const std::string& path) {
    if (!target.is_string()) refuse_at(path, "'$ref' must be a string");
    const std::string name = target.get<std::string>();
    if (auto it = refs_.find(name); it != refs_.end()) return it->second;
    if (name.empty() || name[0] != '#')
      refuse_at(path, "'$ref' \"" + name + "\" is not supported: only references inside the schema (\"#...\") are");
    const json* resolved = nullptr;
    try {
      resolved = &root_.at(json::json_pointer(name.substr(1)));
    } catch (const std::exception&) {
      refuse_at(path, "'$ref' \"" + name + "\" does not resolve to a schema in this document");
    }
    const std::uint32_t r = b_.rule("ref:" + name);
    refs_.emplace(name, r);
    pending_.push_back({resolved, r, name});  // compiled later: refs may be recursive
    return r;
  }

  // A set of JSON values, as a trie of their texts (a large enum stays one parse path).
  std::uint32_t literals(const std::vector<const json*>& values, const std::string& path) {
    std::vector<std::string> texts;
    for (const json* v : values) {
      try {
        texts.push_back(dump_json(*v));
      } catch (const std::exception&) {
        refuse_at(path, "an enum or const value is not valid UTF-8");
      }
    }
    std::sort(texts.begin(), texts.end());
    texts.erase(std::unique(texts.begin(), texts.end()), texts.end());
    const std::uint32_t root = b_.rule("enum@" + path);
    struct Work {
      std::size_t lo, hi, depth;
      std::uint32_t rule;
    };
    std::vector<Work> work{{0, texts.size(), 0, root}};
    while (!work.empty()) {
      const Work w = work.back();
      work.pop_back();
      std::size_t lo = w.lo;
      if (texts[lo].size() == w.depth) {  // a value ends here (sorted: it comes first)
        b_.alt(w.rule, {});
        ++lo;
      }
      while (lo < w.hi) {
        const char c = texts[lo][w.depth];
        std::size_t hi = lo;
        while (hi < w.hi && texts[hi][w.depth] == c) ++hi;
        // The common prefix of [lo, hi) past depth, as one run of bytes.
        std::size_t end = w.depth + 1;
        while (end < texts[lo].size() && end < texts[hi - 1].size() && texts[lo][end] == texts[hi - 1][end]) ++end;
        std::vector<Element> seq;
        b_.literal(seq, std::string_view(texts[lo]).substr(w.depth, end - w.depth));
        if (!(hi - lo == 1 && texts[lo].size() == end)) {
          const std::uint32_t next = b_.rule("enum@" + path);
          seq.push_back(GrammarBuilder::ref(next));
          work.push_back({lo, hi, end, next});
        }
        b_.alt(w.rule, seq);
        lo = hi;
      }
    }
    return root;
  }

  static std::optional<std::int64_t> count(const json& s, const char* key, const std::string& where) {
    auto it = s.find(key);
    if (it == s.end()) return std::nullopt;
    if (!it->is_number_integer() || (it->is_number_integer() && it->get<std::int64_t>() < 0))
      refuse(where, std::string("'") + key + "' must be a non-negative integer");
    if (it->is_number_unsigned() ? it->get<std::uint64_t>() > static_cast<std::uint64_t>(kMaxRepeat)
                                 : it->get<std::int64_t>() > kMaxRepeat)
      refuse(where, std::string("'") + key + "' above " + std::to_string(kMaxRepeat) + " is not supported");
    return it->get<std::int64_t>();
  }

  std::uint32_t typed(const json& s, const std::string& type, const std::string& path) {
    if (type == "object") return object(s, path);
    if (type == "array") return array(s, path);
    if (type == "string") return string(s, path);
    if (type == "integer" || type == "number") return number(s, type == "integer", path);
    if (type == "boolean") return c_.boolean();
    if (type == "null") return c_.null();
    refuse_at(path, "unknown type '" + type + "'");
  }

  std::uint32_t number(const json& s, bool integer, const std::string& path) {
    bool negative = true, positive = false;
    if (auto it = s.find("minimum"); it != s.end()) {
      if (!it->is_number()) refuse_at(path, "'minimum' must be a number");
      const double m = it->get<double>();
      if (m == 0) negative = false;
      else if (integer && m == 1) negative = false, positive = true;
      else refuse_at(path, "'minimum' other than 0 (or 1 for integers) is not supported");
    }
    if (auto it = s.find("exclusiveMinimum"); it != s.end()) {
      if (!it->is_number() || it->get<double>() != 0 || !integer)
        refuse_at(path, "'exclusiveMinimum' is supported only as 0 on integers");
      negative = false;
      positive = true;
    }
    return integer ? c_.integer(negative, positive) : c_.number(negative);
  }

  std::uint32_t string(const json& s, const std::string& path) {
    const std::int64_t min = count(s, "minLength", at(path)).value_or(0);
    const std::optional<std::int64_t> max = count(s, "maxLength", at(path));
    if (min == 0 && !max) return c_.string();
    if (max && *max < min) return b_.rule("empty@" + path);  // admits nothing
    // count_k: k characters written so far.
    const std::int64_t last = max ? *max : min;
    const auto R = GrammarBuilder::ref;
    std::uint32_t next = 0;
    for (std::int64_t k = last; k >= 0; --k) {
      const std::uint32_t r = b_.rule("string" + std::to_string(k) + "@" + path);
      if (k == last && !max) b_.alt(r, {R(c_.string_rest())});  // at least min written: anything more
      else {
        if (k >= min) b_.alt(r, {c_.lit('"')});
        if (k < last) b_.alt(r, {R(c_.character()), R(next)});
      }
      next = r;
    }
    const std::uint32_t r = b_.rule("string@" + path);
    b_.alt(r, {c_.lit('"'), R(next)});
    return r;
  }

  std::uint32_t array(const json& s, const std::string& path) {
    const std::int64_t min = count(s, "minItems", at(path)).value_or(0);
    const std::optional<std::int64_t> max = count(s, "maxItems", at(path));
    if (max && *max < min) return b_.rule("empty@" + path);
    const json* items = nullptr;
    if (auto it = s.find("items"); it != s.end()) {
      if (it->is_array()) refuse_at(path, "'items' as an array (tuples) is not supported");
      items = &*it;
    }
    const std::uint32_t item = items ? compile(*items, child_path(path, "items")) : c_.any_value();
    const auto R = GrammarBuilder::ref;
    const Element w = R(c_.ws());
    // after_k: k items written (k >= 1), what may follow.
    const std::int64_t last = max ? *max : std::max<std::int64_t>(min, 1);
    std::uint32_t next = 0;
    for (std::int64_t k = last; k >= 1; --k) {
      const std::uint32_t r = b_.rule("items" + std::to_string(k) + "@" + path);
      if (k >= min) b_.alt(r, {w, c_.lit(']')});
      if (k < last) b_.alt(r, {c_.lit(','), w, R(item), R(next)});
      else if (!max) b_.alt(r, {c_.lit(','), w, R(item), R(r)});  // unbounded: loop
      next = r;
    }
    const std::uint32_t r = b_.rule("array@" + path);
    if (min == 0) b_.alt(r, {c_.lit('['), w, c_.lit(']')});
    if (last >= 1) b_.alt(r, {c_.lit('['), w, R(item), R(next)});
    return r;
  }

  // An extra key: any ASCII string without escapes that is none of `names`.
  std::uint32_t extra_key(std::vector<std::string> names, const std::string& path) {
    std::sort(names.begin(), names.end());
    const ByteSet plain = Common::plain();
    const std::uint32_t free_rest = b_.rule("key_rest@" + path);
    b_.alt(free_rest, {b_.star(plain), c_.lit('"')});
    struct Work {
      std::size_t lo, hi, depth;
      std::uint32_t rule;
    };
    const std::uint32_t root = b_.rule("key@" + path);
    std::vector<Work> work{{0, names.size(), 0, root}};
    while (!work.empty()) {
      const Work w = work.back();
      work.pop_back();
      std::size_t lo = w.lo;
      if (lo < w.hi && names[lo].size() == w.depth) ++lo;  // a name ends here: no closing quote
      else b_.alt(w.rule, {c_.lit('"')});
      ByteSet other = plain;
      while (lo < w.hi) {
        const auto c = static_cast<std::uint8_t>(names[lo][w.depth]);
        std::size_t hi = lo;
        while (hi < w.hi && static_cast<std::uint8_t>(names[hi][w.depth]) == c) ++hi;
        other.remove(c);
        const std::uint32_t next = b_.rule("key@" + path);
        b_.alt(w.rule, {b_.set(ByteSet::of(c)), GrammarBuilder::ref(next)});
        work.push_back({lo, hi, w.depth + 1, next});
        lo = hi;
      }
      if (!other.empty()) b_.alt(w.rule, {b_.set(other), GrammarBuilder::ref(free_rest)});
    }
    const std::uint32_t r = b_.rule("extra_key@" + path);
    b_.alt(r, {c_.lit('"'), GrammarBuilder::ref(root)});
    return r;
  }

  std::uint32_t object(const json& s, const std::string& path) {
    struct Prop {
      std::string key;  // the key as JSON text, quotes included
      std::string raw;  // its characters (for excluding it from extra keys)
      std::uint32_t value;
      bool required;
    };
    std::vector<Prop> props;
    std::vector<std::string> required;
    if (auto it = s.find("required"); it != s.end()) {
      if (!it->is_array()) refuse_at(path, "'required' must be an array of strings");
      for (const auto& r : *it) {
        if (!r.is_string()) refuse_at(path, "'required' must be an array of strings");
        required.push_back(r.get<std::string>());
      }
    }
    auto is_required = [&](const std::string& k) { return std::find(required.begin(), required.end(), k) != required.end(); };
    if (auto it = s.find("properties"); it != s.end()) {
      if (!it->is_object()) refuse_at(path, "'properties' must be an object");
      for (const auto& [k, v] : it->items())
        props.push_back({dump_json(json(k)), k, compile(v, child_path(path, "properties." + k)), is_required(k)});
    }
    for (const std::string& k : required)  // required but not described: any value
      if (std::none_of(props.begin(), props.end(), [&](const Prop& p) { return p.raw == k; }))
        props.push_back({dump_json(json(k)), k, c_.any_value(), true});

    std::optional<std::uint32_t> extra_value;
    if (auto it = s.find("additionalProperties"); it != s.end()) {
      if (it->is_boolean()) {
        if (it->get<bool>()) extra_value = c_.any_value();
      } else {
        extra_value = compile(*it, child_path(path, "additionalProperties"));
      }
    }
    const auto R = GrammarBuilder::ref;
    const Element w = R(c_.ws());
    auto kv = [&](const Prop& p) {
      std::vector<Element> seq;
      b_.literal(seq, p.key);
      seq.push_back(c_.lit(':'));
      seq.push_back(w);
      seq.push_back(R(p.value));
      return seq;
    };
    // first_i: members i.. with none written yet; more_i: some written (each next one after a comma).
    const std::size_t n = props.size();
    std::uint32_t first_next = b_.rule("members_end@" + path), more_next = b_.rule("members_more_end@" + path);
    b_.alt(first_next, {c_.lit('}')});
    b_.alt(more_next, {w, c_.lit('}')});
    if (extra_value) {
      std::vector<std::string> names;
      for (const auto& p : props) {
        if (std::any_of(p.raw.begin(), p.raw.end(), [](char ch) { return static_cast<unsigned char>(ch) >= 0x80; }) ||
            p.key.size() != p.raw.size() + 2)
          continue;  // extra keys are plain ASCII without escapes: they never spell this name
        names.push_back(p.raw);
      }
      const std::uint32_t key = extra_key(std::move(names), path);
      std::vector<Element> extra = {R(key), c_.lit(':'), w, R(*extra_value)};
      std::vector<Element> more_extra = {c_.lit(','), w};
      more_extra.insert(more_extra.end(), extra.begin(), extra.end());
      more_extra.push_back(R(more_next));
      extra.push_back(R(more_next));
      b_.alt(first_next, extra);
      b_.alt(more_next, more_extra);
    }
    for (std::size_t i = n; i-- > 0;) {
      const std::uint32_t first = b_.rule("members" + std::to_string(i) + "@" + path);
      const std::uint32_t more = b_.rule("members_more" + std::to_string(i) + "@" + path);
      std::vector<Element> a = kv(props[i]);
      a.push_back(R(more_next));
      b_.alt(first, a);
      std::vector<Element> m = {c_.lit(','), w};
      const auto body = kv(props[i]);
      m.insert(m.end(), body.begin(), body.end());
      m.push_back(R(more_next));
      b_.alt(more, m);
      if (!props[i].required) {
        b_.alt(first, {R(first_next)});
        b_.alt(more, {R(more_next)});
      }
      first_next = first;
      more_next = more;
    }
    const std::uint32_t r = b_.rule("object@" + path);
    b_.alt(r, {c_.lit('{'), w, R(first_next)});
    return r;
  }

  GrammarBuilder& b_;
  Common& c_;
  const json& root_;
  std::string where_;
  std::map<std::string, std::uint32_t> refs_;
  struct Pending {
    const json* target;
    std::uint32_t rule;
    std::string path;
  };
  std::deque<Pending> pending_;
};

}  // namespace

Grammar compile_json_schema(const nlohmann::ordered_json& schema) {
  GrammarBuilder b;
  Common common(b);
  SchemaCompiler compiler(b, common, schema, "");
  const std::uint32_t root = compiler.compile_root();
  return std::move(b).finish(root);
}

Grammar compile_json_object() {
  GrammarBuilder b;
  Common common(b);
  const std::uint32_t root = common.any_object();
  return std::move(b).finish(root);
}

Grammar compile_tool_call(const std::vector<ToolSpec>& tools, chat::ToolCallFormat format) {
  if (tools.empty()) fail(errc::invalid_argument, "a tool call needs at least one tool");
  GrammarBuilder b;
  Common common(b);
  const std::uint32_t calls = b.rule("tool_calls");
  for (std::size_t i = 0; i < tools.size(); ++i) {
    const std::string where = "tools[" + std::to_string(i) + "].function.parameters";
    std::uint32_t args = 0;
    if (tools[i].parameters.is_null()) {
      args = common.any_object();
    } else {
      SchemaCompiler compiler(b, common, tools[i].parameters, where);
      args = compiler.compile_root();
    }
    std::vector<Element> seq;
    const char* args_key = format == chat::ToolCallFormat::llama_json ? "parameters" : "arguments";
    b.literal(seq, "{\"name\": " + dump_json(json(tools[i].name)) + ", \"" + args_key + "\": ");
    seq.push_back(GrammarBuilder::ref(args));
    b.literal(seq, "}");
    b.alt(calls, seq);
  }
  if (format == chat::ToolCallFormat::llama_json) return std::move(b).finish(calls);  // the answer is the call
  const std::uint32_t root = b.rule("tool_call");
  std::vector<Element> seq;
  b.literal(seq, "<tool_call>\n");
  seq.push_back(GrammarBuilder::ref(calls));
  b.literal(seq, "\n</tool_call>");
  b.alt(root, seq);
  return std::move(b).finish(root);
}

}  // namespace neuron::grammar
