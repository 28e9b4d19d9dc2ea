#include "grammar/number_range.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <tuple>
#include <vector>

#include "util/error.hpp"

namespace neuron::grammar {

namespace {

std::string digits_of(std::uint64_t v) { return std::to_string(v); }

std::uint64_t pow10(int n) {
  std::uint64_t p = 1;
  while (n-- > 0) p *= 10;
  return p;
}

ByteSet digit_set(const std::vector<int>& ds) {
  ByteSet s;
  for (int d : ds) s.add(static_cast<std::uint8_t>('0' + d));
  return s;
}

// Unsigned integers in [x, y] that are multiples of m, as digit strings without leading zeros.
class IntWalker {
 public:
  IntWalker(GrammarBuilder& b, std::uint64_t m) : b_(b), m_(m) {}

  std::uint32_t range(std::uint64_t x, std::uint64_t y) {
    const std::uint32_t r = b_.rule("uint_range");
    if (x > y) return r;
    const int lx = static_cast<int>(digits_of(x).size()), ly = static_cast<int>(digits_of(y).size());
    for (int len = lx; len <= ly; ++len) {
      const std::uint64_t lo = len == lx ? x : pow10(len - 1);
      const std::uint64_t hi = len == ly ? y : pow10(len) - 1;
      seg_lo_ = digits_of(lo);
      seg_hi_ = digits_of(hi);
      len_ = len;
      ++segment_;
      for (auto& alt : step(0, true, true, 0)) b_.alt(r, alt);
    }
    return r;
  }

 private:
  // The alternatives at digit i (tight against the segment's low / high bound), prefix remainder r.
  std::vector<std::vector<Element>> step(int i, bool tl, bool th, std::uint64_t r) {
    const int dlo = tl ? seg_lo_[i] - '0' : 0, dhi = th ? seg_hi_[i] - '0' : 9;
    std::map<std::tuple<bool, bool, std::uint64_t>, std::vector<int>> groups;  // next state -> digits
    for (int d = dlo; d <= dhi; ++d)
      groups[{tl && d == dlo, th && d == dhi, (r * 10 + static_cast<std::uint64_t>(d)) % m_}].push_back(d);
    std::vector<std::vector<Element>> alts;
    for (const auto& [next, ds] : groups) {
      const auto [ntl, nth, nr] = next;
      if (i + 1 == len_) {
        if (nr == 0) alts.push_back({b_.set(digit_set(ds))});
        continue;
      }
      alts.push_back({b_.set(digit_set(ds)), GrammarBuilder::ref(state(i + 1, ntl, nth, nr))});
    }
    return alts;
  }

  std::uint32_t state(int i, bool tl, bool th, std::uint64_t r) {
    const bool free = !tl && !th;
    const auto key = std::make_tuple(free ? 0 : segment_, free ? len_ - i : i, tl, th, r);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    const std::uint32_t rule = b_.rule(free ? "digits" : "digits_tight");
    memo_.emplace(key, rule);
    for (auto& alt : step(i, tl, th, r)) b_.alt(rule, alt);
    return rule;
  }

  GrammarBuilder& b_;
  std::uint64_t m_;
  std::string seg_lo_, seg_hi_;  // the segment's bounds, len_ digits each
  int len_ = 0, segment_ = 0;
  std::map<std::tuple<int, int, bool, bool, std::uint64_t>, std::uint32_t> memo_;  // free states keyed by digits left
};

struct FracBound {
  std::string digits;  // still to compare against, no trailing zeros
  bool strict = false;
};
using OptFrac = std::optional<FracBound>;

// The fraction digits after a fixed integer part, within fraction bounds.
class FracWalker {
 public:
  explicit FracWalker(GrammarBuilder& b) : b_(b) {}

  // What follows the integer part: nothing, or '.' and 1..kMaxFracDigits digits.
  std::uint32_t fraction(const OptFrac& lo, const OptFrac& hi) {
    const std::uint32_t r = b_.rule("fraction");
    if (end_ok(lo, hi)) b_.alt(r, {});
    for (auto& alt : steps(lo, hi, kMaxFracDigits)) {
      alt.insert(alt.begin(), b_.set(ByteSet::of('.')));
      b_.alt(r, alt);
    }
    return r;
  }

 private:
  static bool end_ok(const OptFrac& lo, const OptFrac& hi) {
    const bool lo_ok = !lo || (lo->digits.empty() && !lo->strict);
    const bool hi_ok = !hi || !(hi->digits.empty() && hi->strict);
    return lo_ok && hi_ok;
  }
  static OptFrac vacuous_lo(OptFrac lo) { return lo && lo->digits.empty() && !lo->strict ? std::nullopt : lo; }

  using OptFracKey = std::tuple<bool, std::string, bool>;
  static OptFracKey key_of(const OptFrac& f) { return f ? OptFracKey{true, f->digits, f->strict} : OptFracKey{false, "", false}; }

  // One more digit (k left): alternatives [digits, rest].
  std::vector<std::vector<Element>> steps(const OptFrac& lo, const OptFrac& hi, int k) {
    std::vector<std::vector<Element>> alts;
    if (k == 0) return alts;
    std::map<std::pair<OptFracKey, OptFracKey>, std::vector<int>> groups;
    std::map<std::pair<OptFracKey, OptFracKey>, std::pair<OptFrac, OptFrac>> nexts;
    for (int d = 0; d <= 9; ++d) {
      OptFrac nlo, nhi;
      if (lo) {
        const int l0 = lo->digits.empty() ? 0 : lo->digits[0] - '0';
        if (d < l0) continue;
        if (d == l0) nlo = FracBound{lo->digits.empty() ? "" : lo->digits.substr(1), lo->strict};
      }
      if (hi) {
        const int h0 = hi->digits.empty() ? 0 : hi->digits[0] - '0';
        if (d > h0) continue;
        if (d == h0) nhi = FracBound{hi->digits.empty() ? "" : hi->digits.substr(1), hi->strict};
      }
      nlo = vacuous_lo(nlo);
      const auto key = std::pair(key_of(nlo), key_of(nhi));
      groups[key].push_back(d);
      nexts[key] = {nlo, nhi};
    }
    for (const auto& [key, ds] : groups) {
      const auto& [nlo, nhi] = nexts[key];
      alts.push_back({b_.set(digit_set(ds)), GrammarBuilder::ref(rest(nlo, nhi, k - 1))});
    }
    return alts;
  }

  std::uint32_t rest(const OptFrac& lo, const OptFrac& hi, int k) {
    const auto key = std::make_tuple(key_of(lo), key_of(hi), k);
    if (auto it = memo_.find(key); it != memo_.end()) return it->second;
    const std::uint32_t r = b_.rule("fraction_digits");
    memo_.emplace(key, r);
    if (end_ok(lo, hi)) b_.alt(r, {});
    for (auto& alt : steps(lo, hi, k)) b_.alt(r, alt);
    return r;
  }

  GrammarBuilder& b_;
  std::map<std::tuple<OptFracKey, OptFracKey, int>, std::uint32_t> memo_;
};

// Non-negative decimals within [lo, hi] (absent hi: below 10^18).
std::uint32_t magnitude(GrammarBuilder& b, const std::optional<DecimalBound>& lo, const std::optional<DecimalBound>& hi) {
  const std::uint32_t r = b.rule("decimal_magnitude");
  const std::uint64_t il = lo ? lo->value.int_part : 0, ih = hi ? hi->value.int_part : kMaxDecimalMagnitude;
  if (il > ih) return r;
  OptFrac lf, hf;
  if (lo && (!lo->value.frac.empty() || lo->strict)) lf = FracBound{lo->value.frac, lo->strict};
  if (hi) hf = FracBound{hi->value.frac, hi->strict};
  FracWalker fw(b);
  auto int_literal = [&](std::uint64_t v) {
    std::vector<Element> seq;
    b.literal(seq, digits_of(v));
    return seq;
  };
  if (il == ih) {
    auto seq = int_literal(il);
    seq.push_back(GrammarBuilder::ref(fw.fraction(lf, hf)));
    b.alt(r, seq);
    return r;
  }
  auto low = int_literal(il);
  low.push_back(GrammarBuilder::ref(fw.fraction(lf, std::nullopt)));
  b.alt(r, low);
  if (ih - il >= 2) {
    IntWalker iw(b, 1);
    b.alt(r, {GrammarBuilder::ref(iw.range(il + 1, ih - 1)), GrammarBuilder::ref(fw.fraction(std::nullopt, std::nullopt))});
  }
  auto high = int_literal(ih);
  high.push_back(GrammarBuilder::ref(fw.fraction(std::nullopt, hf)));
  b.alt(r, high);
  return r;
}

}  // namespace

std::optional<Decimal> to_decimal(double v) {
  if (!std::isfinite(v)) return std::nullopt;
  Decimal d;
  if (v == 0) return d;
  d.negative = v < 0;
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, std::fabs(v), std::chars_format::scientific);
  NEURON_ASSERT(ec == std::errc{});
  const std::string text(buf, end);  // d[.ddd]e[+-]XX
  const auto e = text.find('e');
  std::string mant;
  for (char c : text.substr(0, e))
    if (c != '.') mant += c;
  const int exp = std::stoi(text.substr(e + 1));
  const int point = exp + 1;  // digits of mant before the decimal point
  if (point > 18) return std::nullopt;
  std::string int_digits, frac;
  if (point <= 0) {
    frac = std::string(static_cast<std::size_t>(-point), '0') + mant;
  } else {
    int_digits = mant.substr(0, std::min<std::size_t>(mant.size(), static_cast<std::size_t>(point)));
    int_digits.resize(static_cast<std::size_t>(point), '0');
    if (mant.size() > static_cast<std::size_t>(point)) frac = mant.substr(static_cast<std::size_t>(point));
  }
  while (!frac.empty() && frac.back() == '0') frac.pop_back();
  d.int_part = int_digits.empty() ? 0 : std::stoull(int_digits);
  if (d.int_part > kMaxDecimalMagnitude) return std::nullopt;
  d.frac = frac;
  if (d.int_part == 0 && d.frac.empty()) d.negative = false;
  return d;
}

std::uint32_t integer_range(GrammarBuilder& b, std::int64_t lo, std::int64_t hi, std::uint64_t multiple_of) {
  NEURON_ASSERT(multiple_of >= 1);
  const std::uint32_t r = b.rule("integer_range");
  if (lo > hi) return r;
  // The walk reaches at most min(m, 10^i) remainders after i digits, in a few states each (tight
  // against either bound or free), of up to 10 alternatives of 3 elements: refuse up front what
  // would pass the builder's limit rather than build it.
  const int digits = static_cast<int>(std::max(digits_of(static_cast<std::uint64_t>(lo < 0 ? -lo : lo)).size(),
                                               digits_of(static_cast<std::uint64_t>(hi < 0 ? -hi : hi)).size()));
  std::uint64_t states = 0;
  for (int i = 1; i < digits; ++i) states += std::min(multiple_of, pow10(i));
  if (states * 4 * 31 > kMaxElements)
    fail(errc::invalid_argument, "the schema is too large: 'multipleOf' " + std::to_string(multiple_of) + " over integers of " +
                                     std::to_string(digits) + " digits compiles to more than " + std::to_string(kMaxElements) +
                                     " grammar elements (bound the range with minimum / maximum)");
  IntWalker walker(b, multiple_of);
  if (hi >= 0) b.alt(r, {GrammarBuilder::ref(walker.range(static_cast<std::uint64_t>(std::max<std::int64_t>(lo, 0)), static_cast<std::uint64_t>(hi)))});
  if (lo < 0) {
    const std::uint64_t mlo = hi < 0 ? static_cast<std::uint64_t>(-hi) : 1, mhi = static_cast<std::uint64_t>(-lo);
    b.alt(r, {b.set(ByteSet::of('-')), GrammarBuilder::ref(walker.range(mlo, mhi))});
  }
  return r;
}

std::uint32_t decimal_range(GrammarBuilder& b, const std::optional<DecimalBound>& lo, const std::optional<DecimalBound>& hi) {
  const std::uint32_t r = b.rule("decimal_range");
  auto is_zero = [](const Decimal& d) { return d.int_part == 0 && d.frac.empty(); };
  auto negate = [](DecimalBound d) {
    d.value.negative = false;
    return d;
  };
  if (!hi || !hi->value.negative) {  // the part >= 0
    std::optional<DecimalBound> nlo;
    if (lo && !lo->value.negative) nlo = lo;
    b.alt(r, {GrammarBuilder::ref(magnitude(b, nlo, hi))});
  }
  if (!lo || (lo->value.negative && !is_zero(lo->value))) {  // the part < 0, as '-' and its magnitude
    std::optional<DecimalBound> mlo = DecimalBound{Decimal{}, true};  // magnitude > 0: never "-0"
    if (hi && hi->value.negative) mlo = negate(*hi);
    std::optional<DecimalBound> mhi;
    if (lo) mhi = negate(*lo);
    b.alt(r, {b.set(ByteSet::of('-')), GrammarBuilder::ref(magnitude(b, mlo, mhi))});
  }
  return r;
}

}  // namespace neuron::grammar
