// Tool calls out of Qwen3's answers: the same result however the text is cut
// into deltas, calls streamed as OpenAI's incremental deltas (announcement,
// then argument fragments), nothing the model wrote lost when it is not a
// well-formed call, and the OpenAI shapes (message.tool_calls, streamed
// tool_calls deltas).
#include <gtest/gtest.h>

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "server/api_error.hpp"
#include "server/openai_request.hpp"
#include "server/openai_response.hpp"
#include "server/tool_calls.hpp"

namespace neuron::server {
namespace {

using nlohmann::json;

// What a client reassembles from the stream: content, and each call from its
// deltas (the first names it, the rest append to its arguments).
struct Split {
  std::string streamed;  // content let out by feed() as it went
  std::string content;   // all content, finish() included
  std::vector<ToolCall> calls;
  std::vector<ToolCallDelta> deltas;
  std::string finish_reason;
};

void collect(Split& s, const ToolCallExtractor::Output& o) {
  s.content += o.content;
  for (const ToolCallDelta& d : o.deltas) {
    s.deltas.push_back(d);
    if (d.first) {
      EXPECT_EQ(d.index, s.calls.size()) << "calls are announced in order";
      EXPECT_TRUE(d.arguments.empty()) << "the announcement carries arguments \"\"";
      s.calls.push_back(ToolCall{d.id, d.name, {}});
    } else {
      ASSERT_LT(d.index, s.calls.size()) << "a fragment of a call never announced";
      s.calls[d.index].arguments += d.arguments;
    }
  }
}

Split split_pieces(const std::vector<std::string>& pieces) {
  ToolCallExtractor x;
  Split s;
  for (const std::string& p : pieces) {
    ToolCallExtractor::Output o = x.feed(p);
    s.streamed += o.content;
    collect(s, o);
  }
  collect(s, x.finish());
  s.finish_reason = x.finish_reason("stop");
  return s;
}

Split run(const std::string& text, std::size_t cut) { return split_pieces({text.substr(0, cut), text.substr(cut)}); }

Split run_bytewise(const std::string& text) {
  std::vector<std::string> pieces;
  for (char c : text) pieces.emplace_back(1, c);
  return split_pieces(pieces);
}

const std::string kArgs = R"({"unit": "c", "city": "Paris"})";
const std::string kCall = "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": " + kArgs + "}\n</tool_call>";

TEST(ToolCallExtractor, PlainTextPassesThroughWhateverTheCuts) {
  const std::string text = "No tools here, only a <tool> and a <tool_ca that never closes.";
  for (std::size_t cut = 0; cut <= text.size(); ++cut) {
    Split s = run(text, cut);
    EXPECT_EQ(s.content, text) << "cut at " << cut;
    EXPECT_TRUE(s.calls.empty());
  }
  EXPECT_EQ(run_bytewise(text).content, text);
}

TEST(ToolCallExtractor, ACallBecomesToolCallsAndTheTextBeforeItStreams) {
  for (std::size_t cut = 0; cut <= kCall.size(); ++cut) {
    Split s = run(kCall, cut);
    EXPECT_EQ(s.content, "Let me check.\n") << "cut at " << cut;
    ASSERT_EQ(s.calls.size(), 1u) << "cut at " << cut;
    EXPECT_EQ(s.calls[0].name, "get_weather");
    EXPECT_EQ(s.calls[0].arguments, kArgs) << "the model's arguments text, as written";
    EXPECT_EQ(s.finish_reason, "tool_calls");
  }
  Split bytes = run_bytewise(kCall);
  EXPECT_EQ(bytes.streamed, "Let me check.\n") << "content before the tag goes out before the call is complete";
  ASSERT_EQ(bytes.calls.size(), 1u);
}

TEST(ToolCallExtractor, ArgumentsStreamAsTheModelWritesThem) {
  // Fed a byte at a time: the announcement comes as soon as the name is read
  // and the arguments begin, then one fragment per byte of the arguments.
  Split s = run_bytewise(kCall);
  ASSERT_GE(s.deltas.size(), 2u);
  EXPECT_TRUE(s.deltas[0].first);
  EXPECT_EQ(s.deltas[0].name, "get_weather");
  EXPECT_EQ(s.deltas[0].id.rfind("call_", 0), 0u);
  EXPECT_EQ(s.deltas.size(), 1 + kArgs.size()) << "every byte of the arguments is sent as it arrives";
  for (std::size_t i = 1; i < s.deltas.size(); ++i) {
    EXPECT_FALSE(s.deltas[i].first);
    EXPECT_EQ(s.deltas[i].arguments.size(), 1u);
  }

  // In realistic pieces: the announcement before the arguments are complete.
  ToolCallExtractor x;
  ToolCallExtractor::Output a = x.feed("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\"");
  ASSERT_EQ(a.deltas.size(), 2u);
  EXPECT_TRUE(a.deltas[0].first);
  EXPECT_EQ(a.deltas[1].arguments, "{\"city\"");
  ToolCallExtractor::Output b = x.feed(": \"Paris\"}}\n</tool_call>");
  ASSERT_EQ(b.deltas.size(), 1u);
  EXPECT_EQ(b.deltas[0].arguments, ": \"Paris\"}") << "the closing brace of the call object is not part of the arguments";
  EXPECT_TRUE(x.finish().empty());
}

TEST(ToolCallExtractor, AWholeAnswerSplitsAsTheStreamDoes) {
  const ToolCallExtractor::Result whole = ToolCallExtractor::split(kCall);
  EXPECT_EQ(whole.content, "Let me check.\n");
  ASSERT_EQ(whole.calls.size(), 1u);
  EXPECT_EQ(whole.calls[0].arguments, kArgs);
  EXPECT_EQ(whole.finish_reason("stop"), "tool_calls");
  EXPECT_EQ(whole.finish_reason("length"), "length") << "a call cut short is not a finished call";
  const ToolCallExtractor::Result prose = ToolCallExtractor::split("just text");
  EXPECT_EQ(prose.content, "just text");
  EXPECT_EQ(prose.finish_reason("stop"), "stop");
}

TEST(ToolCallExtractor, SeveralCallsEachGetTheirOwnIdAndIndex) {
  const std::string text = "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
                           "<tool_call>\n{\"arguments\": \"{\\\"x\\\": 1}\", \"name\": \"b\"}\n</tool_call>\n"
                           "<tool_call>{\"name\": \"c\"}</tool_call>";
  Split s = run_bytewise(text);
  EXPECT_EQ(s.content, "") << "blank text between and after calls is dropped";
  ASSERT_EQ(s.calls.size(), 3u);
  EXPECT_EQ(s.calls[0].name, "a");
  EXPECT_EQ(s.calls[0].arguments, "{}");
  EXPECT_EQ(s.calls[1].name, "b") << "arguments before the name wait for it";
  EXPECT_EQ(s.calls[1].arguments, R"({"x": 1})") << "arguments given as a JSON string are sent decoded";
  EXPECT_EQ(s.calls[2].arguments, "{}") << "no arguments: an empty object";
  EXPECT_NE(s.calls[0].id, s.calls[1].id);
  for (std::size_t cut = 0; cut <= text.size(); ++cut) {
    Split c = run(text, cut);
    ASSERT_EQ(c.calls.size(), 3u) << "cut at " << cut;
    EXPECT_EQ(c.calls[1].arguments, s.calls[1].arguments) << "cut at " << cut;
  }
}

TEST(ToolCallExtractor, WhatIsNotAWellFormedCallIsGivenBackAsContent) {
  for (const std::string& text : {
           std::string("Sure <tool_call>\n{\"name\": \"get_weather\", \"argu"),  // cut off before the arguments
           std::string("<tool_call>\n{name: get_weather}\n</tool_call>"),           // not JSON
           std::string("<tool_call>\n{\"arguments\": {}}\n</tool_call>"),           // no name
           std::string("<tool_call>\n{\"name\": 7}\n</tool_call>"),                 // a name that is not a string
           std::string("<tool_call>\n{\"name\": \"\"}\n</tool_call>"),              // an empty name
           std::string("<tool_call>\n[1, 2]\n</tool_call>"),                        // not an object
       }) {
    Split s = run_bytewise(text);
    EXPECT_EQ(s.content, text);
    EXPECT_TRUE(s.calls.empty()) << text;
    EXPECT_EQ(s.finish_reason, "stop") << text;
  }
}

TEST(ToolCallExtractor, AnAnnouncedCallCutOffStaysACall) {
  // Streamed fragments cannot be taken back: a call cut off by max_tokens in
  // its arguments stays a call; its finish reason is the engine's ("length").
  ToolCallExtractor x;
  ToolCallExtractor::Output o = x.feed("<tool_call>\n{\"name\": \"f\", \"arguments\": {\"q\": \"par");
  ASSERT_EQ(o.deltas.size(), 2u);
  EXPECT_TRUE(x.finish().empty());
  EXPECT_EQ(x.finish_reason("length"), "length");
  // Prose after a finished call is content.
  Split s = run_bytewise("<tool_call>\n{\"name\": \"a\"}\n</tool_call> and then some prose");
  ASSERT_EQ(s.calls.size(), 1u);
  EXPECT_EQ(s.content, " and then some prose");
}

TEST(ToolCallResponses, BlockingBodyAndStreamedChunksHaveOpenAisShapes) {
  ResponseMeta meta{true, "chatcmpl-x", 1, "m"};
  ChoiceOutput choice;
  choice.content = "\n";
  choice.reasoning = "thinking";
  choice.finish_reason = "tool_calls";
  choice.calls = {{"call_1", "get_weather", R"({"city":"Paris"})"}};
  json body = completion_body(meta, {choice}, {3, 4});
  const json& message = body["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null()) << "blank content beside tool calls is null, as OpenAI sends it";
  EXPECT_EQ(message["reasoning_content"], "thinking");
  EXPECT_EQ(message["reasoning"], "thinking");
  EXPECT_TRUE(message["refusal"].is_null());
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
  ASSERT_EQ(message["tool_calls"].size(), 1u);
  EXPECT_EQ(message["tool_calls"][0], json({{"id", "call_1"},
                                            {"type", "function"},
                                            {"function", {{"name", "get_weather"}, {"arguments", R"({"city":"Paris"})"}}}}));
  json first = tool_call_deltas_chunk(meta, {{0, true, "call_1", "get_weather", ""}}, 1);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["index"], 1);
  EXPECT_EQ(first["choices"][0]["delta"]["tool_calls"][0],
            json({{"index", 0}, {"id", "call_1"}, {"type", "function"}, {"function", {{"name", "get_weather"}, {"arguments", ""}}}}));
  json frag = tool_call_deltas_chunk(meta, {{0, false, "", "", "{\"ci"}});
  EXPECT_EQ(frag["choices"][0]["delta"]["tool_calls"][0], json({{"index", 0}, {"function", {{"arguments", "{\"ci"}}}}));
  // One entry per index per chunk: the announcement carries the first argument pieces (OpenAI's shape).
  json merged = tool_call_deltas_chunk(meta, {{0, true, "call_1", "get_weather", ""}, {0, false, "", "", "{\"ci"}, {0, false, "", "", "ty\""},
                                               {1, true, "call_2", "get_time", ""}, {1, false, "", "", "{}"}});
  ASSERT_EQ(merged["choices"][0]["delta"]["tool_calls"].size(), 2u);
  EXPECT_EQ(merged["choices"][0]["delta"]["tool_calls"][0],
            json({{"index", 0}, {"id", "call_1"}, {"type", "function"}, {"function", {{"name", "get_weather"}, {"arguments", "{\"city\""}}}}));
  EXPECT_EQ(merged["choices"][0]["delta"]["tool_calls"][1]["function"]["arguments"], "{}");
  ChoiceOutput plain;
  plain.content = "hi";
  plain.finish_reason = "stop";
  EXPECT_FALSE(completion_body(meta, {plain}, {1, 1})["choices"][0]["message"].contains("tool_calls"));
}

TEST(ToolCallRequests, ToolChoiceDecidesWhetherCallsAreParsed) {
  json body = {{"model", "m"},
               {"messages", {{{"role", "user"}, {"content", "weather?"}}}},
               {"tools", {{{"type", "function"}, {"function", {{"name", "get_weather"}}}}}}};
  EXPECT_TRUE(parse_chat_request(body).tool_calls);
  body["tool_choice"] = "auto";
  EXPECT_TRUE(parse_chat_request(body).tool_calls);
  body["tool_choice"] = "none";
  EXPECT_FALSE(parse_chat_request(body).tool_calls);
  for (const json& refused : {json("sometimes"), json({{"type", "function"}, {"function", {{"name", "x"}}}}), json(3),
                              json({{"type", "function"}})}) {
    body["tool_choice"] = refused;
    try {
      parse_chat_request(body);
      ADD_FAILURE() << "tool_choice " << refused.dump() << " was accepted";
    } catch (const FieldError& e) {
      EXPECT_EQ(e.param(), "tool_choice");
    }
  }
  // "required" and a named function force one call through constrained decoding.
  body["tool_choice"] = "required";
  OpenAiRequest required = parse_chat_request(body);
  EXPECT_TRUE(required.tool_calls);
  ASSERT_TRUE(required.constraint.has_value());
  EXPECT_EQ(required.constraint->kind, grammar::Constraint::Kind::tool_call);
  EXPECT_EQ(required.constraint_param, "tool_choice");
  body["tool_choice"] = {{"type", "function"}, {"function", {{"name", "get_weather"}}}};
  OpenAiRequest named = parse_chat_request(body);
  ASSERT_TRUE(named.constraint.has_value());
  ASSERT_EQ(named.constraint->tools.size(), 1u);
  EXPECT_EQ(named.constraint->tools[0].name, "get_weather");
  // With a response format (the Agents SDK's toolChoice "required" and outputType): the forced call
  // is this turn; the format is for a later turn's text.
  body["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "o"}, {"schema", {{"type", "object"}}}}}};
  OpenAiRequest forced = parse_chat_request(body);
  ASSERT_TRUE(forced.constraint.has_value());
  EXPECT_EQ(forced.constraint->kind, grammar::Constraint::Kind::tool_call);
  EXPECT_EQ(forced.constraint_param, "tool_choice");
  // "auto": the format, or a call of any tool.
  body["tool_choice"] = "auto";
  OpenAiRequest either = parse_chat_request(body);
  ASSERT_TRUE(either.constraint.has_value());
  EXPECT_EQ(either.constraint->kind, grammar::Constraint::Kind::json_schema);
  EXPECT_EQ(either.constraint->tools.size(), 1u);
  EXPECT_EQ(either.constraint_param, "response_format");
  body["tool_choice"] = "none";
  OpenAiRequest text_only = parse_chat_request(body);
  ASSERT_TRUE(text_only.constraint.has_value());
  EXPECT_TRUE(text_only.constraint->tools.empty());
  body.erase("response_format");
  body["tools"] = json::array();
  body["tool_choice"] = "required";
  try {
    parse_chat_request(body);
    ADD_FAILURE() << "tool_choice required without tools was accepted";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.param(), "tool_choice");
  }
  body.erase("tool_choice");
  body.erase("tools");
  EXPECT_FALSE(parse_chat_request(body).tool_calls) << "no tools, nothing to parse";
}

}  // namespace
}  // namespace neuron::server
