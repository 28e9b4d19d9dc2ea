// The Responses API without a model: request parsing (bad input names its
// field), the response object, the streamed events of a scripted turn (tool
// calls and reasoning included), and the bounded store.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api_error.hpp"
#include "server/responses_api.hpp"
#include "support/sse_events.hpp"

namespace neuron::server {
namespace {

using ojson = nlohmann::ordered_json;

// The error a body gets: {param, kind}.
std::pair<std::string, std::string> responses_refusal(const std::string& body) {
  try {
    parse_responses_request(ojson::parse(body));
  } catch (const FieldError& e) {
    return {e.param(), e.kind()};
  }
  return {"<accepted>", ""};
}

// The shaper's bytes for open(), each {text, reasoning} delta in order, then `end` (close or fail).
std::string responses_script(TurnShaper& shaper, const std::vector<std::pair<std::string, std::string>>& deltas,
                             const std::function<std::string()>& end) {
  std::string out = shaper.open();
  for (const auto& [text, reasoning] : deltas) out += shaper.delta(text, reasoning);
  out += end();
  return out;
}

using test_support::event_names;
using test_support::parse_sse_events;
using test_support::SseEvent;

TEST(ResponsesRequest, AStringInputIsOneUserTurnAndInstructionsComeFirst) {
  const ResponsesRequest r = parse_responses_request(ojson::parse(R"({"model": "m", "input": "hi", "instructions": "be brief",
      "max_output_tokens": 7, "temperature": 0.5, "metadata": {"k": "v"}})"));
  ASSERT_EQ(r.chat.messages.size(), 1u);
  EXPECT_EQ(r.chat.messages[0].role, "user");
  EXPECT_EQ(r.chat.messages[0].content, "hi");
  EXPECT_EQ(r.chat.max_tokens, 7);
  EXPECT_EQ(r.chat.max_tokens_param, "max_output_tokens");
  EXPECT_TRUE(r.store);
  EXPECT_EQ(r.echo["metadata"], ojson({{"k", "v"}}));
  EXPECT_EQ(r.echo["max_output_tokens"], 7);
  EXPECT_EQ(r.echo["temperature"].dump(), "0.5");
  EXPECT_TRUE(r.echo["top_p"].is_null());

  const std::vector<ChatMessage> previous = {{"user", "first", {}, {}, {}, nullptr}, {"assistant", "answer", {}, {}, {}, nullptr}};
  const std::vector<ChatMessage> all = conversation(r, &previous);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].role, "system");
  EXPECT_EQ(all[0].content, "be brief");
  EXPECT_EQ(all[1].content, "first");
  EXPECT_EQ(all[2].content, "answer");
  EXPECT_EQ(all[3].content, "hi");
}

TEST(ResponsesRequest, ItemsBecomeChatMessagesWithToolCallsAndReasoning) {
  const ResponsesRequest r = parse_responses_request(ojson::parse(R"({"input": [
      {"role": "developer", "content": "sys"},
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "weather?"}, {"type": "input_text", "text": "Paris"}]},
      {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "call the tool"}]},
      {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
      {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
      {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "noon"}]},
      {"role": "assistant", "content": [{"type": "output_text", "text": "Sunny at noon."}]}],
      "tools": [{"type": "function", "name": "get_weather", "description": "d", "parameters": {"type": "object"}, "strict": true}]})"));
  const auto& m = r.chat.messages;
  ASSERT_EQ(m.size(), 6u);
  EXPECT_EQ(m[0].role, "system");
  EXPECT_EQ(m[1].content, "weather?\nParis");
  EXPECT_EQ(m[2].role, "assistant");
  EXPECT_EQ(m[2].reasoning_content.value_or("-"), "call the tool");
  ASSERT_EQ(m[2].tool_calls.size(), 2u);
  EXPECT_EQ(m[2].tool_calls[0]["id"], "call_1");
  EXPECT_EQ(m[2].tool_calls[0]["function"]["name"], "get_weather");
  EXPECT_EQ(m[2].tool_calls[0]["function"]["arguments"], "{\"city\":\"Paris\"}");
  EXPECT_EQ(m[3].role, "tool");
  EXPECT_EQ(m[3].content, "sunny");
  EXPECT_EQ(m[3].tool_call_id.value_or(""), "call_1");
  EXPECT_EQ(m[4].content, "noon");
  EXPECT_EQ(m[5].role, "assistant");
  EXPECT_EQ(m[5].content, "Sunny at noon.");
  EXPECT_FALSE(m[5].reasoning_content);
  // Flat tools become the chat template's nested ones.
  ASSERT_EQ(r.chat.tools.size(), 1u);
  EXPECT_EQ(r.chat.tools[0]["type"], "function");
  EXPECT_EQ(r.chat.tools[0]["function"]["name"], "get_weather");
  EXPECT_EQ(r.chat.tools[0]["function"]["parameters"], ojson({{"type", "object"}}));
  EXPECT_TRUE(r.chat.tool_calls);
}

TEST(ResponsesRequest, BadInputNamesTheField) {
  using P = std::pair<std::string, std::string>;
  const std::string inv = errc::invalid_argument, uns = http_errc::unsupported;
  EXPECT_EQ(responses_refusal(R"({})"), P("input", inv));
  EXPECT_EQ(responses_refusal(R"({"input": 3})"), P("input", inv));
  EXPECT_EQ(responses_refusal(R"({"input": []})"), P("input", inv));
  EXPECT_EQ(responses_refusal(R"({"input": [{"role": "robot", "content": "x"}]})"), P("input[0].role", inv));
  EXPECT_EQ(responses_refusal(R"({"input": [{"role": "user"}]})"), P("input[0].content", inv));
  EXPECT_EQ(responses_refusal(R"({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]})"),
            P("input[0].content[0].type", uns));
  EXPECT_EQ(responses_refusal(R"({"input": [{"role": "user", "content": [{"type": "input_text"}]}]})"), P("input[0].content[0].text", inv));
  EXPECT_EQ(responses_refusal(R"({"input": ["x", {"type": "function_call", "name": "f", "arguments": "{}"}]})"), P("input[0]", inv));
  EXPECT_EQ(responses_refusal(R"({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]})"), P("input[0].call_id", inv));
  EXPECT_EQ(responses_refusal(R"({"input": [{"type": "function_call_output", "call_id": "c"}]})"), P("input[0].output", inv));
  EXPECT_EQ(responses_refusal(R"({"input": [{"type": "item_reference", "id": "x"}]})"), P("input[0].type", uns));
  EXPECT_EQ(responses_refusal(R"({"input": [{"type": "telepathy"}]})"), P("input[0].type", inv));
  EXPECT_EQ(responses_refusal(R"({"input": "x", "max_output_tokens": 0})"), P("max_output_tokens", inv));
  EXPECT_EQ(responses_refusal(R"({"input": "x", "temperature": 3})"), P("temperature", inv));
  EXPECT_EQ(responses_refusal(R"({"input": "x", "tools": [{"type": "web_search"}]})"), P("tools[0].type", uns));
  EXPECT_EQ(responses_refusal(R"({"input": "x", "tools": [{"type": "function"}]})"), P("tools[0].name", inv));
  EXPECT_EQ(responses_refusal(R"({"input": "x", "tool_choice": "required"})"), P("tool_choice", inv));  // no tools
  EXPECT_EQ(responses_refusal(R"({"input": "x", "tools": [{"type": "function", "name": "f"}], "tool_choice": {"type": "function", "name": "g"}})"),
            P("tool_choice.name", inv));
  EXPECT_EQ(responses_refusal(R"({"input": "x", "tool_choice": {"type": "web_search"}})"), P("tool_choice.type", uns));
  EXPECT_EQ(responses_refusal(R"({"input": "x", "text": {"format": {"type": "json_schema"}}})"), P("text.format.schema", inv));
  EXPECT_EQ(responses_refusal(R"({"input": "x", "text": {"format": {"type": "yaml"}}})"), P("text.format.type", inv));
  // tool_choice required with a text.format is accepted (the Agents SDK sends both): ForcedToolCallsAndStructuredOutputAreConstraints.
  EXPECT_EQ(responses_refusal(R"({"input": "x", "reasoning": {"effort": "extreme"}})"), P("reasoning.effort", inv));
  EXPECT_EQ(responses_refusal(R"({"input": "x", "previous_response_id": 5})"), P("previous_response_id", inv));
  EXPECT_EQ(responses_refusal(R"({"input": "x", "metadata": {"k": 1}})"), P("metadata.k", inv));
  EXPECT_EQ(responses_refusal(R"({"input": "x", "background": true})"), P("background", uns));
  EXPECT_EQ(responses_refusal(R"({"input": "x", "store": "yes"})"), P("store", inv));
}

// tool_choice required / a named function and text.format json_object /
// json_schema become the chat request's constraint (compiled by the Api, as
// chat's response_format and tool_choice are).
TEST(ResponsesRequest, ForcedToolCallsAndStructuredOutputAreConstraints) {
  const ojson tools = ojson::array({{{"type", "function"}, {"name", "get_weather"}, {"parameters", {{"type", "object"}}}},
                                  {{"type", "function"}, {"name", "get_time"}}});
  ResponsesRequest r = parse_responses_request({{"input", "x"}, {"tools", tools}, {"tool_choice", "required"}});
  ASSERT_TRUE(r.chat.constraint.has_value());
  EXPECT_EQ(r.chat.constraint_param, "tool_choice");
  EXPECT_TRUE(r.chat.tool_calls);
  EXPECT_EQ(r.echo["tool_choice"], "required");

  r = parse_responses_request({{"input", "x"}, {"tools", tools}, {"tool_choice", {{"type", "function"}, {"name", "get_time"}}}});
  ASSERT_TRUE(r.chat.constraint.has_value());
  EXPECT_EQ(r.echo["tool_choice"], ojson({{"type", "function"}, {"name", "get_time"}}));

  const ojson format = {{"type", "json_schema"}, {"name", "w"}, {"schema", {{"type", "object"}}}, {"strict", true}};
  r = parse_responses_request({{"input", "x"}, {"text", {{"format", format}}}});
  ASSERT_TRUE(r.chat.constraint.has_value());
  EXPECT_EQ(r.chat.constraint_param, "text.format");
  EXPECT_EQ(r.echo["text"]["format"], format);

  r = parse_responses_request({{"input", "x"}, {"text", {{"format", {{"type", "json_object"}}}}}});
  EXPECT_TRUE(r.chat.constraint.has_value());
  // With tool_choice required the forced call is this turn (the format is for a later one); with "auto"
  // and tools, the format admits a tool call too.
  r = parse_responses_request({{"input", "x"}, {"tools", tools}, {"tool_choice", "required"}, {"text", {{"format", format}}}});
  ASSERT_TRUE(r.chat.constraint.has_value());
  EXPECT_EQ(r.chat.constraint->kind, grammar::Constraint::Kind::tool_call);
  EXPECT_EQ(r.chat.constraint_param, "tool_choice");
  r = parse_responses_request({{"input", "x"}, {"tools", tools}, {"text", {{"format", format}}}});
  ASSERT_TRUE(r.chat.constraint.has_value());
  EXPECT_EQ(r.chat.constraint->kind, grammar::Constraint::Kind::json_schema);
  EXPECT_EQ(r.chat.constraint->tools.size(), 2u);
  EXPECT_EQ(r.chat.constraint_param, "text.format");
  r = parse_responses_request({{"input", "x"}, {"text", {{"format", {{"type", "text"}}}}}});
  EXPECT_FALSE(r.chat.constraint.has_value());
}

TEST(ResponsesRequest, MinimalReasoningEffortTurnsThinkingOff) {
  EXPECT_EQ(parse_responses_request(ojson::parse(R"({"input": "x", "reasoning": {"effort": "minimal"}})")).chat.chat_template_kwargs,
            ojson({{"enable_thinking", false}}));
  EXPECT_EQ(parse_responses_request(ojson::parse(R"({"input": "x", "reasoning": {"effort": "high"}})")).chat.chat_template_kwargs,
            ojson::object());
}

TEST(ResponsesShape, AWholeTurnHasReasoningMessageAndCallItems) {
  Turn turn{"", "let me think", {{"call_abc", "get_weather", R"({"city":"Paris"})"}}, {"stop", {10, 5, 2}, 3, {}}};
  const ojson items = output_items(turn);
  ASSERT_EQ(items.size(), 2u);  // blank text around calls is no message
  EXPECT_EQ(items[0]["type"], "reasoning");
  EXPECT_EQ(items[0]["content"][0]["text"], "let me think");
  EXPECT_EQ(items[1]["type"], "function_call");
  EXPECT_EQ(items[1]["call_id"], "call_abc");
  EXPECT_EQ(items[1]["arguments"], R"({"city":"Paris"})");
  EXPECT_EQ(items[1]["id"].get<std::string>().rfind("fc_", 0), 0u);

  const ojson r = response_object("resp_1", 42, "m", parse_responses_request(ojson::parse(R"({"input": "x"})")).echo,
                                 response_status(turn.end), items, &turn.end);
  EXPECT_EQ(r["object"], "response");
  EXPECT_EQ(r["status"], "completed");
  EXPECT_FALSE(r.contains("user")) << "omitted when not sent, as OpenAI does";
  // prompt_tokens / completion_tokens: what the helexa gateway meters a response by.
  EXPECT_EQ(r["usage"], ojson::parse(R"({"input_tokens": 10, "input_tokens_details": {"cached_tokens": 2, "cache_write_tokens": 8},
                                         "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 3},
                                         "total_tokens": 15, "prompt_tokens": 10, "completion_tokens": 5})"));
  EXPECT_TRUE(r["incomplete_details"].is_null());

  turn = Turn{"cut sho", "", {}, {"length", {1, 1, 0}, 0, {}}};
  const ojson cut = output_items(turn);
  ASSERT_EQ(cut.size(), 1u);
  EXPECT_EQ(cut[0]["status"], "incomplete");
  EXPECT_EQ(response_status(turn.end), "incomplete");
  EXPECT_EQ(response_object("r", 0, "m", ojson::object(), "incomplete", cut, &turn.end)["incomplete_details"]["reason"], "max_output_tokens");

  const ChatMessage m = assistant_message(Turn{"hi", "hmm", {{"call_1", "f", "{}"}}, {}});
  EXPECT_EQ(m.role, "assistant");
  EXPECT_EQ(m.reasoning_content.value_or(""), "hmm");
  EXPECT_EQ(m.tool_calls[0]["function"]["name"], "f");
}

TEST(ResponsesShape, AStreamedToolCallTurnHasEveryEventInOrder) {
  ojson stored;
  Turn stored_turn;
  ResponsesTurnShaper shaper("resp_x", 1, "m", ojson::object(), ToolCallSyntax{}, [&](const ojson& response, const Turn& turn) {
    stored = response;
    stored_turn = turn;
  });
  std::string sse = shaper.open();
  sse += shaper.delta("", "I should ");
  sse += shaper.delta("", "call it");
  sse += shaper.delta("\n\n", "");
  sse += shaper.delta("<tool_call>\n{\"name\": \"get_weather\", ", "");
  sse += shaper.delta("\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", "");
  sse += shaper.close(TurnEnd{"stop", {20, 12, 0}, 4, {}});
  const auto events = parse_sse_events(sse);
  const std::vector<std::string> expected = {
      "response.created", "response.in_progress",
      "response.output_item.added", "response.content_part.added", "response.reasoning_text.delta", "response.reasoning_text.delta",
      "response.reasoning_text.done", "response.content_part.done", "response.output_item.done",
      "response.output_item.added", "response.function_call_arguments.delta", "response.function_call_arguments.done",
      "response.output_item.done", "response.completed"};
  EXPECT_EQ(event_names(events), expected);
  for (std::size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].data["sequence_number"], i);
  EXPECT_EQ(events[0].data["response"]["status"], "in_progress");
  EXPECT_EQ(events[6].data["text"], "I should call it");
  EXPECT_EQ(events[9].data["output_index"], 1);
  EXPECT_EQ(events[9].data["item"]["type"], "function_call");
  EXPECT_EQ(events[11].data["name"], "get_weather");
  EXPECT_EQ(ojson::parse(events[11].data["arguments"].get<std::string>()), ojson({{"city", "Paris"}}));
  const nlohmann::json& done = events.back().data["response"];
  EXPECT_EQ(done["status"], "completed");
  ASSERT_EQ(done["output"].size(), 2u);
  EXPECT_EQ(done["output"][1]["call_id"].get<std::string>().rfind("call_", 0), 0u);
  EXPECT_EQ(done["usage"]["output_tokens_details"]["reasoning_tokens"], 4);
  // What is stored is what was sent, and the turn to chain from.
  EXPECT_EQ(nlohmann::json::parse(stored.dump()), done);
  ASSERT_EQ(stored_turn.calls.size(), 1u);
  EXPECT_EQ(stored_turn.reasoning, "I should call it");
}

TEST(ResponsesShape, AStreamedTextTurnCutByItsLimitIsIncomplete) {
  bool stored = false;
  ResponsesTurnShaper shaper("resp_x", 1, "m", ojson::object(), std::nullopt, [&](const ojson&, const Turn&) { stored = true; });
  const std::string sse = responses_script(shaper, {{"Hello", ""}, {" wor", ""}}, [&] { return shaper.close(TurnEnd{"length", {3, 2, 0}, 0, {}}); });
  const auto events = parse_sse_events(sse);
  const std::vector<std::string> expected = {"response.created", "response.in_progress", "response.output_item.added",
                                             "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
                                             "response.output_text.done", "response.content_part.done", "response.output_item.done",
                                             "response.incomplete"};
  EXPECT_EQ(event_names(events), expected);
  EXPECT_EQ(events[6].data["text"], "Hello wor");
  EXPECT_EQ(events[8].data["item"]["status"], "incomplete");
  EXPECT_EQ(events.back().data["response"]["incomplete_details"]["reason"], "max_output_tokens");
  EXPECT_TRUE(stored);
}

TEST(ResponsesShape, AnEmptyAnswerStillHasItsMessageAndAnErrorFailsTheResponse) {
  ResponsesTurnShaper empty("r", 1, "m", ojson::object(), ToolCallSyntax{}, nullptr);
  auto events = parse_sse_events(responses_script(empty, {{" ", ""}}, [&] { return empty.close(TurnEnd{"stop", {3, 1, 0}, 0, {}}); }));
  const ojson& output = events.back().data["response"]["output"];
  ASSERT_EQ(output.size(), 1u);
  EXPECT_EQ(output[0]["type"], "message");
  EXPECT_EQ(output[0]["content"][0]["text"], " ");

  ResponsesTurnShaper failing("r", 1, "m", ojson::object(), std::nullopt, [](const ojson&, const Turn&) { ADD_FAILURE() << "stored a failure"; });
  events = parse_sse_events(responses_script(failing, {{"a", ""}}, [&] { return failing.fail(classify(errc::worker_failed, "rank 1 died")); }));
  EXPECT_EQ(events.back().name, "response.failed");
  EXPECT_EQ(events.back().data["response"]["status"], "failed");
  EXPECT_EQ(events.back().data["response"]["error"]["code"], errc::worker_failed);
  EXPECT_EQ(events.back().data["response"]["output"][0]["content"][0]["text"], "a");
}

TEST(ResponseStore, EvictsTheLeastRecentlyUsedByCountAndBytes) {
  ResponseStore store(2, 10000);
  auto resp = [](int n) { return StoredResponse{ojson{{"n", n}}, {{"user", std::string(n, 'x'), {}, {}, {}, nullptr}}}; };
  store.put("a", resp(1));
  store.put("b", resp(2));
  ASSERT_TRUE(store.get("a"));  // a is now the most recent
  store.put("c", resp(3));      // evicts b
  EXPECT_TRUE(store.get("a"));
  EXPECT_FALSE(store.get("b"));
  EXPECT_EQ(store.get("c")->conversation[0].content, "xxx");
  EXPECT_EQ(store.size(), 2u);
  EXPECT_TRUE(store.erase("a"));
  EXPECT_FALSE(store.erase("a"));
  EXPECT_EQ(store.size(), 1u);

  ResponseStore small(100, 3000);
  small.put("big", resp(5000));  // larger than the bound: not kept
  EXPECT_FALSE(small.get("big"));
  EXPECT_EQ(small.bytes(), 0u);
  small.put("x", resp(1200));
  small.put("y", resp(1200));
  small.put("z", resp(1200));  // bytes: evicts x
  EXPECT_FALSE(small.get("x"));
  EXPECT_TRUE(small.get("y") && small.get("z"));
  EXPECT_LE(small.bytes(), 3000u);
}

TEST(ResponsesRequest, ImageInputIsRefusedAsTextOnly) {
  try {
    parse_responses_request(ojson::parse(R"({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]})"));
    ADD_FAILURE() << "image input accepted";
  } catch (const FieldError& e) {
    EXPECT_EQ(e.param(), "input[0].content[0].type");
    EXPECT_NE(std::string(e.what()).find("text-only"), std::string::npos) << e.what();
  }
}

}  // namespace

}  // namespace neuron::server
