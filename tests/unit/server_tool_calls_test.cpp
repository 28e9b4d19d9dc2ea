// Tool calls out of Qwen3's answers: the same result however the text is cut
// into deltas, nothing the model wrote lost when it is not a well-formed call,
// and the OpenAI shapes (message.tool_calls, streamed tool_calls delta).
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

struct Split {
  std::string streamed;  // what feed() let out as it went
  ToolCallExtractor::Result result;
  std::string content() const { return streamed + result.content; }
};

Split run(const std::string& text, std::size_t cut) {
  ToolCallExtractor x;
  Split s;
  s.streamed = x.feed(text.substr(0, cut));
  s.streamed += x.feed(text.substr(cut));
  s.result = x.finish();
  return s;
}

Split run_bytewise(const std::string& text) {
  ToolCallExtractor x;
  Split s;
  for (char c : text) s.streamed += x.feed(std::string(1, c));
  s.result = x.finish();
  return s;
}

const std::string kCall =
    "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"unit\": \"c\", \"city\": \"Paris\"}}\n</tool_call>";

TEST(ToolCallExtractor, PlainTextPassesThroughWhateverTheCuts) {
  const std::string text = "No tools here, only a <tool> and a <tool_ca that never closes.";
  for (std::size_t cut = 0; cut <= text.size(); ++cut) {
    Split s = run(text, cut);
    EXPECT_EQ(s.content(), text) << "cut at " << cut;
    EXPECT_TRUE(s.result.calls.empty());
  }
  EXPECT_EQ(run_bytewise(text).content(), text);
}

TEST(ToolCallExtractor, ACallBecomesToolCallsAndTheTextBeforeItStreams) {
  for (std::size_t cut = 0; cut <= kCall.size(); ++cut) {
    Split s = run(kCall, cut);
    EXPECT_EQ(s.content(), "Let me check.\n") << "cut at " << cut;
    ASSERT_EQ(s.result.calls.size(), 1u) << "cut at " << cut;
    EXPECT_EQ(s.result.calls[0].name, "get_weather");
    // The model's key order, compact, as OpenAI's function.arguments text.
    EXPECT_EQ(s.result.calls[0].arguments, R"({"unit":"c","city":"Paris"})");
  }
  Split bytes = run_bytewise(kCall);
  EXPECT_EQ(bytes.streamed, "Let me check.\n") << "content before the tag goes out before the call is complete";
  ASSERT_EQ(bytes.result.calls.size(), 1u);
}

TEST(ToolCallExtractor, AWholeAnswerSplitsAsTheStreamDoes) {
  const ToolCallExtractor::Result whole = ToolCallExtractor::split(kCall);
  EXPECT_EQ(whole.content, "Let me check.\n");
  ASSERT_EQ(whole.calls.size(), 1u);
  EXPECT_EQ(whole.calls[0].arguments, R"({"unit":"c","city":"Paris"})");
  EXPECT_EQ(whole.finish_reason("stop"), "tool_calls");
  EXPECT_EQ(whole.finish_reason("length"), "length") << "a call cut short is not a finished call";
  const ToolCallExtractor::Result prose = ToolCallExtractor::split("just text");
  EXPECT_EQ(prose.content, "just text");
  EXPECT_EQ(prose.finish_reason("stop"), "stop");
}

TEST(ToolCallExtractor, SeveralCallsEachGetTheirOwnId) {
  const std::string text = "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n"
                           "<tool_call>\n{\"name\": \"b\", \"arguments\": \"{\\\"x\\\": 1}\"}\n</tool_call>\n";
  Split s = run_bytewise(text);
  EXPECT_EQ(s.content(), "");
  ASSERT_EQ(s.result.calls.size(), 2u);
  EXPECT_EQ(s.result.calls[0].name, "a");
  EXPECT_EQ(s.result.calls[0].arguments, "{}");
  EXPECT_EQ(s.result.calls[1].arguments, R"({"x": 1})") << "arguments already given as text stay as they are";
  EXPECT_NE(s.result.calls[0].id, s.result.calls[1].id);
  EXPECT_EQ(s.result.calls[0].id.rfind("call_", 0), 0u);
}

TEST(ToolCallExtractor, WhatIsNotAWellFormedCallIsGivenBackAsContent) {
  for (const std::string& text : {
           std::string("Sure <tool_call>\n{\"name\": \"get_weather\", \"argu"),              // cut off by max_tokens
           std::string("<tool_call>\n{name: get_weather}\n</tool_call>"),                  // not JSON
           std::string("<tool_call>\n{\"arguments\": {}}\n</tool_call>"),                  // no name
           std::string("<tool_call>\n[1, 2]\n</tool_call>"),                               // not an object
           std::string("<tool_call>\n{\"name\": \"a\"}\n</tool_call> and then some prose"),  // prose after the calls
       }) {
    Split s = run_bytewise(text);
    EXPECT_EQ(s.content(), text);
    EXPECT_TRUE(s.result.calls.empty()) << text;
  }
}

TEST(ToolCallResponses, BlockingBodyAndStreamedChunkHaveOpenAisShapes) {
  ResponseMeta meta{true, "chatcmpl-x", 1, "m"};
  std::vector<ToolCall> calls = {{"call_1", "get_weather", R"({"city":"Paris"})"}};
  json body = completion_body(meta, "\n", "thinking", "tool_calls", {3, 4}, calls);
  const json& message = body["choices"][0]["message"];
  EXPECT_TRUE(message["content"].is_null()) << "blank content beside tool calls is null, as OpenAI sends it";
  EXPECT_EQ(message["reasoning_content"], "thinking");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
  ASSERT_EQ(message["tool_calls"].size(), 1u);
  EXPECT_EQ(message["tool_calls"][0], json({{"id", "call_1"},
                                            {"type", "function"},
                                            {"function", {{"name", "get_weather"}, {"arguments", R"({"city":"Paris"})"}}}}));
  json chunk = tool_calls_chunk(meta, calls);
  EXPECT_EQ(chunk["object"], "chat.completion.chunk");
  EXPECT_EQ(chunk["choices"][0]["delta"]["tool_calls"][0]["index"], 0);
  EXPECT_EQ(chunk["choices"][0]["delta"]["tool_calls"][0]["function"]["name"], "get_weather");
  json plain = completion_body(meta, "hi", "", "stop", {1, 1});
  EXPECT_FALSE(plain["choices"][0]["message"].contains("tool_calls"));
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
  body["response_format"] = {{"type", "json_object"}};
  try {
    parse_chat_request(body);
    ADD_FAILURE() << "tool_choice and response_format together were accepted";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.param(), "response_format");
  }
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
