// Regular expressions (grammar/regex.hpp) against std::regex's ECMAScript
// search on every short string of a small alphabet, and JSON Schema's
// pattern, format, propertyNames, min/maxProperties and prefixItems through
// the grammar.
#include <regex>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "grammar/regex.hpp"
#include "support/grammar_accepts.hpp"

namespace neuron::grammar {
namespace {

using namespace testing;

std::vector<std::string> all_strings(const std::string& alphabet, int max_len) {
  std::vector<std::string> out{""};
  for (std::size_t i = 0; i < out.size(); ++i)
    if (static_cast<int>(out[i].size()) < max_len)
      for (char c : alphabet) out.push_back(out[i] + c);
  return out;
}

TEST(GrammarRegex, MatchesStdRegexOnEveryShortString) {
  const std::vector<std::string> patterns = {
      "a",          "^a",        "a$",          "^a$",           "^ab*$",        "^(ab|b)+$",    "^a?b{2}$",
      "^[ab]{1,3}$", "^[^a]*$",  "^(a|)b$",     "^.{2}$",        "^\\d+$",       "^[a-b1]+-?$",  "b|^a$",
      "^(a*)*$",    "^a{2,}$",   "^(?:ab)?a$",  "^[\\w-]{2,4}$", "1-",           "^\\D\\d$",     "^(?:a)b$",
      "^a{0}b$",    "^[-a]$",    "^\\x61\\u0062$", "^a+?$",      "^(a|b|1)(a|-)$", "^[^\\d-]+$", "^\\s*$",
  };
  const auto strings = all_strings("ab1- ", 4);
  ASSERT_EQ(strings.size(), 781u);
  int matched = 0;
  for (const std::string& p : patterns) {
    const Nfa nfa = compile_regex(p);
    const std::regex re(p, std::regex::ECMAScript);
    for (const std::string& s : strings) {
      const std::u32string u(s.begin(), s.end());
      const bool want = std::regex_search(s, re);
      matched += want;
      ASSERT_EQ(nfa.matches(u), want) << "pattern " << p << " on \"" << s << "\"";
    }
  }
  EXPECT_GT(matched, 1000) << "the patterns match a fair share of the strings";
}

TEST(GrammarRegex, UnicodeAndEscapes) {
  const Nfa greek = compile_regex("^[\xce\xb1-\xcf\x89]+$");  // [α-ω]+
  EXPECT_TRUE(greek.matches(U"\u03b1\u03b2"));
  EXPECT_FALSE(greek.matches(U"a"));
  EXPECT_TRUE(compile_regex("^\\u{1F600}$").matches(U"\U0001F600"));
  EXPECT_TRUE(compile_regex("^\\ud83d\\ude00$").matches(U"\U0001F600"));
  EXPECT_TRUE(compile_regex("^.$").matches(U"\U0001F600"));
  EXPECT_FALSE(compile_regex("^.$").matches(U"\n"));
  EXPECT_TRUE(compile_regex("^a{$").matches(U"a{")) << "a '{' that starts no quantifier is a literal";
  EXPECT_TRUE(compile_regex("^(?<name>a)b$").matches(U"ab")) << "named groups (std::regex lacks them)";
  for (const char* bad : {"(?=a)", "(?!a)", "(?<=a)b", "(?<!a)b", "(a)\\1", "\\bword", "(?i)a", "a**", "(", "a)", "[a",
                          "a{3,2}", "x^", "\xff"}) {
    EXPECT_THROW(compile_regex(bad), Error) << bad;
  }
  EXPECT_THROW(compile_regex("(a{1000}){1000}"), Error) << "state bound";
}

TEST(GrammarPattern, StringsFollowThePatternAsJson) {
  const json s = json::parse(R"({"type":"string","pattern":"^[A-Z][a-z]+ \\d{2}$"})");
  EXPECT_TRUE(accepts(s, R"("Alice 42")"));
  EXPECT_FALSE(prefix(s, R"("alice)"));
  EXPECT_FALSE(accepts(s, R"("Alice 4")"));
  EXPECT_FALSE(prefix(s, R"("Alice 421)"));
  // Searched, not anchored: anything around an unanchored pattern.
  const json search = json::parse(R"({"type":"string","pattern":"ab"})");
  EXPECT_TRUE(accepts(search, R"("xxabyy")"));
  EXPECT_FALSE(accepts(search, R"("xxa")"));
  // Characters JSON escapes are written escaped; other controls never.
  const json quote = json::parse(R"({"type":"string","pattern":"^[\"\\\\\n]+$"})");
  EXPECT_TRUE(accepts(quote, R"("\"\\\n")"));
  EXPECT_FALSE(prefix(quote, "\"\""));
  EXPECT_TRUE(accepts(json::parse(R"({"pattern":"^\u00e9+$"})"), "\"\xc3\xa9\xc3\xa9\""));
  // A pattern with length bounds: both hold.
  const json both = json::parse(R"({"type":"string","pattern":"^[a-c]+$","minLength":2,"maxLength":3})");
  EXPECT_FALSE(accepts(both, R"("a")"));
  EXPECT_TRUE(accepts(both, R"("abc")"));
  EXPECT_FALSE(prefix(both, R"("abca)"));
}

TEST(GrammarPattern, Formats) {
  auto fmt = [](const char* f) { return json{{"type", "string"}, {"format", f}}; };
  const std::vector<std::tuple<const char*, std::vector<const char*>, std::vector<const char*>>> cases = {
      {"date", {"2024-02-29", "2000-02-29", "1999-12-31", "2023-04-30"}, {"2024-13-01", "2024-1-01", "24-01-01", "2023-02-29", "1900-02-29", "2023-04-31"}},
      {"time", {"23:59:59Z", "08:30:00.123+02:00"}, {"24:00:00Z", "08:30:00", "8:30:00Z", "12:00:60Z"}},
      {"date-time", {"2024-05-06T07:08:09Z", "2024-05-06T07:08:09.5-05:30"}, {"2024-05-06 07:08:09Z", "2024-05-06T07:08Z"}},
      {"duration", {"P1Y2M3DT4H5M6S", "PT5M", "P3W", "P1D"}, {"P", "PT", "P1H", "1D"}},
      {"email", {"a.b+c@example.com", "x@y.io"}, {"a@b", "@x.com", "a b@x.com"}},
      {"hostname", {"example.com", "a-b.c", "localhost"}, {"-a.com", "a..b", "a_b.com"}},
      {"ipv4", {"192.168.0.1", "0.0.0.0", "255.255.255.255"}, {"256.1.1.1", "1.2.3", "01.2.3.4"}},
      {"ipv6", {"::1", "fe80::1", "2001:db8:0:0:0:0:2:1", "::"}, {":::", "12345::", "1:2:3:4:5:6:7:8:9"}},
      {"uuid", {"123e4567-e89b-12d3-a456-426614174000"}, {"123e4567e89b12d3a456426614174000", "123e4567-e89b-12d3-a456-42661417400"}},
      {"uri", {"https://example.com:8080/a/b?c=d#e", "mailto:x@y.z", "urn:isbn:0451450523", "file:///etc"},
       {"//example.com", "1http://x", "http://a b", "a:#x#y", "http://x:y:z", "a:", "a:?q"}},
  };
  for (const auto& [f, good, bad] : cases) {
    const auto g = compiled(compile_json_schema(fmt(f)));
    for (const char* v : good) EXPECT_TRUE(accepts(g, json(v).dump())) << f << ": " << v;
    for (const char* v : bad) EXPECT_FALSE(accepts(g, json(v).dump())) << f << ": " << v;
  }
  EXPECT_TRUE(accepts(fmt("x-unknown"), R"("anything")")) << "other formats only annotate";
}

TEST(GrammarObject, MinAndMaxProperties) {
  const json s = json::parse(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"},"c":{"type":"integer"}},
                                 "minProperties":1,"maxProperties":2})");
  EXPECT_FALSE(accepts(s, "{}"));
  EXPECT_TRUE(accepts(s, R"({"b":1})"));
  EXPECT_TRUE(accepts(s, R"({"a":1, "c":2})"));
  EXPECT_FALSE(accepts(s, R"({"a":1,"b":2,"c":3})"));
  const json extra = json::parse(R"({"type":"object","additionalProperties":{"type":"boolean"},"minProperties":2,"maxProperties":3})");
  EXPECT_FALSE(accepts(extra, R"({"x":true})"));
  EXPECT_TRUE(accepts(extra, R"({"x":true,"y":false})"));
  EXPECT_TRUE(accepts(extra, R"({"x":true,"y":false,"z":true})"));
  EXPECT_FALSE(prefix(extra, R"({"x":true,"y":false,"z":true,)"));
  EXPECT_NE(refusal(json::parse(R"({"type":"object","properties":{"a":{}},"required":["a"],"maxProperties":0})"))
                .find("no finite value"),
            std::string::npos);
}

TEST(GrammarObject, PropertyNamesWithAPattern) {
  const json s = json::parse(R"({"type":"object","propertyNames":{"pattern":"^[a-z]{1,3}$"},
                                 "properties":{"ab":{"type":"integer"},"TOO":{"type":"integer"}},
                                 "additionalProperties":{"type":"null"}})");
  EXPECT_TRUE(accepts(s, R"({"ab":1,"xyz":null})"));
  EXPECT_TRUE(accepts(s, R"({"a":null})"));
  EXPECT_FALSE(prefix(s, R"({"TOO")")) << "a declared name the pattern refuses is left out";
  EXPECT_FALSE(prefix(s, R"({"abcd)"));
  EXPECT_FALSE(accepts(s, R"({"ab":null})")) << "an extra key never spells a declared name";
  const json refused_required = json::parse(R"({"type":"object","propertyNames":{"pattern":"^x"},"properties":{"y":{}},"required":["y"]})");
  EXPECT_NE(refusal(refused_required).find("no finite value"), std::string::npos);
}

TEST(GrammarArray, PrefixItems) {
  const json s = json::parse(R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"items":{"type":"boolean"}})");
  EXPECT_TRUE(accepts(s, "[]"));
  EXPECT_TRUE(accepts(s, "[1]"));
  EXPECT_TRUE(accepts(s, R"([1,"a",true,false])"));
  EXPECT_FALSE(accepts(s, R"(["a"])"));
  EXPECT_FALSE(accepts(s, R"([1,"a",1])"));
  const json closed = json::parse(R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"null"}],"items":false,"minItems":2})");
  EXPECT_TRUE(accepts(closed, "[1,null]"));
  EXPECT_FALSE(accepts(closed, "[1]"));
  EXPECT_FALSE(prefix(closed, "[1,null,"));
  const json draft4 = json::parse(R"({"type":"array","items":[{"type":"integer"}],"additionalItems":{"type":"string"}})");
  EXPECT_TRUE(accepts(draft4, R"([1,"x","y"])"));
  EXPECT_FALSE(accepts(draft4, R"([1,2])"));
}

}  // namespace
}  // namespace neuron::grammar
