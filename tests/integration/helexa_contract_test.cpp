// The helexa node contract (DESIGN.md section 5, "Model management"): every
// management route's answer parsed against the fields and types the gateway
// (cortex) reads, on the CPU with the bundled tiny model: loaded by folder
// name, by a Hugging Face id (ids with '/'), and at tensor_parallel 2 (Gloo
// workers). Also the lifecycle: the pre-warm's activation, idle unload after
// keep_alive, load on request, served names echoed in responses.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/registry.hpp"
#include "server/activation.hpp"
#include "server/api.hpp"
#include "server/discovery.hpp"
#include "server/model_spec.hpp"
#include "support/temp_dir.hpp"
#include "support/model_paths.hpp"

namespace neuron::server {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;
using namespace std::chrono_literals;

using test_support::models_dir;
using test_support::tiny_model_dir;

HttpRequest get(const std::string& path) { return HttpRequest{"GET", path, {{"Host", "node7:13131"}}, "", "test"}; }
HttpRequest post(const std::string& path, const json& body) { return HttpRequest{"POST", path, {}, body.dump(), "test"}; }

// ---- the contract's types ----

enum class T { integer, number, string, boolean, array, object, string_or_null, integer_or_null };

bool has_type(const json& v, T t) {
  switch (t) {
    case T::integer: return v.is_number_integer();
    case T::number: return v.is_number();
    case T::string: return v.is_string();
    case T::boolean: return v.is_boolean();
    case T::array: return v.is_array();
    case T::object: return v.is_object();
    case T::string_or_null: return v.is_string() || v.is_null();
    case T::integer_or_null: return v.is_number_integer() || v.is_null();
  }
  return false;
}

// Every field present with its type; returns whether all were.
bool expect_fields(const json& j, std::initializer_list<std::pair<const char*, T>> fields, const std::string& where) {
  if (!j.is_object()) {
    ADD_FAILURE() << where << " is not an object: " << j.dump();
    return false;
  }
  bool ok = true;
  for (const auto& [key, type] : fields) {
    if (!j.contains(key)) {
      ADD_FAILURE() << where << " lacks '" << key << "': " << j.dump();
      ok = false;
    } else if (!has_type(j[key], type)) {
      ADD_FAILURE() << where << "." << key << " has the wrong type: " << j[key].dump();
      ok = false;
    }
  }
  return ok;
}

void expect_int_array(const json& a, const std::string& where) {
  ASSERT_TRUE(a.is_array()) << where;
  for (const auto& v : a) EXPECT_TRUE(v.is_number_integer()) << where << ": " << a.dump();
}
void expect_string_array(const json& a, const std::string& where) {
  ASSERT_TRUE(a.is_array()) << where;
  for (const auto& v : a) EXPECT_TRUE(v.is_string()) << where << ": " << a.dump();
}

void check_health(const json& h) {
  expect_fields(h, {{"uptime_secs", T::integer}, {"devices", T::array}, {"activation", T::object}, {"models", T::array}}, "health");
  for (const auto& d : h["devices"])
    expect_fields(d, {{"index", T::integer}, {"vram_used_mb", T::integer_or_null}, {"vram_free_mb", T::integer_or_null},
                      {"utilization_pct", T::integer_or_null}, {"temp_c", T::integer_or_null}},
                  "health.devices[]");
  const json& a = h["activation"];
  expect_fields(a, {{"state", T::string}, {"pending", T::array}, {"in_progress", T::string_or_null}, {"completed", T::array},
                    {"failed", T::array}},
                "health.activation");
  EXPECT_TRUE(a["state"] == "pre_warming" || a["state"] == "ready") << a.dump();
  expect_string_array(a["pending"], "activation.pending");
  expect_string_array(a["completed"], "activation.completed");
  for (const auto& f : a["failed"]) expect_fields(f, {{"model_id", T::string}, {"error", T::string}}, "activation.failed[]");
  for (const auto& m : h["models"])
    expect_fields(m, {{"id", T::string}, {"in_flight", T::integer}, {"queue_depth", T::integer}, {"max_in_flight", T::integer},
                      {"max_queue_depth", T::integer}, {"rejected_queue_full", T::integer}, {"rejected_timeout", T::integer},
                      {"kv_budget_mb", T::integer}, {"kv_available_mb", T::integer}, {"tok_s_prefill", T::number},
                      {"tok_s_decode", T::number}},
                  "health.models[]");
}

void check_discovery(const json& d) {
  expect_fields(d, {{"hostname", T::string}, {"os", T::string}, {"kernel", T::string}, {"cuda_version", T::string_or_null},
                    {"driver_version", T::string_or_null}, {"devices", T::array}, {"harnesses", T::array},
                    {"max_prompt_tokens", T::integer}},
                "discovery");
  for (const auto& dev : d["devices"])
    expect_fields(dev, {{"index", T::integer}, {"name", T::string}, {"vram_total_mb", T::integer}, {"compute_capability", T::string}},
                  "discovery.devices[]");
  EXPECT_EQ(d["harnesses"], json::array({"neuron", "candle"})) << "the gateway's catalogue names candle";
  if (d.contains("cuda_unavailable_reason")) {
    EXPECT_TRUE(d["cuda_unavailable_reason"].is_string());
  }
  // Only a loaded NVIDIA driver that CUDA cannot use is a reason (the gateway reads it as "CUDA loads fail").
  EXPECT_EQ(d.contains("cuda_unavailable_reason"), d["devices"].empty() && fs::exists("/proc/driver/nvidia/version")) << d.dump();
}

void check_model_entry(const json& m) {
  if (!expect_fields(m, {{"id", T::string}, {"harness", T::string}, {"status", T::string}, {"devices", T::array},
                         {"vram_used_mb", T::integer_or_null}, {"capabilities", T::array}, {"limit", T::object},
                         {"tool_call", T::boolean}, {"reasoning", T::boolean}},
                     "models[]"))
    return;
  const std::string status = m["status"];
  EXPECT_TRUE(status == "loaded" || status == "loading" || status == "unloaded" || status == "recovering") << status;
  expect_int_array(m["devices"], "models[].devices");
  expect_string_array(m["capabilities"], "models[].capabilities");
  for (const auto& c : m["capabilities"]) EXPECT_EQ(c, "text") << "the gateway's modality words";
  if (expect_fields(m, {{"servable", T::object}}, "models[]")) {
    EXPECT_TRUE(m["servable"]["ok"].is_boolean());
    EXPECT_EQ(m["servable"]["ok"] == true, status == "loaded") << m.dump();
  }
  expect_fields(m["limit"], {{"context", T::integer}, {"output", T::integer}}, "models[].limit");
  if (m["limit"].contains("input")) { EXPECT_TRUE(m["limit"]["input"].is_number_integer()); }
  if (m.contains("download"))
    expect_fields(m["download"], {{"bytes_done", T::integer}, {"bytes_total", T::integer}, {"files_done", T::integer},
                                  {"files_total", T::integer}},
                  "models[].download");
}

json body_of(const HttpResponse& r) { return json::parse(r.body); }

const json* find_model(const json& list, const std::string& id) {
  for (const auto& m : list)
    if (m["id"] == id) return &m;
  return nullptr;
}

bool wait_for(const std::function<bool()>& done, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

// A directory of links to the tiny model's files: the same weights under another id.
void link_tiny_model(const fs::path& dir) {
  fs::create_directories(dir);
  for (const auto& f : fs::directory_iterator(tiny_model_dir())) fs::create_symlink(f.path(), dir / f.path().filename());
}

// A Hugging Face cache holding the tiny model as Qwen/Qwen3-Tiny (HF_HUB_CACHE
// points at it while the test runs).
class FakeHfCache {
 public:
  FakeHfCache() {
    const std::string hash(40, 'a');
    const fs::path repo = dir_.path() / "models--Qwen--Qwen3-Tiny";
    fs::create_directories(repo / "refs");
    dir_.write("models--Qwen--Qwen3-Tiny/refs/main", hash);
    link_tiny_model(repo / "snapshots" / hash);
    if (const char* old = std::getenv("HF_HUB_CACHE")) previous_ = old;
    ::setenv("HF_HUB_CACHE", dir_.path().c_str(), 1);
  }
  ~FakeHfCache() {
    if (previous_) ::setenv("HF_HUB_CACHE", previous_->c_str(), 1);
    else ::unsetenv("HF_HUB_CACHE");
  }
  FakeHfCache(const FakeHfCache&) = delete;
  FakeHfCache& operator=(const FakeHfCache&) = delete;

 private:
  test_support::TempDir dir_{"neuron-hf-cache"};
  std::optional<std::string> previous_;
};

engine::RegistryOptions registry_options(const fs::path& extra_root) {
  engine::RegistryOptions ro;
  ro.model_roots = {models_dir(), extra_root};
  ro.worker_binary = NEURON_BINARY;
  ro.kv_budget.bytes = 8u << 20;  // 16384 positions of the tiny model (512 bytes each)
  return ro;
}

TEST(HelexaContract, EveryManagementRouteParsesIncludingTensorParallelTwo) {
  FakeHfCache hf;
  test_support::TempDir root("neuron-contract");
  link_tiny_model(root.path() / "tiny-copy");
  link_tiny_model(root.path() / "tiny-quant");  // never loaded: its quant is refused
  Activation activation;
  engine::RegistryOptions ro = registry_options(root.path());
  ro.on_load_end = [&activation](const engine::ModelInfo& info) { activation.load_ended(info); };
  engine::Registry registry(ro);
  ApiOptions options;
  options.activation = &activation;
  Api api(registry, options);

  // By folder name under a model root, synchronous by default: 200 {"status": "loaded"}.
  const HttpResponse one = api.handle(post("/models/load", {{"model_id", "qwen3-tiny-a"}, {"harness", "neuron"}}));
  ASSERT_EQ(one.status, 200) << one.body;
  EXPECT_EQ(body_of(one)["status"], "loaded");
  EXPECT_EQ(body_of(one)["model_id"], "qwen3-tiny-a") << "the id it was loaded by";
  activation.expect(fs::canonical(tiny_model_dir()).string());
  activation.close_startup();
  // Tensor parallel 2 on the CPU (Gloo), with a served name.
  const HttpResponse two = api.handle(
      post("/models/load", {{"model_id", "tiny-copy"}, {"tensor_parallel", 2}, {"served_model_name", "tiny-tp"}, {"keep_alive", -1}}));
  ASSERT_EQ(two.status, 200) << two.body;
  EXPECT_EQ(body_of(two)["status"], "loaded");
  // A Hugging Face id (ids hold '/'), with the registry scheme and harness the gateway sends (its ModelSpec).
  const HttpResponse hub = api.handle(post("/models/load", {{"model_id", "huggingface:Qwen/Qwen3-Tiny"}, {"harness", "candle"},
                                                            {"quant", nullptr}, {"tensor_parallel", nullptr}, {"devices", json::array()}}));
  ASSERT_EQ(hub.status, 200) << hub.body;
  EXPECT_EQ(body_of(hub)["model_id"], "Qwen/Qwen3-Tiny") << "listed under the bare id the gateway keys it by";

  const HttpResponse health = api.handle(get("/health"));
  ASSERT_EQ(health.status, 200);
  const json h = body_of(health);
  check_health(h);
  EXPECT_EQ(h["activation"]["state"], "ready");
  EXPECT_EQ(h["activation"]["completed"], json::array({"qwen3-tiny-a"}));
  ASSERT_EQ(h["models"].size(), 3u) << h.dump();
  std::set<std::string> health_ids;
  for (const auto& m : h["models"]) {
    health_ids.insert(m["id"].get<std::string>());
    EXPECT_EQ(m["id"].get<std::string>().find(NEURON_REPO_ROOT), std::string::npos) << "/health shows no paths";
    EXPECT_GT(m["kv_budget_mb"].get<int>(), 0) << m.dump();
    EXPECT_GT(m["max_in_flight"].get<int>(), 0) << m.dump();
  }

  EXPECT_EQ(health_ids, (std::set<std::string>{"qwen3-tiny-a", "tiny-tp", "Qwen/Qwen3-Tiny"})) << "one id per model, as /models";
  const json d = body_of(api.handle(get("/discovery")));
  check_discovery(d);
  EXPECT_EQ(d["max_prompt_tokens"], 32768 - 1) << "the longest context (the TP model's), less the token to generate";
  EXPECT_EQ(d["architectures"], json::array({"qwen3", "llama", "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe"})) << "the families this node loads";

  const HttpResponse listed = api.handle(get("/models"));
  ASSERT_EQ(listed.status, 200);
  const json models = body_of(listed);
  ASSERT_TRUE(models.is_array()) << "the gateway reads a bare array";
  ASSERT_EQ(models.size(), 3u);
  for (const auto& m : models) {
    check_model_entry(m);
    EXPECT_EQ(m["status"], "loaded");
    EXPECT_EQ(m["harness"], "neuron");
    EXPECT_TRUE(m["devices"].empty()) << "CPU ranks have no CUDA ordinals";
    EXPECT_TRUE(m["vram_used_mb"].is_null());
    // max_position_embeddings is 40960; the 8 MiB KV budget per rank holds 16384 positions, or 32768 when
    // each of 2 ranks keeps one of the 2 KV heads.
    EXPECT_EQ(m["limit"]["context"], m["tensor_parallel"] == 2 ? 32768 : 16384) << m.dump();
    EXPECT_TRUE(m["tool_call"].get<bool>()) << "Qwen's template and <tool_call> token";
    EXPECT_TRUE(m["reasoning"].get<bool>()) << "Qwen's <think> token";
    EXPECT_EQ(m["architecture"], "qwen3") << "the model's family";
  }
  const json* tp = find_model(models, "tiny-tp");
  ASSERT_NE(tp, nullptr) << models.dump();
  EXPECT_EQ((*tp)["tensor_parallel"], 2);
  ASSERT_NE(find_model(models, "Qwen/Qwen3-Tiny"), nullptr) << models.dump();
  ASSERT_NE(find_model(models, "qwen3-tiny-a"), nullptr) << "listed under the id it was loaded by, not its path: " << models.dump();

  // Per-model routes, by every kind of id: a served name, a Hugging Face id (with '/', raw and escaped), a folder name.
  for (const std::string id : {"tiny-tp", "Qwen/Qwen3-Tiny", "Qwen%2FQwen3-Tiny", "qwen3-tiny-a"}) {
    const HttpResponse endpoint = api.handle(get("/models/" + id + "/endpoint"));
    ASSERT_EQ(endpoint.status, 200) << id << ": " << endpoint.body;
    expect_fields(body_of(endpoint), {{"url", T::string}}, "endpoint");
    EXPECT_EQ(body_of(endpoint)["url"], "http://node7:13131") << "the node's root: the gateway joins it with /v1/...";
    const HttpResponse caps = api.handle(get("/models/" + id + "/capabilities"));
    ASSERT_EQ(caps.status, 200) << id << ": " << caps.body;
    expect_fields(body_of(caps), {{"capabilities", T::array}}, "capabilities");
    expect_string_array(body_of(caps)["capabilities"], "capabilities");
    EXPECT_EQ(body_of(caps)["capabilities"], json::array({"text"}));
  }
  // A model not loaded: its modalities from its files (the gateway asks before any load); none here: 404.
  const HttpResponse cold = api.handle(get("/models/tiny-quant/capabilities"));
  ASSERT_EQ(cold.status, 200) << cold.body;
  EXPECT_EQ(body_of(cold)["capabilities"], json::array({"text"}));
  EXPECT_EQ(api.handle(get("/models/Nobody%2Fnothing/capabilities")).status, 404);
  EXPECT_EQ(api.handle(get("/models/never-loaded/endpoint")).status, 404);
  EXPECT_EQ(api.handle(get("/models/tiny-tp/weights")).status, 404);

  // The served name answers OpenAI requests and is echoed; the TP model generates.
  const HttpResponse chat = api.handle(post("/v1/chat/completions", {{"model", "tiny-tp"},
                                                                     {"messages", {{{"role", "user"}, {"content", "hi"}}}},
                                                                     {"max_tokens", 4}}));
  ASSERT_EQ(chat.status, 200) << chat.body;
  EXPECT_EQ(body_of(chat)["model"], "tiny-tp");
  const HttpResponse by_folder = api.handle(post("/v1/completions", {{"model", "qwen3-tiny-a"}, {"prompt", "hi"}, {"max_tokens", 2}}));
  ASSERT_EQ(by_folder.status, 200) << by_folder.body;
  EXPECT_EQ(body_of(by_folder)["model"], "qwen3-tiny-a") << "what the client sent, not the model's path";
  check_health(body_of(api.handle(get("/health"))));

  // Loads the node can tell are impossible: 422 with a typed error.
  const std::vector<std::pair<json, std::string>> impossible = {
      {{{"model_id", "Nobody/no-such-model"}}, "not_found"},
      {{{"model_id", "tiny-copy-2"}}, "not_found"},
      {{{"model_id", "tiny-quant"}, {"quant", "q4_k_m"}}, "unsupported_arch"},  // a GGUF tag on safetensors
      {{{"model_id", "tiny-copy"}, {"harness", "vllm"}}, "unsupported_arch"},
  };
  for (const auto& [body, code] : impossible) {
    const HttpResponse r = api.handle(post("/models/load", body));
    EXPECT_EQ(r.status, 422) << body.dump() << ": " << r.body;
    EXPECT_EQ(body_of(r)["error"]["code"], code) << r.body;
  }
  // An id already loaded is a conflict the gateway reads as success ("already loaded"); a malformed body a 400.
  const HttpResponse twice = api.handle(post("/models/load", {{"model_id", "qwen3-tiny-a"}, {"harness", "candle"}}));
  EXPECT_EQ(twice.status, 409);
  EXPECT_NE(twice.body.find("already loaded"), std::string::npos) << twice.body;
  EXPECT_EQ(api.handle(post("/models/load", {{"model_id", "x"}, {"keep_alive", "soon"}})).status, 400);

  // Unload: 200 {"status": "unloaded"}, then 404.
  for (const std::string id : {"tiny-tp", "Qwen/Qwen3-Tiny", "qwen3-tiny-a"}) {
    const HttpResponse r = api.handle(post("/models/unload", {{"model_id", id}}));
    ASSERT_EQ(r.status, 200) << id << ": " << r.body;
    EXPECT_EQ(body_of(r)["status"], "unloaded");
    EXPECT_EQ(body_of(r)["model_id"], id);
    EXPECT_EQ(api.handle(post("/models/unload", {{"model_id", id}})).status, 404) << id;
  }
  EXPECT_EQ(body_of(api.handle(get("/models"))), json::array());
  // The asynchronous mode stays, as an explicit option.
  const HttpResponse later = api.handle(post("/models/load", {{"model_id", "tiny-copy"}, {"wait", false}}));
  ASSERT_EQ(later.status, 202) << later.body;
  check_model_entry(body_of(later)["model"]);
}

TEST(HelexaContract, StartupModelsPreWarmOneAfterAnother) {
  test_support::TempDir root("neuron-prewarm");
  link_tiny_model(root.path() / "tiny-copy");
  Activation activation;
  engine::RegistryOptions ro = registry_options(root.path());
  ro.on_load_end = [&activation](const engine::ModelInfo& info) { activation.load_ended(info); };
  engine::Registry registry(ro);
  ApiOptions options;
  options.activation = &activation;
  Api api(registry, options);
  for (const char* id : {"qwen3-tiny-a", "tiny-copy"}) {
    engine::ModelSpec spec;
    spec.model_id = id;
    activation.expect(registry.load(spec, /*wait=*/false).model_id);
  }
  activation.close_startup();
  // Loads run one at a time: the second waits for the first, so both cannot have ended yet.
  const json warming = body_of(api.handle(get("/health")));
  check_health(warming);
  EXPECT_EQ(warming["activation"]["state"], "pre_warming") << warming.dump();
  EXPECT_EQ(warming["activation"]["pending"].size() + warming["activation"]["completed"].size() +
                (warming["activation"]["in_progress"].is_null() ? 0 : 1),
            2u)
      << warming.dump();
  // A request for a model still loading: 503 with Retry-After.
  const HttpResponse early = api.handle(post("/v1/completions", {{"model", "tiny-copy"}, {"prompt", "hi"}, {"max_tokens", 2}}));
  if (early.status != 200) {
    EXPECT_EQ(early.status, 503) << early.body;
    EXPECT_FALSE(early.header("Retry-After").empty());
  }
  ASSERT_TRUE(wait_for([&] { return body_of(api.handle(get("/health")))["activation"]["state"] == "ready"; }, 60s));
  const json ready = body_of(api.handle(get("/health")))["activation"];
  EXPECT_EQ(ready["completed"], json::array({"qwen3-tiny-a", "tiny-copy"})) << ready.dump();
  EXPECT_TRUE(ready["pending"].empty());
  EXPECT_TRUE(ready["in_progress"].is_null());
}

TEST(HelexaContract, IdleModelsUnloadAfterKeepAliveNeverWhileARequestRuns) {
  test_support::TempDir root("neuron-idle");
  engine::Registry registry(registry_options(root.path()));
  Api api(registry, {});
  ASSERT_EQ(api.handle(post("/models/load", {{"model_id", "qwen3-tiny-a"}, {"keep_alive", "300ms"}})).status, 200);
  // A long streamed generation holds the model well past keep_alive.
  HttpResponse stream = api.handle(post("/v1/completions", {{"model", "qwen3-tiny-a"}, {"prompt", "on"}, {"max_tokens", 4000},
                                                                   {"ignore_eos", true}, {"stream", true}}));
  ASSERT_EQ(stream.status, 200) << stream.body;
  ASSERT_TRUE(stream.stream);
  std::this_thread::sleep_for(700ms);
  json models = body_of(api.handle(get("/models")));
  ASSERT_EQ(models.size(), 1u) << "unloaded under a running request";
  EXPECT_EQ(models[0]["status"], "loaded");
  EXPECT_EQ(models[0]["keep_alive_ms"], 300);
  // Polling /models and /health is no use of the model: they must not keep it loaded.
  const auto ended = std::chrono::steady_clock::now();
  stream.stream->cancel();
  stream.stream.reset();  // the connection is done with it: the request has ended
  ASSERT_TRUE(wait_for([&] {
    api.handle(get("/health"));
    return body_of(api.handle(get("/models"))).empty();
  }, 10s)) << "still loaded after keep_alive";
  const auto idle = std::chrono::steady_clock::now() - ended;
  EXPECT_GE(idle, 250ms) << "unloaded before keep_alive ran out";
  EXPECT_TRUE(registry.list().empty());
  EXPECT_EQ(api.handle(post("/v1/completions", {{"model", "qwen3-tiny-a"}, {"prompt", "hi"}, {"max_tokens", 2}})).status, 404);

  // keep_alive 0: unloaded right after the last request ends.
  ASSERT_EQ(api.handle(post("/models/load", {{"model_id", "qwen3-tiny-a"}, {"keep_alive", 0}, {"wait", false}})).status, 202);
  ASSERT_TRUE(wait_for([&] { return registry.list().empty(); }, 10s)) << "keep_alive 0 kept an unused model";
  // Negative: never.
  ASSERT_EQ(api.handle(post("/models/load", {{"model_id", "qwen3-tiny-a"}, {"keep_alive", "-1m"}})).status, 200);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(registry.list().size(), 1u);
}

TEST(HelexaContract, ARequestForAModelUnderTheModelsDirLoadsItWhenAsked) {
  test_support::TempDir root("neuron-on-request");
  engine::Registry registry(registry_options(root.path()));
  const json request = {{"model", "qwen3-tiny-a"}, {"prompt", "hi"}, {"max_tokens", 2}};
  {
    Api off(registry, {});
    EXPECT_EQ(off.handle(post("/v1/completions", request)).status, 404) << "load on request is off by default";
  }
  ApiOptions options;
  options.load_on_request = true;
  Api api(registry, options);
  const HttpResponse r = api.handle(post("/v1/completions", request));
  ASSERT_EQ(r.status, 200) << r.body;
  EXPECT_EQ(body_of(r)["model"], "qwen3-tiny-a");
  const json models = body_of(api.handle(get("/models")));
  ASSERT_EQ(models.size(), 1u);
  EXPECT_EQ(models[0]["status"], "loaded");
  EXPECT_EQ(models[0]["model_id"], fs::canonical(tiny_model_dir()).string());
  const HttpResponse unknown = api.handle(post("/v1/completions", {{"model", "no-such-model"}, {"prompt", "hi"}}));
  EXPECT_EQ(unknown.status, 404) << unknown.body;
  EXPECT_EQ(body_of(unknown)["error"]["code"], "model_not_found");
  EXPECT_EQ(api.handle(post("/v1/completions", {{"model", "../etc"}, {"prompt", "hi"}})).status, 404);
  EXPECT_EQ(registry.list().size(), 1u);
}

// A first load that fails in the background (no tokenizer) answers its error
// and leaves nothing: not listed, and the same load again fails the same way
// (never 409 "already loaded", which the gateway counts as success).
TEST(HelexaContract, AFailedLoadLeavesNothingBehind) {
  test_support::TempDir root("neuron-failed-load");
  fs::create_directories(root.path() / "no-tokenizer");
  for (const auto& f : fs::directory_iterator(tiny_model_dir()))
    if (f.path().filename() != "tokenizer.json") fs::create_symlink(f.path(), root.path() / "no-tokenizer" / f.path().filename());
  engine::Registry registry(registry_options(root.path()));
  Api api(registry, {});
  for (int attempt = 0; attempt < 2; ++attempt) {
    const HttpResponse r = api.handle(post("/models/load", {{"model_id", "no-tokenizer"}, {"harness", "candle"}}));
    EXPECT_EQ(r.status, 400) << attempt << ": " << r.body;
    EXPECT_EQ(body_of(r)["error"]["code"], "not_found") << r.body;
    EXPECT_EQ(body_of(api.handle(get("/models"))), json::array());
    EXPECT_TRUE(body_of(api.handle(get("/health")))["models"].empty());
    EXPECT_EQ(api.handle(get("/models/no-tokenizer/endpoint")).status, 404);
  }
  // Asynchronously too: 202, then gone.
  ASSERT_EQ(api.handle(post("/models/load", {{"model_id", "no-tokenizer"}, {"wait", false}})).status, 202);
  ASSERT_TRUE(wait_for([&] { return registry.list().empty(); }, 10s));
  EXPECT_EQ(api.handle(post("/v1/completions", {{"model", "no-tokenizer"}, {"prompt", "hi"}})).status, 404);
  // A working load of another model is untouched by all this.
  EXPECT_EQ(api.handle(post("/models/load", {{"model_id", "qwen3-tiny-a"}})).status, 200);
}

// Registry schemes: huggingface: is Hugging Face (dropped from the id); any
// other has no source here: 400, nothing loaded.
TEST(HelexaContract, RegistrySchemesAndBadSpecs) {
  FakeHfCache hf;
  test_support::TempDir root("neuron-schemes");
  engine::Registry registry(registry_options(root.path()));
  Api api(registry, {});
  for (const json& body : {json{{"model_id", "helexa:Qwen/Qwen3-Tiny"}}, json{{"model_id", "huggingface:Qwen3-Tiny"}},
                           json{{"model_id", "huggingface:Qwen/Qwen3:Tiny"}}, json{{"model_id", "qwen3-tiny-a"}, {"devices", {-1}}}}) {
    const HttpResponse r = api.handle(post("/models/load", body));
    EXPECT_EQ(r.status, 400) << body.dump() << ": " << r.body;
    EXPECT_EQ(body_of(r)["error"]["param"], body.contains("devices") ? "devices[0]" : "model_id") << r.body;
  }
  EXPECT_TRUE(registry.list().empty());
  // Not schemes: a folder with colons, a path with one; the scheme goes, the id stays.
  EXPECT_EQ(parse_model_spec_text("dir:with:colons").model_id, "dir:with:colons");
  EXPECT_EQ(parse_model_spec_text("/srv/a:b/qwen").model_id, "/srv/a:b/qwen");
  EXPECT_EQ(parse_model_spec_text("huggingface:Qwen/Qwen3-8B:tp=2").model_id, "Qwen/Qwen3-8B");
  const HttpResponse ok = api.handle(post("/models/load", {{"model_id", "huggingface:Qwen/Qwen3-Tiny"}}));
  ASSERT_EQ(ok.status, 200) << ok.body;
  const json models = body_of(api.handle(get("/models")));
  ASSERT_EQ(models.size(), 1u);
  EXPECT_EQ(models[0]["id"], "Qwen/Qwen3-Tiny");
  EXPECT_EQ(api.handle(get("/models/Qwen%2FQwen3-Tiny/endpoint")).status, 200);
}

// /discovery before any load: the prompt cap from the models' configs (the
// gateway keeps the first one above 0); cuda_unavailable_reason only when an
// NVIDIA driver is loaded and CUDA still finds no device.
TEST(HelexaContract, DiscoveryBeforeAnyLoad) {
  test_support::TempDir root("neuron-discovery");
  engine::Registry registry(registry_options(root.path()));
  Api api(registry, {});
  const json d = body_of(api.handle(get("/discovery")));
  check_discovery(d);
  EXPECT_EQ(d["max_prompt_tokens"], 40960 - 1) << "the tiny model's max_position_embeddings, less one";
  EXPECT_FALSE(discover(root.path() / "no-driver").contains("cuda_unavailable_reason"));
  root.write("nvidia-version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14\n");
  const json mismatch = discover(root.path() / "nvidia-version");
  if (mismatch["devices"].empty()) {
    ASSERT_TRUE(mismatch.contains("cuda_unavailable_reason")) << mismatch.dump();
    EXPECT_NE(mismatch["cuda_unavailable_reason"].get<std::string>().find("550.54.14"), std::string::npos);
  }
}

}  // namespace
}  // namespace neuron::server
