// The daemon end to end over loopback HTTP: a real `neuron serve` process
// with the bundled tiny model, driven by an HTTP client. Greedy answers are
// checked against the engine run in this process, so the HTTP layer can be
// trusted to add nothing and lose nothing.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <future>
#include <set>

#include "engine/model_assets.hpp"
#include "engine/registry.hpp"
#include "server_daemon.hpp"
#include "support/gguf_writer.hpp"
#include "support/memory_test_model.hpp"
#include "support/temp_dir.hpp"
#include "util/sanitizers.hpp"
#include "support/process.hpp"

namespace neuron::server {
namespace {

using namespace testing_support;
using nlohmann::json;

constexpr int kMaxTokens = 24;

json chat_request(const std::string& model, const std::string& text, bool stream = false) {
  return {{"model", model},
          {"messages", {{{"role", "user"}, {"content", text}}}},
          {"max_tokens", kMaxTokens},
          {"temperature", 0},
          {"stream", stream},
          {"stream_options", {{"include_usage", stream}}}};
}

json completion_request(const std::string& model, const std::string& prompt, bool stream = false) {
  return {{"model", model}, {"prompt", prompt}, {"max_tokens", kMaxTokens}, {"temperature", 0}, {"stream", stream}};
}

// What the engine itself answers, greedily, for the same prompt.
struct Reference {
  std::string content, reasoning, finish_reason;
  std::int32_t prompt_tokens = 0, completion_tokens = 0;
};

class ServerDaemon : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // Automatic reload is off here: KilledTpWorkerFailsTheRequestAndTheModelCanBeReloaded checks the
    // failed state and the operator's reload; ServerDaemonReload covers the automatic one.
    // A second directory with the tiny model's files (linked, not copied): the
    // same weights under a distinct model id, e.g. loaded again at tensor_parallel 2.
    // Another spelling of the first directory would be the same model (409).
    models_ = new test_support::TempDir("neuron-daemon-models");
    std::filesystem::create_directories(models_->path() / "tiny-copy");
    for (const auto& f : std::filesystem::directory_iterator(tiny_model_dir()))
      std::filesystem::create_symlink(f.path(), models_->path() / "tiny-copy" / f.path().filename());
    second_model_ = std::filesystem::canonical(models_->path() / "tiny-copy").string();
    daemon_ = new Daemon({"--model", tiny_model_dir(), "--max-body-bytes", "65536", "--models-dir", models_->path().string(),
                         "--no-auto-reload"});
    auto res = daemon_->client().Get("/v1/models");
    ASSERT_TRUE(res);
    model_ = json::parse(res->body)["data"][0]["id"];
    engine::RegistryOptions ro;
    ro.model_roots = {repo_path("models")};
    registry_ = new engine::Registry(ro);
    engine::ModelSpec spec;
    spec.model_id = tiny_model_dir();
    registry_->load(spec, true);
  }
  static void TearDownTestSuite() {
    delete registry_;
    registry_ = nullptr;
    if (daemon_) {
      EXPECT_EQ(daemon_->stop(), 0) << "the daemon must exit 0 on SIGTERM";
    }
    delete daemon_;
    daemon_ = nullptr;
    delete models_;
    models_ = nullptr;
  }

  static Reference reference(bool chat, const std::string& text) {
    auto assets = registry_->assets(tiny_model_dir());
    auto eng = registry_->engine(tiny_model_dir());
    engine::CompletionRequest cr;
    if (chat) {
      std::string prompt = assets->chat->apply(json::array({{{"role", "user"}, {"content", text}}}), nullptr, true, json::object());
      cr.prompt = assets->tokenizer->encode(prompt);
      cr.split_reasoning = true;
    } else {
      cr.prompt = assets->tokenizer->encode(text);
    }
    cr.max_tokens = kMaxTokens;
    cr.sampling.temperature = 0;
    auto ch = eng->submit(cr);
    Reference ref;
    for (;;) {
      auto e = ch->next(std::chrono::seconds(60));
      if (!e) throw std::runtime_error("engine timed out");
      if (e->kind == engine::Event::Kind::delta) {
        ref.content += e->text;
        ref.reasoning += e->reasoning;
        continue;
      }
      if (e->kind == engine::Event::Kind::error) throw std::runtime_error(e->error_message);
      ref.finish_reason = e->finish_reason;
      ref.prompt_tokens = e->usage.prompt_tokens;
      ref.completion_tokens = e->usage.completion_tokens;
      if (!chat) {
        EXPECT_EQ(ref.content, assets->tokenizer->decode(e->tokens)) << "completion text is the decoded greedy tokens";
      }
      return ref;
    }
  }

  static std::string metrics() {
    auto res = daemon_->client().Get("/metrics");
    return res ? res->body : std::string{};
  }

  static Daemon* daemon_;
  static engine::Registry* registry_;
  static std::string model_;
  static test_support::TempDir* models_;
  static std::string second_model_;
};

Daemon* ServerDaemon::daemon_ = nullptr;
engine::Registry* ServerDaemon::registry_ = nullptr;
std::string ServerDaemon::model_;
test_support::TempDir* ServerDaemon::models_ = nullptr;
std::string ServerDaemon::second_model_;

TEST_F(ServerDaemon, HealthDiscoveryVersionAndModels) {
  auto c = daemon_->client();
  auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body)["status"], "ok");
  auto discovery = json::parse(c.Get("/discovery")->body);
  EXPECT_GT(discovery["memory"]["total_bytes"].get<std::uint64_t>(), 0u);
  EXPECT_TRUE(discovery["devices"].is_array());
  EXPECT_EQ(json::parse(c.Get("/version")->body)["name"], "neuron");
  auto models = json::parse(c.Get("/models")->body);
  ASSERT_TRUE(models.is_array());
  ASSERT_EQ(models.size(), 1u);
  EXPECT_EQ(models[0]["status"], "loaded");
  EXPECT_EQ(models[0]["tensor_parallel"], 1);
  EXPECT_GT(models[0]["max_context"].get<int>(), kMaxTokens);
  // A directory-loaded model also answers to its folder name.
  auto by_folder = daemon_->post("/v1/completions", completion_request("qwen3-tiny-a", "hi"));
  ASSERT_EQ(by_folder->status, 200) << by_folder->body;
  EXPECT_EQ(json::parse(by_folder->body)["model"], "qwen3-tiny-a") << "responses name the model as the client did";
  auto v1 = json::parse(c.Get("/v1/models")->body);
  EXPECT_EQ(v1["object"], "list");
  EXPECT_EQ(v1["data"][0]["object"], "model");
}

TEST_F(ServerDaemon, ChatMatchesTheGreedyEngine) {
  Reference ref = reference(true, "Tell me a story about a robot.");
  auto res = daemon_->post("/v1/chat/completions", chat_request(model_, "Tell me a story about a robot."));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json body = json::parse(res->body);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(body["model"], model_);
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["choices"][0]["message"]["content"], ref.content);
  EXPECT_EQ(body["choices"][0]["message"].value("reasoning_content", ""), ref.reasoning);
  EXPECT_EQ(body["choices"][0]["finish_reason"], ref.finish_reason);
  EXPECT_EQ(body["usage"]["prompt_tokens"], ref.prompt_tokens);
  EXPECT_EQ(body["usage"]["completion_tokens"], ref.completion_tokens);
  EXPECT_EQ(body["usage"]["total_tokens"], ref.prompt_tokens + ref.completion_tokens);
}

TEST_F(ServerDaemon, CompletionMatchesTheDecodedGreedyTokens) {
  Reference ref = reference(false, "Once upon a time");
  auto res = daemon_->post("/v1/completions", completion_request(model_, "Once upon a time"));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json body = json::parse(res->body);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(body["choices"][0]["text"], ref.content);
  EXPECT_EQ(body["choices"][0]["finish_reason"], ref.finish_reason);
  EXPECT_EQ(body["usage"]["completion_tokens"], ref.completion_tokens);
}

TEST_F(ServerDaemon, StreamingChatHasRoleDeltasFinishUsageAndDone) {
  Reference ref = reference(true, "Tell me a story about a robot.");
  auto res = daemon_->post("/v1/chat/completions", chat_request(model_, "Tell me a story about a robot.", true));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type").rfind("text/event-stream", 0), 0u);
  auto events = sse_payloads(res->body);
  ASSERT_GE(events.size(), 4u) << res->body;
  EXPECT_EQ(events.back(), "[DONE]");
  EXPECT_EQ(events[0]["choices"][0]["delta"]["role"], "assistant");
  std::string content, reasoning;
  // [role, deltas..., finish, usage, [DONE]]
  for (std::size_t i = 1; i + 3 < events.size(); ++i) {
    const json& delta = events[i]["choices"][0]["delta"];
    EXPECT_TRUE(events[i]["choices"][0]["finish_reason"].is_null());
    content += delta.value("content", "");
    reasoning += delta.value("reasoning_content", "");
  }
  const json& finish = events[events.size() - 3];
  const json& usage = events[events.size() - 2];
  EXPECT_EQ(finish["choices"][0]["finish_reason"], ref.finish_reason);
  EXPECT_TRUE(finish["choices"][0]["delta"].empty());
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], ref.completion_tokens);
  EXPECT_EQ(content, ref.content);
  EXPECT_EQ(reasoning, ref.reasoning);
  for (std::size_t i = 0; i + 1 < events.size(); ++i) EXPECT_EQ(events[i]["object"], "chat.completion.chunk");
}

TEST_F(ServerDaemon, StreamingCompletionConcatenatesToTheSameText) {
  Reference ref = reference(false, "Once upon a time");
  auto res = daemon_->post("/v1/completions", completion_request(model_, "Once upon a time", true));
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  auto events = sse_payloads(res->body);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  std::string finish;
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    text += events[i]["choices"][0]["text"].get<std::string>();
    if (!events[i]["choices"][0]["finish_reason"].is_null()) finish = events[i]["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, ref.content);
  EXPECT_EQ(finish, ref.finish_reason);
}

TEST_F(ServerDaemon, StopSeedAndTokenLimitsReachTheEngine) {
  json req = completion_request(model_, "In the beginning");
  req["ignore_eos"] = true;
  auto full = daemon_->post("/v1/completions", req);
  ASSERT_EQ(full->status, 200) << full->body;
  const std::string text = json::parse(full->body)["choices"][0]["text"];
  // A stop string from the middle of the greedy text (one whole UTF-8 character).
  std::size_t mid = text.size() / 2;
  while (mid > 0 && (static_cast<unsigned char>(text[mid]) & 0xC0) == 0x80) --mid;
  std::size_t len = 1;
  while (mid + len < text.size() && (static_cast<unsigned char>(text[mid + len]) & 0xC0) == 0x80) ++len;
  const std::string stop = text.substr(mid, len);
  ASSERT_FALSE(stop.empty());
  for (bool stream : {false, true}) {
    json with_stop = req;
    with_stop["stop"] = {stop};
    with_stop["stream"] = stream;
    auto res = daemon_->post("/v1/completions", with_stop);
    ASSERT_EQ(res->status, 200) << res->body;
    std::string got, finish;
    if (!stream) {
      got = json::parse(res->body)["choices"][0]["text"];
      finish = json::parse(res->body)["choices"][0]["finish_reason"];
    } else {
      for (const auto& e : sse_payloads(res->body)) {
        if (!e.is_object()) continue;
        got += e["choices"][0]["text"].get<std::string>();
        if (!e["choices"][0]["finish_reason"].is_null()) finish = e["choices"][0]["finish_reason"];
      }
    }
    EXPECT_EQ(got, text.substr(0, text.find(stop))) << "stream=" << stream << ": stops before the stop string, never emits it";
    EXPECT_EQ(finish, "stop");
  }

  json seeded = {{"model", model_}, {"prompt", "Random"}, {"max_tokens", 16}, {"temperature", 1.0}, {"top_p", 0.95}, {"seed", 7}, {"ignore_eos", true}};
  auto a = daemon_->post("/v1/completions", seeded);
  auto b = daemon_->post("/v1/completions", seeded);
  ASSERT_EQ(a->status, 200) << a->body;
  EXPECT_EQ(json::parse(a->body)["choices"][0]["text"], json::parse(b->body)["choices"][0]["text"]) << "same seed, same sample";

  json limited = {{"model", model_}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_completion_tokens", 5}, {"ignore_eos", true}};
  auto c = daemon_->post("/v1/chat/completions", limited);
  ASSERT_EQ(c->status, 200) << c->body;
  EXPECT_EQ(json::parse(c->body)["usage"]["completion_tokens"], 5);
  EXPECT_EQ(json::parse(c->body)["choices"][0]["finish_reason"], "length");
}

TEST_F(ServerDaemon, ThirtyTwoConcurrentClientsGetTheirSoloAnswers) {
  const std::vector<std::string> prompts = {"The weather today", "A recipe for bread", "Why is the sky blue", "Count to ten"};
  std::map<std::string, std::string> solo;
  for (const auto& p : prompts) {
    auto res = daemon_->post("/v1/completions", completion_request(model_, p));
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200);
    solo[p] = json::parse(res->body)["choices"][0]["text"];
  }
  std::vector<std::future<std::pair<std::string, std::string>>> futures;
  for (int i = 0; i < 32; ++i) {
    futures.push_back(std::async(std::launch::async, [&, i] {
      const std::string& p = prompts[static_cast<std::size_t>(i) % prompts.size()];
      auto res = daemon_->post("/v1/completions", completion_request(model_, p, i % 2 == 1));
      if (!res || res->status != 200) return std::make_pair(p, std::string("<HTTP failure>"));
      if (i % 2 == 0) return std::make_pair(p, json::parse(res->body)["choices"][0]["text"].get<std::string>());
      std::string text;
      for (const auto& e : sse_payloads(res->body))
        if (e.is_object()) text += e["choices"][0]["text"].get<std::string>();
      return std::make_pair(p, text);
    }));
  }
  for (auto& f : futures) {
    auto [p, text] = f.get();
    EXPECT_EQ(text, solo[p]) << p;
  }
}

TEST_F(ServerDaemon, ClientDisconnectMidStreamCancelsTheGeneration) {
  const double cancelled_before = metric_sum(metrics(), "neuron_requests_cancelled_total");
  const double generated_before = metric_sum(metrics(), "neuron_generated_tokens_total");
  constexpr int kLong = 4000;  // within the 4096-token context; far more than arrive before the disconnect
  {
    RawConnection conn(daemon_->port());
    json body = {{"model", model_}, {"prompt", "Go on forever"}, {"max_tokens", kLong}, {"ignore_eos", true}, {"stream", true}};
    conn.send(http_post_text("/v1/completions", body.dump()));
    std::string got = conn.read_until([](const std::string& s) {
      std::size_t n = 0;
      for (std::size_t pos = 0; (pos = s.find("data: ", pos)) != std::string::npos; ++pos) ++n;
      return n >= 5;
    });
    ASSERT_NE(got.find("200 OK"), std::string::npos) << got;
  }  // closes the socket mid-stream
  double cancelled = cancelled_before;
  for (int i = 0; i < 200 && cancelled == cancelled_before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    cancelled = metric_sum(metrics(), "neuron_requests_cancelled_total");
  }
  EXPECT_EQ(cancelled, cancelled_before + 1);
  const double generated = metric_sum(metrics(), "neuron_generated_tokens_total") - generated_before;
  EXPECT_LT(generated, kLong) << "the engine kept generating after the client left";
  auto health = daemon_->client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
}

TEST_F(ServerDaemon, ClientDisconnectDuringANonStreamingRequestCancelsTheGeneration) {
  const double cancelled_before = metric_sum(metrics(), "neuron_requests_cancelled_total");
  const double generated_before = metric_sum(metrics(), "neuron_generated_tokens_total");
  constexpr int kLong = 4000;
  {
    RawConnection conn(daemon_->port());
    json body = {{"model", model_}, {"prompt", "Go on forever"}, {"max_tokens", kLong}, {"ignore_eos", true}};
    conn.send(http_post_text("/v1/completions", body.dump()));
    // Until tokens are being generated for it, then hang up without reading.
    const double deltas_before = metric_sum(metrics(), "neuron_inter_token_latency_seconds_count");
    for (int i = 0; i < 400 && metric_sum(metrics(), "neuron_inter_token_latency_seconds_count") == deltas_before; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  double cancelled = cancelled_before;
  for (int i = 0; i < 200 && cancelled == cancelled_before; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    cancelled = metric_sum(metrics(), "neuron_requests_cancelled_total");
  }
  EXPECT_EQ(cancelled, cancelled_before + 1) << "the generation ran on for a client that had left";
  const double generated = metric_sum(metrics(), "neuron_generated_tokens_total") - generated_before;
  EXPECT_LT(generated, kLong) << "the engine kept generating after the client left";
  // A client that stays gets its whole answer: the probe raises no false alarm.
  EXPECT_EQ(daemon_->post("/v1/completions", completion_request(model_, "still here"))->status, 200);
}

TEST_F(ServerDaemon, MetricsCountRequestsTokensAndLatencies) {
  ASSERT_EQ(daemon_->post("/v1/completions", completion_request(model_, "metrics"))->status, 200);
  // An exchange is counted once its response is written, which may be just
  // after the client has read it: wait (bounded) for the count.
  std::string text = metrics();
  for (int i = 0; i < 100 && metric_sum(text, "neuron_http_requests_total{route=\"/v1/completions\",status=\"200\"}") == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    text = metrics();
  }
  EXPECT_GT(metric_sum(text, "neuron_http_requests_total{route=\"/v1/completions\",status=\"200\"}"), 0);
  EXPECT_GT(metric_sum(text, "neuron_prompt_tokens_total{model="), 0);
  EXPECT_GT(metric_sum(text, "neuron_generated_tokens_total{model="), 0);
  EXPECT_GT(metric_sum(text, "neuron_time_to_first_token_seconds_count"), 0);
  EXPECT_GT(metric_sum(text, "neuron_inter_token_latency_seconds_count"), 0);
  EXPECT_EQ(metric_sum(text, "neuron_models_loaded"), 1);
  EXPECT_NE(text.find("neuron_queue_depth{model="), std::string::npos);
}

TEST_F(ServerDaemon, TokenizeAndDetokenizeRoundTrip) {
  auto res = daemon_->post("/tokenize", {{"model", model_}, {"prompt", "Hello, world!"}});
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  json tok = json::parse(res->body);
  EXPECT_EQ(tok["count"], tok["tokens"].size());
  EXPECT_GT(tok["count"].get<int>(), 0);
  auto back = daemon_->post("/detokenize", {{"model", model_}, {"tokens", tok["tokens"]}});
  ASSERT_EQ(back->status, 200) << back->body;
  EXPECT_EQ(json::parse(back->body)["prompt"], "Hello, world!");
  auto chat = daemon_->post("/tokenize", {{"model", model_}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}});
  ASSERT_EQ(chat->status, 200) << chat->body;
  EXPECT_GT(json::parse(chat->body)["count"].get<int>(), tok["count"].get<int>() - 2);
  auto bad = daemon_->post("/detokenize", {{"model", model_}, {"tokens", {1, 99999999}}});
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(json::parse(bad->body)["error"]["param"], "tokens[1]");
}

constexpr int kAny4xx = -1;  // where 400 (refused) and 404 (not found) are both right

struct BadCase {
  const char* name;
  const char* method;
  const char* path;
  std::string body;
  int status;
  const char* code;   // expected error.code (nullptr: any)
  const char* param;  // expected error.param (nullptr: any)
};

TEST_F(ServerDaemon, BadInputGetsTheRightEnvelopeAndTheDaemonKeepsServing) {
  const std::string m = "\"model\": \"" + model_ + "\"";
  const std::string msgs = "\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}]";
  const std::vector<BadCase> cases = {
      {"malformed JSON", "POST", "/v1/chat/completions", "{\"model\": ", 400, "invalid_json", nullptr},
      {"not an object", "POST", "/v1/chat/completions", "[1, 2]", 400, "invalid_json", nullptr},
      {"empty body", "POST", "/v1/completions", "", 400, "invalid_json", nullptr},
      {"messages wrong type", "POST", "/v1/chat/completions", "{" + m + ", \"messages\": \"hi\"}", 400, "invalid_argument", "messages"},
      {"temperature wrong type", "POST", "/v1/chat/completions", "{" + m + ", " + msgs + ", \"temperature\": \"hot\"}", 400, "invalid_argument", "temperature"},
      {"negative max_tokens", "POST", "/v1/chat/completions", "{" + m + ", " + msgs + ", \"max_tokens\": -5}", 400, "invalid_argument", "max_tokens"},
      {"huge max_tokens", "POST", "/v1/chat/completions", "{" + m + ", " + msgs + ", \"max_tokens\": 1e300}", 400, "invalid_argument", "max_tokens"},
      {"max_tokens past the context", "POST", "/v1/chat/completions", "{" + m + ", " + msgs + ", \"max_tokens\": 2000000000}", 400, "context_length_exceeded", "max_tokens"},
      {"n = 17", "POST", "/v1/chat/completions", "{" + m + ", " + msgs + ", \"n\": 17}", 400, "invalid_argument", "n"},
      {"top_logprobs = 21", "POST", "/v1/chat/completions", "{" + m + ", " + msgs + ", \"logprobs\": true, \"top_logprobs\": 21}", 400, "invalid_argument", "top_logprobs"},
      {"echo with logprobs", "POST", "/v1/completions", "{" + m + ", \"prompt\": \"a\", \"echo\": true, \"logprobs\": 1}", 400, "unsupported_parameter", "echo"},
      {"batched prompts", "POST", "/v1/completions", "{" + m + ", \"prompt\": [\"a\", \"b\"]}", 400, "invalid_argument", "prompt"},
      {"token id outside the vocabulary", "POST", "/v1/completions", "{" + m + ", \"prompt\": [1, 2000000000]}", 400, nullptr, "prompt[1]"},
      {"unknown model", "POST", "/v1/chat/completions", "{\"model\": \"no-such-model\", " + msgs + "}", 404, "model_not_found", "model"},
      {"invalid UTF-8", "POST", "/v1/chat/completions", "{" + m + ", \"messages\": [{\"role\": \"user\", \"content\": \"\xff\xfe\"}]}", 400, "invalid_json", nullptr},
      {"lone surrogate", "POST", "/v1/completions", "{" + m + ", \"prompt\": \"\\ud800\"}", 400, "invalid_json", nullptr},
      {"body over the limit", "POST", "/v1/completions", "{" + m + ", \"prompt\": \"" + std::string(70000, 'a') + "\"}", 413, "payload_too_large", nullptr},
      {"path traversal", "POST", "/models/load", "{\"model_id\": \"../../../etc\"}", kAny4xx, nullptr, nullptr},
      {"path traversal in an id", "POST", "/models/load", "{\"model_id\": \"org/../../secrets\"}", kAny4xx, nullptr, nullptr},
      {"absolute path outside the roots", "POST", "/models/load", "{\"model_id\": \"/etc\"}", kAny4xx, nullptr, nullptr},
      {"tensor_parallel wrong type", "POST", "/models/load", "{\"model_id\": \"x\", \"tensor_parallel\": \"two\"}", 400, "invalid_argument", "tensor_parallel"},
      {"load without an id", "POST", "/models/load", "{}", 400, "invalid_argument", "model_id"},
      {"load an id already loaded", "POST", "/models/load", "{\"model_id\": \"" + model_ + "\"}", 409, "conflict", nullptr},
      {"unload unknown id", "POST", "/models/unload", "{\"model_id\": \"never-loaded\"}", 404, "not_found", "model_id"},
      {"unknown route", "GET", "/v2/everything", "", 404, "route_not_found", nullptr},
      {"wrong method", "GET", "/v1/chat/completions", "", 405, "method_not_allowed", nullptr},
      {"wrong method on load", "DELETE", "/models/load", "", 405, "method_not_allowed", nullptr},
  };
  for (const auto& c : cases) {
    RawConnection conn(daemon_->port());
    std::string req = std::string(c.method) + " " + c.path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n" +
                      "Content-Length: " + std::to_string(c.body.size()) + "\r\n\r\n" + c.body;
    conn.send(req);
    std::string raw = conn.read_until([](const std::string&) { return false; });
    auto status_end = raw.find("\r\n");
    ASSERT_NE(status_end, std::string::npos) << c.name;
    int status = std::stoi(raw.substr(9, 3));
    if (c.status == kAny4xx) {
      EXPECT_TRUE(status >= 400 && status < 500) << c.name << "\n" << raw;
    }
    else EXPECT_EQ(status, c.status) << c.name << "\n" << raw;
    auto body_start = raw.find("\r\n\r\n");
    json err;
    ASSERT_NO_THROW(err = json::parse(raw.substr(body_start + 4))) << c.name << "\n" << raw;
    ASSERT_TRUE(err.contains("error")) << c.name;
    for (const char* key : {"message", "type", "code", "param"}) EXPECT_TRUE(err["error"].contains(key)) << c.name << " lacks " << key;
    EXPECT_FALSE(err["error"]["message"].get<std::string>().empty()) << c.name;
    if (c.code) {
      EXPECT_EQ(err["error"]["code"], c.code) << c.name << "\n" << raw;
    }
    if (c.param) {
      EXPECT_EQ(err["error"]["param"], c.param) << c.name << "\n" << raw;
    }
    if (c.status == 405) {
      EXPECT_NE(raw.find("Allow: "), std::string::npos) << c.name;
    }
  }
  auto health = daemon_->client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(daemon_->post("/v1/completions", completion_request(model_, "still alive"))->status, 200);
  EXPECT_EQ(json::parse(daemon_->client().Get("/models")->body).size(), 1u) << "a refused load left an entry behind";
}

TEST_F(ServerDaemon, TensorParallelThatDoesNotDivideTheHeadsIsRefused) {
  // The tiny model has 4 attention heads: 3 ranks cannot split them.
  auto refused = daemon_->post("/models/load", {{"model_id", second_model_}, {"tensor_parallel", 3}, {"wait", true}});
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 422) << refused->body;  // impossible before loading anything
  EXPECT_EQ(json::parse(refused->body)["error"]["code"], "bad_tensor_parallel") << refused->body;
  // The loaded directory with a trailing slash is the loaded model, not a new one.
  auto alias = daemon_->post("/models/load", {{"model_id", tiny_model_dir() + "/"}, {"tensor_parallel", 3}, {"wait", true}});
  ASSERT_TRUE(alias);
  EXPECT_EQ(alias->status, 409) << alias->body;
  EXPECT_EQ(daemon_->client().Get("/health")->status, 200);
}

// expert_parallel on a model without experts: impossible before loading anything (422), the option named;
// a body whose expert_parallel is not a boolean is a 400 naming the field.
TEST_F(ServerDaemon, ExpertParallelOnADenseModelIsRefusedNamingTheOption) {
  auto refused = daemon_->post("/models/load", {{"model_id", second_model_}, {"tensor_parallel", 2},
                                                {"expert_parallel", true}, {"wait", true}});
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 422) << refused->body;
  const json err = json::parse(refused->body)["error"];
  EXPECT_EQ(err["code"], "bad_tensor_parallel") << refused->body;
  EXPECT_NE(err["message"].get<std::string>().find("expert_parallel"), std::string::npos) << refused->body;
  auto malformed = daemon_->post("/models/load", {{"model_id", second_model_}, {"expert_parallel", "yes"}});
  ASSERT_TRUE(malformed);
  EXPECT_EQ(malformed->status, 400) << malformed->body;
  EXPECT_EQ(json::parse(malformed->body)["error"]["param"], "expert_parallel") << malformed->body;
  const json models = json::parse(daemon_->client().Get("/models")->body);
  ASSERT_EQ(models.size(), 1u) << "a refused load left an entry behind";
  EXPECT_EQ(models[0]["expert_parallel"], false);
}

TEST_F(ServerDaemon, LoadUnloadLoadAgain) {
  auto unload = daemon_->post("/models/unload", {{"model_id", model_}});
  ASSERT_EQ(unload->status, 200) << unload->body;
  auto gone = daemon_->post("/v1/completions", completion_request(model_, "hello"));
  EXPECT_EQ(gone->status, 404) << gone->body;
  EXPECT_EQ(json::parse(gone->body)["error"]["code"], "model_not_found");

  // With wait false: 202 at once, and the model answers 503 loading (with Retry-After) until ready.
  auto load = daemon_->post("/models/load", {{"model_id", model_}, {"wait", false}});
  ASSERT_EQ(load->status, 202) << load->body;
  EXPECT_EQ(json::parse(load->body)["status"], "loading");
  auto early = daemon_->post("/v1/completions", completion_request(model_, "hello"));
  EXPECT_EQ(early->status, 503) << early->body;
  EXPECT_EQ(json::parse(early->body)["error"]["code"], "loading");
  EXPECT_FALSE(early->get_header_value("Retry-After").empty());
  EXPECT_NE(daemon_->client().Get("/health")->body.find("\"loading\""), std::string::npos);
  daemon_->wait_models_loaded();
  auto again = daemon_->post("/v1/completions", completion_request(model_, "hello"));
  EXPECT_EQ(again->status, 200) << again->body;

}

TEST_F(ServerDaemon, TensorParallelTwoOnTheCpuAnswersLikeOneRank) {
  const std::string tp_id = second_model_;  // same files, a distinct model id
  auto load = daemon_->post("/models/load", {{"model_id", tp_id}, {"tensor_parallel", 2}, {"wait", true}});
  ASSERT_TRUE(load);
  ASSERT_EQ(load->status, 200) << load->body;
  EXPECT_EQ(json::parse(load->body)["status"], "loaded");
  EXPECT_EQ(json::parse(load->body)["model"]["tensor_parallel"], 2);
  for (bool stream : {false, true}) {
    auto one = daemon_->post("/v1/completions", completion_request(model_, "Once upon a time"));
    auto two = daemon_->post("/v1/completions", completion_request(tp_id, "Once upon a time", stream));
    ASSERT_EQ(two->status, 200) << two->body;
    std::string text;
    if (!stream) text = json::parse(two->body)["choices"][0]["text"];
    else
      for (const auto& e : sse_payloads(two->body))
        if (e.is_object()) text += e["choices"][0]["text"].get<std::string>();
    EXPECT_EQ(text, json::parse(one->body)["choices"][0]["text"].get<std::string>()) << "stream=" << stream;
  }
  auto chat = daemon_->post("/v1/chat/completions", chat_request(tp_id, "hi"));
  EXPECT_EQ(chat->status, 200) << chat->body;
  EXPECT_EQ(daemon_->post("/models/unload", {{"model_id", tp_id}})->status, 200);
}

TEST_F(ServerDaemon, KilledTpWorkerFailsTheRequestAndTheModelCanBeReloaded) {
  const std::string tp_id = second_model_;
  auto load = daemon_->post("/models/load", {{"model_id", tp_id}, {"tensor_parallel", 2}, {"wait", true}});
  ASSERT_EQ(load->status, 200) << load->body;
  auto workers = child_processes(daemon_->pid(), "worker");
  ASSERT_EQ(workers.size(), 1u) << "tensor_parallel 2 runs one worker process";

  RawConnection conn(daemon_->port());
  json body = {{"model", tp_id}, {"prompt", "long"}, {"max_tokens", 4000}, {"ignore_eos", true}, {"stream", true}};
  conn.send(http_post_text("/v1/completions", body.dump()));
  std::string head = conn.read_until([](const std::string& s) { return s.find("data: {") != std::string::npos; });
  ASSERT_NE(head.find("200 OK"), std::string::npos) << head;
  ::kill(workers[0], SIGKILL);
  std::string rest = conn.read_until([](const std::string& s) { return s.find("data: [DONE]") != std::string::npos; });
  EXPECT_NE(rest.find("data: {\"error\":"), std::string::npos) << "the request must end with an error event:\n" << rest.substr(rest.size() > 600 ? rest.size() - 600 : 0);
  EXPECT_NE(rest.find("data: [DONE]"), std::string::npos);

  auto models = json::parse(daemon_->client().Get("/models")->body);
  std::string status, state;
  for (const auto& m : models)
    if (m["model_id"] == tp_id) status = m["status"], state = m["state"];
  EXPECT_EQ(state, "failed");
  EXPECT_EQ(status, "unloaded") << "failed for good (no auto-reload): the contract's unloaded";
  auto refused = daemon_->post("/v1/completions", completion_request(tp_id, "again"));
  EXPECT_EQ(refused->status, 503) << refused->body;
  EXPECT_EQ(daemon_->client().Get("/health")->status, 200);
  EXPECT_EQ(daemon_->post("/v1/completions", completion_request(model_, "others still serve"))->status, 200);

  ASSERT_EQ(daemon_->post("/models/unload", {{"model_id", tp_id}})->status, 200);
  EXPECT_TRUE(child_processes(daemon_->pid(), "worker").empty()) << "unload reaps the dead model's workers";
  auto reload = daemon_->post("/models/load", {{"model_id", tp_id}, {"tensor_parallel", 2}, {"wait", true}});
  ASSERT_EQ(reload->status, 200) << reload->body;
  EXPECT_EQ(daemon_->post("/v1/completions", completion_request(tp_id, "back"))->status, 200);
  EXPECT_EQ(daemon_->post("/models/unload", {{"model_id", tp_id}})->status, 200);
}

// A model whose TP worker dies comes back by itself (auto-reload, the
// default), or stays failed with --no-auto-reload; either way requests meanwhile
// get 503 with Retry-After, /models and /health show the state, and unload
// works at any point of it.
class ServerDaemonReload : public ::testing::Test {
 protected:
  using Clock = std::chrono::steady_clock;

  void start(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--model", tiny_model_dir() + ":tp=2"};
    args.insert(args.end(), extra.begin(), extra.end());
    daemon_ = std::make_unique<Daemon>(args);
    model_ = json::parse(daemon_->client().Get("/v1/models")->body)["data"][0]["id"].get<std::string>();
  }
  void TearDown() override {
    if (daemon_) { EXPECT_EQ(daemon_->stop(), 0); }
  }

  json entry(const std::string& route) const {
    auto res = daemon_->client().Get(route.c_str(), daemon_->auth_headers());
    if (!res) {
      ADD_FAILURE() << "GET " << route << " failed: " << httplib::to_string(res.error());
      return nullptr;
    }
    const json body = json::parse(res->body);  // kept alive: the loop walks into it
    // /health names a directory model by its folder, never its path.
    const std::string folder = std::filesystem::path(model_).filename().string();
    for (const auto& m : route == "/models" ? body : body["models"])  // /models is a bare array
      if (m["id"] == model_ || (route == "/health" && m["id"] == folder)) return m;
    return nullptr;
  }
  std::vector<pid_t> workers() const { return child_processes(daemon_->pid(), "worker"); }
  bool wait_for(const std::function<bool()>& done, std::chrono::milliseconds timeout) const {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      if (done()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return done();
  }
  httplib::Result complete(const std::string& prompt) const {
    return daemon_->post("/v1/completions", {{"model", model_}, {"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}});
  }

  // SIGKILLs the model's worker during a streaming request; returns how long
  // the request took to end with its error event after the kill.
  Clock::duration kill_worker_mid_request() {
    const auto pids = workers();
    EXPECT_EQ(pids.size(), 1u);
    if (pids.empty()) return {};
    RawConnection conn(daemon_->port());
    json body = {{"model", model_}, {"prompt", "long"}, {"max_tokens", 4000}, {"ignore_eos", true}, {"stream", true}};
    conn.send(http_post_text("/v1/completions", body.dump()));
    std::string head = conn.read_until([](const std::string& s) { return s.find("data: {") != std::string::npos; });
    EXPECT_NE(head.find("200 OK"), std::string::npos) << head;
    const auto killed = Clock::now();
    ::kill(pids[0], SIGKILL);
    std::string rest = conn.read_until([](const std::string& s) { return s.find("data: [DONE]") != std::string::npos; });
    const auto ended = Clock::now() - killed;
    const auto err = rest.find("data: {\"error\":");
    EXPECT_NE(err, std::string::npos) << rest.substr(rest.size() > 600 ? rest.size() - 600 : 0);
    if (err != std::string::npos) {
      const std::string named = "rank 1 (pid " + std::to_string(pids[0]) + ") exited: killed by signal 9";
      EXPECT_NE(rest.find(named, err), std::string::npos) << rest.substr(err, 600);
    }
    return ended;
  }

  void expect_503_with_retry_after() const {
    auto res = complete("while failed");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 503) << res->body;
    EXPECT_EQ(json::parse(res->body)["error"]["code"], "model_failed") << res->body;
    EXPECT_FALSE(res->get_header_value("Retry-After").empty()) << "a failed model's 503 says when to retry";
  }

  std::unique_ptr<Daemon> daemon_;
  std::string model_;
};

TEST_F(ServerDaemonReload, AKilledWorkerIsReplacedWithoutAnOperator) {
  start();
  const pid_t old_worker = workers().at(0);
  const auto took = kill_worker_mid_request();
  EXPECT_LT(took, std::chrono::seconds(1)) << "the request must end within 1 s of the kill";
  std::printf("[ measure  ] daemon: streaming request ended %.1f ms after the worker's SIGKILL\n",
              std::chrono::duration<double, std::milli>(took).count());

  // Failed, with the first attempt scheduled about a second out.
  const json failed = entry("/models");
  ASSERT_FALSE(failed.is_null()) << daemon_->log();
  EXPECT_EQ(failed["state"], "failed") << failed.dump();
  EXPECT_EQ(failed["status"], "recovering") << "a reload is scheduled: the contract's recovering";
  EXPECT_EQ(failed["error"]["kind"], "worker_failed") << failed.dump();
  EXPECT_EQ(failed["reload"]["attempt"], 1) << failed.dump();
  EXPECT_LE(failed["reload"]["next_try_in_ms"].get<int>(), 1000) << failed.dump();
  EXPECT_EQ(entry("/health")["state"], "failed");
  expect_503_with_retry_after();

  // Serving again by itself, on a new worker; the dead one was reaped.
  ASSERT_TRUE(wait_for([&] { return entry("/models")["state"] == "loaded"; }, std::chrono::seconds(30))) << daemon_->log();
  auto res = complete("back again");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  const auto now = workers();
  ASSERT_EQ(now.size(), 1u);
  EXPECT_NE(now[0], old_worker);
  EXPECT_TRUE(::kill(old_worker, 0) != 0 && errno == ESRCH) << "the killed worker was never reaped";
  EXPECT_EQ(entry("/health")["state"], "loaded");

  // A second failure soon after waits longer (backoff doubles).
  kill_worker_mid_request();
  const json again = entry("/models");
  EXPECT_EQ(again["reload"]["attempt"], 2) << again.dump();
  EXPECT_GT(again["reload"]["next_try_in_ms"].get<int>(), 1000) << again.dump();
  EXPECT_TRUE(wait_for([&] { return entry("/models")["state"] == "loaded"; }, std::chrono::seconds(30)));
  EXPECT_EQ(complete("and again")->status, 200);
}

TEST_F(ServerDaemonReload, WithAutoReloadOffTheModelStaysFailed) {
  start({"--no-auto-reload"});
  kill_worker_mid_request();
  const json failed = entry("/models");
  EXPECT_EQ(failed["state"], "failed") << failed.dump();
  EXPECT_FALSE(failed.contains("reload")) << failed.dump();
  expect_503_with_retry_after();
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));  // past the first backoff
  EXPECT_EQ(entry("/models")["state"], "failed");
  EXPECT_TRUE(workers().empty()) << "no worker was started again";
  expect_503_with_retry_after();
  ASSERT_EQ(daemon_->post("/models/unload", {{"model_id", model_}})->status, 200);
  EXPECT_TRUE(entry("/models").is_null());
}

TEST_F(ServerDaemonReload, UnloadDuringTheBackoffStopsTheReloads) {
  start();
  kill_worker_mid_request();
  EXPECT_EQ(entry("/models")["state"], "failed");
  const auto t0 = Clock::now();
  auto res = daemon_->post("/models/unload", {{"model_id", model_}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  EXPECT_TRUE(entry("/models").is_null());
  std::this_thread::sleep_for(std::chrono::milliseconds(2000));  // past when the attempt was due
  EXPECT_TRUE(entry("/models").is_null()) << "an unloaded model came back";
  EXPECT_TRUE(workers().empty()) << "no worker was started after the unload";
  EXPECT_EQ(complete("gone")->status, 404);
}

TEST(ServerDaemonAdmission, FullQueueAnswers503WithRetryAfter) {
  Daemon d({"--model", tiny_model_dir(), "--queue-depth", "1", "--max-num-seqs", "1"});
  auto model = json::parse(d.client().Get("/v1/models")->body)["data"][0]["id"].get<std::string>();
  json slow = {{"model", model}, {"prompt", "slow"}, {"max_tokens", 4000}, {"ignore_eos", true}, {"stream", true}};
  // Streams that hold the engine (one running, one queued) while more arrive.
  std::vector<std::unique_ptr<RawConnection>> holders;
  std::vector<std::string> heads;
  for (int i = 0; i < 4; ++i) {
    holders.push_back(std::make_unique<RawConnection>(d.port()));
    holders.back()->send(http_post_text("/v1/completions", slow.dump()));
    heads.push_back(holders.back()->read_until([](const std::string& s) { return s.find("\r\n\r\n") != std::string::npos; }));
  }
  int rejected = 0;
  for (const auto& h : heads) {
    if (h.find(" 503 ") == std::string::npos) continue;
    ++rejected;
    EXPECT_NE(h.find("Retry-After: "), std::string::npos) << h;
  }
  EXPECT_GE(rejected, 1) << "4 long requests with queue depth 1 must overflow";
  auto res = d.post("/v1/completions", {{"model", model}, {"prompt", "x"}, {"max_tokens", 2}});
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 503) << res->body;
  EXPECT_EQ(json::parse(res->body)["error"]["code"], "overloaded");
  EXPECT_FALSE(res->get_header_value("Retry-After").empty());
  holders.clear();  // disconnect: the engine frees up
  EXPECT_EQ(d.stop(), 0);
}

TEST(ServerDaemonAuth, ApiKeyGuardsEveryRouteButHealth) {
  Daemon d({"--model", tiny_model_dir(), "--api-key", "sekret"}, false);
  auto c = d.client();
  EXPECT_EQ(c.Get("/health")->status, 200);
  auto missing = c.Get("/v1/models");
  EXPECT_EQ(missing->status, 401);
  EXPECT_EQ(json::parse(missing->body)["error"]["type"], "authentication_error");
  EXPECT_EQ(c.Get("/metrics", {{"Authorization", "Bearer wrong"}})->status, 401);
  EXPECT_EQ(c.Get("/v1/models", {{"Authorization", "Bearer sekret"}})->status, 200);
  d.api_key = "sekret";
  d.wait_models_loaded();
  EXPECT_EQ(d.post("/v1/completions", {{"prompt", "hi"}, {"max_tokens", 2}})->status, 200);
  EXPECT_EQ(d.stop(), 0);
}

TEST(ServerDaemonCli, InvalidSettingsExitTwo) {
  for (std::vector<std::string> args : {std::vector<std::string>{"--port", "http"}, {"--queue-depth", "0"}, {"--config", "/nonexistent.json"},
                                     {"--model", "/nonexistent/model"}, {"--model", "m:tp=x"}, {"--keep-alive", "later"},
                                     {"--model", "a", "--model", "b", "--served-model-name", "x"}}) {
    std::string cmd = std::string(NEURON_BINARY) + " serve";
    for (const auto& a : args) cmd += " " + a;
    cmd += " 2>/dev/null";
    int status = std::system(cmd.c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << cmd;
  }
}

using test_support::rss_kib;

// Unloading gives the model's memory back to the system, seen from outside as
// the daemon's RSS. The model is ~60 MB of weights so that allocator and
// thread noise (a few MB) cannot decide the outcome either way.
TEST(ServerDaemonMemory, UnloadGivesTheWeightsAndCacheBack) {
#if NEURON_ASAN
  GTEST_SKIP() << "the ASan daemon keeps freed memory in quarantine; its RSS says nothing about neuron";
#endif
  test_support::TempDir tmp("neuron-rss");
  const std::filesystem::path dir = tmp.path();
  test_support::write_memory_test_model(dir, tiny_model_dir());

  // Started with the model, so the startup load is the warm-up: allocator
  // arenas, HTTP threads and lazily loaded code are not the model's.
  const std::string id = dir.string();
  Daemon daemon({"--model", id + ":max_context=1024"});
  auto complete = [&] {
    auto done = daemon.post("/v1/completions", completion_request(id, "hello"));
    EXPECT_EQ(done->status, 200) << done->body;
  };
  complete();
  ASSERT_EQ(daemon.post("/models/unload", {{"model_id", id}})->status, 200);
  const long before = rss_kib(daemon.pid());
  auto load = daemon.post("/models/load", {{"model_id", id}, {"max_context", 1024}, {"wait", true}});
  ASSERT_EQ(load->status, 200) << load->body;
  const json info = json::parse(load->body);
  complete();
  const long loaded = rss_kib(daemon.pid());
  ASSERT_EQ(daemon.post("/models/unload", {{"model_id", id}})->status, 200);
  const long after = rss_kib(daemon.pid());
  // The KV pool is address space until positions are written: the weights are what must show.
  const long model_kib = static_cast<long>(info["model"]["memory"]["weight_bytes"].get<std::uint64_t>() / 1024);
  ASSERT_GT(model_kib, 50 << 10) << "the test model is meant to be ~60 MB";
  EXPECT_GT(loaded, before + model_kib / 2) << "loading did not show in RSS";
  std::printf("daemon RSS before load %ld KiB, loaded %ld KiB, after unload %ld KiB (model %ld KiB)\n", before, loaded, after,
              model_kib);
  EXPECT_LT(after, before + model_kib / 3) << "unload must give the memory back (before " << before << " KiB, loaded "
                                           << loaded << " KiB, after " << after << " KiB, model " << model_kib << " KiB)";
  EXPECT_EQ(daemon.stop(), 0);
}

// `neuron serve --model FILE.gguf`: the file named on the command line loads and answers under its path,
// and only that file becomes reachable: another GGUF beside it stays outside the model roots over HTTP.
TEST(ServerDaemonGguf, AGgufFileNamedOnTheCommandLineServesAndItsFolderStaysClosed) {
  test_support::TempDir tmp("neuron-serve-gguf");
  const auto file = tmp.path() / "tiny-bf16.gguf", other = tmp.path() / "other.gguf";
  test_support::gguf_from_checkpoint(tiny_model_dir(), quant::GgmlType::bf16).write(file);
  std::filesystem::copy_file(file, other);
  Daemon daemon({"--model", file.string() + ":max_context=512"});
  auto done = daemon.post("/v1/completions", completion_request(file.string(), "hello"));
  ASSERT_EQ(done->status, 200) << done->body;
  EXPECT_FALSE(json::parse(done->body)["choices"][0]["text"].get<std::string>().empty());
  auto refused = daemon.post("/models/load", {{"model_id", other.string()}, {"wait", true}});
  EXPECT_GE(refused->status, 400) << refused->body;
  EXPECT_LT(refused->status, 500) << refused->body;
  EXPECT_NE(refused->body.find("outside the allowed model roots"), std::string::npos) << refused->body;
  EXPECT_EQ(daemon.stop(), 0);
}

// The lifecycle flags end to end: a startup model with a served name and a
// keep_alive pre-warms, answers under its name, unloads itself once idle (its
// weights leave the daemon's RSS), and --load-on-request brings it back when a
// request names its folder under --models-dir.
TEST(ServerDaemonLifecycle, IdleUnloadGivesTheMemoryBackAndARequestLoadsItAgain) {
#if NEURON_ASAN
  GTEST_SKIP() << "the ASan daemon keeps freed memory in quarantine; its RSS says nothing about neuron";
#endif
  test_support::TempDir tmp("neuron-lifecycle");
  const std::filesystem::path dir = tmp.path() / "mem-model";
  std::filesystem::create_directories(dir);
  test_support::write_memory_test_model(dir, tiny_model_dir());
  Daemon daemon({"--model", dir.string() + ":max_context=1024,keep_alive=1s", "--served-model-name", "mem", "--models-dir",
                 tmp.path().string(), "--load-on-request"});
  const json health = json::parse(daemon.client().Get("/health")->body);
  EXPECT_EQ(health["activation"]["completed"], json::array({"mem"})) << health.dump();
  auto done = daemon.post("/v1/completions", completion_request("mem", "hello"));
  ASSERT_EQ(done->status, 200) << done->body;
  EXPECT_EQ(json::parse(done->body)["model"], "mem");
  const json models = json::parse(daemon.client().Get("/models")->body);
  ASSERT_EQ(models.size(), 1u);
  EXPECT_EQ(models[0]["id"], "mem");
  EXPECT_EQ(models[0]["keep_alive_ms"], 1000);
  const long model_kib = static_cast<long>(models[0]["memory"]["weight_bytes"].get<std::uint64_t>() / 1024);
  const long loaded = rss_kib(daemon.pid());

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(15);
  while (!json::parse(daemon.client().Get("/models")->body).empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(json::parse(daemon.client().Get("/models")->body).empty()) << "not unloaded after keep_alive:\n" << daemon.log();
  const long idle = rss_kib(daemon.pid());
  std::printf("daemon RSS loaded %ld KiB, after idle unload %ld KiB (model %ld KiB)\n", loaded, idle, model_kib);
  EXPECT_LT(idle, loaded - model_kib / 2) << "idle unload must give the weights back";

  auto again = daemon.post("/v1/completions", completion_request("mem-model", "hello again"));
  ASSERT_EQ(again->status, 200) << again->body;
  EXPECT_EQ(json::parse(again->body)["model"], "mem-model");
  const json reloaded = json::parse(daemon.client().Get("/models")->body);
  ASSERT_EQ(reloaded.size(), 1u);
  EXPECT_EQ(reloaded[0]["model_id"], std::filesystem::canonical(dir).string());
  EXPECT_EQ(daemon.stop(), 0);
}

// A daemon reachable beyond loopback without a key says so at startup; the
// loopback one does not. Both refuse deep JSON and unreadable weights with 400.
TEST_F(ServerDaemon, ExposedWithoutAKeyWarnsAndHostileInputGets400) {
  EXPECT_EQ(daemon_->log().find("without --api-key"), std::string::npos) << daemon_->log();

  test_support::TempDir models;
  const std::filesystem::path bad = models.path() / "bad-weights";
  std::filesystem::create_directories(bad / "model.safetensors");  // a directory where the weights should be
  for (const char* f : {"config.json", "tokenizer.json", "tokenizer_config.json"})
    std::filesystem::copy_file(std::filesystem::path(tiny_model_dir()) / f, bad / f);
  Daemon exposed({"--model", tiny_model_dir(), "--host", "0.0.0.0", "--max-body-bytes", "1048576", "--models-dir",
                  models.path().string()});
  const std::string log = exposed.log();
  EXPECT_NE(log.find("listening on 0.0.0.0 without --api-key"), std::string::npos) << log;

  constexpr std::size_t kDeep = 100'000;
  const std::string body = R"({"messages": [{"role": "user", "content": "hi"}], "tools": )" + std::string(kDeep, '[') +
                           std::string(kDeep, ']') + "}";
  auto res = exposed.client().Post("/v1/chat/completions", body, "application/json");
  ASSERT_TRUE(res) << "the daemon died: " << exposed.log();
  EXPECT_EQ(res->status, 400) << res->body;
  const json err = json::parse(res->body)["error"];
  EXPECT_EQ(err["code"], "invalid_json");
  EXPECT_NE(err["message"].get<std::string>().find("nests deeper than"), std::string::npos) << err;

  auto load = exposed.post("/models/load", {{"model_id", bad.string()}, {"wait", true}});
  ASSERT_TRUE(load);
  EXPECT_EQ(load->status, 400) << load->body;
  EXPECT_NE(load->body.find("is a directory"), std::string::npos) << load->body;

  auto health = exposed.client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body.find(models.path().string()), std::string::npos) << health->body;
  EXPECT_EQ(health->body.find(NEURON_REPO_ROOT), std::string::npos) << health->body;
  EXPECT_FALSE(exposed.exited());
  EXPECT_EQ(exposed.stop(), 0);
}

}  // namespace
}  // namespace neuron::server
