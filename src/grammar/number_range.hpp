#pragma once
// Numbers within bounds, as grammar rules over their JSON text (JSON
// Schema's minimum, maximum, exclusiveMinimum, exclusiveMaximum and, on
// integers, multipleOf).
//
// The text is canonical decimal: no leading zeros, no "-0", no exponent, a
// fraction of 1 to kMaxFracDigits digits or none. Integer ranges are walked
// digit by digit as a regular-expression range generator does (per digit
// count, the digits still tight against the low or high bound, then free
// digits), crossed with the remainder modulo multipleOf; decimal ranges
// split on the integer part (the bound's own integer part constrains the
// fraction, digit by digit, against the bound's fraction).
#include <cstdint>
#include <optional>
#include <string>

#include "grammar/grammar.hpp"

namespace neuron::grammar {

inline constexpr std::int64_t kMaxSafeInteger = (std::int64_t{1} << 53) - 1;  // JavaScript's Number.MAX_SAFE_INTEGER
inline constexpr int kMaxFracDigits = 18;
inline constexpr std::uint64_t kMaxDecimalMagnitude = 999'999'999'999'999'999;  // 18 integer digits

// A finite decimal |value| = int_part.frac; frac has no trailing zeros.
struct Decimal {
  bool negative = false;
  std::uint64_t int_part = 0;  // <= kMaxDecimalMagnitude
  std::string frac;            // fraction digits
};

// `v` exactly as its shortest round-trip decimal form; nullopt when its
// magnitude exceeds kMaxDecimalMagnitude (or it is not finite).
std::optional<Decimal> to_decimal(double v);

struct DecimalBound {
  Decimal value;
  bool strict = false;  // exclusive
};

// Integers n, lo <= n <= hi, n % multiple_of == 0 (multiple_of >= 1). The
// rule derives nothing when none exists. Bounded work: a multiple_of whose
// automaton over the range would pass the builder's limits is refused up
// front (Error{invalid_argument}).
std::uint32_t integer_range(GrammarBuilder& b, std::int64_t lo, std::int64_t hi, std::uint64_t multiple_of);

// Decimals within the bounds (absent: up to +-kMaxDecimalMagnitude and its
// fraction), as text without an exponent.
std::uint32_t decimal_range(GrammarBuilder& b, const std::optional<DecimalBound>& lo, const std::optional<DecimalBound>& hi);

}  // namespace neuron::grammar
