// The helexa node contract (DESIGN.md section 5, "Model management"): the
// routes the gateway (cortex) polls and drives. Every answer here has the
// contract's required fields with their types; our richer data rides along
// as extra fields (the gateway ignores what it does not know).
#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <optional>

#include <spdlog/spdlog.h>

#include "backend/device.hpp"
#include "engine/model_assets.hpp"
#include "server/activation.hpp"
#include "server/api.hpp"
#include "server/api_helpers.hpp"
#include "server/discovery.hpp"
#include "server/model_spec.hpp"
#include "server/openai_request.hpp"
#include "util/retry_later.hpp"

namespace neuron::server {
namespace {

using nlohmann::json;
using detail::json_response;
using detail::string_field;
using detail::unix_seconds;
using engine::ModelStatus;

constexpr std::uint64_t kMiB = 1u << 20;
// A load on request that outlasts ApiOptions::load_wait: when to try again.
constexpr auto kLoadRetryAfter = std::chrono::seconds(5);

// The automatic recovery of a model whose engine failed: the attempt that is
// scheduled or running, and when a scheduled one starts. Null when none.
json reload_json(const engine::ModelInfo& m) {
  if (m.reload_attempt == 0 || m.status == ModelStatus::loaded || m.status == ModelStatus::loading) return nullptr;
  json r = {{"attempt", m.reload_attempt}};
  if (m.next_reload) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*m.next_reload - std::chrono::steady_clock::now());
    r["next_try_in_ms"] = std::max<std::int64_t>(0, left.count());
  } else {
    r["next_try_in_ms"] = nullptr;  // running now
  }
  return r;
}

// How a model is named in every answer (ModelInfo::name: the id it was loaded
// by, never a path). A bare ModelInfo (display_name of a model not listed)
// gets its served name, else a directory's folder name, else its id.
std::string public_name(const engine::ModelInfo& m) {
  if (!m.name.empty()) return m.name;
  if (!m.served_name.empty()) return m.served_name;
  if (!m.model_id.starts_with('/')) return m.model_id;
  std::filesystem::path p(m.model_id);
  while (!p.empty() && (p.filename().empty() || p.filename() == ".")) p = p.parent_path();
  return p.filename().string();
}

// The contract's status: a failed model being brought back is "recovering";
// one that failed for good (a first load, or auto-reload off) is "unloaded".
const char* contract_status(const engine::ModelInfo& m) {
  switch (m.status) {
    case ModelStatus::loading: return "loading";
    case ModelStatus::loaded: return "loaded";
    case ModelStatus::reloading: return "recovering";
    case ModelStatus::failed: return m.next_reload ? "recovering" : "unloaded";
  }
  return "unloaded";
}

// CUDA ordinals of a model's ranks, each once ("cuda:1" -> 1; CPU ranks have none).
std::vector<int> cuda_ordinals(const engine::ModelInfo& m) {
  std::vector<int> out;
  for (const auto& d : m.devices) {
    try {
      const backend::Device dev = backend::Device::parse(d);
      if (dev.is_cuda() && std::find(out.begin(), out.end(), dev.index) == out.end()) out.push_back(dev.index);
    } catch (const Error&) {
      // ModelInfo holds only Device::str() spellings; nothing else can be here.
    }
  }
  return out;
}

// What the gateway reads: `modalities` as its capability words (neuron serves
// text), and the flags; `list` rides along as "features".
struct Capabilities {
  std::vector<std::string> modalities;  // "text"
  std::vector<std::string> list;        // "completion", "chat", "tools", "reasoning"; "embeddings"; "rerank", "score"
  bool tool_call = false;               // the chat template shows the model a tool-call syntax
  bool reasoning = false;               // the vocabulary has <think>: reasoning is split out
};

Capabilities capabilities_of(const engine::ModelAssets* assets) {
  Capabilities c;
  if (!assets) return c;  // not loaded (yet): unknown, so none claimed
  c.modalities.push_back("text");
  // An embedder or a reranker serves only its own routes (server/embeddings_api.cpp).
  if (assets->task.task == engine::ModelTask::embed) {
    c.list.push_back("embeddings");
    return c;
  }
  if (assets->task.task == engine::ModelTask::rerank) {
    c.list.push_back("rerank");
    c.list.push_back("score");
    return c;
  }
  c.list.push_back("completion");
  if (assets->chat) c.list.push_back("chat");
  c.tool_call = assets->chat.has_value() && assets->chat->tool_call_format().has_value();
  c.reasoning = assets->tokenizer->token_to_id("<think>").has_value();
  if (c.tool_call) c.list.push_back("tools");
  if (c.reasoning) c.list.push_back("reasoning");
  return c;
}

// Whether the model can serve a request now (the gateway stops routing to a
// location whose servable.ok is false): a loaded model whose engine has not
// failed can; otherwise the reason is what a request would get.
json servable_json(const engine::ModelInfo& m, const engine::Engine* engine) {
  if (m.status == ModelStatus::loaded && engine) {
    const engine::EngineStats st = engine->stats();
    if (!st.failed) return {{"ok", true}};
    return {{"ok", false}, {"reason", errc::model_failed}, {"detail", st.failure}};
  }
  if (m.status == ModelStatus::loading) return {{"ok", false}, {"reason", errc::loading}, {"detail", "the model is loading"}};
  return {{"ok", false}, {"reason", m.error_kind.empty() ? std::string(errc::model_failed) : m.error_kind}, {"detail", m.error_message}};
}

double per_second(std::uint64_t tokens, double seconds) { return seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0; }

// The request's id in /models/{id}/...: percent-escapes decoded (a client may send Qwen%2FQwen3-8B).
std::string decode_id(std::string_view raw) {
  std::string out;
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] == '%' && i + 2 < raw.size() && std::isxdigit(static_cast<unsigned char>(raw[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(raw[i + 2]))) {
      out.push_back(static_cast<char>(std::stoi(std::string(raw.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(raw[i]);
    }
  }
  for (unsigned char c : out)
    if (c < 0x20 || c == 0x7f) throw FieldError("model_id", "the model id must not contain control characters");
  return out;
}

// The Host a client reached us at, when it is a plain host[:port].
std::optional<std::string> usable_host(const std::string& host) {
  if (host.empty() || host.size() > 255) return std::nullopt;
  for (unsigned char c : host)
    if (!(std::isalnum(c) || c == '.' || c == '-' || c == ':' || c == '[' || c == ']' || c == '_')) return std::nullopt;
  return host;
}

// A load the node can tell is impossible before loading anything (the
// contract's 422): no such model, a quant or split it cannot do, no memory.
bool impossible_load(const std::string& kind) {
  return kind == errc::not_found || kind == errc::unsupported_arch || kind == errc::bad_tensor_parallel ||
         kind == errc::out_of_memory || kind == errc::bad_model;
}

HttpResponse unprocessable(ApiError e) {
  e.status = 422;
  e.type = "invalid_request_error";
  e.retry_after_s = 0;
  return error_response(e);
}

}  // namespace

void Api::add_management_routes() {
  auto bind = [this](HttpResponse (Api::*fn)(const HttpRequest&)) {
    return [this, fn](const HttpRequest& r) { return (this->*fn)(r); };
  };
  router_.add("GET", "/health", bind(&Api::health));
  router_.add("GET", "/discovery", bind(&Api::discovery));
  router_.add("GET", "/models", bind(&Api::list_models));
  router_.add("POST", "/models/load", bind(&Api::load_model));
  router_.add("POST", "/models/unload", bind(&Api::unload_model));
  router_.add_prefix("GET", "/models/", "/models/{id}/...", bind(&Api::model_route));
}

std::string Api::display_name(const std::string& model_id) const {
  if (auto info = registry_.info(model_id)) return public_name(*info);
  engine::ModelInfo bare;
  bare.model_id = model_id;
  return public_name(bare);
}

// ---- GET /health ----

HttpResponse Api::health(const HttpRequest&) {
  const auto list = registry_.list();
  json models = json::array();
  std::vector<int> busy_devices;  // devices a loaded model holds a CUDA context on
  for (const auto& m : list) {
    json j = {{"id", public_name(m)},
              {"status", contract_status(m)},
              {"state", std::string(engine::to_string(m.status))},
              {"in_flight", 0},
              {"queue_depth", 0},
              {"max_in_flight", 0},
              {"max_queue_depth", 0},
              {"rejected_queue_full", 0},
              {"rejected_timeout", 0},  // neuron has no queue timeout: a queued request waits for its turn
              {"rejected_per_principal", 0},
              {"anon_in_flight", 0},
              {"anon_max_in_flight", 0},
              {"rejected_anon_yield", 0},
              {"kv_budget_mb", 0},
              {"kv_available_mb", 0},
              {"tok_s_prefill", 0.0},
              {"tok_s_decode", 0.0}};
    if (auto engine = registry_.peek(m.model_id)) {
      const engine::EngineStats st = engine->stats();
      const engine::EngineOptions& eo = engine->options();
      const std::uint64_t kv_bytes = engine->memory().kv_cache_bytes;
      const double per_block = st.kv_blocks_total > 0 ? static_cast<double>(kv_bytes) / static_cast<double>(st.kv_blocks_total) : 0.0;
      j["in_flight"] = st.running;
      j["queue_depth"] = st.queue_depth;
      j["max_in_flight"] = eo.max_num_seqs;
      j["max_queue_depth"] = eo.queue_depth;
      j["rejected_queue_full"] = st.rejected_queue_full;
      const AdmissionCounts admitted = admission_.counts(public_name(m), eo.queue_depth + static_cast<std::size_t>(eo.max_num_seqs));
      j["rejected_per_principal"] = admitted.rejected_per_principal;
      j["anon_in_flight"] = admitted.anon_in_flight;
      j["anon_max_in_flight"] = admitted.anon_max_in_flight;
      j["rejected_anon_yield"] = admitted.rejected_anon_yield;
      j["kv_budget_mb"] = kv_bytes / kMiB;
      j["kv_available_mb"] = static_cast<std::uint64_t>(per_block * static_cast<double>(st.kv_blocks_total - st.kv_blocks_used)) / kMiB;
      j["tok_s_prefill"] = per_second(st.prefill_step_tokens, st.prefill_seconds);
      j["tok_s_decode"] = per_second(st.decode_step_tokens, st.decode_seconds);
      for (int d : cuda_ordinals(m))
        if (std::find(busy_devices.begin(), busy_devices.end(), d) == busy_devices.end()) busy_devices.push_back(d);
    }
    if (auto r = reload_json(m); !r.is_null()) j["reload"] = std::move(r);
    models.push_back(std::move(j));
  }
  // Device memory comes from the driver, which needs a context on the device:
  // only devices a model already runs on are asked (asking would put a context
  // on every idle GPU); `vram_measured` says which. An idle device reports its
  // whole memory free (nothing of ours is on it). Utilisation and temperature
  // need NVML, which neuron does not link: 0. All are numbers: the gateway's
  // DeviceHealth has no nulls, and one would fail its whole /health read.
  json devices = json::array();
  for (const auto& d : backend::cuda_devices()) {
    json j = {{"index", d.index}, {"vram_used_mb", 0}, {"vram_free_mb", d.total_bytes / kMiB}, {"utilization_pct", 0}, {"temp_c", 0},
              {"vram_total_mb", d.total_bytes / kMiB}, {"vram_measured", false}};
    if (std::find(busy_devices.begin(), busy_devices.end(), d.index) != busy_devices.end()) {
      if (auto use = backend::cuda_memory_use(d.index)) {
        j["vram_used_mb"] = use->used_bytes / kMiB;
        j["vram_free_mb"] = use->free_bytes / kMiB;
        j["vram_measured"] = true;
      }
    }
    devices.push_back(std::move(j));
  }
  json activation = options_.activation
                        ? options_.activation->to_json(list, [](const engine::ModelInfo& m) { return public_name(m); })
                        : json{{"state", "ready"}, {"pending", json::array()}, {"in_progress", nullptr},
                               {"completed", json::array()}, {"failed", json::array()}};
  const bool down = shutting_down_;
  const double uptime = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  return json_response({{"status", down ? "shutting_down" : "ok"},
                        {"uptime_secs", static_cast<std::int64_t>(uptime)},
                        {"uptime_s", uptime},
                        {"devices", devices},
                        {"activation", activation},
                        {"models", models},
                        {"version", NEURON_VERSION}},
                       down ? 503 : 200);
}

// ---- GET /discovery ----

HttpResponse Api::discovery(const HttpRequest&) {
  json d = discover();
  // The longest prompt a loaded model takes (its context less the token it
  // must generate); before any load, what the models under the model roots
  // take by their configs (the gateway keeps the first value it reads above 0).
  std::int64_t max_prompt = 0;
  for (const auto& m : registry_.list())
    if (m.status == ModelStatus::loaded) max_prompt = std::max<std::int64_t>(max_prompt, m.max_context - 1);
  if (max_prompt == 0) max_prompt = max_prompt_tokens_under(registry_.model_roots());
  d["max_prompt_tokens"] = max_prompt;
  return json_response(d);
}

// ---- GET /models ----

namespace {

json model_entry(const engine::ModelInfo& m, const engine::Engine* engine, const engine::ModelAssets* assets) {
  const Capabilities caps = capabilities_of(assets);
  const std::vector<int> ordinals = cuda_ordinals(m);
  json vram = nullptr;  // host memory is not VRAM: null for CPU models
  if (!ordinals.empty() && m.status == ModelStatus::loaded) {
    // Rank 0's weights and KV pool; the ranks of a split hold about as much each.
    vram = (m.memory.weight_bytes + m.memory.kv_cache_bytes) * static_cast<std::uint64_t>(m.tensor_parallel) / kMiB;
  }
  json j = {{"id", public_name(m)},
            {"harness", "neuron"},
            {"status", contract_status(m)},
            {"devices", ordinals},
            {"vram_used_mb", vram},
            {"capabilities", caps.modalities},
            {"servable", servable_json(m, engine)},
            {"features", caps.list},
            {"limit", {{"context", m.max_context}, {"input", std::max(0, m.max_context - 1)}, {"output", std::max(0, m.max_context - 1)}}},
            {"tool_call", caps.tool_call},
            {"reasoning", caps.reasoning},
            // Extra fields: neuron's own view.
            {"architecture", assets ? json(assets->configs.model.model_type) : json(nullptr)},
            {"task", assets ? json(engine::task_name(assets->task.task)) : json(nullptr)},
            {"pooling", assets && assets->task.task == engine::ModelTask::embed ? json(engine::pooling_name(assets->task.pooling))
                                                                                : json(nullptr)},
            {"include_prompt", assets && assets->task.task == engine::ModelTask::embed ? json(assets->task.include_prompt)
                                                                                       : json(nullptr)},
            {"model_id", m.model_id},
            {"served_name", m.served_name.empty() ? json(nullptr) : json(m.served_name)},
            {"state", std::string(engine::to_string(m.status))},
            {"kind", m.kind},
            {"tensor_parallel", m.tensor_parallel},
            {"expert_parallel", m.expert_parallel},
            {"device_names", m.devices},
            {"quant", m.quant.empty() ? json(nullptr) : json(m.quant)},
            {"max_context", m.max_context},
            {"memory", {{"weight_bytes", m.memory.weight_bytes}, {"kv_cache_bytes", m.memory.kv_cache_bytes}}},
            {"path", m.path.string()},
            {"created", unix_seconds(m.created)},
            {"load_ms", m.load_ms},
            {"keep_alive_ms", m.keep_alive.count() < 0 ? json(nullptr) : json(m.keep_alive.count())},
            {"in_use", m.active}};
  if (m.idle_since) {
    j["idle_ms"] = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - *m.idle_since).count();
  }
  if (m.status == ModelStatus::failed || m.status == ModelStatus::reloading)
    j["error"] = {{"kind", m.error_kind}, {"message", m.error_message}};
  if (auto r = reload_json(m); !r.is_null()) j["reload"] = std::move(r);
  if (m.download) {
    j["download"] = {{"bytes_done", m.download->bytes_done},
                     {"bytes_total", m.download->bytes_total},
                     {"files_done", m.download->files_done},
                     {"files_total", m.download->files_total}};
  }
  if (engine) {
    const engine::EngineStats stats = engine->stats();
    const double prompt = static_cast<double>(stats.prompt_tokens);
    j["queue_depth"] = stats.queue_depth;
    j["running"] = stats.running;
    j["batching"] = {{"max_num_seqs", engine->options().max_num_seqs},
                     {"max_batch_tokens", engine->options().max_batch_tokens},
                     {"steps", stats.steps},
                     {"mean_batch_size", stats.steps ? static_cast<double>(stats.step_seqs) / static_cast<double>(stats.steps) : 0.0},
                     {"preemptions", stats.preemptions}};
    j["kv_cache"] = {{"block_size", stats.kv_block_size},
                     {"blocks_total", stats.kv_blocks_total},
                     {"blocks_used", stats.kv_blocks_used},
                     {"blocks_cached", stats.kv_blocks_cached},
                     {"prompt_tokens_cached", stats.prompt_tokens_cached},
                     {"prefix_hit_rate", prompt > 0 ? static_cast<double>(stats.prompt_tokens_cached) / prompt : 0.0}};
    j["timings"] = {{"load_ms", m.load_ms},
                    {"tok_s_prefill", per_second(stats.prefill_step_tokens, stats.prefill_seconds)},
                    {"tok_s_decode", per_second(stats.decode_step_tokens, stats.decode_seconds)}};
  }
  return j;
}

}  // namespace

json Api::model_json(const engine::ModelInfo& m) const {
  std::shared_ptr<const engine::Engine> engine = registry_.peek(m.model_id);
  std::shared_ptr<const engine::ModelAssets> assets;
  if (engine) {
    try {
      assets = registry_.assets(m.model_id);
    } catch (const Error&) {
      // Unloaded or failed since list(): the entry says enough.
    }
  }
  return model_entry(m, engine.get(), assets.get());
}

HttpResponse Api::list_models(const HttpRequest&) {
  json models = json::array();
  for (const auto& m : registry_.list()) models.push_back(model_json(m));
  return json_response(models);
}

// ---- POST /models/load, /models/unload ----

HttpResponse Api::load_model(const HttpRequest& request) {
  const LoadRequest load = parse_load_request(parse_body(request.body));
  if (load.harness && !known_harness(*load.harness))
    return unprocessable(classify(errc::unsupported_arch, "harness '" + *load.harness + "' is not available on this node (it runs: neuron, candle)", "harness"));
  engine::ModelInfo info;
  try {
    info = registry_.load(load.spec, /*wait=*/false);
  } catch (const FieldError&) {
    throw;
  } catch (const Error& e) {
    if (impossible_load(e.kind())) return unprocessable(from_exception(e));
    throw;
  }
  auto answer = [&](const engine::ModelInfo& m, int status) {
    return json_response({{"status", contract_status(m)}, {"model_id", public_name(m)}, {"model", model_json(m)}}, status);
  };
  if (!load.wait) return answer(info, 202);
  try {
    info = registry_.wait_loaded(info.model_id);
  } catch (const Error& e) {
    ApiError err = from_exception(e);  // the load itself failed (and left nothing): the contract's 400, with its kind as the code
    err.status = 400;
    err.type = "invalid_request_error";
    err.retry_after_s = 0;
    return error_response(err);
  }
  return answer(info, 200);
}

HttpResponse Api::unload_model(const HttpRequest& request) {
  json body = parse_body(request.body);
  std::string id = string_field(body, "model_id", false);
  if (id.empty()) id = string_field(body, "model", false);
  if (id.empty()) throw FieldError("model_id", "'model_id' is required");
  std::int64_t drain_ms = 0;
  if (auto it = body.find("drain_ms"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<std::int64_t>() < 0 || it->get<std::int64_t>() > 600000)
      throw FieldError("drain_ms", "'drain_ms' must be an integer between 0 and 600000");
    drain_ms = it->get<std::int64_t>();
  }
  const std::string asked = id;
  id = resolve_model_name(id);
  const std::string name = display_name(id);
  try {
    registry_.unload(id, std::chrono::milliseconds(drain_ms));
  } catch (const Error& e) {
    if (e.kind() == errc::not_found) throw FieldError("model_id", "model '" + asked + "' is not loaded", errc::not_found);
    throw;
  }
  return json_response({{"status", "unloaded"}, {"model_id", name}});
}

// ---- GET /models/{id}/endpoint, /models/{id}/capabilities ----

HttpResponse Api::model_route(const HttpRequest& request) {
  const std::string rest = request.path.substr(std::string("/models/").size());
  std::string what;
  std::string raw_id;
  for (const char* suffix : {"/endpoint", "/capabilities"}) {
    if (rest.size() > std::strlen(suffix) && rest.ends_with(suffix)) {
      what = suffix + 1;
      raw_id = rest.substr(0, rest.size() - std::strlen(suffix));
    }
  }
  if (what.empty())
    return error_response(classify(http_errc::route_not_found, "no route for GET " + request.path +
                                                                   " (known: /models/{id}/endpoint, /models/{id}/capabilities)"));
  const std::string asked = decode_id(raw_id);
  const std::string id = resolve_model_name(asked);
  const auto info = registry_.info(id);
  if (!info && what == "capabilities") {
    // Not loaded: what its files say, when they are here (nothing is loaded or
    // downloaded); 404 when this node has no evidence. neuron serves text.
    if (!registry_.locate(asked)) throw FieldError("model_id", "no local files for model '" + asked + "'", errc::not_found);
    return json_response({{"capabilities", json::array({"text"})}, {"loaded", false}});
  }
  if (!info) throw FieldError("model_id", "model '" + asked + "' is not loaded", errc::not_found);
  if (what == "endpoint") {
    // The node's root: the gateway appends the client's path (/v1/chat/completions).
    const auto host = usable_host(request.header("Host"));
    if (!host) throw FieldError("Host", "the request has no usable Host header to build the endpoint from");
    return json_response({{"url", "http://" + *host}, {"model", public_name(*info)}});
  }
  std::shared_ptr<const engine::ModelAssets> assets;
  if (info->status == ModelStatus::loaded) {
    try {
      assets = registry_.assets(id);
    } catch (const Error&) {
      // Failed or unloaded since info(): no capabilities to claim.
    }
  }
  const Capabilities caps = capabilities_of(assets.get());
  return json_response({{"capabilities", caps.modalities}, {"features", caps.list}, {"tool_call", caps.tool_call},
                        {"reasoning", caps.reasoning}, {"loaded", true},
                        {"architecture", assets ? json(assets->configs.model.model_type) : json(nullptr)}});
}

// ---- load on request ----

std::string Api::load_on_request(const std::string& model) {
  if (!options_.load_on_request || model.empty() || registry_.info(model)) return model;
  engine::ModelSpec spec;
  spec.model_id = model;
  std::string id;
  try {
    id = registry_.load(spec, /*wait=*/false).model_id;
    spdlog::info("loading model {} on request", id);
  } catch (const Error& e) {
    if (e.kind() == errc::conflict) {
      id = resolve_model_name(model);  // another request started it meanwhile
    } else if (e.kind() == errc::not_found || e.kind() == errc::invalid_argument) {
      throw FieldError("model", "model '" + model + "' does not exist or is not loaded (" + e.what() + ")", http_errc::model_not_found);
    } else {
      throw;
    }
  }
  const engine::ModelInfo info = registry_.wait_loaded(id, options_.load_wait);
  if (info.status == ModelStatus::loading)
    throw RetryLaterError(errc::loading, "model " + model + " is loading (started by this request); try again shortly", kLoadRetryAfter);
  return id;
}

}  // namespace neuron::server
