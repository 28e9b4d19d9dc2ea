// The API without sockets: handlers take HttpRequest and return
// HttpResponse, streams are BodyStreams driven here as the transport drives
// them, over an in-process registry holding the bundled tiny model.
#include <gtest/gtest.h>

#include <chrono>
#include <climits>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/model_assets.hpp"
#include "engine/registry.hpp"
#include "server/api.hpp"

namespace neuron::server {
namespace {

using nlohmann::json;

std::string tiny_model_dir() { return std::string(NEURON_REPO_ROOT) + "/models/qwen3-tiny-a"; }

// Drives a BodyStream on this thread as the transport does: start, then a
// pull after every wake. After `budget` pulls that brought bytes it cancels,
// like a connection whose client went away.
struct Drained {
  std::string received;
  bool finished = false;
};
Drained drain(BodyStream& stream, int budget = INT_MAX) {
  struct Wakes {  // shared: the engine may still call the wake after we return
    std::mutex mu;
    std::condition_variable cv;
    bool woken = false;
  };
  auto wakes = std::make_shared<Wakes>();
  stream.start([wakes] {
    std::lock_guard lock(wakes->mu);
    wakes->woken = true;
    wakes->cv.notify_one();
  });
  Drained d;
  for (int pulls = 0;;) {
    std::string out;
    const bool more = stream.pull(out);
    d.received += out;
    if (!more) {
      d.finished = true;
      return d;
    }
    if (!out.empty() && ++pulls >= budget) {
      stream.cancel();
      return d;
    }
    std::unique_lock lock(wakes->mu);
    if (!wakes->cv.wait_for(lock, std::chrono::seconds(60), [&] { return wakes->woken; })) {
      ADD_FAILURE() << "the stream stopped waking";
      stream.cancel();
      return d;
    }
    wakes->woken = false;
  }
}

bool wait_for(const std::function<bool()>& done, std::chrono::seconds timeout = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

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
  Drained d = drain(*r.stream, 3);
  EXPECT_FALSE(d.finished);
  EXPECT_EQ(d.received.find("[DONE]"), std::string::npos);
  // cancel() returns at once; the engine's last event, counted on its thread, follows within a step.
  EXPECT_TRUE(wait_for([&] { return api.in_flight() == 0; })) << "the cancelled stream's generation never ended";
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
  Drained sink = drain(*streamed.stream);
  EXPECT_TRUE(sink.finished);
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
  Drained sink = drain(*streamed.stream);
  ASSERT_TRUE(sink.finished);
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
