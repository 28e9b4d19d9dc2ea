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
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/model_assets.hpp"
#include "engine/registry.hpp"
#include "server/api.hpp"
#include "support/drain_stream.hpp"
#include "support/temp_dir.hpp"
#include "util/json_parse.hpp"
#include "support/model_paths.hpp"

namespace neuron::server {
namespace {

using nlohmann::json;

namespace fs = std::filesystem;

using test_support::models_dir;
using test_support::tiny_model_dir;
std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

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
  Api api(*registry_, ApiOptions{.api_key = "k3y"});
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
    // Reassembled as clients do: a call's first delta names it, the next ones append arguments.
    if (delta.contains("tool_calls"))
      for (const json& d : delta["tool_calls"]) {
        const std::size_t index = d["index"];
        if (d.contains("id")) {
          ASSERT_EQ(index, calls.size());
          calls.push_back({{"id", d["id"]}, {"type", d["type"]}, {"function", {{"name", d["function"]["name"]}, {"arguments", ""}}}});
        }
        ASSERT_LT(index, calls.size());
        calls[index]["function"]["arguments"] = calls[index]["function"]["arguments"].get<std::string>() +
                                                d["function"].value("arguments", "");
      }
  }
  // Held text (a possible call) must come out one way or the other, the same both ways.
  EXPECT_EQ(content, message["content"].is_null() ? "" : message["content"].get<std::string>());
  const json blocking_calls = message.value("tool_calls", json::array());
  ASSERT_EQ(calls.size(), blocking_calls.size());
  for (std::size_t i = 0; i < calls.size(); ++i) {
    EXPECT_EQ(calls[i]["function"]["name"], blocking_calls[i]["function"]["name"]);
    EXPECT_EQ(calls[i]["function"]["arguments"], blocking_calls[i]["function"]["arguments"]);
  }
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
  EXPECT_EQ(listed[0]["id"], "qwen3-tiny-a") << "the name clients send, never a file system path";
  const HttpResponse one = api.handle({"GET", "/v1/models/qwen3-tiny-a", {}, "", ""});
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(json::parse(one.body)["id"], "qwen3-tiny-a");
}

TEST_F(ServerApi, HealthShowsFolderNamesNotPaths) {
  for (const std::string key : {"", "secret"}) {
    Api api(*registry_, ApiOptions{.api_key = key});
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
  EXPECT_EQ(json::parse(load.body)["model_id"], "qwen3-tiny-a") << "answers name it, never by its path";
  EXPECT_EQ(json::parse(load.body)["model"]["model_id"], fs::canonical(tiny_model_dir()).string()) << "the registry key";
  EXPECT_EQ(api.handle(post_json("/models/load", {{"model_id", tiny_model_dir()}})).status, 409);
  const HttpResponse unload = api.handle(post_json("/models/unload", {{"model_id", models_dir() + "/./qwen3-tiny-a"}}));
  EXPECT_EQ(unload.status, 200) << unload.body;
  EXPECT_TRUE(registry.list().empty());
  // The folder name unloads too.
  ASSERT_EQ(api.handle(post_json("/models/load", {{"model_id", tiny_model_dir()}, {"wait", true}})).status, 200);
  EXPECT_EQ(api.handle(post_json("/models/unload", {{"model_id", "qwen3-tiny-a"}})).status, 200);
  EXPECT_TRUE(registry.list().empty());
}

// A Qwen3.5 hybrid (tests/data/families/qwen3_5-a with the Qwen vocabulary of models/qwen3-tiny-a) loaded through
// the registry from a models directory and served on the CPU: greedy completions repeat exactly (the second run
// recomputes its prompt: no prefix reuse for hybrids, cached_tokens 0).
TEST(ServerApiLoad, AQwen35HybridServesCompletionsOnTheCpu) {
  test_support::TempDir root;
  const fs::path dir = root.path() / "qwen3_5-a";
  fs::create_directories(dir);
  const fs::path family = fs::path(NEURON_TEST_DATA) / "families" / "qwen3_5-a";
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"}) fs::copy_file(family / f, dir / f);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) fs::copy_file(fs::path(tiny_model_dir()) / f, dir / f);
  engine::RegistryOptions ro;
  ro.model_roots = {root.path()};
  engine::Registry registry(ro);
  Api api(registry, {});
  const HttpResponse load = api.handle(post_json("/models/load", {{"model_id", "qwen3_5-a"}, {"wait", true}}));
  ASSERT_EQ(load.status, 200) << load.body;
  const json body = {{"model", "qwen3_5-a"}, {"prompt", "The quick brown fox"}, {"max_tokens", 8},
                     {"temperature", 0}, {"ignore_eos", true}};
  const HttpResponse first = api.handle(post_json("/v1/completions", body));
  ASSERT_EQ(first.status, 200) << first.body;
  const HttpResponse again = api.handle(post_json("/v1/completions", body));
  ASSERT_EQ(again.status, 200) << again.body;
  const json a = json::parse(first.body), b = json::parse(again.body);
  EXPECT_EQ(a["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(a["usage"]["completion_tokens"], 8);
  EXPECT_EQ(a["choices"][0]["text"], b["choices"][0]["text"]);
  EXPECT_EQ(b["usage"]["prompt_tokens_details"]["cached_tokens"], 0) << b.dump();
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
    if (name == "fifo") { ASSERT_EQ(::mkfifo(weights.c_str(), 0600), 0); }
    const HttpResponse r = api.handle(post_json("/models/load", {{"model_id", dir.string()}, {"wait", true}}));
    EXPECT_EQ(r.status, 400) << name << ": " << r.body;
    const json err = json::parse(r.body)["error"];
    EXPECT_EQ(err["code"], "bad_model") << name;
    EXPECT_NE(err["message"].get<std::string>().find("model.safetensors is " + what), std::string::npos) << err["message"];
  }
}

// Constrained decoding through the API with the random-weight model at
// temperature 1: every answer is complete, parses and has the schema's shape;
// thinking is off for constrained requests; a forced tool call comes back as
// message.tool_calls.
TEST_F(ServerApi, ResponseFormatAndForcedToolCallsConstrainTheAnswer) {
  Api api(*registry_, {});
  const json schema = json::parse(R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},
      "n":{"type":"integer"},"tags":{"type":"array","items":{"enum":["x","y"]},"maxItems":2}},
      "required":["name","n","tags"],"additionalProperties":false})");
  const json msgs = json::array({{{"role", "user"}, {"content", "hi"}}});
  for (int seed = 0; seed < 8; ++seed) {
    HttpResponse r = api.handle(post("/v1/chat/completions",
                                     {{"messages", msgs}, {"max_tokens", 400}, {"temperature", 1}, {"seed", seed},
                                      {"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "t"}, {"schema", schema}}}}}}));
    ASSERT_EQ(r.status, 200) << r.body;
    const json body = json::parse(r.body);
    ASSERT_EQ(body["choices"][0]["finish_reason"], "stop") << r.body;
    const json v = json::parse(body["choices"][0]["message"]["content"].get<std::string>());
    ASSERT_TRUE(v.is_object()) << v.dump();
    EXPECT_EQ(v.size(), 3u) << v.dump();
    EXPECT_TRUE(v["name"].is_string() && v["n"].is_number_integer() && v["tags"].is_array()) << v.dump();
    EXPECT_LE(v["tags"].size(), 2u);
    EXPECT_FALSE(body["choices"][0]["message"].contains("reasoning_content")) << "thinking is off";
  }
  HttpResponse r = api.handle(post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 200}, {"temperature", 1},
                                                       {"response_format", {{"type", "json_object"}}}}));
  ASSERT_EQ(r.status, 200) << r.body;
  const json c = json::parse(r.body)["choices"][0];
  if (c["finish_reason"] == "stop") { EXPECT_TRUE(json::parse(c["text"].get<std::string>()).is_object()) << c.dump(); }
  const json tools = json::parse(R"([{"type":"function","function":{"name":"f","parameters":{"type":"object",
      "properties":{"a":{"enum":[1,2]}},"required":["a"]}}},{"type":"function","function":{"name":"g"}}])");
  HttpResponse t = api.handle(post("/v1/chat/completions", {{"messages", msgs}, {"max_tokens", 300}, {"temperature", 1},
                                                            {"tools", tools}, {"tool_choice", {{"type", "function"}, {"function", {{"name", "f"}}}}}}));
  ASSERT_EQ(t.status, 200) << t.body;
  const json choice = json::parse(t.body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls") << t.body;
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << t.body;
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "f");
  const json args = json::parse(choice["message"]["tool_calls"][0]["function"]["arguments"].get<std::string>());
  EXPECT_TRUE(args["a"] == 1 || args["a"] == 2) << args.dump();
  // Refusals are 400s naming the field and the construct; the API keeps serving.
  HttpResponse bad = api.handle(post("/v1/chat/completions",
                                     {{"messages", msgs}, {"response_format", {{"type", "json_schema"},
                                      {"json_schema", {{"name", "t"}, {"schema", {{"type", "string"}, {"not", {{"const", "a"}}}}}}}}}}));
  EXPECT_EQ(bad.status, 400) << bad.body;
  EXPECT_EQ(json::parse(bad.body)["error"]["param"], "response_format");
  EXPECT_NE(bad.body.find("'not'"), std::string::npos);
  HttpResponse unknown = api.handle(post("/v1/chat/completions", {{"messages", msgs}, {"tools", tools},
                                                                  {"tool_choice", {{"type", "function"}, {"function", {{"name", "nope"}}}}}}));
  EXPECT_EQ(unknown.status, 400) << unknown.body;
  EXPECT_EQ(json::parse(unknown.body)["error"]["param"], "tool_choice");
}

}  // namespace
}  // namespace neuron::server

namespace neuron::server {
namespace {

// The JSON events of an SSE body, without [DONE].
std::vector<json> events_of(const std::string& sse) {
  std::vector<json> out;
  for (std::size_t pos = 0; (pos = sse.find("data: {", pos)) != std::string::npos;) {
    const std::size_t end = sse.find("\n\n", pos);
    out.push_back(json::parse(sse.substr(pos + 6, end - pos - 6)));
    pos = end;
  }
  return out;
}

void expect_chat_logprob_entry(const json& entry, std::size_t top) {
  ASSERT_TRUE(entry["token"].is_string()) << entry;
  ASSERT_TRUE(entry["logprob"].is_number()) << entry;
  EXPECT_LE(entry["logprob"].get<double>(), 0.0);
  ASSERT_TRUE(entry["bytes"].is_array()) << entry;
  const std::string token = entry["token"];
  if (!token.starts_with("bytes:") && !token.starts_with("token_id:")) {
    std::string joined;
    for (const json& b : entry["bytes"]) joined += static_cast<char>(b.get<int>());
    EXPECT_EQ(joined, token) << "bytes are the token's UTF-8";
  }
  ASSERT_EQ(entry["top_logprobs"].size(), top) << entry;
  for (const json& alt : entry["top_logprobs"]) {
    EXPECT_TRUE(alt["token"].is_string());
    EXPECT_TRUE(alt["logprob"].is_number());
    EXPECT_TRUE(alt["bytes"].is_array());
    EXPECT_FALSE(alt.contains("top_logprobs"));
  }
}

// Logprobs entries with the same tokens and logprobs equal to float noise (a
// choice whose prompt came from the prefix cache ran its last positions in
// another batch shape than choice 0).
void expect_same_logprobs(const json& a, const json& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["token"], b[i]["token"]) << i;
    EXPECT_EQ(a[i]["bytes"], b[i]["bytes"]) << i;
    EXPECT_NEAR(a[i]["logprob"].get<double>(), b[i]["logprob"].get<double>(), 1e-4) << i;
    ASSERT_EQ(a[i]["top_logprobs"].size(), b[i]["top_logprobs"].size());
    for (std::size_t k = 0; k < a[i]["top_logprobs"].size(); ++k) {
      EXPECT_EQ(a[i]["top_logprobs"][k]["token"], b[i]["top_logprobs"][k]["token"]);
      EXPECT_NEAR(a[i]["top_logprobs"][k]["logprob"].get<double>(), b[i]["top_logprobs"][k]["logprob"].get<double>(), 1e-4);
    }
  }
}

TEST_F(ServerApi, ChatChoicesWithLogprobsBlockingAndStreamedAgree) {
  Api api(*registry_, {});
  json body = {{"model", tiny_model_dir()},
               {"messages", {{{"role", "user"}, {"content", "Count to ten."}}}},
               {"max_tokens", 10},
               {"temperature", 0},
               {"ignore_eos", true},
               {"n", 2},
               {"logprobs", true},
               {"top_logprobs", 2}};
  HttpResponse blocking = api.handle(post("/v1/chat/completions", body));
  ASSERT_EQ(blocking.status, 200) << blocking.body;
  const json b = json::parse(blocking.body);
  EXPECT_EQ(b["system_fingerprint"], std::string("neuron-") + NEURON_VERSION);
  ASSERT_EQ(b["choices"].size(), 2u);
  std::size_t entries = 0;
  for (int i = 0; i < 2; ++i) {
    const json& c = b["choices"][i];
    EXPECT_EQ(c["index"], i);
    EXPECT_TRUE(c["message"]["refusal"].is_null());
    EXPECT_EQ(c["finish_reason"], "length");
    ASSERT_TRUE(c["logprobs"]["content"].is_array()) << c;
    EXPECT_TRUE(c["logprobs"]["refusal"].is_null());
    for (const json& e : c["logprobs"]["content"]) expect_chat_logprob_entry(e, 2);
    entries += c["logprobs"]["content"].size();
  }
  EXPECT_EQ(b["choices"][0]["message"], b["choices"][1]["message"]) << "greedy choices are equal";
  expect_same_logprobs(b["choices"][0]["logprobs"]["content"], b["choices"][1]["logprobs"]["content"]);
  EXPECT_EQ(b["usage"]["completion_tokens"], 20) << "usage sums the choices";
  EXPECT_LE(entries, 20u);
  EXPECT_GE(entries, 18u) << "every token with text has its logprobs";
  EXPECT_TRUE(b["usage"]["prompt_tokens_details"]["cached_tokens"].is_number_integer());

  body["stream"] = true;
  body["stream_options"] = {{"include_usage", true}};
  HttpResponse streamed = api.handle(post("/v1/chat/completions", body));
  ASSERT_TRUE(streamed.stream);
  Drained sink = drain(*streamed.stream);
  ASSERT_TRUE(sink.finished);
  EXPECT_EQ(sink.received.substr(sink.received.size() - 14), "data: [DONE]\n\n");
  std::string content[2], reasoning[2];
  json logprobs[2] = {json::array(), json::array()};
  int roles[2] = {0, 0}, finishes[2] = {0, 0};
  json usage;
  for (const json& e : events_of(sink.received)) {
    EXPECT_EQ(e["system_fingerprint"], std::string("neuron-") + NEURON_VERSION);
    if (e["choices"].empty()) {
      usage = e["usage"];
      continue;
    }
    const json& c = e["choices"][0];
    const int i = c["index"];
    ASSERT_TRUE(i == 0 || i == 1);
    const json& d = c["delta"];
    if (d.contains("role")) ++roles[i];
    content[i] += d.value("content", "");
    reasoning[i] += d.value("reasoning_content", "");
    EXPECT_EQ(d.value("reasoning", ""), d.value("reasoning_content", "")) << "reasoning under both names";
    if (!c["logprobs"].is_null())
      for (const json& entry : c["logprobs"]["content"]) logprobs[i].push_back(entry);
    if (!c["finish_reason"].is_null()) ++finishes[i];
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(roles[i], 1) << "one role chunk per choice";
    EXPECT_EQ(finishes[i], 1) << "one finish chunk per choice";
    const json& m = b["choices"][i]["message"];
    EXPECT_EQ(content[i], m["content"].get<std::string>()) << i;
    EXPECT_EQ(reasoning[i], m.value("reasoning_content", "")) << i;
    expect_same_logprobs(logprobs[i], b["choices"][i]["logprobs"]["content"]);  // streamed logprobs are the blocking ones
  }
  ASSERT_TRUE(usage.is_object());
  EXPECT_EQ(usage["completion_tokens"], 20);
  EXPECT_TRUE(usage["prompt_tokens_details"]["cached_tokens"].is_number_integer());
  EXPECT_EQ(api.in_flight(), 0u);
}

TEST_F(ServerApi, CompletionLogprobsAndEchoInTheLegacyShape) {
  Api api(*registry_, {});
  const std::string prompt = "Once upon a time";
  json body = {{"prompt", prompt}, {"max_tokens", 8}, {"temperature", 0}, {"ignore_eos", true}, {"logprobs", 2}};
  HttpResponse r = api.handle(post("/v1/completions", body));
  ASSERT_EQ(r.status, 200) << r.body;
  const json c = json::parse(r.body)["choices"][0];
  const json& lp = c["logprobs"];
  ASSERT_TRUE(lp.is_object()) << c;
  const std::size_t n = lp["tokens"].size();
  EXPECT_GE(n, 7u);
  EXPECT_EQ(lp["token_logprobs"].size(), n);
  EXPECT_EQ(lp["top_logprobs"].size(), n);
  EXPECT_EQ(lp["text_offset"].size(), n);
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_TRUE(lp["top_logprobs"][i].is_object());
    EXPECT_LE(lp["top_logprobs"][i].size(), 2u);
    EXPECT_GE(lp["top_logprobs"][i].size(), 1u);
    if (i > 0) { EXPECT_GE(lp["text_offset"][i].get<int>(), lp["text_offset"][i - 1].get<int>()); }
  }
  EXPECT_EQ(lp["text_offset"][0], 0);

  body["echo"] = true;
  body.erase("logprobs");
  HttpResponse echoed = api.handle(post("/v1/completions", body));
  ASSERT_EQ(echoed.status, 200) << echoed.body;
  const json e = json::parse(echoed.body)["choices"][0];
  EXPECT_EQ(e["text"].get<std::string>(), prompt + c["text"].get<std::string>());
  body["stream"] = true;
  HttpResponse streamed = api.handle(post("/v1/completions", body));
  Drained sink = drain(*streamed.stream);
  std::string text;
  for (const json& ev : events_of(sink.received)) text += ev["choices"][0]["text"].get<std::string>();
  EXPECT_EQ(text, e["text"].get<std::string>());

  body = {{"prompt", prompt}, {"max_tokens", 4}, {"echo", true}, {"logprobs", 1}};
  HttpResponse refused = api.handle(post("/v1/completions", body));
  EXPECT_EQ(refused.status, 400);
  EXPECT_EQ(json::parse(refused.body)["error"]["param"], "echo");
}

TEST_F(ServerApi, ABlockingAnswerCannotHoldUnboundedLogprobs) {
  Api api(*registry_, {});
  json body = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"n", 16}, {"logprobs", true}, {"top_logprobs", 20},
               {"max_tokens", 4000}};
  HttpResponse r = api.handle(post("/v1/chat/completions", body));
  ASSERT_EQ(r.status, 400) << r.body;
  EXPECT_EQ(json::parse(r.body)["error"]["param"], "top_logprobs");
  EXPECT_NE(r.body.find("stream it"), std::string::npos) << r.body;
  // Streamed, the cap does not apply (nothing piles up); kept short here to be quick.
  body["stream"] = true;
  body["max_tokens"] = 2;
  HttpResponse s = api.handle(post("/v1/chat/completions", body));
  ASSERT_TRUE(s.stream) << s.body;
  EXPECT_TRUE(drain(*s.stream).finished);
}

TEST_F(ServerApi, CancellingAStreamOfSeveralChoicesEndsThemAll) {
  Api api(*registry_, {});
  json body = {{"prompt", "again and again"}, {"max_tokens", 3000}, {"ignore_eos", true}, {"stream", true}, {"n", 3}};
  HttpResponse r = api.handle(post("/v1/completions", body));
  ASSERT_TRUE(r.stream);
  Drained d = drain(*r.stream, 4);
  EXPECT_FALSE(d.finished);
  EXPECT_TRUE(wait_for([&] { return api.in_flight() == 0; })) << "a choice kept generating after the client left";
  EXPECT_EQ(api.metrics().value("neuron_requests_cancelled_total", Labels{{"model", tiny_model_dir()}}), 1);
  EXPECT_TRUE(wait_for([&] { return registry_->engine(tiny_model_dir())->idle(); }));
}

TEST_F(ServerApi, TheApiKeyComesAsBearerInAnyCaseOrAsXApiKey) {
  Api api(*registry_, ApiOptions{.api_key = "k3y"});
  for (const char* auth : {"Bearer k3y", "bearer k3y", "BEARER  k3y "})
    EXPECT_EQ(api.handle({"GET", "/v1/models", {{"Authorization", auth}}, "", ""}).status, 200) << auth;
  EXPECT_EQ(api.handle({"GET", "/v1/models", {{"x-api-key", "k3y"}}, "", ""}).status, 200);
  EXPECT_EQ(api.handle({"GET", "/v1/models", {{"X-Api-Key", "nope"}}, "", ""}).status, 401);
  EXPECT_EQ(api.handle({"GET", "/v1/models", {{"Authorization", "Basic k3y"}}, "", ""}).status, 401);
  EXPECT_EQ(api.handle({"GET", "/v1/models", {{"Authorization", "Bearerk3y"}}, "", ""}).status, 401);
}

}  // namespace
}  // namespace neuron::server

namespace neuron::server {
namespace {

// A model whose greedy answer is one tool call, written by the e2e suite's
// node script (tests/e2e/node/make_tool_call_model.mjs); skipped without node.
TEST(ServerApiToolCalls, StreamedCallsAreIncrementalDeltasThatReassembleToTheBlockingOnes) {
  if (std::system("node --version >/dev/null 2>&1") != 0) GTEST_SKIP() << "node is not installed";
  test_support::TempDir dir("neuron-tool-model");
  const std::string model = (dir.path() / "tool-call").string();
  const std::string cmd = "node " + std::string(NEURON_REPO_ROOT) + "/tests/e2e/node/make_tool_call_model.mjs " + tiny_model_dir() + " " + model;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  engine::RegistryOptions ro;
  ro.model_roots = {dir.path().string()};
  engine::Registry registry(ro);
  engine::ModelSpec spec;
  spec.model_id = model;
  registry.load(spec, true);
  Api api(registry, {});

  json body = {{"messages", {{{"role", "user"}, {"content", "Look it up."}}}},
               {"tools", {{{"type", "function"}, {"function", {{"name", "lookup"}, {"parameters", {{"type", "object"}}}}}}}},
               {"temperature", 0},
               {"max_tokens", 40}};
  HttpResponse blocking = api.handle(post_json("/v1/chat/completions", body));
  ASSERT_EQ(blocking.status, 200) << blocking.body;
  const json choice = json::parse(blocking.body)["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << choice;
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["name"], "lookup");
  EXPECT_EQ(choice["message"]["tool_calls"][0]["function"]["arguments"], R"({"q":[1,2]})");

  body["stream"] = true;
  body["n"] = 2;
  HttpResponse streamed = api.handle(post_json("/v1/chat/completions", body));
  ASSERT_TRUE(streamed.stream);
  Drained sink = drain(*streamed.stream);
  ASSERT_TRUE(sink.finished);
  json calls[2] = {json::array(), json::array()};
  int deltas[2] = {0, 0};
  std::string finish[2];
  for (const json& e : events_of(sink.received)) {
    const json& c = e["choices"][0];
    const int i = c["index"];
    if (!c["finish_reason"].is_null()) finish[i] = c["finish_reason"];
    EXPECT_FALSE(c["delta"].contains("content") && !c["delta"]["content"].get<std::string>().empty()) << "no text outside the call";
    if (!c["delta"].contains("tool_calls")) continue;
    std::set<std::size_t> indices;  // OpenAI sends one entry per call index per chunk
    for (const json& d : c["delta"]["tool_calls"]) EXPECT_TRUE(indices.insert(d["index"].get<std::size_t>()).second) << c.dump();
    for (const json& d : c["delta"]["tool_calls"]) {
      const std::size_t index = d["index"];
      if (deltas[i]++ == 0) {  // the announcement: id, type, name and the first argument pieces
        EXPECT_EQ(d["type"], "function");
        EXPECT_EQ(d["function"]["name"], "lookup");
        EXPECT_TRUE(d["function"]["arguments"].is_string());
        EXPECT_TRUE(d["id"].get<std::string>().starts_with("call_"));
        calls[i].push_back(d);
        continue;
      }
      EXPECT_FALSE(d.contains("id")) << "later deltas carry only arguments";
      ASSERT_LT(index, calls[i].size());
      calls[i][index]["function"]["arguments"] =
          calls[i][index]["function"]["arguments"].get<std::string>() + d["function"]["arguments"].get<std::string>();
    }
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(finish[i], "tool_calls") << i;
    EXPECT_GT(deltas[i], 2) << "the arguments stream in fragments, as the model writes them";
    ASSERT_EQ(calls[i].size(), 1u) << i;
    EXPECT_EQ(calls[i][0]["function"]["arguments"], R"({"q":[1,2]})") << i;
  }
  EXPECT_NE(calls[0][0]["id"], calls[1][0]["id"]) << "every call has its own id";
  EXPECT_EQ(api.in_flight(), 0u);
}

// The Qwen3.5-shaped checkpoint with Qwen3.5's chat template (the tiny
// model's tokenizer, whose tokenizer_config.json is given the template of
// tests/data/qwen3_5): tools and tool_choice "required" force a call in the
// template's XML syntax, which comes back parsed and typed as tool_calls;
// without a constraint, thinking on routes the answer to reasoning_content
// (the prompt ends inside <think>), thinking off leaves it content.
TEST(ServerApiLoad, AQwen35HybridCallsToolsInItsTemplatesSyntax) {
  test_support::TempDir root;
  const fs::path dir = root.path() / "qwen3_5-a";
  fs::create_directories(dir);
  const fs::path family = fs::path(NEURON_TEST_DATA) / "families" / "qwen3_5-a";
  for (const char* f : {"config.json", "generation_config.json", "model.safetensors"}) fs::copy_file(family / f, dir / f);
  fs::copy_file(fs::path(tiny_model_dir()) / "tokenizer.json", dir / "tokenizer.json");
  json config = parse_json<json>(read_text(fs::path(tiny_model_dir()) / "tokenizer_config.json"), "tokenizer_config.json");
  config["chat_template"] = read_text(fs::path(NEURON_TEST_DATA) / "qwen3_5" / "Qwen3.5-4B.jinja");
  std::ofstream(dir / "tokenizer_config.json") << config.dump();
  engine::RegistryOptions ro;
  ro.model_roots = {root.path()};
  engine::Registry registry(ro);
  Api api(registry, {});
  const HttpResponse load = api.handle(post_json("/models/load", {{"model_id", "qwen3_5-a"}, {"wait", true}}));
  ASSERT_EQ(load.status, 200) << load.body;

  const json tools = json::parse(R"([{"type": "function", "function": {"name": "pick", "parameters": {"type": "object",
      "properties": {"n": {"type": "integer", "enum": [1, 2]}, "why": {"type": "boolean"}}, "required": ["n", "why"]}}},
      {"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {}}}}])");
  const json msgs = json::array({{{"role", "user"}, {"content", "Pick a number."}}});
  for (int seed = 0; seed < 3; ++seed) {
    const HttpResponse r = api.handle(post_json("/v1/chat/completions", {{"model", "qwen3_5-a"}, {"messages", msgs}, {"tools", tools},
                                                                         {"tool_choice", "required"}, {"max_tokens", 200},
                                                                         {"temperature", 1}, {"seed", seed}}));
    ASSERT_EQ(r.status, 200) << r.body;
    const json choice = json::parse(r.body)["choices"][0];
    EXPECT_EQ(choice["finish_reason"], "tool_calls") << r.body;
    ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u) << r.body;
    const json fn = choice["message"]["tool_calls"][0]["function"];
    const json args = json::parse(fn["arguments"].get<std::string>());
    if (fn["name"] == "pick") {
      EXPECT_TRUE(args["n"] == 1 || args["n"] == 2) << args.dump();  // typed: a number, not the text "1"
      EXPECT_TRUE(args["why"].is_boolean()) << args.dump();
    } else {
      EXPECT_EQ(fn["name"], "noop") << r.body;
      EXPECT_EQ(args, json::object());
    }
    EXPECT_FALSE(choice["message"].contains("reasoning_content")) << "thinking is off for a forced call";
    if (seed != 0) continue;
    // Streamed, the same call: one entry per call index per chunk, the first with id, type and name.
    const HttpResponse streamed = api.handle(post_json("/v1/chat/completions", {{"model", "qwen3_5-a"}, {"messages", msgs}, {"tools", tools},
                                                                                {"tool_choice", "required"}, {"max_tokens", 200},
                                                                                {"temperature", 1}, {"seed", seed}, {"stream", true}}));
    ASSERT_TRUE(streamed.stream);
    const Drained sink = drain(*streamed.stream);
    ASSERT_TRUE(sink.finished);
    json call = nullptr;
    std::string finish;
    for (const json& e : events_of(sink.received)) {
      const json& c = e["choices"][0];
      if (!c["finish_reason"].is_null()) finish = c["finish_reason"];
      if (!c["delta"].contains("tool_calls")) continue;
      ASSERT_EQ(c["delta"]["tool_calls"].size(), 1u) << c.dump();
      const json& d = c["delta"]["tool_calls"][0];
      EXPECT_EQ(d["index"], 0);
      if (call.is_null()) {
        ASSERT_TRUE(d.contains("id")) << d.dump();
        EXPECT_EQ(d["type"], "function");
        call = {{"name", d["function"]["name"]}, {"arguments", d["function"]["arguments"]}};
        continue;
      }
      EXPECT_FALSE(d.contains("id")) << "later deltas carry only arguments";
      call["arguments"] = call["arguments"].get<std::string>() + d["function"]["arguments"].get<std::string>();
    }
    EXPECT_EQ(finish, "tool_calls");
    ASSERT_FALSE(call.is_null()) << sink.received;
    EXPECT_EQ(call["name"], fn["name"]);
    EXPECT_EQ(call["arguments"], fn["arguments"]);
  }

  const json plain = {{"model", "qwen3_5-a"}, {"messages", msgs}, {"max_tokens", 6}, {"temperature", 0}, {"ignore_eos", true}};
  json on = plain, off = plain;
  on["chat_template_kwargs"] = {{"enable_thinking", true}};
  off["chat_template_kwargs"] = {{"enable_thinking", false}};
  const HttpResponse thinking = api.handle(post_json("/v1/chat/completions", on));
  ASSERT_EQ(thinking.status, 200) << thinking.body;
  const json t = json::parse(thinking.body)["choices"][0]["message"];
  EXPECT_FALSE(t.value("reasoning_content", "").empty()) << "the prompt opened <think>: the answer starts as reasoning; " << t.dump();
  const HttpResponse direct = api.handle(post_json("/v1/chat/completions", off));
  ASSERT_EQ(direct.status, 200) << direct.body;
  const json d = json::parse(direct.body)["choices"][0]["message"];
  EXPECT_FALSE(d.contains("reasoning_content")) << d.dump();
  EXPECT_FALSE(d["content"].get<std::string>().empty()) << d.dump();
}

}  // namespace
}  // namespace neuron::server
