// The API without sockets: handlers take HttpRequest and return
// HttpResponse, streams are BodyStreams driven here as the transport drives
// them, over an in-process registry holding the bundled tiny model.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <climits>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <filesystem>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/model_assets.hpp"
#include "engine/registry.hpp"
#include "server/api.hpp"
#include "support/drain_stream.hpp"
#include "support/temp_dir.hpp"
#include "util/json_parse.hpp"

namespace neuron::server {
namespace {

using nlohmann::json;

namespace fs = std::filesystem;

std::string models_dir() { return std::string(NEURON_REPO_ROOT) + "/models"; }
std::string tiny_model_dir() { return models_dir() + "/qwen3-tiny-a"; }

HttpRequest raw_post(const std::string& path, std::string body) { return HttpRequest{"POST", path, {}, std::move(body), "test"}; }
HttpRequest post_json(const std::string& path, const nlohmann::json& body) { return raw_post(path, body.dump()); }

using test_support::drain;
using test_support::Drained;

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

TEST_F(ServerApi, DeeplyNestedJsonIsA400OnEveryRouteAndTheApiKeepsServing) {
  Api api(*registry_, {});
  constexpr std::size_t kDeep = 100'000;
  const std::string deep = std::string(kDeep, '[') + std::string(kDeep, ']');
  const std::string m = R"("model": "qwen3-tiny-a")";
  const std::string user = R"({"role": "user", "content": "hi"})";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/models/load", deep},
      {"/models/load", R"({"model_id": )" + deep + "}"},
      {"/models/load", R"({"model_id": "qwen3-tiny-a", "devices": )" + deep + "}"},
      {"/models/unload", R"({"model_id": )" + deep + "}"},
      {"/models/unload", R"({"model_id": "x", "drain_ms": )" + deep + "}"},
      {"/v1/chat/completions", deep},
      {"/v1/chat/completions", "{" + m + R"(, "messages": [)" + user + R"(], "tools": )" + deep + "}"},
      {"/v1/chat/completions", "{" + m + R"(, "messages": [)" + user + R"(], "chat_template_kwargs": {"x": )" + deep + "}}"},
      {"/v1/chat/completions", "{" + m + R"(, "messages": [{"role": "assistant", "content": "", "tool_calls": )" + deep + "}, " + user + "]}"},
      {"/v1/completions", "{" + m + R"(, "prompt": )" + deep + "}"},
      {"/tokenize", "{" + m + R"(, "messages": [)" + user + R"(], "tools": [)" + deep + "]}"},
      {"/tokenize", "{" + m + R"(, "prompt": )" + deep + "}"},
      {"/detokenize", "{" + m + R"(, "tokens": )" + deep + "}"},
  };
  for (const auto& [path, body] : cases) {
    const HttpResponse r = api.handle(raw_post(path, body));
    EXPECT_EQ(r.status, 400) << path << " " << body.substr(0, 80) << "\n" << r.body.substr(0, 400);
    const json err = json::parse(r.body)["error"];
    EXPECT_EQ(err["code"], "invalid_json") << path;
    EXPECT_NE(err["message"].get<std::string>().find("nests deeper than " + std::to_string(kMaxJsonDepth) + " levels"), std::string::npos)
        << path << ": " << err["message"];
  }
  // Still serving, on the same Api.
  const HttpResponse ok = api.handle(post("/tokenize", {{"model", "qwen3-tiny-a"}, {"prompt", "still here"}}));
  EXPECT_EQ(ok.status, 200) << ok.body;
  EXPECT_EQ(api.handle({"GET", "/health", {}, "", ""}).status, 200);
  // Nesting up to the limit is an ordinary request.
  const std::string at_limit = std::string(kMaxJsonDepth - 2, '[') + std::string(kMaxJsonDepth - 2, ']');
  const HttpResponse nested_tools = api.handle(raw_post("/tokenize", "{" + m + R"(, "messages": [)" + user +
                                                                        R"(], "chat_template_kwargs": {"x": )" + at_limit + "}}"));
  EXPECT_EQ(nested_tools.status, 200) << nested_tools.body;
}

TEST_F(ServerApi, EverySpellingOfTheDirectoryIsTheLoadedModel) {
  Api api(*registry_, {});
  test_support::TempDir links;
  fs::create_directory_symlink(tiny_model_dir(), links / "link");
  fs::create_directory_symlink(models_dir(), links / "models-link");
  const std::vector<std::string> spellings = {tiny_model_dir(),        tiny_model_dir() + "/", models_dir() + "//qwen3-tiny-a",
                                              models_dir() + "/./qwen3-tiny-a", tiny_model_dir() + "/.", (links / "link").string(),
                                              (links / "models-link" / "qwen3-tiny-a").string()};
  for (const auto& s : spellings) {
    const HttpResponse load = api.handle(post("/models/load", {{"model_id", s}}));
    EXPECT_EQ(load.status, 409) << s << ": " << load.body;
    EXPECT_EQ(json::parse(load.body)["error"]["code"], "conflict") << s;
    const HttpResponse tok = api.handle(post("/tokenize", {{"model", s}, {"prompt", "hi"}}));
    EXPECT_EQ(tok.status, 200) << s << ": " << tok.body;
  }
  // The folder name still works as an alias, and the one model has one id.
  EXPECT_EQ(api.handle(post("/tokenize", {{"model", "qwen3-tiny-a"}, {"prompt", "hi"}})).status, 200);
  const json listed = json::parse(api.handle({"GET", "/v1/models", {}, "", ""}).body)["data"];
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0]["id"], fs::canonical(tiny_model_dir()).string());
}

TEST_F(ServerApi, HealthShowsFolderNamesNotPaths) {
  for (const std::string key : {"", "secret"}) {
    Api api(*registry_, ApiOptions{key});
    const HttpResponse r = api.handle({"GET", "/health", {}, "", ""});
    ASSERT_EQ(r.status, 200);
    EXPECT_EQ(r.body.find(NEURON_REPO_ROOT), std::string::npos) << r.body;
    EXPECT_EQ(r.body.find('/'), std::string::npos) << r.body;
    const json models = json::parse(r.body)["models"];
    ASSERT_EQ(models.size(), 1u);
    EXPECT_EQ(models[0]["id"], "qwen3-tiny-a");
  }
}

// A registry of its own: loading and unloading by any spelling, and loads that fail.
TEST(ServerApiLoad, LoadAndUnloadByAnySpelling) {
  engine::RegistryOptions ro;
  ro.model_roots = {models_dir()};
  engine::Registry registry(ro);
  Api api(registry, {});
  const HttpResponse load = api.handle(post_json("/models/load", {{"model_id", models_dir() + "//qwen3-tiny-a/"}, {"wait", true}}));
  ASSERT_EQ(load.status, 200) << load.body;
  EXPECT_EQ(json::parse(load.body)["id"], fs::canonical(tiny_model_dir()).string());
  EXPECT_EQ(api.handle(post_json("/models/load", {{"model_id", tiny_model_dir()}})).status, 409);
  const HttpResponse unload = api.handle(post_json("/models/unload", {{"model_id", models_dir() + "/./qwen3-tiny-a"}}));
  EXPECT_EQ(unload.status, 200) << unload.body;
  EXPECT_TRUE(registry.list().empty());
  // The folder name unloads too.
  ASSERT_EQ(api.handle(post_json("/models/load", {{"model_id", tiny_model_dir()}, {"wait", true}})).status, 200);
  EXPECT_EQ(api.handle(post_json("/models/unload", {{"model_id", "qwen3-tiny-a"}})).status, 200);
  EXPECT_TRUE(registry.list().empty());
}

TEST(ServerApiLoad, WeightsThatAreNotRegularFilesAreA400NamingTheFile) {
  test_support::TempDir root;
  engine::RegistryOptions ro;
  ro.model_roots = {root.path()};
  engine::Registry registry(ro);
  Api api(registry, {});
  const std::vector<std::pair<std::string, std::string>> variants = {
      {"directory", "a directory"}, {"dev-zero", "a character device"}, {"fifo", "a FIFO"}};
  for (const auto& [name, what] : variants) {
    const fs::path dir = root / name;
    fs::create_directories(dir);
    for (const char* f : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(fs::path(tiny_model_dir()) / f, dir / f);
    const fs::path weights = dir / "model.safetensors";
    if (name == "directory") fs::create_directory(weights);
    if (name == "dev-zero") fs::create_symlink("/dev/zero", weights);
    if (name == "fifo") ASSERT_EQ(::mkfifo(weights.c_str(), 0600), 0);
    const HttpResponse r = api.handle(post_json("/models/load", {{"model_id", dir.string()}, {"wait", true}}));
    EXPECT_EQ(r.status, 400) << name << ": " << r.body;
    const json err = json::parse(r.body)["error"];
    EXPECT_EQ(err["code"], "bad_model") << name;
    EXPECT_NE(err["message"].get<std::string>().find("model.safetensors is " + what), std::string::npos) << err["message"];
  }
}

}  // namespace
}  // namespace neuron::server
