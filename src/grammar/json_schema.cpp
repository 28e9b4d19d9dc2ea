#include "grammar/json_schema.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>

#include "grammar/number_range.hpp"
#include "grammar/regex.hpp"
#include "util/error.hpp"

namespace neuron::grammar {

namespace {

using json = nlohmann::ordered_json;

constexpr int kMaxIndent = 16;     // spaces after a newline in whitespace
constexpr int kMaxIntDigits = 18;  // digits of a number's integer part
constexpr int kMaxExpDigits = 2;   // so an unbounded number stays below 1e118: a finite double

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

  // Unsigned integer part of an unbounded number: 0, or up to kMaxIntDigits digits without a leading 0.
  std::uint32_t int_abs() {
    if (nat_int_) return *nat_int_;
    const std::uint32_t more = digits(kMaxIntDigits - 1, "int_digits");
    const std::uint32_t r = b_.rule("natural_integer");
    ByteSet nonzero;
    nonzero.add_range('1', '9');
    b_.alt(r, {lit('0')});
    b_.alt(r, {b_.set(nonzero), GrammarBuilder::ref(more)});
    nat_int_ = r;
    return r;
  }

  // Integers in [lo, hi] that are multiples of m (number_range.hpp), shared by equal bounds.
  std::uint32_t integer(std::int64_t lo, std::int64_t hi, std::uint64_t m) {
    const auto key = std::make_tuple(lo, hi, m);
    if (auto it = integers_.find(key); it != integers_.end()) return it->second;
    const std::uint32_t r = integer_range(b_, lo, hi, m);
    integers_.emplace(key, r);
    return r;
  }

  // Any number (no bounds): an exponent of at most kMaxExpDigits keeps it a finite double.
  std::uint32_t number() {
    if (number_) return *number_;
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
    const std::uint32_t r = b_.rule("number");
    const std::vector<Element> tail = {GrammarBuilder::ref(int_abs()), GrammarBuilder::ref(frac), GrammarBuilder::ref(exp)};
    b_.alt(r, tail);
    std::vector<Element> neg = {lit('-')};
    neg.insert(neg.end(), tail.begin(), tail.end());
    b_.alt(r, neg);
    number_ = r;
    return r;
  }

  // One character of a string's content from `chars`, as JSON writes it:
  // printable ASCII as itself, '"' '\\' tab, newline and carriage return
  // escaped, other characters as UTF-8 (of the Basic Multilingual Plane
  // only when `bmp`, as character()). Other control characters are never written.
  std::uint32_t code_set(const CodeSet& chars, bool bmp) {
    const auto key = std::pair(chars, bmp);
    if (auto it = code_sets_.find(key); it != code_sets_.end()) return it->second;
    const std::uint32_t r = b_.rule("chars");
    code_sets_.emplace(key, r);
    ByteSet ascii;
    for (const auto& [lo, hi] : chars.ranges())
      for (char32_t c = std::max<char32_t>(lo, 0x20); c <= std::min<char32_t>(hi, 0x7f); ++c) ascii.add(static_cast<std::uint8_t>(c));
    ascii.remove('"');
    ascii.remove('\\');
    if (!ascii.empty()) b_.alt(r, {b_.set(ascii)});
    for (auto [c, e] : {std::pair{U'"', '"'}, {U'\\', '\\'}, {U'\t', 't'}, {U'\n', 'n'}, {U'\r', 'r'}})
      if (chars.has(c)) b_.alt(r, {lit('\\'), lit(e)});
    CodeSet wide = chars.intersect(CodeSet::of(0x80, bmp ? 0xffff : kMaxCodePoint)).intersect(CodeSet::of(0xd800, 0xdfff).complement());
    for (const auto& [lo, hi] : wide.ranges())
      for (const auto& seq : utf8_sequences(lo, hi)) {
        std::vector<Element> alt;
        for (const auto& [blo, bhi] : seq) alt.push_back(b_.set(range(blo, bhi)));
        b_.alt(r, alt);
      }
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

  // The UTF-8 encodings of the code points lo..hi (no surrogates), as
  // sequences of byte ranges (the split of RE2's and regex-syntax's utf8 ranges).
  static std::vector<std::vector<std::pair<std::uint8_t, std::uint8_t>>> utf8_sequences(char32_t lo, char32_t hi) {
    std::vector<std::vector<std::pair<std::uint8_t, std::uint8_t>>> out;
    std::vector<std::pair<char32_t, char32_t>> todo{{lo, hi}};
    auto encode = [](char32_t c, std::uint8_t* b) {
      if (c < 0x80) return b[0] = static_cast<std::uint8_t>(c), 1;
      if (c < 0x800) return b[0] = static_cast<std::uint8_t>(0xc0 | (c >> 6)), b[1] = static_cast<std::uint8_t>(0x80 | (c & 0x3f)), 2;
      if (c < 0x10000)
        return b[0] = static_cast<std::uint8_t>(0xe0 | (c >> 12)), b[1] = static_cast<std::uint8_t>(0x80 | ((c >> 6) & 0x3f)),
               b[2] = static_cast<std::uint8_t>(0x80 | (c & 0x3f)), 3;
      return b[0] = static_cast<std::uint8_t>(0xf0 | (c >> 18)), b[1] = static_cast<std::uint8_t>(0x80 | ((c >> 12) & 0x3f)),
             b[2] = static_cast<std::uint8_t>(0x80 | ((c >> 6) & 0x3f)), b[3] = static_cast<std::uint8_t>(0x80 | (c & 0x3f)), 4;
    };
    while (!todo.empty()) {
      auto [s, e] = todo.back();
      todo.pop_back();
      bool split = false;
      for (char32_t max : {char32_t{0x7f}, char32_t{0x7ff}, char32_t{0xffff}})
        if (s <= max && max < e) {
          todo.push_back({max + 1, e});
          todo.push_back({s, max});
          split = true;
          break;
        }
      if (split) continue;
      for (int i = 1; i < 4 && !split; ++i) {
        const char32_t m = (char32_t{1} << (6 * i)) - 1;
        if ((s & ~m) == (e & ~m)) continue;
        if ((s & m) != 0) {
          todo.push_back({(s | m) + 1, e});
          todo.push_back({s, s | m});
          split = true;
        } else if ((e & m) != m) {
          todo.push_back({e & ~m, e});
          todo.push_back({s, (e & ~m) - 1});
          split = true;
        }
      }
      if (split) continue;
      std::uint8_t bs[4], be[4];
      const int n = encode(s, bs);
      encode(e, be);
      std::vector<std::pair<std::uint8_t, std::uint8_t>> seq;
      for (int i = 0; i < n; ++i) seq.push_back({bs[i], be[i]});
      out.push_back(std::move(seq));
    }
    return out;
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

 private:
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
    b_.alt(value, {R(number())});
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
  std::optional<std::uint32_t> ws_, char_, string_rest_, string_, nat_int_, number_, boolean_, null_, any_, any_object_,
      any_array_, escape_;
  std::map<std::tuple<std::int64_t, std::int64_t, std::uint64_t>, std::uint32_t> integers_;
  std::map<std::pair<CodeSet, bool>, std::uint32_t> code_sets_;
};

// Keywords not listed here only annotate (title, $defs, x-*) or are compiled
// below; these constrain values in ways the grammar does not express.
bool refused_keyword(std::string_view k) {
  static constexpr std::string_view kRefused[] = {
      "patternProperties", "dependencies", "dependentRequired", "dependentSchemas", "if", "then", "else", "not",
      "contains", "minContains", "maxContains", "unevaluatedProperties", "unevaluatedItems", "$dynamicRef",
      "$recursiveRef", "$dynamicAnchor", "$recursiveAnchor"};
  return std::find(std::begin(kRefused), std::end(kRefused), k) != std::end(kRefused);
}

std::string child_path(const std::string& path, const std::string& key) { return path.empty() ? key : path + "." + key; }

// Compiles one root schema (refs resolve against it) into rules of a shared builder.
class SchemaCompiler {
 public:
  SchemaCompiler(GrammarBuilder& b, Common& common, const json& root, std::string where)
      : b_(b), c_(common), root_(root), where_(std::move(where)) {}

  // The rule for the root schema; every $ref reached is compiled before returning.
  std::uint32_t compile_root() { return compile_part(root_, ""); }
  // The rule for a schema inside the root (`path` from it), refs still resolved against the root.
  std::uint32_t compile_part(const json& s, const std::string& path) {
    const std::uint32_t r = compile(s, path);
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
      if (s.contains("propertyNames") || s.contains("minProperties") || s.contains("maxProperties")) return typed(s, "object", path);
      if (s.contains("items") || s.contains("prefixItems") || s.contains("minItems") || s.contains("maxItems"))
        return typed(s, "array", path);
      if (s.contains("minLength") || s.contains("maxLength") || s.contains("pattern") || known_format(s))
        return typed(s, "string", path);
      for (const char* k : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
        if (s.contains(k)) return typed(s, "number", path);
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

  // A bound keyword's value: a number (or, for exclusiveMinimum / exclusiveMaximum, draft 4's boolean).
  const json* bound(const json& s, const char* key, const std::string& path) const {
    auto it = s.find(key);
    if (it == s.end()) return nullptr;
    if (!it->is_number()) refuse_at(path, std::string("'") + key + "' must be a number");
    return &*it;
  }

  std::uint32_t number(const json& s, bool integer, const std::string& path) {
    // Draft 4: exclusiveMinimum / exclusiveMaximum true make minimum / maximum exclusive.
    auto draft4 = [&](const char* key) {
      auto it = s.find(key);
      return it != s.end() && it->is_boolean() && it->get<bool>();
    };
    const bool min_excl4 = draft4("exclusiveMinimum"), max_excl4 = draft4("exclusiveMaximum");
    auto is_flag = [&](const char* key) {
      auto it = s.find(key);
      return it != s.end() && it->is_boolean();
    };
    const json* min = bound(s, "minimum", path);
    const json* max = bound(s, "maximum", path);
    const json* xmin = is_flag("exclusiveMinimum") ? nullptr : bound(s, "exclusiveMinimum", path);
    const json* xmax = is_flag("exclusiveMaximum") ? nullptr : bound(s, "exclusiveMaximum", path);
    std::uint64_t multiple = 1;
    if (auto it = s.find("multipleOf"); it != s.end()) {
      if (!it->is_number() || !(it->get<double>() > 0)) refuse_at(path, "'multipleOf' must be a number above 0");
      const double m = it->get<double>();
      if (m != std::floor(m)) refuse_at(path, "'multipleOf' is supported only as a whole number (on integers)");
      integer = true;  // a number that is a multiple of a whole number is an integer
      if (m > static_cast<double>(kMaxSafeInteger)) refuse_at(path, "'multipleOf' above 2^53 is not supported");
      multiple = it->is_number_unsigned() ? it->get<std::uint64_t>()
                 : it->is_number_integer() ? static_cast<std::uint64_t>(it->get<std::int64_t>())
                                           : static_cast<std::uint64_t>(m);
    }
    if (integer) {
      // Integers stay within what every JSON parser keeps exactly.
      std::int64_t lo = -kMaxSafeInteger, hi = kMaxSafeInteger;
      constexpr double kClamp = 1e17;  // past +-2^53: converts to int64 without overflow
      auto as_int = [&](const json& v, bool up) -> std::int64_t {
        if (v.is_number_integer()) {
          if (v.is_number_unsigned()) return v.get<std::uint64_t>() > static_cast<std::uint64_t>(kClamp) ? static_cast<std::int64_t>(kClamp) : v.get<std::int64_t>();
          return std::clamp<std::int64_t>(v.get<std::int64_t>(), -static_cast<std::int64_t>(kClamp), static_cast<std::int64_t>(kClamp));
        }
        const double d = std::clamp(v.get<double>(), -kClamp, kClamp);
        return static_cast<std::int64_t>(up ? std::ceil(d) : std::floor(d));
      };
      if (min) lo = std::max(lo, as_int(*min, true) + (min_excl4 && as_int(*min, true) == as_int(*min, false) ? 1 : 0));
      if (xmin) lo = std::max(lo, as_int(*xmin, false) + 1);
      if (max) hi = std::min(hi, as_int(*max, false) - (max_excl4 && as_int(*max, true) == as_int(*max, false) ? 1 : 0));
      if (xmax) hi = std::min(hi, as_int(*xmax, true) - 1);
      return c_.integer(lo, hi, multiple);
    }
    if (!min && !max && !xmin && !xmax) return c_.number();
    // The tighter of each side's bounds; a bound past what the grammar writes (+-1e18) is none (or admits nothing).
    std::optional<std::pair<double, bool>> lo_d, hi_d;  // value, exclusive
    auto tighten = [](std::optional<std::pair<double, bool>>& slot, const json* v, bool strict, bool is_lo) {
      if (!v) return;
      const double d = v->get<double>();
      if (!slot || (is_lo ? d > slot->first : d < slot->first) || (d == slot->first && strict)) slot = std::pair(d, strict);
    };
    tighten(lo_d, min, min_excl4, true);
    tighten(lo_d, xmin, true, true);
    tighten(hi_d, max, max_excl4, false);
    tighten(hi_d, xmax, true, false);
    std::optional<DecimalBound> lo, hi;
    if (lo_d) {
      if (auto d = to_decimal(lo_d->first)) lo = DecimalBound{*d, lo_d->second};
      else if (lo_d->first > 0) return b_.rule("empty@" + path);
    }
    if (hi_d) {
      if (auto d = to_decimal(hi_d->first)) hi = DecimalBound{*d, hi_d->second};
      else if (hi_d->first < 0) return b_.rule("empty@" + path);
    }
    return decimal_range(b_, lo, hi);
  }

  // The regular expression of a `format` the grammar enforces, or null (other formats only annotate).
  static const char* format_pattern(std::string_view f) {
// Calendar dates (days per month, February 29 in leap years), times without leap seconds.
#define NEURON_DATE                                                                                          \
  R"((\d{4}-((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|02-(0[1-9]|1\d|2[0-8]))|)" \
  R"((\d{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)-02-29))"
#define NEURON_TIME R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))"
#define NEURON_LABEL R"([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)"
#define NEURON_OCTET R"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))"
#define NEURON_H16 "[0-9a-fA-F]{1,4}"
#define NEURON_DUR_TIME R"(T(\d+H(\d+M)?(\d+S)?|\d+M(\d+S)?|\d+S))"
#define NEURON_PCHAR R"([A-Za-z0-9\-._~!$&'()*+,;=:@])"
#define NEURON_QCHAR R"([A-Za-z0-9\-._~!$&'()*+,;=:@/?])"
    static constexpr std::pair<std::string_view, const char*> kFormats[] = {
        {"date", "^" NEURON_DATE "$"},
        {"time", "^" NEURON_TIME "$"},
        {"date-time", "^" NEURON_DATE "T" NEURON_TIME "$"},
        {"duration", "^P((\\d+Y(\\d+M)?(\\d+D)?|\\d+M(\\d+D)?|\\d+D)(" NEURON_DUR_TIME ")?|" NEURON_DUR_TIME "|\\d+W)$"},
        {"email", R"(^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*@)" NEURON_LABEL R"((\.)" NEURON_LABEL ")+$"},
        {"hostname", "^" NEURON_LABEL R"((\.)" NEURON_LABEL ")*$"},
        {"ipv4", "^(" NEURON_OCTET R"(\.){3})" NEURON_OCTET "$"},
        {"ipv6", "^((" NEURON_H16 ":){7}" NEURON_H16 "|(" NEURON_H16 ":){1,7}:|(" NEURON_H16 ":){1,6}:" NEURON_H16 "|(" NEURON_H16
                 ":){1,5}(:" NEURON_H16 "){1,2}|(" NEURON_H16 ":){1,4}(:" NEURON_H16 "){1,3}|(" NEURON_H16 ":){1,3}(:" NEURON_H16
                 "){1,4}|(" NEURON_H16 ":){1,2}(:" NEURON_H16 "){1,5}|" NEURON_H16 ":(:" NEURON_H16 "){1,6}|:((:" NEURON_H16
                 "){1,7}|:))$"},
        {"uuid", "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$"},
        // scheme ":" then "//" authority and an absolute path, or a non-empty path (as validators such as
        // ajv-formats want); a query; a fragment (RFC 3986, no percent-escapes or IP literals).
        {"uri", "^[A-Za-z][A-Za-z0-9+.-]*:(//[A-Za-z0-9\\-._~]*(:\\d{1,5})?(/" NEURON_PCHAR "*)*|/?" NEURON_PCHAR "+(/" NEURON_PCHAR
                "*)*|/)(\\?" NEURON_QCHAR "*)?(#" NEURON_QCHAR "*)?$"},
    };
#undef NEURON_DATE
#undef NEURON_TIME
#undef NEURON_LABEL
#undef NEURON_OCTET
#undef NEURON_H16
#undef NEURON_DUR_TIME
#undef NEURON_PCHAR
#undef NEURON_QCHAR
    for (const auto& [name, re] : kFormats)
      if (name == f) return re;
    return nullptr;
  }
  static bool known_format(const json& s) {
    auto it = s.find("format");
    return it != s.end() && it->is_string() && format_pattern(it->get<std::string>()) != nullptr;
  }

  Nfa regex(const std::string& pattern, const std::string& path, const std::string& what) {
    try {
      return compile_regex(pattern);
    } catch (const Error& e) {
      refuse_at(path, what + ": " + e.what());
    }
  }

  // A string whose content matches `nfa` and holds min..max characters:
  // states (automaton state, characters written, counted up to the bound).
  std::uint32_t regex_string(const Nfa& nfa, std::int64_t min, std::optional<std::int64_t> max, const std::string& path) {
    const std::uint32_t root = b_.rule("pattern@" + path);
    if (max && *max < min) return root;
    const bool bmp = min > 0 || max;  // a length-bounded string holds no characters JavaScript counts twice
    const std::int64_t cap = max ? *max : min;
    std::map<std::pair<std::uint32_t, std::int64_t>, std::uint32_t> rules;
    std::vector<std::pair<std::uint32_t, std::int64_t>> work;
    auto state = [&](std::uint32_t q, std::int64_t k) {
      auto [it, inserted] = rules.try_emplace({q, k}, 0);
      if (inserted) {
        it->second = b_.rule("pattern@" + path);
        work.push_back({q, k});
      }
      return it->second;
    };
    b_.alt(root, {c_.lit('"'), GrammarBuilder::ref(state(nfa.start, 0))});
    while (!work.empty()) {
      const auto [q, k] = work.back();
      work.pop_back();
      const std::uint32_t r = rules.at({q, k});
      if (nfa.accepting[q] && k >= min) b_.alt(r, {c_.lit('"')});
      if (max && k == cap) continue;
      const std::int64_t next = k < cap ? k + 1 : cap;
      for (const auto& e : nfa.edges[q])
        b_.alt(r, {GrammarBuilder::ref(c_.code_set(nfa.sets[e.set], bmp)), GrammarBuilder::ref(state(e.to, next))});
    }
    return root;
  }

  std::uint32_t string(const json& s, const std::string& path) {
    const std::int64_t min = count(s, "minLength", at(path)).value_or(0);
    const std::optional<std::int64_t> max = count(s, "maxLength", at(path));
    const char* format = nullptr;
    if (auto it = s.find("format"); it != s.end() && it->is_string()) format = format_pattern(it->get<std::string>());
    if (auto it = s.find("pattern"); it != s.end()) {
      if (!it->is_string()) refuse_at(path, "'pattern' must be a string");
      if (format) refuse_at(path, "'pattern' together with 'format' is not supported");
      return regex_string(regex(it->get<std::string>(), path, "'pattern'"), min, max, path);
    }
    if (format) return regex_string(regex(format, path, "'format'"), min, max, path);
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
    std::optional<std::int64_t> max = count(s, "maxItems", at(path));
    // Item schemas by position: prefixItems (or draft 4's items array) first, then items (or additionalItems).
    const json* prefix = nullptr;
    const json* rest = nullptr;
    std::string prefix_key = "prefixItems", rest_key = "items";
    if (auto it = s.find("prefixItems"); it != s.end()) prefix = &*it;
    if (auto it = s.find("items"); it != s.end()) {
      if (it->is_array()) {
        if (prefix) refuse_at(path, "'items' as an array together with 'prefixItems'");
        prefix = &*it;
        prefix_key = "items", rest_key = "additionalItems";
        if (auto more = s.find("additionalItems"); more != s.end()) rest = &*more;
      } else {
        rest = &*it;
      }
    }
    std::vector<std::uint32_t> prefix_rules;
    if (prefix) {
      if (!prefix->is_array()) refuse_at(path, "'" + prefix_key + "' must be an array of schemas");
      if (prefix->size() > static_cast<std::size_t>(kMaxRepeat))
        refuse_at(path, "'" + prefix_key + "' of more than " + std::to_string(kMaxRepeat) + " schemas is not supported");
      for (std::size_t i = 0; i < prefix->size(); ++i)
        prefix_rules.push_back(compile((*prefix)[i], child_path(path, prefix_key + "[" + std::to_string(i) + "]")));
    }
    const auto n_prefix = static_cast<std::int64_t>(prefix_rules.size());
    const bool no_rest = rest && rest->is_boolean() && !rest->get<bool>();
    if (no_rest) max = std::min(max.value_or(n_prefix), n_prefix);
    if (max && *max < min) return b_.rule("empty@" + path);
    const std::uint32_t rest_item = no_rest ? 0 : rest ? compile(*rest, child_path(path, rest_key)) : c_.any_value();
    auto item_at = [&](std::int64_t k) { return k < n_prefix ? prefix_rules[static_cast<std::size_t>(k)] : rest_item; };
    const auto R = GrammarBuilder::ref;
    const Element w = R(c_.ws());
    // after_k: k items written (k >= 1), what may follow.
    const std::int64_t last = max ? *max : std::max({min, n_prefix, std::int64_t{1}});
    std::uint32_t next = 0;
    for (std::int64_t k = last; k >= 1; --k) {
      const std::uint32_t r = b_.rule("items" + std::to_string(k) + "@" + path);
      if (k >= min) b_.alt(r, {w, c_.lit(']')});
      if (k < last) b_.alt(r, {c_.lit(','), w, R(item_at(k)), R(next)});
      else if (!max) b_.alt(r, {c_.lit(','), w, R(item_at(k)), R(r)});  // unbounded: loop (k >= the prefix)
      next = r;
    }
    const std::uint32_t r = b_.rule("array@" + path);
    if (min == 0) b_.alt(r, {c_.lit('['), w, c_.lit(']')});
    if (last >= 1) b_.alt(r, {c_.lit('['), w, R(item_at(0)), R(next)});
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
    // propertyNames: a declared key it refuses is left out (a required one: no object qualifies).
    const std::optional<Nfa> names = property_names(s, path);
    if (names) {
      for (const Prop& p : props)
        if (p.required && !names->matches(decode_utf8(p.raw))) return b_.rule("empty@" + path);
      std::erase_if(props, [&](const Prop& p) { return !names->matches(decode_utf8(p.raw)); });
    }
    const std::int64_t min = count(s, "minProperties", at(path)).value_or(0);
    const std::optional<std::int64_t> max = count(s, "maxProperties", at(path));
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
    // members[i][k]: properties i.. still to come, k members written (counted up to `cap`; past it only
    // without a maximum). k == 0: the next member has no comma before it.
    const std::int64_t cap = max ? *max : std::max<std::int64_t>(min, 1);
    auto after = [&](std::int64_t k) -> std::optional<std::int64_t> {
      if (k < cap) return k + 1;
      if (!max) return cap;
      return std::nullopt;
    };
    const std::size_t n = props.size();
    std::vector<std::vector<std::uint32_t>> members(n + 1);
    for (std::size_t i = 0; i <= n; ++i)
      for (std::int64_t k = 0; k <= cap; ++k) members[i].push_back(b_.rule("members" + std::to_string(i) + "_" + std::to_string(k) + "@" + path));
    auto comma = [&](std::int64_t k) { return k > 0 ? std::vector<Element>{c_.lit(','), w} : std::vector<Element>{}; };
    std::optional<std::uint32_t> extra_key_rule;
    if (extra_value) {
      if (names) {
        std::vector<std::u32string> declared;
        for (const auto& p : props) declared.push_back(decode_utf8(p.raw));
        extra_key_rule = pattern_key(*names, declared, path);
      } else {
        std::vector<std::string> plain_names;
        for (const auto& p : props) {
          if (std::any_of(p.raw.begin(), p.raw.end(), [](char ch) { return static_cast<unsigned char>(ch) >= 0x80; }) ||
              p.key.size() != p.raw.size() + 2)
            continue;  // extra keys are plain ASCII without escapes: they never spell this name
          plain_names.push_back(p.raw);
        }
        extra_key_rule = extra_key(std::move(plain_names), path);
      }
    }
    for (std::int64_t k = 0; k <= cap; ++k) {
      const std::uint32_t r = members[n][static_cast<std::size_t>(k)];
      if (k >= min) b_.alt(r, k == 0 ? std::vector<Element>{c_.lit('}')} : std::vector<Element>{w, c_.lit('}')});
      if (extra_value && after(k)) {
        std::vector<Element> seq = comma(k);
        for (Element e : {R(*extra_key_rule), c_.lit(':'), w, R(*extra_value), R(members[n][static_cast<std::size_t>(*after(k))])})
          seq.push_back(e);
        b_.alt(r, seq);
      }
    }
    for (std::size_t i = n; i-- > 0;)
      for (std::int64_t k = 0; k <= cap; ++k) {
        const std::uint32_t r = members[i][static_cast<std::size_t>(k)];
        if (after(k)) {
          std::vector<Element> seq = comma(k);
          const auto body = kv(props[i]);
          seq.insert(seq.end(), body.begin(), body.end());
          seq.push_back(R(members[i + 1][static_cast<std::size_t>(*after(k))]));
          b_.alt(r, seq);
        }
        if (!props[i].required) b_.alt(r, {R(members[i + 1][static_cast<std::size_t>(k)])});
      }
    const std::uint32_t r = b_.rule("object@" + path);
    b_.alt(r, {c_.lit('{'), w, R(members[0][0])});
    return r;
  }

  // propertyNames as an automaton over keys; nullopt when it constrains nothing.
  std::optional<Nfa> property_names(const json& s, const std::string& path) {
    auto it = s.find("propertyNames");
    if (it == s.end() || (it->is_boolean() && it->get<bool>())) return std::nullopt;
    const std::string where = child_path(path, "propertyNames");
    if (!it->is_object()) refuse_at(where, "'propertyNames' is supported only as a schema with a 'pattern' or a 'format'");
    const char* pattern = nullptr;
    std::string text;
    for (const auto& [k, v] : it->items()) {
      if (k == "type" && v == "string") continue;
      if (k == "pattern" && v.is_string()) {
        text = v.get<std::string>();
        pattern = text.c_str();
      } else if (k == "format" && v.is_string()) {
        if (const char* f = format_pattern(v.get<std::string>()); f && !pattern) pattern = f;
      } else if (k != "title" && k != "description" && k != "$comment" && k != "examples" && k != "format") {
        refuse_at(where, "'" + k + "' in 'propertyNames' is not supported (only 'pattern' or 'format')");
      }
    }
    if (!pattern) return std::nullopt;
    return regex(pattern, where, "'pattern'");
  }

  // An extra key of an object with propertyNames: a string of the pattern's language that is
  // none of `declared` (the automaton crossed with the trie of the declared names).
  std::uint32_t pattern_key(const Nfa& nfa, const std::vector<std::u32string>& declared, const std::string& path) {
    struct TrieNode {
      std::map<char32_t, std::int32_t> kids;
      bool end = false;
    };
    std::vector<TrieNode> trie(1);
    for (const auto& name : declared) {
      std::int32_t t = 0;
      for (char32_t c : name) {
        auto [it, inserted] = trie[static_cast<std::size_t>(t)].kids.try_emplace(c, static_cast<std::int32_t>(trie.size()));
        if (inserted) trie.emplace_back();
        t = it->second;
      }
      trie[static_cast<std::size_t>(t)].end = true;
    }
    std::map<std::pair<std::uint32_t, std::int32_t>, std::uint32_t> rules;  // (state, trie node or -1: off the trie)
    std::vector<std::pair<std::uint32_t, std::int32_t>> work;
    auto state = [&](std::uint32_t q, std::int32_t t) {
      auto [it, inserted] = rules.try_emplace({q, t}, 0);
      if (inserted) {
        it->second = b_.rule("key@" + path);
        work.push_back({q, t});
      }
      return it->second;
    };
    const std::uint32_t root = b_.rule("extra_key@" + path);
    b_.alt(root, {c_.lit('"'), GrammarBuilder::ref(state(nfa.start, 0))});
    while (!work.empty()) {
      const auto [q, t] = work.back();
      work.pop_back();
      const std::uint32_t r = rules.at({q, t});
      if (nfa.accepting[q] && (t < 0 || !trie[static_cast<std::size_t>(t)].end)) b_.alt(r, {c_.lit('"')});
      for (const auto& e : nfa.edges[q]) {
        const CodeSet& chars = nfa.sets[e.set];
        CodeSet on_trie;
        if (t >= 0)
          for (const auto& [c, child] : trie[static_cast<std::size_t>(t)].kids)
            if (chars.has(c)) {
              on_trie.add(c, c);
              b_.alt(r, {GrammarBuilder::ref(c_.code_set(CodeSet::of(c, c), false)), GrammarBuilder::ref(state(e.to, child))});
            }
        const CodeSet off = chars.intersect(on_trie.complement());
        if (!off.empty()) b_.alt(r, {GrammarBuilder::ref(c_.code_set(off, false)), GrammarBuilder::ref(state(e.to, -1))});
      }
    }
    return root;
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

namespace {

// Bytes of qwen3_coder free text: tab, newline, carriage return, printable ASCII (UTF-8 multi-byte
// characters are added as sequences).
ByteSet xml_text_bytes() {
  ByteSet s;
  s.add('\t');
  s.add('\n');
  s.add('\r');
  s.add_range(0x20, 0x7e);
  return s;
}

// A qwen3_coder parameter's text value: well-formed UTF-8 without "</parameter>" in it, the language of
// the pattern's KMP automaton minus its accepting state. No proper prefix of "</parameter>" is also its
// suffix ('<' opens it only), so a mismatch in state k goes to state 1 on '<' and to state 0 otherwise.
std::uint32_t xml_text_rule(GrammarBuilder& b, Common& common) {
  constexpr std::string_view kEnd = "</parameter>";
  std::vector<std::uint32_t> state(kEnd.size());
  for (std::size_t k = 0; k < kEnd.size(); ++k) state[k] = b.rule("xml_text" + std::to_string(k));
  const auto multibyte = common.utf8_multibyte();
  for (std::size_t k = 0; k < kEnd.size(); ++k) {
    const std::uint32_t r = state[k];
    b.alt(r, {});
    if (k + 1 < kEnd.size()) b.alt(r, {common.lit(kEnd[k]), GrammarBuilder::ref(state[k + 1])});
    if (kEnd[k] != '<') b.alt(r, {common.lit('<'), GrammarBuilder::ref(state[1])});
    ByteSet other = xml_text_bytes();
    other.remove(static_cast<std::uint8_t>(kEnd[k]));
    other.remove('<');
    b.alt(r, {b.set(other), GrammarBuilder::ref(state[0])});
    for (auto seq : multibyte) {
      seq.push_back(GrammarBuilder::ref(state[0]));
      b.alt(r, seq);
    }
  }
  return state[0];
}

// A name the qwen3_coder syntax can carry: it ends at '>' and holds no '<' or newline.
void check_xml_name(const std::string& name, const std::string& where) {
  if (name.empty() || name.find_first_of("<>\n") != std::string::npos)
    refuse(where, "the name '" + name + "' cannot be written in this model's tool call syntax (it holds '<', '>' or a newline, or is empty)");
}

// One qwen3_coder call of `tool` (see compile_tool_call): its parameters in the schema's declared order,
// the required ones always, each value JSON of its schema or free text (chat::qwen3_coder_value_is_json);
// a tool whose schema declares no properties takes any parameter names.
std::vector<Element> xml_call(GrammarBuilder& b, Common& common, const ToolSpec& tool, const std::string& where,
                              std::optional<std::uint32_t>& text_rule) {
  auto text = [&] {
    if (!text_rule) text_rule = xml_text_rule(b, common);
    return *text_rule;
  };
  check_xml_name(tool.name, where.substr(0, where.rfind('.')) + ".name");
  std::vector<Element> seq;
  b.literal(seq, "<function=" + tool.name + ">\n");
  const json* props = nullptr;
  if (tool.parameters.is_object())
    if (auto it = tool.parameters.find("properties"); it != tool.parameters.end() && it->is_object()) props = &*it;
  if (!props) {
    // Any names: ("<parameter=" name ">\n" text "\n</parameter>\n")*
    ByteSet name_bytes = xml_text_bytes();
    name_bytes.remove('<');
    name_bytes.remove('>');
    name_bytes.remove('\n');
    const std::uint32_t any = b.rule("xml_params@" + tool.name);
    b.alt(any, {});
    std::vector<Element> one;
    b.literal(one, "<parameter=");
    one.push_back(b.set(name_bytes));
    one.push_back(b.star(name_bytes));
    b.literal(one, ">\n");
    one.push_back(GrammarBuilder::ref(text()));
    b.literal(one, "\n</parameter>\n");
    one.push_back(GrammarBuilder::ref(any));
    b.alt(any, one);
    seq.push_back(GrammarBuilder::ref(any));
  } else {
    std::set<std::string> required;
    if (auto it = tool.parameters.find("required"); it != tool.parameters.end() && it->is_array())
      for (const auto& r : *it)
        if (r.is_string()) required.insert(r.get<std::string>());
    SchemaCompiler compiler(b, common, tool.parameters, where);
    // rest[j]: parameters j.. of the declared ones; each may be skipped unless required.
    std::vector<std::pair<std::string, const json*>> declared;
    for (const auto& [name, schema] : props->items()) declared.emplace_back(name, &schema);
    std::uint32_t rest = b.rule("xml_params_end@" + tool.name);
    b.alt(rest, {});
    for (std::size_t j = declared.size(); j-- > 0;) {
      const auto& [name, schema] = declared[j];
      const std::string path = "properties." + name;
      check_xml_name(name, where + "." + path);
      std::vector<Element> one;
      b.literal(one, "<parameter=" + name + ">\n");
      one.push_back(GrammarBuilder::ref(chat::qwen3_coder_value_is_json(*schema) ? compiler.compile_part(*schema, path) : text()));
      b.literal(one, "\n</parameter>\n");
      one.push_back(GrammarBuilder::ref(rest));
      const std::uint32_t r = b.rule("xml_params@" + tool.name + "." + name);
      b.alt(r, one);
      if (!required.contains(name)) b.alt(r, {GrammarBuilder::ref(rest)});
      rest = r;
    }
    seq.push_back(GrammarBuilder::ref(rest));
  }
  b.literal(seq, "</function>");
  return seq;
}

// `calls` between the <tool_call> tags Hermes and qwen3_coder write around a call.
std::uint32_t tagged_tool_call(GrammarBuilder& b, std::uint32_t calls) {
  const std::uint32_t root = b.rule("tool_call");
  std::vector<Element> seq;
  b.literal(seq, "<tool_call>\n");
  seq.push_back(GrammarBuilder::ref(calls));
  b.literal(seq, "\n</tool_call>");
  b.alt(root, seq);
  return root;
}

// The rule of one tool call of `tools` as `format` writes it: Hermes (Qwen3) wraps the call object in
// <tool_call> tags; Llama's JSON call is the whole answer, with its arguments under "parameters";
// qwen3_coder wraps its XML-like call in <tool_call> tags.
std::uint32_t tool_call_rule(GrammarBuilder& b, Common& common, const std::vector<ToolSpec>& tools,
                             chat::ToolCallFormat format) {
  if (tools.empty()) fail(errc::invalid_argument, "a tool call needs at least one tool");
  if (format == chat::ToolCallFormat::qwen3_coder) {
    const std::uint32_t calls = b.rule("tool_calls");
    std::optional<std::uint32_t> text_rule;  // built once, for the first free-text value
    for (std::size_t i = 0; i < tools.size(); ++i)
      b.alt(calls, xml_call(b, common, tools[i], "tools[" + std::to_string(i) + "].function.parameters", text_rule));
    return tagged_tool_call(b, calls);
  }
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
  if (format == chat::ToolCallFormat::llama_json) return calls;  // the answer is the call
  return tagged_tool_call(b, calls);
}

}  // namespace

Grammar compile_tool_call(const std::vector<ToolSpec>& tools, chat::ToolCallFormat format) {
  GrammarBuilder b;
  Common common(b);
  const std::uint32_t root = tool_call_rule(b, common, tools, format);
  return std::move(b).finish(root);
}

Grammar compile_tool_call_or_json(const std::vector<ToolSpec>& tools, const nlohmann::ordered_json* schema,
                                  chat::ToolCallFormat format) {
  if (format == chat::ToolCallFormat::llama_json) fail(errc::invalid_argument, "a Llama tool call is itself a JSON object");
  GrammarBuilder b;
  Common common(b);
  const std::uint32_t call = tool_call_rule(b, common, tools, format);
  std::uint32_t value = 0;
  if (schema) {
    SchemaCompiler compiler(b, common, *schema, "");
    value = compiler.compile_root();
  } else {
    value = common.any_object();
  }
  const std::uint32_t root = b.rule("tool_call_or_value");
  b.alt(root, {GrammarBuilder::ref(call)});
  b.alt(root, {GrammarBuilder::ref(value)});
  return std::move(b).finish(root);
}

}  // namespace neuron::grammar
