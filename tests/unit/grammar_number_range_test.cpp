// Numeric bounds as grammars (grammar/number_range.hpp through JSON Schema's
// minimum / maximum / exclusive* / multipleOf): every range and text of a
// small domain checked against the arithmetic, plus the 2^53 and finite-double
// limits of unbounded schemas.
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "grammar/number_range.hpp"
#include "support/grammar_accepts.hpp"

namespace neuron::grammar {
namespace {

using namespace testing;

TEST(GrammarNumberRange, IntegerRangesMatchBruteForceExhaustively) {
  // Bounds across sign changes, digit-count changes and multiples; every integer text of [-130, 130].
  const std::vector<int> bounds = {-125, -100, -99, -10, -9, -1, 0, 1, 9, 10, 11, 19, 20, 99, 100, 101, 125};
  for (int m : {1, 3, 7, 10}) {
    for (int lo : bounds)
      for (int hi : bounds) {
        if (lo > hi) continue;
        const json s = {{"type", "integer"}, {"minimum", lo}, {"maximum", hi}, {"multipleOf", m}};
        bool any = false;
        for (int v = lo; v <= hi; ++v) any = any || v % m == 0;
        if (!any) {
          EXPECT_NE(refusal(s).find("no finite value"), std::string::npos) << s.dump();
          continue;
        }
        const auto g = compiled(compile_json_schema(s));
        for (int v = -130; v <= 130; ++v) {
          const bool want = v >= lo && v <= hi && v % m == 0;
          ASSERT_EQ(accepts(g, std::to_string(v)), want) << s.dump() << " on " << v;
        }
        for (const char* bad : {"-0", "00", "01", "+1", "1.0", "1e1", ""}) EXPECT_FALSE(accepts(g, bad)) << s.dump() << " on " << bad;
      }
  }
}

TEST(GrammarNumberRange, ExclusiveAndFractionalBoundsOnIntegers) {
  auto ok = [](const json& s, int v) { return accepts(s, std::to_string(v)); };
  const json s = json::parse(R"({"type":"integer","exclusiveMinimum":-3,"exclusiveMaximum":12})");
  for (int v = -10; v <= 20; ++v) EXPECT_EQ(ok(s, v), v > -3 && v < 12) << v;
  const json f = json::parse(R"({"type":"integer","minimum":-2.5,"maximum":7.5})");
  for (int v = -10; v <= 20; ++v) EXPECT_EQ(ok(f, v), v >= -2 && v <= 7) << v;
  const json draft4 = json::parse(R"({"type":"integer","minimum":0,"exclusiveMinimum":true,"maximum":5,"exclusiveMaximum":true})");
  for (int v = -3; v <= 8; ++v) EXPECT_EQ(ok(draft4, v), v > 0 && v < 5) << v;
}

// Decimal texts (at most 4 fraction digits) in ten-thousandths, compared exactly.
long scaled(const std::string& text) {
  const bool neg = text[0] == '-';
  const std::string t = neg ? text.substr(1) : text;
  const auto dot = t.find('.');
  long v = std::stol(t.substr(0, dot)) * 10000;
  if (dot != std::string::npos) {
    std::string frac = t.substr(dot + 1);
    frac.resize(4, '0');
    v += std::stol(frac);
  }
  return neg ? -v : v;
}

TEST(GrammarNumberRange, DecimalRangesMatchBruteForce) {
  const std::vector<const char*> bounds = {"-10.5", "-1", "-0.25", "0", "0.3", "1", "1.05", "2.5", "10"};
  // Every multiple of 0.05 in [-12, 12], written shortest and with a trailing zero, plus a few 3-digit fractions.
  std::vector<std::string> texts;
  for (int k = -240; k <= 240; ++k) {
    const int a = std::abs(k);
    std::string t = (k < 0 ? "-" : "") + std::to_string(a / 20);
    const int frac = (a % 20) * 5;
    if (frac) t += "." + std::string(frac < 10 ? "0" : "") + std::to_string(frac % 10 == 0 ? frac / 10 : frac);
    if (t == "-0") continue;
    texts.push_back(t);
    if (frac) texts.push_back(t + "0");
  }
  for (const char* t : {"0.251", "-0.249", "1.049", "1.051", "0.299", "0.301", "-10.501", "2.4999", "9.999"}) texts.push_back(t);
  int grammars = 0;
  for (const char* lo : bounds)
    for (const char* hi : bounds)
      for (int strict = 0; strict < 4; ++strict) {
        const long l = scaled(lo), h = scaled(hi);
        const bool sl = strict & 1, sh = strict & 2;
        if (l > h || (l == h && strict)) continue;
        json s = {{"type", "number"}};
        s[sl ? "exclusiveMinimum" : "minimum"] = json::parse(lo);
        s[sh ? "exclusiveMaximum" : "maximum"] = json::parse(hi);
        const auto g = compiled(compile_json_schema(s));
        ++grammars;
        for (const std::string& t : texts) {
          const long v = scaled(t);
          const bool want = (sl ? v > l : v >= l) && (sh ? v < h : v <= h);
          ASSERT_EQ(accepts(g, t), want) << s.dump() << " on " << t;
        }
        for (const char* bad : {"-0", "-0.0", "1.", ".5", "1e0", "01"}) EXPECT_FALSE(accepts(g, bad)) << s.dump() << " on " << bad;
      }
  EXPECT_GT(grammars, 100);
}

TEST(GrammarNumberRange, OneSidedAndExtremeBounds) {
  const json pos = json::parse(R"({"type":"number","exclusiveMinimum":0})");
  for (const char* t : {"0.000001", "5", "123456789012345678.5"}) EXPECT_TRUE(accepts(pos, t)) << t;
  for (const char* t : {"0", "0.0", "-1", "-0.5", "1e5"}) EXPECT_FALSE(accepts(pos, t)) << t;
  const json tiny = json::parse(R"({"type":"number","minimum":1e-30,"maximum":1e300})");
  EXPECT_TRUE(accepts(tiny, "0.000000000000000001")) << "the smallest 18-digit fraction above 1e-30";
  EXPECT_FALSE(accepts(tiny, "0"));
  EXPECT_TRUE(accepts(tiny, "999999999999999999"));
  const json neg = json::parse(R"({"type":"number","maximum":-1e300})");
  EXPECT_NE(refusal(neg).find("no finite value"), std::string::npos);
  // zod 4's z.number().int(): the safe-integer bounds.
  const json zod = json::parse(R"({"type":"integer","minimum":-9007199254740991,"maximum":9007199254740991})");
  for (const char* t : {"0", "-9007199254740991", "9007199254740991", "42"}) EXPECT_TRUE(accepts(zod, t)) << t;
  EXPECT_FALSE(accepts(zod, "9007199254740992"));
  const json huge = json::parse(R"({"type":"integer","minimum":-1e300,"maximum":1e300})");
  EXPECT_FALSE(accepts(huge, "9007199254740992")) << "integers stay within 2^53 whatever the bounds";
  EXPECT_TRUE(accepts(huge, "-9007199254740991"));
}

TEST(GrammarNumberRange, UnboundedNumbersParseAsFiniteDoubles) {
  const json n = json::parse(R"({"type":"number"})");
  const std::string biggest = "-" + std::string(18, '9') + "." + std::string(18, '9') + "e+99";
  const std::string smallest = "0." + std::string(17, '0') + "1e-99";
  ASSERT_TRUE(accepts(n, biggest));
  ASSERT_TRUE(accepts(n, smallest));
  EXPECT_TRUE(std::isfinite(std::strtod(biggest.c_str(), nullptr)));
  EXPECT_NE(std::strtod(smallest.c_str(), nullptr), 0.0);
  EXPECT_FALSE(prefix(n, "1e100"));
}

TEST(GrammarNumberRange, DecimalOfDoublesIsExact) {
  auto d = to_decimal(0.1);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->int_part, 0u);
  EXPECT_EQ(d->frac, "1");
  d = to_decimal(-1234.5);
  ASSERT_TRUE(d);
  EXPECT_TRUE(d->negative);
  EXPECT_EQ(d->int_part, 1234u);
  EXPECT_EQ(d->frac, "5");
  d = to_decimal(1e-7);
  ASSERT_TRUE(d);
  EXPECT_EQ(d->frac, "0000001");
  d = to_decimal(-0.0);
  ASSERT_TRUE(d);
  EXPECT_FALSE(d->negative);
  EXPECT_FALSE(to_decimal(1e18));
  EXPECT_FALSE(to_decimal(NAN));
}

TEST(GrammarNumberRange, LargeMultipleOfIsRefusedNotBuilt) {
  const json s = json::parse(R"({"type":"integer","multipleOf":1000003})");
  EXPECT_NE(refusal(s).find("too large"), std::string::npos);
  const json number = json::parse(R"({"type":"number","multipleOf":3,"minimum":-1,"maximum":10})");
  for (const char* t : {"0", "3", "9"}) EXPECT_TRUE(accepts(number, t)) << t;
  for (const char* t : {"1.5", "4", "12", "-3"}) EXPECT_FALSE(accepts(number, t)) << t;
  const auto ok = compiled(compile_json_schema(json::parse(R"({"type":"integer","minimum":0,"maximum":1000,"multipleOf":250})")));
  for (int v = 0; v <= 1000; ++v) EXPECT_EQ(accepts(ok, std::to_string(v)), v % 250 == 0) << v;
}

}  // namespace
}  // namespace neuron::grammar
