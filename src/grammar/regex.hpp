#pragma once
// Regular expressions (JSON Schema's `pattern`, `format` and `propertyNames`)
// as automata over Unicode code points, for json_schema.cpp to turn into
// grammar rules.
//
// Syntax: ECMA-262 (what JSON Schema names) without what a finite automaton
// cannot hold: literals and escapes (\t \n \r \f \v \0 \xHH \uHHHH \u{H..}
// \cX, identity escapes of punctuation), classes ([...], negated, ranges,
// \d \D \w \W \s \S inside and out), `.` (any code point but a line
// terminator), groups ( (...), (?:...), (?<name>...) ), alternation, and the
// quantifiers * + ? {n} {n,} {n,m} (lazy forms match the same strings).
// ^ and $ anchor only at the start / end of a top-level alternative; a
// pattern is searched, as JSON Schema says, so an alternative without them
// may have anything before / after it. Refused with Error{invalid_argument}
// naming the construct: lookaround, backreferences, \b \B, flags groups,
// anchors elsewhere, and patterns past the size bounds below.
//
// compile_regex() returns an epsilon-free NFA: each state's consuming edges
// and whether it accepts.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace neuron::grammar {

inline constexpr std::size_t kMaxPatternBytes = 4096;
inline constexpr std::size_t kMaxRegexStates = 4096;  // Thompson states, repetitions unrolled
inline constexpr std::uint32_t kMaxCodePoint = 0x10ffff;

// A set of code points: sorted, disjoint, non-adjacent closed ranges.
class CodeSet {
 public:
  using Range = std::pair<char32_t, char32_t>;
  CodeSet() = default;
  static CodeSet of(char32_t lo, char32_t hi);
  void add(char32_t lo, char32_t hi);
  void add_all(const CodeSet& o);
  CodeSet complement() const;
  CodeSet intersect(const CodeSet& o) const;
  bool has(char32_t c) const;
  bool empty() const noexcept { return ranges_.empty(); }
  const std::vector<Range>& ranges() const noexcept { return ranges_; }
  bool operator==(const CodeSet&) const = default;
  auto operator<=>(const CodeSet& o) const { return ranges_ <=> o.ranges_; }

 private:
  void normalize();
  std::vector<Range> ranges_;
};

struct Nfa {
  struct Edge {
    std::uint32_t set;  // index into sets
    std::uint32_t to;   // state
  };
  std::vector<std::vector<Edge>> edges;  // [state] consuming edges
  std::vector<char> accepting;           // [state] 1: a match may end here
  std::vector<CodeSet> sets;             // distinct edge labels
  std::uint32_t start = 0;

  // Whether the whole of `text` (code points) is in the language.
  bool matches(std::u32string_view text) const;
};

// `pattern`: UTF-8. Errors name the construct and its byte offset.
Nfa compile_regex(std::string_view pattern);

// UTF-8 text as code points; invalid UTF-8 is an Error{invalid_argument}.
std::u32string decode_utf8(std::string_view text);

}  // namespace neuron::grammar
