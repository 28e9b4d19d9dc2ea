// The API without sockets: handlers take HttpRequest and return
// HttpResponse, streams write into a ChunkSink, over an in-process registry
// holding the bundled tiny model.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "engine/model_assets.hpp"
#include "engine/registry.hpp"
#include "server/api.hpp"

namespace neuron::server {
namespace {

using nlohmann::json;

std::string tiny_model_dir() { return std::string(NEURON_REPO_ROOT) + "/models/qwen3-tiny-a"; }

// Accepts `budget` writes, then behaves like a socket whose peer has gone.
class ClosingSink final : public ChunkSink {
 public:
  explicit ClosingSink(int budget) : budget_(budget) {}
  bool write(std::string_view data) override {
    if (budget_-- <= 0) return false;
    received += data;
    return true;
  }
  std::string received;

 private:
  int budget_;
};

class ServerApi : public ::testing::Test {
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
  static engine::Registry* registry_;
};

engine::Registry* ServerApi::registry_ = nullptr;

TEST_F(ServerApi, AStreamWhoseClientLeftIsCancelledAndCounted) {
  Api api(*registry_, {});
  json body = {{"model", tiny_model_dir()}, {"prompt", "on and on"}, {"max_tokens", 3000}, {"ignore_eos", true}, {"stream", true}};
  HttpResponse r = api.handle(post("/v1/completions", body));
  ASSERT_EQ(r.status, 200) << r.body;
  ASSERT_TRUE(r.stream);
  EXPECT_EQ(r.content_type, "text/event-stream");
  ClosingSink sink(3);
  r.stream(sink);  // returns once the engine has stopped the request
  EXPECT_EQ(sink.received.find("[DONE]"), std::string::npos);
  const Labels model{{"model", tiny_model_dir()}};
  EXPECT_EQ(api.metrics().value("neuron_requests_cancelled_total", model), 1);
  EXPECT_LT(api.metrics().value("neuron_generated_tokens_total", model), 3000) << "generation went on after the client left";
  EXPECT_EQ(api.in_flight(), 0u);
  EXPECT_TRUE(registry_->engine(tiny_model_dir())->idle());
}

TEST_F(ServerApi, StreamsEndWithDoneAndBlockingAnswersMatchThem) {
  Api api(*registry_, {});
  json body = {{"prompt", "abc"}, {"max_tokens", 8}, {"temperature", 0}};
  HttpResponse blocking = api.handle(post("/v1/completions", body));
  ASSERT_EQ(blocking.status, 200) << blocking.body;
  body["stream"] = true;
  HttpResponse streamed = api.handle(post("/v1/completions", body));
  ClosingSink sink(1000);
  streamed.stream(sink);
  std::string text;
  std::size_t pos = 0;
  while ((pos = sink.received.find("data: {", pos)) != std::string::npos) {
    auto end = sink.received.find("\n\n", pos);
    text += json::parse(sink.received.substr(pos + 6, end - pos - 6))["choices"][0]["text"].get<std::string>();
    pos = end;
  }
  EXPECT_EQ(text, json::parse(blocking.body)["choices"][0]["text"].get<std::string>());
  EXPECT_EQ(sink.received.substr(sink.received.size() - 14), "data: [DONE]\n\n");
}

TEST_F(ServerApi, ApiKeyIsRequiredEverywhereButHealth) {
  Api api(*registry_, ApiOptions{"k3y"});
  EXPECT_EQ(api.handle({"GET", "/health", {}, "", ""}).status, 200);
  HttpResponse missing = api.handle({"GET", "/v1/models", {}, "", ""});
  EXPECT_EQ(missing.status, 401);
  EXPECT_EQ(missing.header("WWW-Authenticate"), "Bearer");
  EXPECT_EQ(api.handle({"GET", "/v1/models", {{"Authorization", "Bearer k3"}}, "", ""}).status, 401);
  EXPECT_EQ(api.handle({"GET", "/v1/models", {{"Authorization", "Bearer k3yy"}}, "", ""}).status, 401);
  EXPECT_EQ(api.handle({"GET", "/v1/models", {{"authorization", "Bearer k3y"}}, "", ""}).status, 200);
  // Unknown routes also need the key: they must not reveal which paths exist.
  EXPECT_EQ(api.handle({"GET", "/nowhere", {}, "", ""}).status, 401);
}

TEST_F(ServerApi, ShuttingDownRefusesNewWorkButKeepsHealthAndMetrics) {
  Api api(*registry_, {});
  api.begin_shutdown();
  HttpResponse r = api.handle(post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}}));
  EXPECT_EQ(r.status, 503);
  EXPECT_EQ(json::parse(r.body)["error"]["code"], "shutting_down");
  HttpResponse health = api.handle({"GET", "/health", {}, "", ""});
  EXPECT_EQ(health.status, 503);
  EXPECT_EQ(json::parse(health.body)["status"], "shutting_down");
  EXPECT_EQ(api.handle({"GET", "/metrics", {}, "", ""}).status, 200);
  EXPECT_TRUE(api.wait_idle(std::chrono::milliseconds(10)));
}

TEST_F(ServerApi, ChatUsesTheTemplateAndTheThinkingSwitch) {
  Api api(*registry_, {});
  json msgs = json::array({{{"role", "user"}, {"content", "hi"}}});
  HttpResponse plain = api.handle(post("/tokenize", {{"messages", msgs}}));
  HttpResponse no_think = api.handle(post("/tokenize", {{"messages", msgs}, {"chat_template_kwargs", {{"enable_thinking", false}}}}));
  ASSERT_EQ(plain.status, 200) << plain.body;
  ASSERT_EQ(no_think.status, 200) << no_think.body;
  // Qwen3's template closes an empty <think></think> block when thinking is off.
  EXPECT_GT(json::parse(no_think.body)["count"].get<int>(), json::parse(plain.body)["count"].get<int>());
  HttpResponse chat = api.handle(post("/v1/chat/completions", {{"messages", msgs}, {"max_tokens", 4}, {"chat_template_kwargs", {{"enable_thinking", false}}}}));
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(json::parse(chat.body)["usage"]["prompt_tokens"], json::parse(no_think.body)["count"]);
}

TEST_F(ServerApi, ToolsReachTheTemplateInTheClientsKeyOrder) {
  Api api(*registry_, {});
  // Written by hand so the order is the client's: "type" before "function", "name" before "description".
  const std::string tools = R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";
  const std::string messages = R"([{"role": "user", "content": "Weather in Paris?"}])";
  HttpRequest req;
  req.method = "POST";
  req.path = "/tokenize";
  req.body = R"({"messages": )" + messages + R"(, "tools": )" + tools + "}";
  HttpResponse r = api.handle(req);
  ASSERT_EQ(r.status, 200) << r.body;

  auto assets = registry_->assets(tiny_model_dir());
  const std::string ordered = assets->chat->apply(nlohmann::ordered_json::parse(messages), nlohmann::ordered_json::parse(tools),
                                                  true, nlohmann::ordered_json::object());
  EXPECT_NE(ordered.find(R"({"type": "function", "function": {"name": "get_weather", "description")"), std::string::npos)
      << ordered;
  EXPECT_EQ(json::parse(r.body)["tokens"].get<std::vector<std::int32_t>>(), assets->tokenizer->encode(ordered));
  const std::string sorted = assets->chat->apply(json::parse(messages), json::parse(tools), true, json::object());
  EXPECT_NE(assets->tokenizer->encode(sorted), assets->tokenizer->encode(ordered)) << "the test must tell the orders apart";
}

TEST_F(ServerApi, WithToolsStreamedAndBlockingAnswersCarryTheSameText) {
  Api api(*registry_, {});
  json body = {{"model", tiny_model_dir()},
               {"messages", {{{"role", "user"}, {"content", "What is the weather in Paris?"}}}},
               {"tools", {{{"type", "function"}, {"function", {{"name", "get_weather"}, {"parameters", {{"type", "object"}}}}}}}},
               {"max_tokens", 48},
               {"temperature", 0}};
  HttpResponse blocking = api.handle(post("/v1/chat/completions", body));
  ASSERT_EQ(blocking.status, 200) << blocking.body;
  const json message = json::parse(blocking.body)["choices"][0]["message"];
  body["stream"] = true;
  HttpResponse streamed = api.handle(post("/v1/chat/completions", body));
  ASSERT_TRUE(streamed.stream);
  ClosingSink sink(1 << 20);
  streamed.stream(sink);
  std::string content;
  json calls = json::array();
  for (std::size_t pos = 0; (pos = sink.received.find("data: {", pos)) != std::string::npos;) {
    const std::size_t end = sink.received.find("\n\n", pos);
    const json e = json::parse(sink.received.substr(pos + 6, end - pos - 6));
    pos = end;
    if (e["choices"].empty()) continue;
    const json& delta = e["choices"][0]["delta"];
    if (delta.contains("content") && delta["content"].is_string()) content += delta["content"].get<std::string>();
    if (delta.contains("tool_calls")) calls = delta["tool_calls"];
  }
  // Held text (a possible call) must come out one way or the other, the same both ways.
  EXPECT_EQ(content, message["content"].is_null() ? "" : message["content"].get<std::string>());
  EXPECT_EQ(calls.size(), message.contains("tool_calls") ? message["tool_calls"].size() : 0u);
}

}  // namespace
}  // namespace neuron::server
