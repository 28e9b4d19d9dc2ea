// The daemon driven exactly as the helexa gateway (cortex, github
// helexa-ai/helexa, crates cortex-gateway and cortex-core) drives a node: each
// request is the one cortex's code sends, with its timeouts, and each answer is
// read the way cortex reads it (its serde types' required fields, its
// last_count_for metering scan, its URL join). The file/function of cortex each
// step follows is named where it happens.
//
// One `neuron serve` on the CPU: a --models-dir with the tiny model under its
// folder name (a catalogue profile without `source`), a Hugging Face cache
// with it as Qwen/Qwen3-Tiny (a profile with source = "huggingface"), and a
// copy without its tokenizer (a load that fails in the background).
#include <gtest/gtest.h>

#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include "integration/server_daemon.hpp"
#include "support/temp_dir.hpp"

namespace neuron::server {
namespace {

using namespace testing_support;
using nlohmann::json;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

// ---- cortex's helpers, in C++ ----

// helexa-stream/src/lib.rs last_count_for: the last `"key": <digits>` in the body tail.
std::optional<std::uint64_t> last_count_for(const std::string& tail, const std::string& key) {
  const std::string needle = "\"" + key + "\"";
  std::optional<std::uint64_t> result;
  for (std::size_t at = tail.find(needle); at != std::string::npos; at = tail.find(needle, at + 1)) {
    std::size_t i = at + needle.size();
    while (i < tail.size() && std::isspace(static_cast<unsigned char>(tail[i]))) ++i;
    if (i >= tail.size() || tail[i] != ':') continue;
    ++i;
    while (i < tail.size() && std::isspace(static_cast<unsigned char>(tail[i]))) ++i;
    std::size_t j = i;
    while (j < tail.size() && std::isdigit(static_cast<unsigned char>(tail[j]))) ++j;
    if (j > i) result = std::stoull(tail.substr(i, j - i));
  }
  return result;
}

// urlencoding::encode, as router.rs finish() and poller.rs discover_capabilities use it.
std::string urlencode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~') out.push_back(static_cast<char>(c));
    else out += std::string("%") + hex[c >> 4] + hex[c & 15];
  }
  return out;
}

// router.rs rewrite_loopback_host: a loopback host in the node's answer becomes
// the configured node endpoint's host; port and path stay.
std::string rewrite_loopback_host(const std::string& url, const std::string& node_host) {
  static const std::regex re(R"(^(https?://)(localhost|127\.0\.0\.1|0\.0\.0\.0|\[::1\])(:\d+)?(.*)$)");
  std::smatch m;
  if (!std::regex_match(url, m, re)) return url;
  std::string out = m[1].str() + node_host + m[3].str() + m[4].str();
  while (!out.empty() && out.back() == '/') out.pop_back();
  return out;
}

// serde's view of a JSON number for a u64 / u32 / usize field: a non-negative integer (never null).
bool is_unsigned(const json& j, const char* key) { return j.contains(key) && j[key].is_number_unsigned(); }
bool is_u64_or_null(const json& j, const char* key) { return !j.contains(key) || j[key].is_null() || j[key].is_number_unsigned(); }

// cortex-core discovery.rs DiscoveryResponse.
void expect_discovery_response(const json& d) {
  for (const char* k : {"hostname", "os", "kernel"}) EXPECT_TRUE(d[k].is_string()) << k;
  for (const char* k : {"cuda_version", "driver_version"}) EXPECT_TRUE(d[k].is_null() || d[k].is_string()) << k;
  ASSERT_TRUE(d["devices"].is_array());
  for (const auto& dev : d["devices"]) {
    EXPECT_TRUE(is_unsigned(dev, "index") && dev["name"].is_string() && is_unsigned(dev, "vram_total_mb") &&
                dev["compute_capability"].is_string())
        << dev.dump();
  }
  ASSERT_TRUE(d["harnesses"].is_array());
  EXPECT_TRUE(is_unsigned(d, "max_prompt_tokens")) << d.dump();
  if (d.contains("cuda_unavailable_reason")) {
    EXPECT_TRUE(d["cuda_unavailable_reason"].is_string());
  }
}

// cortex-core harness.rs ModelInfo (the /models array's entries), with the
// optional parts the poller copies (limit, servable) in their shapes.
void expect_model_info(const json& m) {
  EXPECT_TRUE(m["id"].is_string() && m["harness"].is_string() && m["status"].is_string()) << m.dump();
  ASSERT_TRUE(m["devices"].is_array()) << m.dump();
  for (const auto& d : m["devices"]) EXPECT_TRUE(d.is_number_unsigned());
  EXPECT_TRUE(is_u64_or_null(m, "vram_used_mb")) << m.dump();
  if (m.contains("capabilities")) {
    for (const auto& c : m["capabilities"]) EXPECT_TRUE(c.is_string());
  }
  if (m.contains("limit") && !m["limit"].is_null()) {
    EXPECT_TRUE(is_unsigned(m["limit"], "context") && is_unsigned(m["limit"], "output")) << m.dump();
    EXPECT_TRUE(is_u64_or_null(m["limit"], "input"));
  }
  if (m.contains("servable") && !m["servable"].is_null()) {
    EXPECT_TRUE(m["servable"]["ok"].is_boolean()) << m.dump();
    for (const char* k : {"reason", "detail"})
      EXPECT_TRUE(!m["servable"].contains(k) || m["servable"][k].is_null() || m["servable"][k].is_string());
  }
  for (const char* k : {"tool_call", "reasoning"}) EXPECT_TRUE(!m.contains(k) || m[k].is_boolean());
}

// cortex-core discovery.rs HealthResponse: DeviceHealth has no optional field.
void expect_health_response(const json& h) {
  EXPECT_TRUE(is_unsigned(h, "uptime_secs")) << h.dump();
  ASSERT_TRUE(h["devices"].is_array());
  for (const auto& d : h["devices"])
    for (const char* k : {"index", "vram_used_mb", "vram_free_mb", "utilization_pct", "temp_c"}) EXPECT_TRUE(is_unsigned(d, k)) << d.dump();
  for (const auto& m : h["models"]) {
    EXPECT_TRUE(m["id"].is_string());
    for (const char* k : {"in_flight", "queue_depth", "max_in_flight", "max_queue_depth", "rejected_queue_full", "rejected_timeout",
                          "rejected_per_principal", "anon_in_flight", "anon_max_in_flight", "rejected_anon_yield", "kv_budget_mb",
                          "kv_available_mb"})
      EXPECT_TRUE(is_unsigned(m, k)) << k << ": " << m.dump();
  }
}

// cortex-core openai.rs ChatCompletionChunk as anthropic_sse.rs parses a frame:
// lenient, but `usage` (when present) is a Usage with its three counts, and a
// helexa_timing in it has all of HelexaTiming's fields, or the frame is skipped.
bool parses_as_chunk(const json& c) {
  if (!c.is_object()) return false;
  if (c.contains("choices"))
    for (const auto& ch : c["choices"])
      if (!ch["index"].is_number_unsigned() || !ch.contains("delta")) return false;
  if (c.contains("usage") && !c["usage"].is_null()) {
    const json& u = c["usage"];
    if (!is_unsigned(u, "prompt_tokens") || !is_unsigned(u, "completion_tokens") || !is_unsigned(u, "total_tokens")) return false;
    if (u.contains("helexa_timing"))
      for (const char* k : {"prefill_ms", "decode_ms", "prefill_tokens"})
        if (!is_unsigned(u["helexa_timing"], k)) return false;
  }
  return true;
}

// The data: payloads of an SSE body split as anthropic_sse.rs splits it (events end at "\n\n").
std::vector<std::string> sse_frames(const std::string& body) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t end = body.find("\n\n"); end != std::string::npos; start = end + 2, end = body.find("\n\n", start)) {
    std::istringstream event(body.substr(start, end - start));
    for (std::string line; std::getline(event, line);)
      if (line.rfind("data:", 0) == 0) {
        std::string data = line.substr(5);
        while (!data.empty() && data.front() == ' ') data.erase(0, 1);
        out.push_back(data);
      }
  }
  return out;
}

// ---- the fleet: one node, a catalogue of two profiles ----

// cortex-core catalogue.rs ModelProfile, the fields router.rs profile_to_spec reads.
struct Profile {
  std::string id;
  std::string harness = "candle";
  std::optional<std::string> quant;
  std::optional<std::string> source;
  unsigned min_devices = 0;  // a CPU node has no devices: is_feasible_on needs min_devices <= 0
};

// router.rs profile_to_spec + qualified_model_id: the ModelSpec (harness.rs) body of POST /models/load.
json model_spec(const Profile& p, const json& discovery) {
  json devices = json::array();
  for (const auto& d : discovery["devices"]) {
    if (devices.size() >= p.min_devices) break;
    devices.push_back(d["index"]);
  }
  if (devices.empty())
    for (unsigned i = 0; i < p.min_devices; ++i) devices.push_back(i);
  return {{"model_id", p.source && !p.source->empty() ? *p.source + ":" + p.id : p.id},
          {"harness", p.harness},
          {"quant", p.quant ? json(*p.quant) : json(nullptr)},
          {"tensor_parallel", p.min_devices > 1 ? json(p.min_devices) : json(nullptr)},
          {"devices", devices}};
}

class CortexGateway : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = new test_support::TempDir("neuron-cortex");
    const fs::path models = root_->path() / "models";
    const fs::path tiny = tiny_model_dir();
    auto link_model = [&](const fs::path& dir, bool tokenizer) {
      fs::create_directories(dir);
      for (const auto& f : fs::directory_iterator(tiny))
        if (tokenizer || f.path().filename() != "tokenizer.json") fs::create_symlink(f.path(), dir / f.path().filename());
    };
    link_model(models / "qwen3-tiny-a", true);
    link_model(models / "tiny-no-tokenizer", false);  // configs fine, the background load fails
    const std::string hash(40, 'b');
    const fs::path repo = root_->path() / "hf" / "models--Qwen--Qwen3-Tiny";
    fs::create_directories(repo / "refs");
    std::ofstream(repo / "refs" / "main") << hash;
    link_model(repo / "snapshots" / hash, true);
    daemon_ = new Daemon({"--models-dir", models.string(), "--max-num-seqs", "1", "--queue-depth", "3", "--max-per-principal", "1",
                          "--kv-cache-bytes", "8388608"},
                         /*wait_loaded=*/false, {"HF_HUB_CACHE=" + (root_->path() / "hf").string(), "HF_HUB_OFFLINE=1"});
  }
  static void TearDownTestSuite() {
    delete daemon_;
    delete root_;
  }

  // cortex.toml [[nodes]] endpoint: the node's base URL.
  std::string node_endpoint() const { return "http://127.0.0.1:" + std::to_string(daemon_->port()); }
  // poller.rs: every poll request has a 5 s timeout.
  httplib::Client poll_client() const {
    httplib::Client c("127.0.0.1", daemon_->port());
    c.set_connection_timeout(5s);
    c.set_read_timeout(5s);
    return c;
  }
  // The gateway's shared http_client (no timeout but the load's 1800 s).
  httplib::Client http_client() const {
    httplib::Client c("127.0.0.1", daemon_->port());
    c.set_read_timeout(1800s);
    return c;
  }

  // poller.rs poll_neuron: maybe_poll_discovery, /models (the node's models
  // replace the cache; unlisted ones are dropped), discover_capabilities for
  // catalogue ids, poll_health. Returns the /models entries by id.
  std::map<std::string, json> poll(const std::vector<Profile>& catalogue, json* health = nullptr) {
    auto c = poll_client();
    auto d = c.Get("/discovery");
    EXPECT_TRUE(d && d->status == 200);
    if (d && d->status == 200) {
      discovery_ = json::parse(d->body);
      expect_discovery_response(discovery_);
    }
    std::map<std::string, json> models;
    auto m = c.Get("/models");
    EXPECT_TRUE(m && m->status == 200);
    if (m && m->status == 200) {
      const json list = json::parse(m->body);
      EXPECT_TRUE(list.is_array());
      for (const auto& e : list) {
        expect_model_info(e);
        models[e["id"].get<std::string>()] = e;
      }
    }
    for (const auto& p : catalogue) {
      auto caps = c.Get(("/models/" + urlencode(p.id) + "/capabilities").c_str());
      if (caps && caps->status == 200) capabilities_[p.id] = json::parse(caps->body)["capabilities"];
    }
    auto h = c.Get("/health");
    EXPECT_TRUE(h && h->status == 200);
    if (h && h->status == 200) {
      const json body = json::parse(h->body);
      expect_health_response(body);
      if (health) *health = body;
    }
    return models;
  }

  // router.rs cold_load: POST {endpoint}/models/load with the profile's spec;
  // "already loaded" in a failure's body counts as success. Returns (ok, body).
  std::pair<bool, std::string> cold_load(const Profile& p) {
    if (discovery_.is_null()) poll({});  // the poller has cached the topology by then
    auto r = http_client().Post("/models/load", model_spec(p, discovery_).dump(), "application/json");
    if (!r) return {false, "no answer"};
    const bool ok = (r->status >= 200 && r->status < 300) || r->body.find("already loaded") != std::string::npos;
    return {ok, std::to_string(r->status) + " " + r->body};
  }

  // router.rs finish: GET /models/{urlencoded id}/endpoint, `url`, loopback rewrite.
  std::optional<std::string> endpoint_of(const std::string& model_id) {
    auto r = http_client().Get(("/models/" + urlencode(model_id) + "/endpoint").c_str());
    if (!r || r->status != 200) return std::nullopt;
    const json body = json::parse(r->body);
    if (!body["url"].is_string()) return std::nullopt;
    return rewrite_loopback_host(body["url"], "127.0.0.1");
  }

  // proxy.rs forward_request: POST format!("{endpoint}{path}") with the client's
  // headers (handlers.rs strip_hop_headers keeps the x-helexa-* stamps) and the
  // body whose model was rewritten to the resolved id.
  httplib::Result proxy(const std::string& endpoint, const std::string& path, const json& body, const httplib::Headers& headers) {
    const std::string url = endpoint + path;
    const std::string prefix = node_endpoint();
    EXPECT_EQ(url.rfind(prefix, 0), 0u) << url;
    httplib::Client c("127.0.0.1", daemon_->port());
    c.set_read_timeout(120s);
    return c.Post(url.substr(prefix.size()).c_str(), headers, body.dump(), "application/json");
  }

  // Every model's requests ended (closed streams are cancelled at the next
  // step): nothing running or queued, and no request holds a model (in_use).
  bool wait_for_idle() {
    const auto deadline = std::chrono::steady_clock::now() + 30s;
    while (std::chrono::steady_clock::now() < deadline) {
      auto h = poll_client().Get("/health");
      auto m = poll_client().Get("/models");
      bool idle = h && h->status == 200 && m && m->status == 200;
      if (idle) {
        // Named documents: a range-for over json::parse(...)["models"] would walk a destroyed temporary.
        const json health = json::parse(h->body), models = json::parse(m->body);
        for (const auto& e : health["models"]) idle = idle && e["in_flight"] == 0 && e["queue_depth"] == 0;
        for (const auto& e : models) idle = idle && e["in_use"] == 0;
      }
      if (idle) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

  // evictor.rs: POST /models/unload {"model_id"}; 2xx is success.
  void unload(const std::string& id) {
    auto r = http_client().Post("/models/unload", json{{"model_id", id}}.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body << "\n" << daemon_->log().substr(daemon_->log().size() > 3000 ? daemon_->log().size() - 3000 : 0);
  }

  static httplib::Headers principal(const std::string& account, const std::string& key) {
    return {{"x-helexa-account-id", account}, {"x-helexa-key-id", key}, {"user-agent", "opencode/1.0"}};
  }

  static inline Daemon* daemon_ = nullptr;
  static inline test_support::TempDir* root_ = nullptr;
  json discovery_;
  std::map<std::string, json> capabilities_;
};

const Profile kFolder{"qwen3-tiny-a", "candle", std::nullopt, std::nullopt};   // no source: the bare id
const Profile kHub{"Qwen/Qwen3-Tiny", "candle", std::nullopt, "huggingface"};  // qualified_model_id: huggingface:Qwen/Qwen3-Tiny

TEST_F(CortexGateway, PollColdLoadProxyMeterAndEvictAsTheGatewayDoes) {
  const std::vector<Profile> catalogue = {kFolder, kHub};
  // The first cycle, nothing loaded: topology cached, with a prompt cap the
  // gateway can keep (it re-polls /discovery only while the cap is 0).
  auto models = poll(catalogue);
  EXPECT_TRUE(models.empty());
  EXPECT_GT(discovery_["max_prompt_tokens"].get<std::uint64_t>(), 0u) << discovery_.dump();
  EXPECT_FALSE(discovery_.contains("cuda_unavailable_reason")) << "a CPU host is no driver mismatch: " << discovery_.dump();
  // poller.rs discover_capabilities: cold models' modalities from their files, before any load.
  EXPECT_EQ(capabilities_[kFolder.id], json::array({"text"}));
  EXPECT_EQ(capabilities_[kHub.id], json::array({"text"}));

  for (const Profile& p : catalogue) {
    SCOPED_TRACE(p.id);
    // router.rs resolve, priority 4: catalogue cold-load, then finish().
    const auto [loaded, answer] = cold_load(p);
    ASSERT_TRUE(loaded) << answer << "\n" << daemon_->log();
    const auto endpoint = endpoint_of(p.id);
    ASSERT_TRUE(endpoint) << "EndpointResolveFailed";
    EXPECT_EQ(*endpoint, node_endpoint()) << "the node's root: the gateway appends /v1/...";

    // The next poll keeps the entry (same id), routable and servable, with what the router reads.
    models = poll(catalogue);
    ASSERT_TRUE(models.count(p.id)) << "the poller would drop " << p.id << " and cold-load it again";
    const json& m = models[p.id];
    EXPECT_EQ(m["status"], "loaded");
    EXPECT_EQ(m["servable"]["ok"], true) << m.dump();
    EXPECT_EQ(m["capabilities"], json::array({"text"})) << m.dump();
    EXPECT_GT(m["limit"]["context"].get<std::uint64_t>(), 0u);
    // A second cold-load of the same profile (two requests raced): "already loaded", success.
    EXPECT_TRUE(cold_load(p).first);

    // handlers.rs chat_completions -> proxy_with_metrics -> proxy.rs forward_request.
    const httplib::Headers who = principal("acct-" + p.id, "key-1");
    auto chat = proxy(*endpoint, "/v1/chat/completions",
                      {{"model", p.id}, {"messages", {{{"role", "user"}, {"content", "hello"}}}}, {"max_tokens", 5}}, who);
    ASSERT_TRUE(chat);
    ASSERT_EQ(chat->status, 200) << chat->body;
    EXPECT_GT(last_count_for(chat->body, "prompt_tokens").value_or(0), 0u);
    EXPECT_GT(last_count_for(chat->body, "completion_tokens").value_or(0), 0u);

    // Streams: metered from the body's tail (CortexMetrics::finish), no stream_options added.
    for (const char* path : {"/v1/chat/completions", "/v1/completions", "/v1/responses"}) {
      json body = {{"model", p.id}, {"stream", true}, {"max_tokens", 6}};
      if (std::string(path) == "/v1/completions") body["prompt"] = "once upon";
      else if (std::string(path) == "/v1/responses") body = {{"model", p.id}, {"stream", true}, {"max_output_tokens", 6}, {"input", "hi"}};
      else body["messages"] = {{{"role", "user"}, {"content", "count"}}};
      auto r = proxy(*endpoint, path, body, who);
      ASSERT_TRUE(r);
      ASSERT_EQ(r->status, 200) << path << ": " << r->body;
      EXPECT_EQ(r->get_header_value("Content-Type").rfind("text/event-stream", 0), 0u);
      EXPECT_GT(last_count_for(r->body, "prompt_tokens").value_or(0), 0u) << path << " is billed 0 prompt tokens:\n" << r->body;
      EXPECT_GT(last_count_for(r->body, "completion_tokens").value_or(0), 0u) << path << ":\n" << r->body;
      EXPECT_NE(r->body.find("\"helexa_timing\""), std::string::npos) << path;
      if (std::string(path) == "/v1/chat/completions")  // what anthropic_sse.rs parses as ChatCompletionChunk
        for (const auto& f : sse_frames(r->body))
          if (f != "[DONE]") {
            EXPECT_TRUE(parses_as_chunk(json::parse(f))) << f;
          }
    }
  }

  // A plain OpenAI client that asks for usage gets OpenAI's usage chunk, and only that one.
  {
    auto r = proxy(node_endpoint(), "/v1/chat/completions",
                   {{"model", kFolder.id}, {"stream", true}, {"max_tokens", 4}, {"stream_options", {{"include_usage", true}}},
                    {"messages", {{{"role", "user"}, {"content", "hi"}}}}},
                   {});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    int with_usage = 0;
    for (const auto& f : sse_frames(r->body)) {
      if (f == "[DONE]") continue;
      const json c = json::parse(f);
      if (c.contains("usage")) {
        ++with_usage;
        EXPECT_TRUE(c["choices"].empty()) << f;
      }
    }
    EXPECT_EQ(with_usage, 1) << r->body;
  }

  // handlers.rs anthropic_messages, stream: cortex-core translate.rs
  // anthropic_to_openai (system merged to the front, max_tokens, the rest of
  // the Anthropic body carried over), then anthropic_sse.rs stream_translated:
  // POST {endpoint}/v1/chat/completions with content-type and only the
  // principal headers (auth.rs forward_principal_headers).
  {
    const auto endpoint = endpoint_of(kFolder.id);
    ASSERT_TRUE(endpoint);
    const json translated = {{"model", kFolder.id},
                             {"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "hi"}}}},
                             {"max_tokens", 6},
                             {"stream", true},
                             {"metadata", {{"user_id", "u-1"}}}};
    auto r = proxy(*endpoint, "/v1/chat/completions", translated,
                   {{"x-helexa-account-id", "acct-a"}, {"x-helexa-key-id", "key-a"}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    std::uint64_t prompt = 0, completion = 0;
    bool finished = false, done = false;
    for (const auto& data : sse_frames(r->body)) {
      if (data == "[DONE]") {
        done = true;
        continue;
      }
      if (auto p = last_count_for(data, "prompt_tokens")) prompt = *p;
      if (auto c = last_count_for(data, "completion_tokens")) completion = *c;
      const json chunk = json::parse(data);
      ASSERT_TRUE(parses_as_chunk(chunk)) << data;
      for (const auto& ch : chunk["choices"]) finished = finished || ch["finish_reason"].is_string();
    }
    EXPECT_TRUE(done && finished);
    EXPECT_GT(prompt, 0u) << "the translated stream settles 0 tokens";
    EXPECT_GT(completion, 0u);
  }

  // evictor.rs evict_lru_on_node: POST /models/unload {"model_id": id}, 2xx.
  for (const Profile& p : catalogue) {
    auto r = http_client().Post("/models/unload", json{{"model_id", p.id}}.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
  }
  EXPECT_TRUE(poll(catalogue).empty());
}

TEST_F(CortexGateway, PollsAnswerWithinTheirTimeoutWhileAStreamRunsAndQueuedStreamsStayAlive) {
  ASSERT_TRUE(cold_load(kFolder).first);
  const std::string body = json{{"model", kFolder.id}, {"prompt", "go"}, {"max_tokens", 16000}, {"ignore_eos", true}, {"stream", true}}.dump();
  RawConnection running(daemon_->port());
  running.send(http_post_text("/v1/completions", body, "x-helexa-account-id: a\r\nx-helexa-key-id: k\r\n"));
  // Two data frames: a generated token, so the request is running and not still queued behind its first frame
  // (a poll between the two saw in_flight 0 once, under load).
  const auto two_frames = [](const std::string& s) {
    const auto first = s.find("data: {");
    return first != std::string::npos && s.find("data: {", first + 1) != std::string::npos;
  };
  ASSERT_NE(running.read_until(two_frames).find("200 OK"), std::string::npos);
  // poller.rs: one cycle while it generates, every request inside its 5 s (poll_client's timeouts).
  json health;
  const auto models = poll({kFolder}, &health);
  ASSERT_TRUE(models.count(kFolder.id));
  ASSERT_EQ(health["models"].size(), 1u);
  EXPECT_EQ(health["models"][0]["id"], kFolder.id) << "the router's load score is keyed by the /models id";
  EXPECT_EQ(health["models"][0]["in_flight"], 1);

  // One seat (--max-num-seqs 1): the next stream waits in the queue, and says
  // so at least every second (SSE comments) so no proxy stall timer cuts it.
  RawConnection queued(daemon_->port());
  queued.send(http_post_text("/v1/completions", body, "x-helexa-account-id: b\r\nx-helexa-key-id: k\r\n"));
  const auto q0 = std::chrono::steady_clock::now();
  const std::string waited = queued.read_until([](const std::string& s) { return s.find(": keep-alive") != std::string::npos; });
  EXPECT_NE(waited.find("200 OK"), std::string::npos) << waited;
  EXPECT_NE(waited.find(": keep-alive"), std::string::npos) << waited;
  // A comment after 1 s of silence; the slack is for a loaded 2-core CI machine (any proxy's stall timer is far
  // longer). 3 s was missed once here with a build beside the suite; without the comments the wait is the running
  // stream's 16000 tokens.
  EXPECT_LT(std::chrono::steady_clock::now() - q0, 5s) << daemon_->log().substr(daemon_->log().size() > 3000 ? daemon_->log().size() - 3000 : 0);
  running.close();
  queued.close();
  ASSERT_TRUE(wait_for_idle());
  unload(kFolder.id);
}

TEST_F(CortexGateway, OnePrincipalHoldsItsShareAnonymousCallersWhatIsLeft) {
  ASSERT_TRUE(cold_load(kFolder).first);
  // Capacity 4 sequences (1 running + 3 queued), --max-per-principal 1: anonymous callers get 3.
  const std::string body = json{{"model", kFolder.id}, {"prompt", "go"}, {"max_tokens", 16000}, {"ignore_eos", true}, {"stream", true}}.dump();
  std::vector<std::unique_ptr<RawConnection>> held;
  auto open = [&](const std::string& headers) {
    held.push_back(std::make_unique<RawConnection>(daemon_->port()));
    held.back()->send(http_post_text("/v1/completions", body, headers));
    return held.back()->read_until([](const std::string& s) { return s.find("\r\n\r\n") != std::string::npos; });
  };
  const std::string a = "x-helexa-account-id: acct-a\r\nx-helexa-key-id: key-1\r\n";
  EXPECT_NE(open(a).find("200 OK"), std::string::npos);
  const std::string again = open(a);
  EXPECT_NE(again.find("429"), std::string::npos) << again;
  EXPECT_NE(again.find("Retry-After:"), std::string::npos) << again;
  for (int i = 0; i < 2; ++i) EXPECT_NE(open("").find("200 OK"), std::string::npos) << "anonymous " << i;
  const std::string third = open("");
  EXPECT_NE(third.find("200 OK"), std::string::npos) << third;
  const std::string fourth = open("");
  EXPECT_NE(fourth.find("503"), std::string::npos) << "anonymous over what is left: " << fourth;
  EXPECT_NE(fourth.find("Retry-After:"), std::string::npos) << fourth;
  json health;
  poll({kFolder}, &health);
  ASSERT_EQ(health["models"].size(), 1u);
  EXPECT_EQ(health["models"][0]["rejected_per_principal"], 1);
  EXPECT_EQ(health["models"][0]["rejected_anon_yield"], 1);
  EXPECT_EQ(health["models"][0]["anon_in_flight"], 3);
  EXPECT_EQ(health["models"][0]["anon_max_in_flight"], 3);
  held.clear();
  // Their places come back when the requests end.
  ASSERT_TRUE(wait_for_idle());
  auto r = proxy(node_endpoint(), "/v1/completions", {{"model", kFolder.id}, {"prompt", "hi"}, {"max_tokens", 2}}, principal("acct-a", "key-1"));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  unload(kFolder.id);
}

TEST_F(CortexGateway, AFailedColdLoadLeavesNothingAndBadSpecsAreRefusedCleanly) {
  const Profile broken{"tiny-no-tokenizer", "candle", std::nullopt, std::nullopt};
  for (int attempt = 0; attempt < 2; ++attempt) {
    const auto [ok, answer] = cold_load(broken);
    EXPECT_FALSE(ok) << "attempt " << attempt << ": " << answer;
    EXPECT_EQ(answer.find("already loaded"), std::string::npos) << "a failed load must not block the next: " << answer;
    EXPECT_EQ(answer.rfind("400", 0), 0u) << answer;
    EXPECT_FALSE(poll({broken}).count(broken.id)) << "listed after its load failed";
  }
  // Bad specs: a clear 4xx, nothing left behind.
  const std::vector<json> bad = {
      {{"model_id", "helexa:Qwen/Qwen3-Tiny"}, {"harness", "candle"}},  // no source for that scheme here
      {{"model_id", "huggingface:Qwen3-Tiny"}, {"harness", "candle"}},  // not org/name
      {{"model_id", kFolder.id}, {"harness", "vllm"}},
      {{"model_id", kFolder.id}, {"harness", "candle"}, {"devices", {"zero"}}},
      {{"harness", "candle"}},
  };
  for (const auto& b : bad) {
    auto r = http_client().Post("/models/load", b.dump(), "application/json");
    ASSERT_TRUE(r);
    EXPECT_GE(r->status, 400) << b.dump();
    EXPECT_LT(r->status, 500) << b.dump() << ": " << r->body;
    EXPECT_TRUE(json::parse(r->body)["error"]["message"].is_string()) << r->body;
  }
  EXPECT_TRUE(poll({kFolder}).empty());
  EXPECT_EQ(poll_client().Get("/models/nobody%2Fnothing/capabilities")->status, 404) << "no local evidence: 404, not an empty list";
}

}  // namespace
}  // namespace neuron::server
