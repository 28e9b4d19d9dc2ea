// The grammar engine: JSON Schema compilation (every supported construct,
// refusals), the byte-level matcher (accept / reject, bounds on adversarial
// schemas and outputs) and token masks over a small vocabulary.
#include <chrono>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "grammar/cache.hpp"
#include "grammar/json_schema.hpp"
#include "grammar/matcher.hpp"
#include "model/sampler.hpp"
#include "server/tool_calls.hpp"
#include "support/grammar_accepts.hpp"
#include "util/error.hpp"
#include "util/json_parse.hpp"

namespace neuron::grammar {
namespace {

using namespace testing;

TEST(GrammarSchema, ObjectsKeepDeclaredOrderRequiredAndOptional) {
  const json s = json::parse(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"},
                                 "c":{"type":"boolean"}},"required":["a","c"]})");
  EXPECT_TRUE(accepts(s, R"({"a":1,"c":true})"));
  EXPECT_TRUE(accepts(s, R"({"a": 1, "b": "x", "c": false})"));
  EXPECT_TRUE(accepts(s, "{\n  \"a\": -7,\n  \"c\": true\n}"));
  EXPECT_FALSE(accepts(s, R"({"c":true,"a":1})")) << "declared order";
  EXPECT_FALSE(accepts(s, R"({"a":1})")) << "c is required";
  EXPECT_FALSE(accepts(s, R"({"a":1,"c":true,"d":1})")) << "no additional properties unless allowed";
  EXPECT_FALSE(accepts(s, R"({"a":"1","c":true})"));
  EXPECT_FALSE(prefix(s, R"({"a":1,"c":true} )")) << "nothing after the value";
  EXPECT_FALSE(accepts(s, R"({"a":1,,"c":true})"));
  const json all_optional = json::parse(R"({"type":"object","properties":{"x":{"type":"null"},"y":{"type":"null"}}})");
  for (const char* ok : {"{}", "{ }", R"({"x":null})", R"({"y":null})", R"({"x":null,"y":null})"})
    EXPECT_TRUE(accepts(all_optional, ok)) << ok;
  EXPECT_FALSE(accepts(all_optional, R"({,"y":null})"));
  EXPECT_FALSE(accepts(all_optional, R"({"y":null,"x":null})"));
}

TEST(GrammarSchema, AdditionalProperties) {
  const json any = json::parse(R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":true})");
  EXPECT_TRUE(accepts(any, R"({"a":1,"zz":[1,{"q":null}],"b":"x"})"));
  EXPECT_TRUE(accepts(any, R"({"other":1})"));
  EXPECT_TRUE(accepts(any, R"({"a":1,"ab":2,"":3})")) << "extra keys may extend a declared name";
  EXPECT_FALSE(accepts(any, R"({"ab":1,"a":2})")) << "declared properties come first";
  EXPECT_FALSE(accepts(any, R"({"a":1,"a":2})")) << "an extra key is never a declared name";
  const json typed = json::parse(R"({"type":"object","additionalProperties":{"type":"integer"}})");
  EXPECT_TRUE(accepts(typed, R"({"x":1,"y":2})"));
  EXPECT_FALSE(accepts(typed, R"({"x":"1"})"));
  EXPECT_FALSE(accepts(json::parse(R"({"type":"object","additionalProperties":false})"), R"({"x":1})"));
  EXPECT_TRUE(accepts(json::parse(R"({"type":"object","additionalProperties":false})"), "{}"));
}

TEST(GrammarSchema, ArraysWithBounds) {
  const json s = json::parse(R"({"type":"array","items":{"type":"integer"},"minItems":1,"maxItems":3})");
  EXPECT_FALSE(accepts(s, "[]"));
  EXPECT_TRUE(accepts(s, "[1]"));
  EXPECT_TRUE(accepts(s, "[1, 2,3]"));
  EXPECT_FALSE(prefix(s, "[1,2,3,"));
  EXPECT_FALSE(accepts(s, "[1,]"));
  const json open = json::parse(R"({"type":"array","items":{"type":"string"}})");
  EXPECT_TRUE(accepts(open, "[]"));
  EXPECT_TRUE(accepts(open, R"(["a","b","c","d","e"])"));
  EXPECT_TRUE(accepts(json::parse(R"({"type":"array"})"), R"([1,"x",null,[true]])"));
  EXPECT_FALSE(accepts(json::parse(R"({"type":"array","minItems":2})"), "[1]"));
}

TEST(GrammarSchema, StringsAreValidUtf8JsonWithLengthsInCodePoints) {
  const json s = json::parse(R"({"type":"string"})");
  EXPECT_TRUE(accepts(s, R"("")"));
  EXPECT_TRUE(accepts(s, R"("a \"q\" \\ \/ \b\f\n\r\t \u00e9 \uFFFD")"));
  EXPECT_TRUE(accepts(s, "\"caf\xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80\""));
  EXPECT_FALSE(prefix(s, "\"\xc3\x28")) << "invalid UTF-8";
  EXPECT_FALSE(prefix(s, "\"\xed\xa0\x80")) << "an encoded surrogate";
  EXPECT_FALSE(prefix(s, R"("\ud800)")) << "escaped surrogates would not parse strictly";
  EXPECT_FALSE(prefix(s, "\"a\nb")) << "raw control characters";
  EXPECT_FALSE(prefix(s, R"("\x")"));
  const json bounded = json::parse(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_FALSE(accepts(bounded, R"("a")"));
  EXPECT_TRUE(accepts(bounded, R"("ab")"));
  EXPECT_TRUE(accepts(bounded, "\"\xc3\xa9\xc3\xa9\xc3\xa9\"")) << "three code points, six bytes";
  EXPECT_TRUE(accepts(bounded, R"("\n\u0041")"));
  EXPECT_FALSE(prefix(bounded, "\"\xf0\x9f")) << "bounded strings stay in the BMP (JavaScript counts the rest twice)";
  EXPECT_FALSE(prefix(bounded, R"("abcd)"));
  EXPECT_TRUE(accepts(json::parse(R"({"type":"string","minLength":2})"), R"("abcdefgh")"));
  EXPECT_FALSE(accepts(json::parse(R"({"type":"string","minLength":2})"), R"("a")"));
}

TEST(GrammarSchema, NumbersAreBounded) {
  const json i = json::parse(R"({"type":"integer"})");
  for (const char* ok : {"0", "7", "-12", "9007199254740991", "-9007199254740991"}) EXPECT_TRUE(accepts(i, ok)) << ok;
  for (const char* bad : {"01", "-0", "1.5", "+1", "1e3", "-", "9007199254740992", "-9007199254740992"})
    EXPECT_FALSE(accepts(i, bad)) << bad;
  const json n = json::parse(R"({"type":"number"})");
  for (const char* ok : {"0", "-0.5", "1.25e10", "3E-7", "2e+99"}) EXPECT_TRUE(accepts(n, ok)) << ok;
  for (const char* bad : {"1.", ".5", "1e", "8e+826", "2e300", "NaN", "00"}) EXPECT_FALSE(accepts(n, bad)) << bad;
  EXPECT_FALSE(accepts(json::parse(R"({"type":"integer","minimum":0})"), "-1"));
  EXPECT_TRUE(accepts(json::parse(R"({"type":"integer","minimum":0})"), "0"));
  EXPECT_FALSE(accepts(json::parse(R"({"type":"integer","exclusiveMinimum":0})"), "0"));
  EXPECT_TRUE(accepts(json::parse(R"({"type":"integer","minimum":1})"), "10"));
  EXPECT_FALSE(accepts(json::parse(R"({"type":"number","minimum":0})"), "-0.1"));
}

TEST(GrammarSchema, EnumsConstsAndAlternatives) {
  const json e = json::parse(R"({"enum":["red","green","gr",3,null,{"k":[1]}]})");
  for (const char* ok : {R"("red")", R"("green")", R"("gr")", "3", "null", R"({"k":[1]})"}) EXPECT_TRUE(accepts(e, ok)) << ok;
  for (const char* bad : {R"("gre")", R"("blue")", "4", R"({"k":[2]})"}) EXPECT_FALSE(accepts(e, bad)) << bad;
  EXPECT_TRUE(accepts(json::parse(R"({"const":"x"})"), R"("x")"));
  EXPECT_FALSE(accepts(json::parse(R"({"const":"x"})"), R"("y")"));
  const json any_of = json::parse(R"({"anyOf":[{"type":"integer"},{"type":"object","properties":{"a":{"type":"string"}},"required":["a"]}]})");
  EXPECT_TRUE(accepts(any_of, "5"));
  EXPECT_TRUE(accepts(any_of, R"({"a":"b"})"));
  EXPECT_FALSE(accepts(any_of, R"("5")"));
  EXPECT_TRUE(accepts(json::parse(R"({"oneOf":[{"type":"null"},{"type":"boolean"}]})"), "false"));
  const json nullable = json::parse(R"({"type":["string","null"]})");
  EXPECT_TRUE(accepts(nullable, "null"));
  EXPECT_TRUE(accepts(nullable, R"("s")"));
  EXPECT_FALSE(accepts(nullable, "1"));
  EXPECT_TRUE(accepts(json::parse(R"({"type":"integer","nullable":true})"), "null"));
  EXPECT_TRUE(accepts(json::parse(R"({"allOf":[{"type":"boolean"}]})"), "true"));
  EXPECT_TRUE(accepts(json::parse(R"({})"), R"({"free":[1,2.5,"x",true,null]})"));
  EXPECT_TRUE(accepts(json::parse("true"), "[]"));
  EXPECT_TRUE(accepts(json::parse(R"({"anyOf":[false,{"type":"null"}]})"), "null"));
}

TEST(GrammarSchema, RefsAndRecursion) {
  const json tree = json::parse(R"({
    "$defs": {"node": {"type": "object",
      "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
      "required": ["v"], "additionalProperties": false}},
    "$ref": "#/$defs/node"})");
  EXPECT_TRUE(accepts(tree, R"({"v":1})"));
  EXPECT_TRUE(accepts(tree, R"({"v":1,"kids":[{"v":2,"kids":[{"v":3}]},{"v":4,"kids":[]}]})"));
  EXPECT_FALSE(accepts(tree, R"({"v":1,"kids":[{"w":2}]})"));
  const json root_ref = json::parse(R"({"type":"object","properties":{"next":{"anyOf":[{"$ref":"#"},{"type":"null"}]}},"required":["next"]})");
  EXPECT_TRUE(accepts(root_ref, R"({"next":{"next":{"next":null}}})"));
  const json definitions = json::parse(R"({"definitions":{"a":{"type":"string"}},"properties":{"x":{"$ref":"#/definitions/a"}},"required":["x"]})");
  EXPECT_TRUE(accepts(definitions, R"({"x":"y"})"));
}

TEST(GrammarSchema, RefusesWhatItCannotEnforceByName) {
  const json lookahead = json::parse(R"j({"type":"object","properties":{"name":{"type":"string","pattern":"^(?=a)"}}})j");
  EXPECT_NE(refusal(lookahead).find("lookaround"), std::string::npos);
  EXPECT_NE(refusal(lookahead).find("properties.name"), std::string::npos);
  for (const char* kw : {"not", "if", "uniqueItems", "patternProperties", "contains", "dependentRequired"}) {
    json s = {{"type", "integer"}, {kw, kw == std::string("uniqueItems") ? json(true) : json(1)}};
    EXPECT_NE(refusal(s).find(kw), std::string::npos) << kw;
  }
  EXPECT_NE(refusal(json::parse(R"({"type":"number","multipleOf":0.5})")).find("multipleOf"), std::string::npos);
  EXPECT_NE(refusal(json::parse(R"({"type":"string","pattern":"(a)\\1"})")).find("backreferences"), std::string::npos);
  EXPECT_NE(refusal(json::parse(R"({"type":"string","pattern":"a\\bc"})")).find("word boundary"), std::string::npos);
  EXPECT_NE(refusal(json::parse(R"j({"type":"string","pattern":"(^a)"})j")).find("'^'"), std::string::npos);
  EXPECT_NE(refusal(json::parse(R"({"type":"string","format":"email","pattern":"a"})")).find("together"), std::string::npos);
  EXPECT_NE(refusal(json::parse(R"({"type":"object","propertyNames":{"maxLength":3}})")).find("propertyNames"), std::string::npos);
  EXPECT_NE(refusal(json::parse(R"({"$ref":"https://example.com/s.json"})")).find("$ref"), std::string::npos);
  EXPECT_NE(refusal(json::parse(R"({"$ref":"#/$defs/missing"})")).find("does not resolve"), std::string::npos);
  EXPECT_NE(refusal(json::parse(R"({"type":"string","maxLength":100000})")).find("maxLength"), std::string::npos);
  EXPECT_NE(refusal(json::parse(R"({"type":"wat"})")).find("unknown type"), std::string::npos);
  EXPECT_NE(refusal(json::parse(R"({"allOf":[{"type":"string"},{"minLength":1}]})")).find("allOf"), std::string::npos);
  EXPECT_NE(refusal(json::parse(R"({"type":"integer","minimum":"5"})")).find("minimum"), std::string::npos);
  // Left recursion would loop the matcher; a schema with no finite value would never end.
  EXPECT_NE(refusal(json::parse(R"({"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},"$ref":"#/$defs/a"})"))
                .find("refers to itself"),
            std::string::npos);
  EXPECT_NE(refusal(json::parse(R"({"$ref":"#"})")).find("no finite value"), std::string::npos);
  EXPECT_NE(refusal(json::parse(R"({"$defs":{"a":{"type":"object","properties":{"x":{"$ref":"#/$defs/a"}},"required":["x"]}},"$ref":"#/$defs/a"})"))
                .find("no finite value"),
            std::string::npos);
  EXPECT_NE(refusal(json(false)).find("no finite value"), std::string::npos);
  EXPECT_NE(refusal(json::parse(R"({"type":"array","minItems":3,"maxItems":1})")).find("no finite value"), std::string::npos);
}

TEST(GrammarSchema, WhitespaceIsBounded) {
  const json s = json::parse(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})");
  EXPECT_TRUE(accepts(s, R"({ "a": 1 })"));
  EXPECT_FALSE(prefix(s, "{  "));
  EXPECT_TRUE(accepts(s, "{\n" + std::string(16, ' ') + "\"a\":1}"));
  EXPECT_FALSE(prefix(s, "{\n" + std::string(17, ' ')));
  EXPECT_FALSE(prefix(s, "{\n\n"));
  EXPECT_FALSE(prefix(s, " {")) << "no leading whitespace";
  EXPECT_FALSE(prefix(s, R"({"a" :)")) << "no space before a colon";
}

TEST(GrammarSchema, AdversarialSchemasCostBoundedWork) {
  const auto start = std::chrono::steady_clock::now();
  // A huge enum is one parse path (a trie of the values).
  json values = json::array();
  for (int i = 0; i < 20000; ++i) values.push_back("value" + std::to_string(i * 7919));
  const auto big = compiled(compile_json_schema({{"enum", values}}));
  EXPECT_TRUE(accepts(big, "\"value" + std::to_string(19999 * 7919) + "\""));
  EXPECT_FALSE(accepts(big, R"("value1")"));
  // 2^40 paths through shared definitions: each (position, parent) is expanded once a step.
  json defs = json::object();
  for (int i = 0; i < 40; ++i) {
    const std::string next = i == 39 ? "" : "#/$defs/d" + std::to_string(i + 1);
    defs["d" + std::to_string(i)] =
        i == 39 ? json{{"type", "integer"}} : json{{"anyOf", {{{"$ref", next}}, {{"$ref", next}}}}};
  }
  EXPECT_TRUE(accepts(json{{"$defs", defs}, {"$ref", "#/$defs/d0"}}, "12345"));
  // Many optional properties: linear in their number.
  json props = json::object();
  for (int i = 0; i < 2000; ++i) props["p" + std::to_string(i)] = {{"type", "integer"}};
  EXPECT_TRUE(accepts(json{{"type", "object"}, {"properties", props}}, R"({"p1999":1})"));
  // A schema past the element limit is refused, not built.
  json huge = json::array();
  for (int i = 0; i < 300000; ++i) huge.push_back(std::string(8, static_cast<char>('a' + i % 26)) + std::to_string(i));
  EXPECT_NE(refusal({{"enum", huge}}).find("too large"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST(GrammarMatcher, NestingPastTheDepthLimitIsRefusedNotOverflowed) {
  const auto g = compiled(compile_json_object());
  Matcher m(g);
  ASSERT_TRUE(m.accept_bytes(R"({"a":)"));
  int opened = 0;
  while (opened < 100000 && m.accept_bytes("[")) ++opened;
  EXPECT_GT(opened, 50);
  EXPECT_LT(opened, 100000);
  for (int i = 0; i < opened; ++i) ASSERT_TRUE(m.accept_bytes("]"));
  EXPECT_TRUE(m.accept_bytes("}"));
  EXPECT_TRUE(m.done());
}

TEST(GrammarMatcher, JsonObjectModeAcceptsOnlyObjects) {
  const auto g = compiled(compile_json_object());
  EXPECT_TRUE(accepts(g, R"({"a":[1,{"b":null}],"c":"d"})"));
  EXPECT_TRUE(accepts(g, "{}"));
  EXPECT_FALSE(accepts(g, "[]"));
  EXPECT_FALSE(accepts(g, R"("x")"));
  EXPECT_FALSE(accepts(g, R"({"a":1)"));
}

TEST(GrammarMatcher, ToolCallsMatchTheQwen3FormatTheExtractorParses) {
  const auto g = compiled(compile_tool_call(
      {{"get_weather", json::parse(R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})")},
       {"noop", nullptr}}));
  const std::string call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
  Matcher m(g);
  ASSERT_TRUE(m.accept_bytes(call));
  EXPECT_TRUE(m.done());
  EXPECT_TRUE(accepts(g, "<tool_call>\n{\"name\": \"noop\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(accepts(g, "<tool_call>\n{\"name\": \"other\", \"arguments\": {}}\n</tool_call>"));
  EXPECT_FALSE(accepts(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>"));
  const auto split = server::ToolCallExtractor::split(call);
  ASSERT_EQ(split.calls.size(), 1u);
  EXPECT_EQ(split.calls[0].name, "get_weather");
  EXPECT_EQ(split.calls[0].arguments, R"({"city": "Paris"})");  // the model's own text
  EXPECT_TRUE(split.content.empty());
}

// tool_choice "auto" with a response format: a tool call, or a value of the format.
TEST(GrammarMatcher, ToolCallOrFormat) {
  const std::vector<ToolSpec> tools = {{"get_weather", json::parse(R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})")}};
  const json schema = json::parse(R"({"type":"object","properties":{"answer":{"type":"integer","minimum":0,"maximum":9}},"required":["answer"]})");
  const auto g = compiled(compile_tool_call_or_json(tools, &schema));
  EXPECT_TRUE(accepts(g, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>"));
  EXPECT_TRUE(accepts(g, R"({"answer": 7})"));
  EXPECT_FALSE(accepts(g, R"({"answer": 10})"));
  EXPECT_FALSE(accepts(g, "hello"));
  const auto object = compiled(compile_tool_call_or_json(tools, nullptr));
  EXPECT_TRUE(accepts(object, R"({"any": [1]})"));
  EXPECT_FALSE(accepts(object, "[1]"));
  // Different tools make different constraints (the cache key tells them apart).
  Constraint a = Constraint::json_schema(schema), b = Constraint::json_schema(schema);
  b.tools = tools;
  EXPECT_NE(a.key(), b.key());
}

TEST(GrammarMask, WalksTheVocabularyAndAddsEosWhenComplete) {
  // ids: 0 "{", 1 "}", 2 "\"a\"", 3 ":", 4 "1", 5 "12", 6 "{\"a\":", 7 "x", 8 "" (no bytes), 9 "1}", 10 EOS (no bytes)
  const auto trie = std::make_shared<const TokenTrie>(std::vector<std::string>{"{", "}", "\"a\"", ":", "1", "12", "{\"a\":", "x", "", "1}", ""});
  const auto g = std::make_shared<const CompiledGrammar>(
      compile_json_schema(json::parse(R"({"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]})")), trie);
  const std::vector<std::int32_t> eos = {10};
  auto allowed = [&](Matcher& m) {
    const TokenMask& mask = m.mask(eos);
    std::vector<int> ids;
    for (int id = 0; id < 11; ++id)
      if ((mask.bits[0] >> id) & 1) ids.push_back(id);
    EXPECT_EQ(static_cast<std::int64_t>(ids.size()), mask.count);
    return ids;
  };
  Matcher m(g);
  EXPECT_EQ(allowed(m), (std::vector<int>{0, 6}));
  ASSERT_TRUE(m.accept_token(6));
  EXPECT_EQ(allowed(m), (std::vector<int>{4, 5, 9}));
  ASSERT_TRUE(m.accept_token(5));
  EXPECT_EQ(allowed(m), (std::vector<int>{1, 4, 5, 9}));
  EXPECT_FALSE(m.accept_token(7));
  EXPECT_FALSE(m.accept_token(8)) << "a token without bytes";
  ASSERT_TRUE(m.accept_token(1));
  EXPECT_TRUE(m.done());
  EXPECT_EQ(allowed(m), (std::vector<int>{10})) << "complete: only EOS";
  // The same state again comes from the cache.
  Matcher again(g);
  ASSERT_TRUE(again.accept_token(6));
  allowed(again);
  EXPECT_GE(g->cache_stats().hits, 1u);
}

TEST(GrammarMask, AHostileSchemaCannotMakeAMaskSlow) {
  // 148,877 three-letter tokens, and 200 string branches alive at once inside a string.
  std::vector<std::string> vocab;
  const std::string letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ \"";
  for (char a : letters)
    for (char b : letters)
      for (char c : letters) vocab.push_back(std::string{a, b, c});
  const auto trie = std::make_shared<const TokenTrie>(vocab);
  json branches = json::array();
  for (int i = 1; i <= 200; ++i) branches.push_back({{"type", "string"}, {"maxLength", 50 + i}});
  const auto g = std::make_shared<const CompiledGrammar>(compile_json_schema({{"anyOf", branches}}), trie);
  // The bound is lowered 40x for the test's speed; the walk stops there.
  Matcher m(g, kMaxMaskWork / 40);
  ASSERT_TRUE(m.accept_bytes("\""));
  const auto start = std::chrono::steady_clock::now();
  const TokenMask& mask = m.mask({});
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  ASSERT_GT(mask.count, 0);
  EXPECT_LT(mask.count, static_cast<std::int64_t>(vocab.size()) / 2) << "the walk was cut short";
  // Whatever the bounded walk found is valid.
  int checked = 0;
  for (std::size_t id = 0; id < vocab.size() && checked < 50; ++id)
    if ((mask.bits[id >> 6] >> (id & 63)) & 1) {
      EXPECT_TRUE(m.allows(static_cast<std::int32_t>(id), {})) << vocab[id];
      ++checked;
    }
}

TEST(GrammarMask, SamplerDrawsOnlyAllowedTokens) {
  model::SamplingParams p;
  p.temperature = 1.0f;
  p.seed = 7;
  model::Sampler sampler(p);
  std::vector<std::uint64_t> bits(2, 0);
  bits[0] = (1ull << 3) | (1ull << 40);
  bits[1] = 1ull << (70 - 64);
  for (int i = 0; i < 200; ++i) {
    std::vector<float> logits(100, 0.0f);
    logits[5] = 50.0f;  // the favourite is not allowed
    const std::int32_t t = sampler.sample(logits, {}, 0, bits.data());
    EXPECT_TRUE(t == 3 || t == 40 || t == 70) << t;
  }
  // A large allowed set too.
  std::vector<std::uint64_t> most(2, ~0ull);
  most[0] &= ~(1ull << 5);
  for (int i = 0; i < 50; ++i) {
    std::vector<float> logits(100, 0.0f);
    logits[5] = 50.0f;
    EXPECT_NE(sampler.sample(logits, {}, 0, most.data()), 5);
  }
  model::SamplingParams greedy;
  greedy.temperature = 0.0f;
  model::Sampler g(greedy);
  std::vector<float> logits(100, 0.0f);
  logits[5] = 50.0f;
  logits[40] = 2.0f;
  EXPECT_EQ(g.sample(logits, {}, 0, bits.data()), 40);
  std::vector<std::uint64_t> none(2, 0);
  EXPECT_THROW(g.sample(logits, {}, 0, none.data()), Error);
}

TEST(GrammarCache, ReusesCompiledConstraintsAndNamesRefusals) {
  std::vector<std::string> v;
  for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
  // GrammarCache needs a tokenizer; the constraint's key and compile are checked directly.
  const Constraint a = Constraint::json_schema(json::parse(R"({"type":"string"})"));
  const Constraint b = Constraint::json_schema(json::parse(R"({"type":"string"})"));
  EXPECT_EQ(a.key(), b.key());
  EXPECT_NE(a.key(), Constraint::json_object().key());
  EXPECT_NE(Constraint::tool_call({{"f", nullptr}}).key(), Constraint::tool_call({{"g", nullptr}}).key());
  EXPECT_THROW(Constraint::json_schema(json::parse(R"({"type":"string","not":{}})")).compile(), Error);
}

}  // namespace
}  // namespace neuron::grammar
