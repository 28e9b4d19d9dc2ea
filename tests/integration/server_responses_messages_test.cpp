// /v1/responses and /v1/messages through the Api (no sockets) over the
// bundled tiny model: blocking and streamed answers agree at temperature 0,
// stored responses chain and can be read and deleted, tool round trips in the
// input are rendered as chat would render them, and errors come in each API's
// own shape.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/registry.hpp"
#include "server/api.hpp"
#include "support/drain_stream.hpp"
#include "support/model_paths.hpp"

namespace neuron::server {
namespace {

using json = nlohmann::json;

using test_support::tiny_model_dir;

struct Event {
  std::string name;
  json data;
};

std::vector<Event> events_of(const std::string& sse) {
  std::vector<Event> out;
  std::size_t pos = 0;
  while (pos < sse.size()) {
    const std::size_t end = sse.find("\n\n", pos);
    if (end == std::string::npos) {
      ADD_FAILURE() << "unterminated event: " << sse.substr(pos);
      break;
    }
    const std::string block = sse.substr(pos, end - pos);
    pos = end + 2;
    if (block.starts_with(":")) continue;  // keep-alive comment
    const std::size_t nl = block.find('\n');
    out.push_back(Event{block.substr(7, nl - 7), json::parse(block.substr(nl + 7))});
  }
  return out;
}

class ResponsesMessagesApi : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    engine::RegistryOptions ro;
    ro.model_roots = {std::string(NEURON_REPO_ROOT) + "/models"};
    registry_ = new engine::Registry(ro);
    engine::ModelSpec spec;
    spec.model_id = tiny_model_dir();
    registry_->load(spec, true);
  }
  static void TearDownTestSuite() {
    delete registry_;
    registry_ = nullptr;
  }
  static HttpRequest post(const std::string& path, const json& body, std::vector<std::pair<std::string, std::string>> headers = {}) {
    return HttpRequest{"POST", path, std::move(headers), body.dump(), "test"};
  }
  static HttpRequest get(const std::string& path, const std::string& method = "GET") { return HttpRequest{method, path, {}, {}, "test"}; }
  // Input tokens of a chat request as /tokenize renders it.
  static int chat_tokens(Api& api, const json& messages, const json& tools = nullptr) {
    json body = {{"messages", messages}};
    if (!tools.is_null()) body["tools"] = tools;
    const HttpResponse r = api.handle(post("/tokenize", body));
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body)["count"].get<int>();
  }
  static engine::Registry* registry_;
};

engine::Registry* ResponsesMessagesApi::registry_ = nullptr;

TEST_F(ResponsesMessagesApi, AResponseIsStoredChainsAndCanBeDeleted) {
  Api api(*registry_, {});
  const json first_body = {{"input", "Tell me a story."}, {"instructions", "Be brief."}, {"max_output_tokens", 6}, {"temperature", 0},
                           {"metadata", {{"run", "1"}}}};
  const HttpResponse first = api.handle(post("/v1/responses", first_body));
  ASSERT_EQ(first.status, 200) << first.body;
  const json r1 = json::parse(first.body);
  EXPECT_EQ(r1["object"], "response");
  EXPECT_TRUE(r1["id"].get<std::string>().starts_with("resp_"));
  EXPECT_EQ(r1["metadata"], json({{"run", "1"}}));
  EXPECT_EQ(r1["instructions"], "Be brief.");
  const json& usage = r1["usage"];
  EXPECT_EQ(usage["input_tokens"], chat_tokens(api, json::parse(R"([{"role": "system", "content": "Be brief."},
                                                                    {"role": "user", "content": "Tell me a story."}])")));
  EXPECT_GT(usage["output_tokens"].get<int>(), 0);
  EXPECT_EQ(usage["total_tokens"], usage["input_tokens"].get<int>() + usage["output_tokens"].get<int>());
  // The random model rarely ends by itself within 6 tokens: then it is incomplete.
  if (usage["output_tokens"] == 6) {
    EXPECT_EQ(r1["status"], "incomplete");
    EXPECT_EQ(r1["incomplete_details"]["reason"], "max_output_tokens");
  }
  ASSERT_FALSE(r1["output"].empty());

  const std::string id = r1["id"];
  const HttpResponse got = api.handle(get("/v1/responses/" + id));
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(json::parse(got.body), r1);

  // Chaining: the stored conversation (input + output, not the instructions) comes before the new input.
  const HttpResponse second =
      api.handle(post("/v1/responses", {{"input", "Go on."}, {"previous_response_id", id}, {"max_output_tokens", 4}, {"store", false}}));
  ASSERT_EQ(second.status, 200) << second.body;
  const json r2 = json::parse(second.body);
  EXPECT_EQ(r2["previous_response_id"], id);
  EXPECT_GT(r2["usage"]["input_tokens"].get<int>(), usage["input_tokens"].get<int>() + 2);
  EXPECT_EQ(api.handle(get("/v1/responses/" + r2["id"].get<std::string>())).status, 404);  // store: false

  const HttpResponse deleted = api.handle(get("/v1/responses/" + id, "DELETE"));
  ASSERT_EQ(deleted.status, 200) << deleted.body;
  EXPECT_EQ(json::parse(deleted.body)["deleted"], true);
  const HttpResponse gone = api.handle(get("/v1/responses/" + id));
  EXPECT_EQ(gone.status, 404);
  EXPECT_TRUE(json::parse(gone.body)["error"]["message"].get<std::string>().find(id) != std::string::npos);
  const HttpResponse unknown = api.handle(post("/v1/responses", {{"input", "x"}, {"previous_response_id", id}}));
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(json::parse(unknown.body)["error"]["param"], "previous_response_id");
}

TEST_F(ResponsesMessagesApi, AStreamedResponseEqualsTheBlockingOneAndIsStored) {
  Api api(*registry_, {});
  const json body = {{"input", "Name three colours."}, {"max_output_tokens", 12}, {"temperature", 0}};
  const HttpResponse blocking = api.handle(post("/v1/responses", body));
  ASSERT_EQ(blocking.status, 200) << blocking.body;
  const json whole = json::parse(blocking.body);

  json streamed_body = body;
  streamed_body["stream"] = true;
  HttpResponse streamed = api.handle(post("/v1/responses", streamed_body));
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  ASSERT_TRUE(streamed.stream);
  EXPECT_EQ(streamed.content_type, "text/event-stream");
  const auto d = test_support::drain(*streamed.stream);
  ASSERT_TRUE(d.finished);
  const auto events = events_of(d.received);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[0].name, "response.created");
  EXPECT_EQ(events[1].name, "response.in_progress");
  std::string text, reasoning;
  for (std::size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].data["sequence_number"], i);
    if (events[i].name == "response.output_text.delta") text += events[i].data["delta"].get<std::string>();
    if (events[i].name == "response.reasoning_text.delta") reasoning += events[i].data["delta"].get<std::string>();
  }
  const json& last = events.back().data["response"];
  EXPECT_TRUE(events.back().name == "response.completed" || events.back().name == "response.incomplete") << events.back().name;
  // Same items and usage as the blocking answer (ids differ).
  ASSERT_EQ(last["output"].size(), whole["output"].size());
  for (std::size_t i = 0; i < whole["output"].size(); ++i) {
    EXPECT_EQ(last["output"][i]["type"], whole["output"][i]["type"]);
    EXPECT_EQ(last["output"][i]["content"], whole["output"][i]["content"]);
    if (last["output"][i]["type"] == "message") {
      EXPECT_EQ(last["output"][i]["content"][0]["text"], text);
    }
    if (last["output"][i]["type"] == "reasoning") {
      EXPECT_EQ(last["output"][i]["content"][0]["text"], reasoning);
    }
  }
  json streamed_usage = last["usage"], whole_usage = whole["usage"];
  ASSERT_TRUE(streamed_usage.contains("helexa_timing") && whole_usage.contains("helexa_timing"));
  streamed_usage.erase("helexa_timing");  // each request's own milliseconds
  whole_usage.erase("helexa_timing");
  EXPECT_EQ(streamed_usage, whole_usage);
  EXPECT_EQ(last["status"], whole["status"]);

  const HttpResponse got = api.handle(get("/v1/responses/" + last["id"].get<std::string>()));
  ASSERT_EQ(got.status, 200) << got.body;
  EXPECT_EQ(json::parse(got.body), last);
}

TEST_F(ResponsesMessagesApi, AToolRoundTripInTheInputIsRenderedAsChatRendersIt) {
  Api api(*registry_, {});
  const json input = json::parse(R"([
      {"role": "user", "content": "Weather in Paris?"},
      {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "sunny, 21 C"}])");
  const json tools = json::parse(R"([{"type": "function", "name": "get_weather", "description": "Weather of a city",
                                      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}])");
  const HttpResponse r = api.handle(post("/v1/responses", {{"input", input}, {"tools", tools}, {"max_output_tokens", 3}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const json chat_messages = json::parse(R"([
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function",
                                                           "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"}])");
  const json chat_tools = json::parse(R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
                                           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  EXPECT_EQ(json::parse(r.body)["usage"]["input_tokens"], chat_tokens(api, chat_messages, chat_tools));
  EXPECT_EQ(json::parse(r.body)["tools"], tools);
}

// Constrained decoding through both APIs on the random model: a forced call
// comes back as a call of the named tool (its schema allows only {}), and
// text.format json_schema gives JSON of the schema.
TEST_F(ResponsesMessagesApi, ForcedToolCallsAndStructuredOutputAreHonoured) {
  Api api(*registry_, {});
  const json strict = {{"type", "object"}, {"properties", json::object()}, {"additionalProperties", false}};
  const json fn_tools = json::array({{{"type", "function"}, {"name", "ping"}, {"parameters", strict}},
                                     {{"type", "function"}, {"name", "pong"}, {"parameters", strict}}});
  HttpResponse r = api.handle(post("/v1/responses", {{"input", "Call a tool."}, {"tools", fn_tools}, {"max_output_tokens", 64},
                                                     {"tool_choice", {{"type", "function"}, {"name", "pong"}}}}));
  ASSERT_EQ(r.status, 200) << r.body;
  json j = json::parse(r.body);
  const json& call = j["output"].back();
  EXPECT_EQ(call["type"], "function_call") << r.body;
  EXPECT_EQ(call["name"], "pong") << r.body;
  EXPECT_EQ(json::parse(call["arguments"].get<std::string>()), json::object()) << r.body;

  const json schema = {{"type", "object"}, {"properties", {{"c", {{"enum", {"red", "blue"}}}}}}, {"required", {"c"}}};
  r = api.handle(post("/v1/responses", {{"input", "Pick a colour."}, {"max_output_tokens", 64},
                                        {"text", {{"format", {{"type", "json_schema"}, {"name", "colour"}, {"schema", schema}}}}}}));
  ASSERT_EQ(r.status, 200) << r.body;
  j = json::parse(r.body);
  EXPECT_EQ(j["status"], "completed") << r.body;
  const json answer = json::parse(j["output"].back()["content"][0]["text"].get<std::string>());
  EXPECT_TRUE(answer == json({{"c", "red"}}) || answer == json({{"c", "blue"}})) << answer.dump();

  const json anthropic_tools = json::array({{{"name", "ping"}, {"input_schema", strict}}, {{"name", "pong"}, {"input_schema", strict}}});
  r = api.handle(post("/v1/messages", {{"max_tokens", 64}, {"tools", anthropic_tools}, {"tool_choice", {{"type", "tool"}, {"name", "ping"}}},
                                       {"messages", {{{"role", "user"}, {"content", "Call a tool."}}}}}));
  ASSERT_EQ(r.status, 200) << r.body;
  j = json::parse(r.body);
  EXPECT_EQ(j["stop_reason"], "tool_use") << r.body;
  EXPECT_EQ(j["content"].back()["type"], "tool_use") << r.body;
  EXPECT_EQ(j["content"].back()["name"], "ping") << r.body;
  EXPECT_EQ(j["content"].back()["input"], json::object()) << r.body;
}

TEST_F(ResponsesMessagesApi, BadResponsesRequestsAre400sInOpenAisShape) {
  Api api(*registry_, {});
  const HttpResponse r = api.handle(post("/v1/responses", {{"input", "x"}, {"tool_choice", "required"}}));
  EXPECT_EQ(r.status, 400);
  const json e = json::parse(r.body)["error"];
  EXPECT_EQ(e["param"], "tool_choice");
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_EQ(api.handle(HttpRequest{"POST", "/v1/responses", {}, "{nope", "test"}).status, 400);
  const HttpResponse too_long = api.handle(post("/v1/responses", {{"input", "x"}, {"max_output_tokens", 100000}}));  // past the context
  EXPECT_EQ(too_long.status, 400);
  EXPECT_EQ(json::parse(too_long.body)["error"]["param"], "max_output_tokens");
  EXPECT_EQ(json::parse(too_long.body)["error"]["code"], "context_length_exceeded");
  EXPECT_EQ(api.handle(get("/v1/responses/resp_missing")).status, 404);
  EXPECT_EQ(api.handle(get("/v1/responses/resp_missing", "DELETE")).status, 404);
  // Deep JSON anywhere is refused by the parser, before anything is built from it.
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  for (const std::string& body : {deep, R"({"input": )" + deep + "}", R"({"input": "x", "tools": )" + deep + "}",
                                  R"({"input": [{"role": "user", "content": )" + deep + "}]}"}) {
    const HttpResponse r = api.handle(HttpRequest{"POST", "/v1/responses", {}, body, "test"});
    EXPECT_EQ(r.status, 400);
    EXPECT_EQ(json::parse(r.body)["error"]["code"], "invalid_json");
  }
}

TEST_F(ResponsesMessagesApi, AMessageStreamedEqualsTheBlockingOne) {
  Api api(*registry_, {});
  const json body = {{"max_tokens", 12}, {"temperature", 0}, {"system", "Be brief."},
                     {"messages", {{{"role", "user"}, {"content", "Name three colours."}}}}};
  const HttpResponse blocking = api.handle(post("/v1/messages", body, {{"anthropic-version", "2023-06-01"}}));
  ASSERT_EQ(blocking.status, 200) << blocking.body;
  const json whole = json::parse(blocking.body);
  EXPECT_EQ(whole["type"], "message");
  EXPECT_TRUE(whole["id"].get<std::string>().starts_with("msg_"));
  const std::string stop = whole["stop_reason"];
  EXPECT_TRUE(stop == "end_turn" || stop == "max_tokens") << stop;
  EXPECT_EQ(whole["usage"]["input_tokens"].get<int>() + whole["usage"]["cache_read_input_tokens"].get<int>(),
            chat_tokens(api, json::parse(R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name three colours."}])")));

  json streamed_body = body;
  streamed_body["stream"] = true;
  HttpResponse streamed = api.handle(post("/v1/messages", streamed_body));
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  ASSERT_TRUE(streamed.stream);
  const auto d = test_support::drain(*streamed.stream);
  ASSERT_TRUE(d.finished);
  const auto events = events_of(d.received);
  ASSERT_GE(events.size(), 4u);
  EXPECT_EQ(events.front().name, "message_start");
  EXPECT_EQ(events.back().name, "message_stop");
  json blocks = json::array();
  std::string stop_reason;
  for (const auto& e : events) {
    if (e.name == "content_block_start") blocks.push_back(e.data["content_block"]);
    if (e.name == "content_block_delta") {
      const json& delta = e.data["delta"];
      json& block = blocks[e.data["index"].get<std::size_t>()];
      if (delta["type"] == "text_delta") block["text"] = block["text"].get<std::string>() + delta["text"].get<std::string>();
      if (delta["type"] == "thinking_delta") block["thinking"] = block["thinking"].get<std::string>() + delta["thinking"].get<std::string>();
    }
    if (e.name == "message_delta") {
      stop_reason = e.data["delta"]["stop_reason"];
      EXPECT_EQ(e.data["usage"]["output_tokens"], whole["usage"]["output_tokens"]);
    }
  }
  EXPECT_EQ(blocks, whole["content"]);
  EXPECT_EQ(stop_reason, stop);

  // count_tokens renders the same prompt (max_tokens not needed there).
  json count_body = body;
  count_body.erase("max_tokens");
  const HttpResponse counted = api.handle(post("/v1/messages/count_tokens", count_body));
  ASSERT_EQ(counted.status, 200) << counted.body;
  EXPECT_EQ(json::parse(counted.body)["input_tokens"],
            whole["usage"]["input_tokens"].get<int>() + whole["usage"]["cache_read_input_tokens"].get<int>());
  const HttpResponse bad_count = api.handle(post("/v1/messages/count_tokens", {{"messages", 3}}));
  EXPECT_EQ(bad_count.status, 400);
  EXPECT_EQ(json::parse(bad_count.body)["type"], "error");
}

TEST_F(ResponsesMessagesApi, MessagesErrorsAndAuthUseAnthropicsShape) {
  Api api(*registry_, {.api_key = "sekrit"});
  const json ok = {{"max_tokens", 2}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  HttpResponse r = api.handle(post("/v1/messages", ok));
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(json::parse(r.body), json::parse(R"({"type": "error", "error": {"type": "authentication_error",
      "message": "missing API key: send 'Authorization: Bearer <key>' or 'x-api-key: <key>'"}})"));
  EXPECT_EQ(api.handle(post("/v1/messages", ok, {{"x-api-key", "wrong"}})).status, 401);
  r = api.handle(post("/v1/messages", ok, {{"x-api-key", "sekrit"}}));
  EXPECT_EQ(r.status, 200) << r.body;
  r = api.handle(post("/v1/messages", ok, {{"Authorization", "Bearer sekrit"}}));
  EXPECT_EQ(r.status, 200) << r.body;
  // Either header works on every route (the OpenAI ones included), in each route's error shape.
  EXPECT_EQ(api.handle(post("/v1/responses", {{"input", "x"}, {"max_output_tokens", 2}}, {{"x-api-key", "sekrit"}})).status, 200);
  r = api.handle(post("/v1/responses", {{"input", "x"}, {"max_output_tokens", 2}}, {{"x-api-key", "wrong"}}));
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(json::parse(r.body)["error"]["type"], "authentication_error") << r.body;

  r = api.handle(post("/v1/messages", {{"messages", ok["messages"]}}, {{"x-api-key", "sekrit"}}));
  EXPECT_EQ(r.status, 400);
  const json e = json::parse(r.body);
  EXPECT_EQ(e["type"], "error");
  EXPECT_EQ(e["error"]["type"], "invalid_request_error");
  EXPECT_NE(e["error"]["message"].get<std::string>().find("max_tokens"), std::string::npos);
  r = api.handle(post("/v1/messages", {{"model", "no-such-model"}, {"max_tokens", 2}, {"messages", ok["messages"]}}, {{"x-api-key", "sekrit"}}));
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(json::parse(r.body)["error"]["type"], "not_found_error");
  r = api.handle(HttpRequest{"POST", "/v1/messages", {{"x-api-key", "sekrit"}}, "[1,", "test"});
  EXPECT_EQ(r.status, 400);
  EXPECT_EQ(json::parse(r.body)["type"], "error");
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  r = api.handle(HttpRequest{"POST", "/v1/messages", {{"x-api-key", "sekrit"}}, R"({"max_tokens": 2, "messages": )" + deep + "}", "test"});
  EXPECT_EQ(r.status, 400);
  EXPECT_NE(json::parse(r.body)["error"]["message"].get<std::string>().find("nests deeper"), std::string::npos) << r.body;
  r = api.handle(HttpRequest{"GET", "/v1/messages", {{"x-api-key", "sekrit"}}, {}, "test"});
  EXPECT_EQ(r.status, 405);
  EXPECT_EQ(r.header("Allow"), "POST");
  EXPECT_EQ(json::parse(r.body)["error"]["type"], "invalid_request_error");
  EXPECT_NE(json::parse(r.body)["error"]["message"].get<std::string>().find("GET is not allowed"), std::string::npos);
  api.begin_shutdown();
  r = api.handle(post("/v1/messages", ok, {{"x-api-key", "sekrit"}}));
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(json::parse(r.body)["error"]["type"], "overloaded_error");
}

}  // namespace
}  // namespace neuron::server
