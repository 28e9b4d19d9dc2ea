#pragma once
// A context-free grammar over bytes, the form every constraint compiles to
// (JSON Schema, any JSON object, a Qwen3 tool call). Rules are lists of
// alternatives; an alternative is a sequence of elements, each a byte set
// (one byte), a byte set repeated any number of times (`star`), or a
// reference to a rule. Everything is laid out flat in one element array so a
// parser position is one integer (grammar/matcher.hpp keeps stacks of them).
//
// Build with GrammarBuilder, then finish(): it drops alternatives that can
// never derive a finite string, and refuses (Error{invalid_argument}) a root
// that derives none ("the schema admits no finite value") and left recursion
// (a rule that reaches itself without consuming a byte), which would make
// the matcher's expansion loop forever. Both come from client schemas, so
// they are errors, never aborts.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace neuron::grammar {

class ByteSet {
 public:
  bool has(std::uint8_t b) const noexcept { return (bits_[b >> 6] >> (b & 63)) & 1u; }
  void add(std::uint8_t b) noexcept { bits_[b >> 6] |= std::uint64_t{1} << (b & 63); }
  void add_range(std::uint8_t lo, std::uint8_t hi) noexcept {
    for (unsigned b = lo; b <= hi; ++b) add(static_cast<std::uint8_t>(b));
  }
  void remove(std::uint8_t b) noexcept { bits_[b >> 6] &= ~(std::uint64_t{1} << (b & 63)); }
  bool empty() const noexcept { return (bits_[0] | bits_[1] | bits_[2] | bits_[3]) == 0; }
  void add_all(const ByteSet& o) noexcept {
    for (int i = 0; i < 4; ++i) bits_[i] |= o.bits_[i];
  }
  bool contains_all(const ByteSet& o) const noexcept {
    for (int i = 0; i < 4; ++i)
      if (o.bits_[i] & ~bits_[i]) return false;
    return true;
  }
  bool operator==(const ByteSet&) const = default;
  const std::array<std::uint64_t, 4>& words() const noexcept { return bits_; }
  static ByteSet of(std::uint8_t b) noexcept {
    ByteSet s;
    s.add(b);
    return s;
  }

 private:
  std::array<std::uint64_t, 4> bits_{};  // bit b: byte b is in the set
};

enum class Op : std::uint8_t {
  bytes,  // one byte from sets[arg]
  star,   // zero or more bytes from sets[arg]
  ref,    // rule arg
  end,    // end of an alternative
};

struct Element {
  Op op;
  std::uint32_t arg;
};

// Limits on what a client's schema may compile to (bounded memory and work).
inline constexpr std::size_t kMaxElements = 1u << 20;
inline constexpr std::size_t kMaxRules = 1u << 18;

struct Grammar {
  std::vector<Element> elements;                  // every alternative, each closed by an `end`
  std::vector<ByteSet> sets;                      // byte sets, deduplicated
  std::vector<std::vector<std::uint32_t>> rules;  // [rule] the first element of each alternative
  std::vector<std::string> rule_names;            // [rule] for messages and debugging
  std::uint32_t root = 0;
};

class GrammarBuilder {
 public:
  // A new rule with no alternatives yet (so rules may refer to each other,
  // recursively, before they are defined).
  std::uint32_t rule(std::string name);
  // Appends an alternative to `rule`: a sequence of elements (no `end`).
  void alt(std::uint32_t rule, const std::vector<Element>& seq);

  Element set(const ByteSet& s);
  Element star(const ByteSet& s);
  static Element ref(std::uint32_t rule) noexcept { return {Op::ref, rule}; }
  // Appends the bytes of `text`, one element each, to `seq`.
  void literal(std::vector<Element>& seq, std::string_view text);

  std::size_t size() const noexcept { return g_.elements.size(); }
  // Validates and returns the grammar rooted at `root` (see the header comment).
  Grammar finish(std::uint32_t root) &&;

 private:
  std::uint32_t set_index(const ByteSet& s);
  Grammar g_;
  std::vector<std::pair<std::array<std::uint64_t, 4>, std::uint32_t>> set_lookup_;  // sorted by words
};

}  // namespace neuron::grammar
