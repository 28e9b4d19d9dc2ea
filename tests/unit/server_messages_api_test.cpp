// The Anthropic Messages API without a model: request parsing (bad input
// names its field), Anthropic's error shape, the message object and the
// streamed events of scripted turns (thinking, text, tool use, stop sequence).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api_error.hpp"
#include "server/messages_api.hpp"
#include "support/sse_events.hpp"

namespace neuron::server {
namespace {

using ojson = nlohmann::ordered_json;

std::pair<std::string, std::string> messages_refusal(const std::string& body) {
  try {
    parse_messages_request(ojson::parse(body));
  } catch (const FieldError& e) {
    return {e.param(), e.kind()};
  }
  return {"<accepted>", ""};
}

// The shaper's bytes for open(), each {text, reasoning} delta in order, then `end` (close or fail).
std::string messages_script(TurnShaper& shaper, const std::vector<std::pair<std::string, std::string>>& deltas,
                            const std::function<std::string()>& end) {
  std::string out = shaper.open();
  for (const auto& [text, reasoning] : deltas) out += shaper.delta(text, reasoning);
  out += end();
  return out;
}

using test_support::event_names;
using test_support::parse_sse_events;
using test_support::SseEvent;

TEST(MessagesRequest, BlocksBecomeChatMessages) {
  const OpenAiRequest r = parse_messages_request(ojson::parse(R"({"model": "m", "max_tokens": 64,
      "system": [{"type": "text", "text": "be"}, {"type": "text", "text": "brief"}],
      "messages": [
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "use the tool", "signature": "s"},
                                          {"type": "text", "text": "Checking."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "sunny"}]},
                                     {"type": "text", "text": "and tomorrow?"}]}],
      "tools": [{"name": "get_weather", "description": "d", "input_schema": {"type": "object"}}],
      "stop_sequences": ["END"], "temperature": 0.2, "top_k": 5, "thinking": {"type": "disabled"}, "metadata": {"user_id": "u"}})"));
  const auto& m = r.messages;
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0].role, "system");
  EXPECT_EQ(m[0].content, "be\nbrief");
  EXPECT_EQ(m[1].content, "weather in Paris?");
  EXPECT_EQ(m[2].role, "assistant");
  EXPECT_EQ(m[2].content, "Checking.");
  EXPECT_EQ(m[2].reasoning_content.value_or(""), "use the tool");
  ASSERT_EQ(m[2].tool_calls.size(), 1u);
  EXPECT_EQ(m[2].tool_calls[0]["function"]["arguments"], ojson({{"city", "Paris"}}));
  EXPECT_EQ(m[3].role, "tool");
  EXPECT_EQ(m[3].content, "sunny");
  EXPECT_EQ(m[3].tool_call_id.value_or(""), "toolu_1");
  EXPECT_EQ(m[4].role, "user");
  EXPECT_EQ(m[4].content, "and tomorrow?");
  EXPECT_EQ(r.max_tokens, 64);
  EXPECT_EQ(r.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_EQ(r.chat_template_kwargs, ojson({{"enable_thinking", false}}));
  ASSERT_EQ(r.tools.size(), 1u);
  EXPECT_EQ(r.tools[0]["function"]["parameters"], ojson({{"type", "object"}}));
  EXPECT_TRUE(r.tool_calls);
}

// tool_choice any / tool force one tool_use block: the chat request's constraint.
TEST(MessagesRequest, ForcedToolUseIsAConstraint) {
  const ojson base = {{"max_tokens", 8},
                     {"messages", ojson::array({{{"role", "user"}, {"content", "x"}}})},
                     {"tools", ojson::array({{{"name", "f"}, {"input_schema", {{"type", "object"}}}},
                                            {{"name", "g"}, {"input_schema", {{"type", "object"}}}}})}};
  ojson body = base;
  body["tool_choice"] = {{"type", "any"}};
  OpenAiRequest r = parse_messages_request(body);
  ASSERT_TRUE(r.constraint.has_value());
  EXPECT_EQ(r.constraint_param, "tool_choice");
  EXPECT_TRUE(r.tool_calls);
  body["tool_choice"] = {{"type", "tool"}, {"name", "g"}};
  r = parse_messages_request(body);
  ASSERT_TRUE(r.constraint.has_value());
  body["tool_choice"] = {{"type", "auto"}};
  EXPECT_FALSE(parse_messages_request(body).constraint.has_value());
}

TEST(MessagesRequest, BadInputNamesTheField) {
  using P = std::pair<std::string, std::string>;
  const std::string inv = errc::invalid_argument, uns = http_errc::unsupported;
  const std::string ok = R"("max_tokens": 8, "messages": [{"role": "user", "content": "x"}])";
  EXPECT_EQ(messages_refusal(R"({"messages": [{"role": "user", "content": "x"}]})"), P("max_tokens", inv));
  EXPECT_EQ(messages_refusal(R"({"max_tokens": 0, "messages": [{"role": "user", "content": "x"}]})"), P("max_tokens", inv));
  EXPECT_EQ(messages_refusal(R"({"max_tokens": 8})"), P("messages", inv));
  EXPECT_EQ(messages_refusal(R"({"max_tokens": 8, "messages": []})"), P("messages", inv));
  EXPECT_EQ(messages_refusal(R"({"max_tokens": 8, "messages": [{"role": "system", "content": "x"}]})"), P("messages[0].role", inv));
  EXPECT_EQ(messages_refusal(R"({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]})"),
            P("messages[0].content[0].type", uns));
  EXPECT_EQ(messages_refusal(R"({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "tool_use", "id": "a", "name": "f"}]}]})"),
            P("messages[0].content[0].type", inv));
  EXPECT_EQ(messages_refusal(R"({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "tool_result"}]}]})"),
            P("messages[0].content[0].tool_use_id", inv));
  EXPECT_EQ(messages_refusal(R"({"max_tokens": 8, "messages": [{"role": "assistant", "content": [{"type": "tool_use", "id": "a", "name": "f", "input": 3}]}]})"),
            P("messages[0].content[0].input", inv));
  EXPECT_EQ(messages_refusal("{" + ok + R"(, "system": 5})"), P("system", inv));
  EXPECT_EQ(messages_refusal("{" + ok + R"(, "temperature": 1.5})"), P("temperature", inv));
  EXPECT_EQ(messages_refusal("{" + ok + R"(, "stop_sequences": [""]})"), P("stop_sequences[0]", inv));
  EXPECT_EQ(messages_refusal("{" + ok + R"(, "tools": [{"name": "f"}]})"), P("tools[0].input_schema", inv));
  EXPECT_EQ(messages_refusal("{" + ok + R"(, "tools": [{"type": "web_search_20250305", "name": "w"}]})"), P("tools[0].type", uns));
  EXPECT_EQ(messages_refusal("{" + ok + R"(, "tool_choice": {"type": "any"}})"), P("tool_choice", inv));  // no tools
  EXPECT_EQ(messages_refusal("{" + ok + R"(, "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "tool", "name": "g"}})"),
            P("tool_choice.name", inv));
  EXPECT_EQ(messages_refusal("{" + ok + R"(, "tools": [{"name": "f", "input_schema": {"type": "object"}}], "tool_choice": {"type": "tool"}})"),
            P("tool_choice.name", inv));
  EXPECT_EQ(messages_refusal("{" + ok + R"(, "tool_choice": "auto"})"), P("tool_choice", inv));
  EXPECT_EQ(messages_refusal("{" + ok + R"(, "thinking": {"type": "enabled", "budget_tokens": 100}})"), P("thinking.budget_tokens", inv));
  EXPECT_EQ(messages_refusal("{" + ok + "}"), P("<accepted>", ""));
}

TEST(MessagesShape, ErrorsHaveAnthropicsShapeAndTypes) {
  EXPECT_EQ(anthropic_error_body(classify(errc::invalid_argument, "bad", "max_tokens")),
            nlohmann::json::parse(R"({"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}})"));
  EXPECT_EQ(anthropic_error_type(classify(http_errc::unauthorized, "").status), "authentication_error");
  EXPECT_EQ(anthropic_error_type(classify(http_errc::model_not_found, "").status), "not_found_error");
  EXPECT_EQ(anthropic_error_type(classify(http_errc::payload_too_large, "").status), "request_too_large");
  EXPECT_EQ(anthropic_error_type(classify(errc::overloaded, "").status), "overloaded_error");
  EXPECT_EQ(anthropic_error_type(classify(errc::worker_failed, "").status), "api_error");
  const HttpResponse r = anthropic_error_response(classify(errc::overloaded, "busy"));
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(r.header("Retry-After"), "1");
  EXPECT_EQ(nlohmann::json::parse(r.body)["error"]["type"], "overloaded_error");
}

TEST(MessagesShape, AWholeTurnHasThinkingTextAndToolUseBlocks) {
  const Turn turn{"\n\n", "hmm", {{"call_0123", "get_weather", R"({"city": "Paris"})"}}, {"stop", {10, 6, 4}, 2, {}}};
  const ojson m = message_body("msg_1", "model", turn);
  EXPECT_EQ(m["type"], "message");
  EXPECT_EQ(m["role"], "assistant");
  ASSERT_EQ(m["content"].size(), 2u);
  EXPECT_EQ(m["content"][0], ojson({{"type", "thinking"}, {"thinking", "hmm"}, {"signature", ""}}));
  EXPECT_EQ(m["content"][1]["type"], "tool_use");
  EXPECT_EQ(m["content"][1]["id"], "toolu_0123");
  EXPECT_EQ(m["content"][1]["input"], ojson({{"city", "Paris"}}));
  EXPECT_EQ(m["stop_reason"], "tool_use");
  EXPECT_TRUE(m["stop_sequence"].is_null());
  EXPECT_EQ(m["usage"], ojson({{"input_tokens", 6}, {"cache_creation_input_tokens", 0}, {"cache_read_input_tokens", 4}, {"output_tokens", 6}}));

  EXPECT_EQ(anthropic_stop_reason(TurnEnd{"length", {}, 0, {}}, false), "max_tokens");
  EXPECT_EQ(anthropic_stop_reason(TurnEnd{"stop", {}, 0, std::string("END")}, false), "stop_sequence");
  EXPECT_EQ(anthropic_stop_reason(TurnEnd{"stop", {}, 0, {}}, false), "end_turn");
  const ojson text = message_body("msg_2", "model", Turn{"Hi", "", {}, {"stop", {1, 1, 0}, 0, std::string("END")}});
  EXPECT_EQ(text["content"], ojson::parse(R"([{"type": "text", "text": "Hi"}])"));
  EXPECT_EQ(text["stop_sequence"], "END");
}

TEST(MessagesShape, AStreamedTurnWithThinkingTextAndAToolCall) {
  MessagesTurnShaper shaper("msg_1", "model", 12, ToolCallSyntax{});
  std::string sse = shaper.open();
  sse += shaper.delta("", "think");
  sse += shaper.delta("Let me check.", "");
  sse += shaper.delta("\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", "");
  sse += shaper.close(TurnEnd{"stop", {12, 30, 0}, 3, {}});
  const auto events = parse_sse_events(sse);
  const std::vector<std::string> expected = {"message_start", "ping",
                                             "content_block_start", "content_block_delta", "content_block_stop",
                                             "content_block_start", "content_block_delta", "content_block_delta", "content_block_stop",
                                             "content_block_start", "content_block_delta", "content_block_stop",
                                             "message_delta", "message_stop"};
  EXPECT_EQ(event_names(events), expected);
  EXPECT_EQ(events[0].data["message"]["usage"]["input_tokens"], 12);
  EXPECT_EQ(events[2].data["content_block"]["type"], "thinking");
  EXPECT_EQ(events[3].data["delta"], nlohmann::json({{"type", "thinking_delta"}, {"thinking", "think"}}));
  EXPECT_EQ(events[5].data["index"], 1);
  EXPECT_EQ(events[6].data["delta"], nlohmann::json({{"type", "text_delta"}, {"text", "Let me check."}}));
  EXPECT_EQ(events[7].data["delta"]["text"], "\n");
  EXPECT_EQ(events[9].data["index"], 2);
  EXPECT_EQ(events[9].data["content_block"]["type"], "tool_use");
  EXPECT_EQ(events[9].data["content_block"]["name"], "get_weather");
  EXPECT_EQ(events[10].data["delta"]["type"], "input_json_delta");
  EXPECT_EQ(ojson::parse(events[10].data["delta"]["partial_json"].get<std::string>()), ojson({{"city", "Paris"}}));
  EXPECT_EQ(events[12].data["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(events[12].data["usage"]["output_tokens"], 30);
}

TEST(MessagesShape, AStreamStoppedBySequenceOrFailingSaysSo) {
  MessagesTurnShaper shaper("msg_1", "model", 3, std::nullopt);
  auto events = parse_sse_events(messages_script(shaper, {{"Hi", ""}}, [&] { return shaper.close(TurnEnd{"stop", {3, 2, 0}, 0, std::string("END")}); }));
  EXPECT_EQ(events[events.size() - 2].data["delta"]["stop_reason"], "stop_sequence");
  EXPECT_EQ(events[events.size() - 2].data["delta"]["stop_sequence"], "END");

  MessagesTurnShaper failing("msg_2", "model", 3, std::nullopt);
  events = parse_sse_events(messages_script(failing, {}, [&] { return failing.fail(classify(errc::worker_failed, "rank 1 died")); }));
  EXPECT_EQ(events.back().name, "error");
  EXPECT_EQ(events.back().data["error"], nlohmann::json({{"type", "api_error"}, {"message", "rank 1 died"}}));

  // A blank answer with tools on and no call is still the answer's text.
  MessagesTurnShaper blank("msg_3", "model", 3, ToolCallSyntax{});
  events = parse_sse_events(messages_script(blank, {{" ", ""}}, [&] { return blank.close(TurnEnd{"stop", {3, 1, 0}, 0, {}}); }));
  EXPECT_EQ(events[3].data["delta"]["text"], " ");
  EXPECT_EQ(events[events.size() - 2].data["delta"]["stop_reason"], "end_turn");
}

TEST(MessagesRequest, ImageInputIsRefusedAsTextOnly) {
  try {
    parse_messages_request(ojson::parse(R"({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}}]}]})"));
    ADD_FAILURE() << "image input accepted";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.param(), "messages[0].content[0].type");
    EXPECT_NE(std::string(e.what()).find("text-only"), std::string::npos) << e.what();
  }
}

}  // namespace

}  // namespace neuron::server
