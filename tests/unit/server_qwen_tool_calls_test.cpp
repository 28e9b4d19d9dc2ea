// Tool calls out of Qwen3-Coder / Qwen3.5 answers (chat::ToolCallFormat::
// qwen3_coder): <tool_call><function=NAME><parameter=P>VALUE</parameter>...
// </function></tool_call>, each value raw text typed by the tool's schema.
// The same calls however the text is cut into deltas, blocking and
// streamed; OpenAI's streamed shape (one entry per call index per chunk, the
// first with id, type and name); text that is not a call stays content; the
// forced-call grammar writes exactly what the parser reads.
#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/tool_call_format.hpp"
#include "grammar/cache.hpp"
#include "support/grammar_accepts.hpp"
#include "support/streamed_tool_calls.hpp"
#include "server/messages_api.hpp"
#include "server/openai_response.hpp"
#include "server/tool_calls.hpp"
#include "server/xml_tool_call.hpp"
#include "util/error.hpp"

namespace neuron::server {
namespace {

using nlohmann::json;
using nlohmann::ordered_json;
constexpr auto kQwen = chat::ToolCallFormat::qwen3_coder;

const ordered_json kTools = ordered_json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
    "city": {"type": "string"}, "days": {"type": "integer"}, "detailed": {"type": "boolean"},
    "note": {"type": "string"}, "where": {"type": "object"}, "ratio": {"type": ["number", "null"]}, "any": {}},
    "required": ["city"]}}},
  {"type": "function", "function": {"name": "get_time"}}
])");

ToolCallSyntax syntax() { return {kQwen, ParameterTypes(kTools)}; }

using tool_call_test::cut_every;
using tool_call_test::Streamed;
Streamed qwen_pieces(const std::vector<std::string>& pieces, const std::string& engine_reason = "stop") {
  return tool_call_test::run_pieces(syntax(), pieces, engine_reason);
}

const std::string kAnswer =
    "I'll check both.\n\n"
    "<tool_call>\n<function=get_weather>\n"
    "<parameter=city>\nParis\n</parameter>\n"
    "<parameter=days>\n3\n</parameter>\n"
    "<parameter=detailed>\nTrue\n</parameter>\n"
    "<parameter=note>\nline one\nline <two> </param \"q\"\n</parameter>\n"
    "<parameter=where>\n{\"lat\": 48.8, \"tags\": [\"a\"]}\n</parameter>\n"
    "</function>\n</tool_call>\n"
    "<tool_call>\n<function=get_time>\n</function>\n</tool_call>";
const std::string kWeatherArgs =
    R"({"city":"Paris","days":3,"detailed":true,"note":"line one\nline <two> </param \"q\"","where":{"lat":48.8,"tags":["a"]}})";

void expect_answer(const Streamed& s, const std::string& where) {
  ASSERT_EQ(s.calls.size(), 2u) << where;
  EXPECT_EQ(s.calls[0].name, "get_weather") << where;
  EXPECT_EQ(s.calls[0].arguments, kWeatherArgs) << where;
  EXPECT_EQ(s.calls[1].name, "get_time") << where;
  EXPECT_EQ(s.calls[1].arguments, "{}") << where;
  EXPECT_NE(s.calls[0].id, s.calls[1].id);
  EXPECT_EQ(s.content, "I'll check both.\n\n") << where;
  EXPECT_EQ(s.finish_reason, "tool_calls") << where;
}

TEST(QwenToolCalls, BlockingAnswerGivesTypedCalls) {
  const ToolCallExtractor::Result r = ToolCallExtractor::split(kAnswer, syntax());
  EXPECT_EQ(r.content, "I'll check both.\n\n");
  ASSERT_EQ(r.calls.size(), 2u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(r.calls[0].arguments, kWeatherArgs);
  EXPECT_TRUE(json::parse(r.calls[0].arguments).is_object());
  EXPECT_EQ(r.calls[1].arguments, "{}");
  EXPECT_EQ(r.finish_reason("stop"), "tool_calls");
}

TEST(QwenToolCalls, SameCallsWhateverTheCuts) {
  for (std::size_t cut = 0; cut <= kAnswer.size(); ++cut)
    expect_answer(qwen_pieces({kAnswer.substr(0, cut), kAnswer.substr(cut)}), "cut at " + std::to_string(cut));
  for (std::size_t n : {1u, 2u, 3u, 7u}) expect_answer(qwen_pieces(cut_every(kAnswer, n)), "pieces of " + std::to_string(n));
  // Content before the tag goes out before the call is complete.
  EXPECT_EQ(qwen_pieces(cut_every(kAnswer, 1)).streamed, "I'll check both.\n\n");
}

// The streamed chat completion as a client reads it: per chunk one entry per
// call index, the first carrying id, type and name, then the arguments.
TEST(QwenToolCalls, StreamedChunksHaveOneEntryPerIndex) {
  const ResponseMeta meta{true, "chatcmpl-x", 1, "qwen"};
  for (std::size_t n : {std::size_t{1}, std::size_t{5}, kAnswer.size()}) {
    ToolCallExtractor x(syntax());
    std::vector<json> chunks;
    for (const std::string& piece : cut_every(kAnswer, n)) {
      ToolCallExtractor::Output o = x.feed(piece);
      if (!o.deltas.empty()) chunks.push_back(tool_call_deltas_chunk(meta, o.deltas));
    }
    ToolCallExtractor::Output rest = x.finish();
    if (!rest.deltas.empty()) chunks.push_back(tool_call_deltas_chunk(meta, rest.deltas));
    std::vector<json> calls;
    for (const json& c : chunks) {
      std::map<std::size_t, int> seen;
      for (const json& t : c["choices"][0]["delta"]["tool_calls"]) {
        const std::size_t index = t["index"].get<std::size_t>();
        EXPECT_EQ(++seen[index], 1) << "one entry per index per chunk: " << c.dump();
        if (t.contains("id")) {
          ASSERT_EQ(index, calls.size());
          EXPECT_EQ(t["type"], "function");
          calls.push_back({{"name", t["function"]["name"]}, {"arguments", ""}});
        }
        ASSERT_LT(index, calls.size()) << "arguments before the announcement";
        EXPECT_FALSE(!t.contains("id") && t["function"].contains("name")) << "only the first entry names the call";
        calls[index]["arguments"] = calls[index]["arguments"].get<std::string>() + t["function"]["arguments"].get<std::string>();
      }
    }
    ASSERT_EQ(calls.size(), 2u) << n;
    EXPECT_EQ(calls[0]["name"], "get_weather");
    EXPECT_EQ(calls[0]["arguments"], kWeatherArgs);
    EXPECT_EQ(calls[1]["arguments"], "{}");
    if (n == 1) {
      EXPECT_GE(chunks.size(), 7u) << "announcement, five parameters, close: as they end";
    }
  }
}

TEST(QwenToolCalls, ValuesAreTypedByTheToolsSchema) {
  const ParameterTypes t(kTools);
  const auto v = [&](const std::string& param, const std::string& text) { return t.json_value("get_weather", param, text); };
  EXPECT_EQ(v("city", "007"), R"("007")") << "a string stays a string";
  EXPECT_EQ(v("city", "null"), R"("null")");
  EXPECT_EQ(v("days", "42"), "42");
  EXPECT_EQ(v("days", " 42 "), "42");
  EXPECT_EQ(v("days", "4 2"), R"("4 2")") << "not JSON: left as the text";
  EXPECT_EQ(v("days", ""), R"("")");
  EXPECT_EQ(v("detailed", "true"), "true");
  EXPECT_EQ(v("detailed", "False"), "false") << "the template writes a past call's boolean with str()";
  EXPECT_EQ(v("detailed", "yes"), R"("yes")");
  EXPECT_EQ(v("where", R"({"b": 1, "a": [2, {"c": null}]})"), R"({"b":1,"a":[2,{"c":null}]})") << "key order kept";
  EXPECT_EQ(v("where", "{broken"), R"("{broken")");
  EXPECT_EQ(v("ratio", "1.5"), "1.5");
  EXPECT_EQ(v("ratio", "null"), "null");
  EXPECT_EQ(v("any", "42"), R"("42")") << "no declared type: text";
  EXPECT_EQ(v("unknown", "42"), R"("42")");
  EXPECT_EQ(t.json_value("get_time", "x", "[1]"), R"("[1]")");
  EXPECT_EQ(t.json_value("nope", "x", "[1]"), R"("[1]")");
  EXPECT_EQ(v("city", "caf\xc3\xa9 \"q\" \\"), R"("café \"q\" \\")");
  // Schemas of another shape are skipped, never an error.
  EXPECT_EQ(ParameterTypes(ordered_json::parse(R"([1, {"function": 2}, {"function": {"name": "f", "parameters": []}}])"))
                .json_value("f", "a", "1"),
            R"("1")");
  // A deep JSON value is refused by the parser's bound and kept as text.
  EXPECT_EQ(v("where", std::string(200, '[') + std::string(200, ']')).front(), '"');
}

TEST(QwenToolCalls, TextThatIsNotACallIsContent) {
  const std::vector<std::string> answers = {
      "The weather in Paris is sunny.",
      "<tool_call>\nnot a function\n</tool_call>",
      "<tool_call>\n<function=>\n</function>\n</tool_call>",  // no name
      "<tool_call>\n<function=get\nweather>",                  // a newline in the name
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",  // Hermes' JSON means nothing here
      "<tool_call>\n<function=get_weather",                   // cut off before the name is whole
      "a < b, <tool_call",                                     // a tag that never completes
  };
  for (const std::string& text : answers)
    for (std::size_t n : {std::size_t{1}, std::size_t{3}, text.size()}) {
      const Streamed s = qwen_pieces(cut_every(text, n));
      EXPECT_EQ(s.content, text) << "pieces of " << n;
      EXPECT_TRUE(s.calls.empty()) << text;
      EXPECT_EQ(s.finish_reason, "stop");
    }
}

TEST(QwenToolCalls, CallsCutOffOrBrokenAfterTheirNameStayCalls) {
  // Cut off inside a parameter: the call keeps the parameters it finished (arguments stay a JSON object).
  Streamed s = qwen_pieces(cut_every("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3", 2),
                          "length");
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(s.content, "");
  EXPECT_EQ(s.finish_reason, "length");
  s = qwen_pieces({"<tool_call>\n<function=get_time>"}, "length");
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].arguments, "{}");
  // Broken syntax after the name: the call ends there and the rest is content.
  s = qwen_pieces(cut_every("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<oops> rest", 1));
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(s.content, "<oops> rest");
  // The model stopped after </function> without </tool_call>: a whole call.
  s = qwen_pieces({"<tool_call>\n<function=get_time>\n</function>\n"});
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.finish_reason, "tool_calls");
  // Text after a finished call is content; blank text between calls is not.
  s = qwen_pieces({"<tool_call>\n<function=get_time>\n</function>\n</tool_call>\n\nDone."});
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.content, "\n\nDone.");
  s = qwen_pieces({"<tool_call>\n<function=get_time>\n</function>\nDone."});
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.content, "Done.");
}

// Random answers: well-formed calls with random names, parameters and
// values, then often broken (cut short, a piece of syntax inserted, a byte
// dropped). However they are cut, the stream gives what the blocking split
// gives, and every call's arguments are a JSON object (cut off, broken or
// whole).
TEST(QwenToolCalls, RandomAnswersStreamAsTheySplitAndArgumentsAreObjects) {
  std::mt19937 rng(7);
  const auto pick = [&](const std::vector<std::string>& from) { return from[rng() % from.size()]; };
  const std::vector<std::string> names = {"get_weather", "get_time", "other"};
  const std::vector<std::string> params = {"city", "days", "detailed", "where", "ratio", "extra"};
  const std::vector<std::string> values = {"Paris", "3", "x\ny", "True", "{\"a\": [1]}", "[1, 2", "null", "", "<b>", "</param"};
  const std::vector<std::string> noise = {"<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>",
                                          "<", ">", "\n", "text"};
  int with_calls = 0, with_params = 0;
  for (int round = 0; round < 2000; ++round) {
    std::string text = rng() % 2 ? "Let me see.\n" : "";
    for (int c = static_cast<int>(rng() % 4); c > 0; --c) {
      const bool bare = rng() % 4 == 0;
      text += (bare ? "<function=" : "<tool_call>\n<function=") + pick(names) + ">\n";
      for (int p = static_cast<int>(rng() % 4); p > 0; --p) text += "<parameter=" + pick(params) + ">\n" + pick(values) + "\n</parameter>\n";
      text += bare ? "</function>\n" : "</function>\n</tool_call>\n";
    }
    switch (rng() % 4) {
      case 0: text = text.substr(0, rng() % (text.size() + 1)); break;
      case 1: text.insert(rng() % (text.size() + 1), pick(noise)); break;
      case 2: if (!text.empty()) text.erase(rng() % text.size(), 1); break;
      default: break;
    }
    const ToolCallExtractor::Result whole = ToolCallExtractor::split(text, syntax());
    std::vector<std::string> cuts;
    for (std::size_t at = 0; at < text.size();) {
      const std::size_t len = 1 + rng() % 6;
      cuts.push_back(text.substr(at, len));
      at += len;
    }
    const Streamed s = qwen_pieces(cuts);
    ASSERT_EQ(s.content, whole.content) << text;
    ASSERT_EQ(s.calls.size(), whole.calls.size()) << text;
    with_calls += !s.calls.empty();
    for (std::size_t i = 0; i < s.calls.size(); ++i) {
      with_params += s.calls[i].arguments.size() > 2;
      EXPECT_EQ(s.calls[i].name, whole.calls[i].name) << text;
      EXPECT_EQ(s.calls[i].arguments, whole.calls[i].arguments) << text;
      EXPECT_TRUE(json::accept(s.calls[i].arguments) && json::parse(s.calls[i].arguments).is_object()) << text << "\n" << s.calls[i].arguments;
    }
  }
  EXPECT_GT(with_calls, 1000) << "most answers hold calls";
  EXPECT_GT(with_params, 1000) << "and calls with parameters";
}

// A call the model did not wrap in <tool_call> is read too (vLLM reads it);
// text around it is content, and the Hermes format never reads it.
TEST(QwenToolCalls, ACallWithoutToolCallTagsIsACall) {
  const std::string text = "Sure.\n<function=get_weather>\n<parameter=days>\n2\n</parameter>\n</function>\nDone.";
  for (std::size_t cut = 0; cut <= text.size(); ++cut) {
    const Streamed s = qwen_pieces({text.substr(0, cut), text.substr(cut)});
    ASSERT_EQ(s.calls.size(), 1u) << "cut at " << cut;
    EXPECT_EQ(s.calls[0].name, "get_weather");
    EXPECT_EQ(s.calls[0].arguments, R"({"days":2})");
    EXPECT_EQ(s.content, "Sure.\n\nDone.") << "cut at " << cut;
  }
  const Streamed two = qwen_pieces({"<function=get_time>\n</function>\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>"});
  EXPECT_EQ(two.calls.size(), 2u);
  EXPECT_EQ(two.content, "");
  for (const std::string& prose : {std::string("use <function=f> in x"), std::string("a <function= b"), std::string("<function=\n")}) {
    const Streamed s = qwen_pieces(cut_every(prose, 1));
    if (prose.starts_with("use")) {
      ASSERT_EQ(s.calls.size(), 1u) << "a whole <function=NAME> tag is a call, the rest content";
      EXPECT_EQ(s.content, "use in x");  // the blank after the tag went with the call
      continue;
    }
    EXPECT_TRUE(s.calls.empty()) << prose;
    EXPECT_EQ(s.content, prose);
  }
  EXPECT_TRUE(ToolCallExtractor::split(text).calls.empty()) << "hermes";
}

// The Messages stream (Anthropic) reads the same calls.
TEST(QwenToolCalls, MessagesStreamReadsTheFormat) {
  MessagesTurnShaper messages("msg_1", "qwen", 5, syntax());
  std::string sse = messages.open();
  for (const std::string& piece : cut_every(kAnswer, 7)) sse += messages.delta(piece, "");
  sse += messages.close(TurnEnd{"stop", {5, 20, 0}, 0, {}});
  EXPECT_NE(sse.find(R"("name":"get_weather")"), std::string::npos) << sse;
  EXPECT_NE(sse.find(R"("name":"get_time")"), std::string::npos) << sse;
  EXPECT_NE(sse.find(R"("stop_reason":"tool_use")"), std::string::npos) << sse;
}

// ---- the forced call's grammar ----

std::vector<grammar::ToolSpec> specs(const ordered_json& tools) {
  std::vector<grammar::ToolSpec> out;
  for (const auto& t : tools)
    out.push_back({t["function"]["name"].get<std::string>(), t["function"].value("parameters", ordered_json())});
  return out;
}

std::string call(const std::string& name, const std::vector<std::pair<std::string, std::string>>& params) {
  std::string s = "<tool_call>\n<function=" + name + ">\n";
  for (const auto& [p, v] : params) s += "<parameter=" + p + ">\n" + v + "\n</parameter>\n";
  return s + "</function>\n</tool_call>";
}

TEST(QwenToolCallGrammar, AcceptsCallsOfTheToolsInTheirSchemasOrder) {
  const ordered_json tools = ordered_json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
      "city": {"type": "string"}, "days": {"type": "integer", "minimum": 1, "maximum": 9}, "unit": {"enum": ["c", "f"]}},
      "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time"}}
  ])");
  grammar::Constraint c = grammar::Constraint::tool_call(specs(tools));
  const std::string hermes_key = c.key();
  c.tool_format = kQwen;
  EXPECT_NE(c.key(), hermes_key) << "the cache keeps the grammars apart";
  const auto g = grammar::testing::compiled(c.compile());
  using grammar::testing::accepts;
  const std::vector<std::string> good = {
      call("get_weather", {{"city", "Paris"}}),
      call("get_weather", {{"city", "Paris"}, {"days", "3"}, {"unit", "c"}}),
      call("get_weather", {{"city", "Saint-Denis\nR\xc3\xa9union <b> </param"}, {"unit", "anything: no type, free text"}}),
      call("get_weather", {{"city", ""}}),
      call("get_time", {}),
      call("get_time", {{"tz", "UTC"}, {"fmt", "iso"}}),  // no properties declared: any names
  };
  for (const std::string& text : good) {
    EXPECT_TRUE(accepts(g, text)) << text;
    // What the grammar lets through is one call to the parser.
    const auto split = ToolCallExtractor::split(text, ToolCallSyntax{kQwen, ParameterTypes(tools)});
    EXPECT_EQ(split.calls.size(), 1u) << text;
    EXPECT_EQ(split.content, "") << text;
  }
  const std::vector<std::string> bad = {
      call("get_weather", {}),                                     // city is required
      call("get_weather", {{"days", "3"}, {"city", "Paris"}}),     // declared order
      call("get_weather", {{"city", "Paris"}, {"days", "three"}}),  // an integer
      call("get_weather", {{"city", "Paris"}, {"days", "12"}}),     // above its maximum
      call("get_weather", {{"city", "Paris"}, {"country", "FR"}}),  // not a declared parameter
      call("get_weather", {{"city", "Paris"}, {"city", "Rome"}}),   // twice
      call("get_weather", {{"city", "Pa</parameter>ris"}}),         // the value cannot hold its closing tag
      call("other", {}),
      call("get_time", {{"t<z", "UTC"}}),
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
      "<function=get_time>\n</function>",
      call("get_time", {}) + "\n",
  };
  for (const std::string& text : bad) EXPECT_FALSE(accepts(g, text)) << text;
  const auto typed = ToolCallExtractor::split(call("get_weather", {{"city", "Paris"}, {"days", "3"}}), ToolCallSyntax{kQwen, ParameterTypes(tools)});
  ASSERT_EQ(typed.calls.size(), 1u);
  EXPECT_EQ(typed.calls[0].arguments, R"({"city":"Paris","days":3})");
}

TEST(QwenToolCallGrammar, NamedToolAndToolOrJson) {
  // tool_choice naming a function: the grammar is built from that tool only.
  const auto named = grammar::testing::compiled(grammar::compile_tool_call({{"get_time", nullptr}}, kQwen));
  EXPECT_TRUE(grammar::testing::accepts(named, call("get_time", {})));
  EXPECT_FALSE(grammar::testing::accepts(named, call("get_weather", {})));
  // tool_choice auto with a response format: a tagged call or the value.
  const ordered_json schema = ordered_json::parse(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})");
  const auto either = grammar::testing::compiled(grammar::compile_tool_call_or_json({{"get_time", nullptr}}, &schema, kQwen));
  EXPECT_TRUE(grammar::testing::accepts(either, call("get_time", {})));
  EXPECT_TRUE(grammar::testing::accepts(either, R"({"a": 1})"));
  EXPECT_FALSE(grammar::testing::accepts(either, R"({"b": 1})"));
  EXPECT_THROW(grammar::compile_tool_call_or_json({{"f", nullptr}}, &schema, chat::ToolCallFormat::llama_json), Error);
}

TEST(QwenToolCallGrammar, NamesTheSyntaxCannotCarryAreRefused) {
  const auto refusal = [](std::vector<grammar::ToolSpec> tools) {
    try {
      grammar::compile_tool_call(tools, kQwen);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), errc::invalid_argument);
      return std::string(e.what());
    }
    return std::string("compiled");
  };
  EXPECT_NE(refusal({{"a>b", nullptr}}).find("tools[0].function.name"), std::string::npos);
  EXPECT_NE(refusal({{"ok", ordered_json::parse(R"({"properties": {"x\ny": {"type": "string"}}})")}}).find("x\ny"), std::string::npos);
  // A schema construct the grammar cannot express is refused as for the other formats.
  EXPECT_NE(refusal({{"ok", ordered_json::parse(R"({"properties": {"n": {"type": "integer", "not": {}}}})")}}).find("'not'"),
            std::string::npos);
}

}  // namespace
}  // namespace neuron::server
