#include "server/serve_options.hpp"

#include "backend/cpu/activations.hpp"
#include "server/cors.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "server/keep_alive.hpp"
#include "util/error.hpp"
#include "util/json_parse.hpp"

namespace neuron::server {
namespace {

using nlohmann::json;

// One setting's raw text and where it came from, for error messages.
struct Raw {
  std::string text;
  std::string source;
};

class Sources {
 public:
  Sources(const EnvLookup& env, const json& file) : env_(env), file_(file) {}

  std::optional<Raw> get(const std::optional<std::string>& flag, const char* flag_name, const char* env_name,
                         const char* file_key) const {
    if (flag) return Raw{*flag, flag_name};
    if (auto v = env_(env_name)) return Raw{*v, env_name};
    if (auto it = file_.find(file_key); it != file_.end() && !it->is_null()) {
      std::string source = std::string("config file '") + file_key + "'";
      if (it->is_string()) return Raw{it->get<std::string>(), source};
      if (it->is_number_integer() || it->is_boolean()) return Raw{it->dump(), source};
      fail(errc::invalid_argument, source + " must be a string or an integer, got " + it->dump());
    }
    return std::nullopt;
  }

  // Lists: flags (repeatable) win as a whole; the env var holds ';'-separated
  // items (model specs may contain commas); the file holds an array of strings.
  std::vector<std::string> list(const std::vector<std::string>& flag, const char* env_name, const char* file_key) const {
    if (!flag.empty()) return flag;
    std::vector<std::string> out;
    if (auto v = env_(env_name)) {
      std::stringstream ss(*v);
      for (std::string item; std::getline(ss, item, ';');)
        if (!item.empty()) out.push_back(item);
      return out;
    }
    if (auto it = file_.find(file_key); it != file_.end() && !it->is_null()) {
      std::string source = std::string("config file '") + file_key + "'";
      if (!it->is_array()) fail(errc::invalid_argument, source + " must be an array");
      for (const auto& item : *it) {
        if (item.is_string()) out.push_back(item.get<std::string>());
        else if (item.is_object()) out.push_back(item.dump());  // a ModelSpec object
        else fail(errc::invalid_argument, source + " entries must be strings, got " + item.dump());
      }
    }
    return out;
  }

 private:
  const EnvLookup& env_;
  const json& file_;
};

std::int64_t parse_int(const Raw& raw, std::int64_t lo, std::int64_t hi) {
  std::size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(raw.text, &used, 10);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != raw.text.size())
    fail(errc::invalid_argument, raw.source + " must be an integer, got '" + raw.text + "'");
  if (v < lo || v > hi)
    fail(errc::invalid_argument,
         raw.source + " must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " + raw.text);
  return v;
}

double parse_fraction(const Raw& raw) {
  double v = 0;
  std::size_t used = 0;
  try {
    v = std::stod(raw.text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != raw.text.size() || !(v > 0.0 && v <= 1.0))
    fail(errc::invalid_argument, raw.source + " must be a number in (0, 1], got " + raw.text);
  return v;
}

bool parse_bool(const Raw& raw) {
  for (const char* t : {"1", "true", "yes", "on"})
    if (raw.text == t) return true;
  for (const char* f : {"0", "false", "no", "off"})
    if (raw.text == f) return false;
  fail(errc::invalid_argument, raw.source + " must be a boolean (1/0, true/false, yes/no, on/off), got '" + raw.text + "'");
}

json read_config_file(const std::string& path, const std::string& source) {
  std::ifstream in(path);
  if (!in) fail(errc::invalid_argument, source + ": cannot read config file '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  const json j = parse_json(ss.str(), "config file '" + path + "'");
  if (!j.is_object()) fail(errc::invalid_argument, "config file '" + path + "' must hold a JSON object");
  static const char* kKnown[] = {"host",         "port",           "models",          "api_key",
                                 "models_dirs",  "queue_depth",    "max_body_bytes",  "step_timeout_ms",
                                 "threads",      "shutdown_grace_ms", "max_num_seqs", "max_batch_tokens",
                                 "kv_cache_bytes", "gpu_memory_fraction", "prefix_caching", "auto_reload",
                                 "io_threads",     "max_connections", "header_timeout_ms", "idle_timeout_ms",
                                 "write_timeout_ms", "keep_alive",     "load_on_request", "served_model_name",
                                 "allowed_origins", "cpu_activations", "max_per_principal", "state_snapshots"};
  for (const auto& [key, value] : j.items()) {
    bool known = false;
    for (const char* k : kKnown) known = known || key == k;
    if (!known) fail(errc::invalid_argument, "config file '" + path + "': unknown setting '" + key + "'");
  }
  return j;
}

}  // namespace

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  };
}

bool is_loopback_host(std::string_view host) {
  std::string h(host);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  std::string lower = h;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "localhost") return true;
  in_addr v4{};
  if (::inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, h.c_str(), &v6) == 1)
    return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
  return false;
}

std::string exposure_warning(const ServeOptions& options) {
  if (!options.api_key.empty() || is_loopback_host(options.host)) return {};
  return "listening on " + options.host +
         " without --api-key: anyone who can reach this address can load and unload models and use them; set --api-key "
         "(NEURON_API_KEY) or listen on 127.0.0.1";
}

ServeOptions resolve_serve_options(const ServeFlags& flags, const EnvLookup& env) {
  json file = json::object();
  if (flags.config) file = read_config_file(*flags.config, "--config");
  else if (auto p = env("NEURON_CONFIG")) file = read_config_file(*p, "NEURON_CONFIG");

  Sources src(env, file);
  ServeOptions o;
  constexpr std::int64_t kMaxSize = std::numeric_limits<std::int32_t>::max();
  if (auto r = src.get(flags.host, "--host", "NEURON_HOST", "host")) {
    if (r->text.empty()) fail(errc::invalid_argument, r->source + " must not be empty");
    o.host = r->text;
  }
  if (auto r = src.get(flags.port, "--port", "NEURON_PORT", "port")) o.port = static_cast<int>(parse_int(*r, 0, 65535));
  if (auto r = src.get(flags.api_key, "--api-key", "NEURON_API_KEY", "api_key")) o.api_key = r->text;
  if (auto r = src.get(flags.queue_depth, "--queue-depth", "NEURON_QUEUE_DEPTH", "queue_depth"))
    o.queue_depth = static_cast<std::size_t>(parse_int(*r, 1, 1 << 20));
  if (auto r = src.get(flags.max_body_bytes, "--max-body-bytes", "NEURON_MAX_BODY_BYTES", "max_body_bytes"))
    o.max_body_bytes = static_cast<std::size_t>(parse_int(*r, 1024, std::int64_t{1} << 34));
  if (auto r = src.get(flags.step_timeout_ms, "--step-timeout-ms", "NEURON_STEP_TIMEOUT_MS", "step_timeout_ms"))
    o.step_timeout = std::chrono::milliseconds(parse_int(*r, 1, kMaxSize));
  if (auto r = src.get(flags.threads, "--threads", "NEURON_THREADS", "threads"))
    o.threads = static_cast<int>(parse_int(*r, 1, 4096));
  if (auto r = src.get(flags.shutdown_grace_ms, "--shutdown-grace-ms", "NEURON_SHUTDOWN_GRACE_MS", "shutdown_grace_ms"))
    o.shutdown_grace = std::chrono::milliseconds(parse_int(*r, 0, kMaxSize));
  if (auto r = src.get(flags.max_num_seqs, "--max-num-seqs", "NEURON_MAX_NUM_SEQS", "max_num_seqs"))
    o.max_num_seqs = static_cast<int>(parse_int(*r, 1, 4096));
  if (auto r = src.get(flags.max_per_principal, "--max-per-principal", "NEURON_MAX_PER_PRINCIPAL", "max_per_principal"))
    o.max_per_principal = static_cast<std::size_t>(parse_int(*r, 0, 1 << 20));
  if (auto r = src.get(flags.max_batch_tokens, "--max-batch-tokens", "NEURON_MAX_BATCH_TOKENS", "max_batch_tokens"))
    o.max_batch_tokens = static_cast<int>(parse_int(*r, 1, 1 << 20));
  if (auto r = src.get(flags.kv_cache_bytes, "--kv-cache-bytes", "NEURON_KV_CACHE_BYTES", "kv_cache_bytes"))
    o.kv_cache_bytes = static_cast<std::uint64_t>(parse_int(*r, 1 << 20, std::int64_t{1} << 46));
  if (auto r = src.get(flags.gpu_memory_fraction, "--gpu-memory-fraction", "NEURON_GPU_MEMORY_FRACTION", "gpu_memory_fraction"))
    o.gpu_memory_fraction = parse_fraction(*r);
  if (auto r = src.get(flags.prefix_caching, "--prefix-caching", "NEURON_PREFIX_CACHING", "prefix_caching"))
    o.prefix_caching = parse_bool(*r);
  if (auto r = src.get(flags.state_snapshots, "--state-snapshots", "NEURON_STATE_SNAPSHOTS", "state_snapshots"))
    o.state_snapshots = static_cast<int>(parse_int(*r, 0, 1 << 16));
  if (auto r = src.get(flags.auto_reload, "--no-auto-reload", "NEURON_AUTO_RELOAD", "auto_reload"))
    o.auto_reload = parse_bool(*r);
  if (auto r = src.get(flags.io_threads, "--io-threads", "NEURON_IO_THREADS", "io_threads"))
    o.io_threads = static_cast<int>(parse_int(*r, 0, 256));
  if (auto r = src.get(flags.max_connections, "--max-connections", "NEURON_MAX_CONNECTIONS", "max_connections"))
    o.max_connections = static_cast<std::size_t>(parse_int(*r, 1, 1 << 20));
  if (auto r = src.get(flags.header_timeout_ms, "--header-timeout-ms", "NEURON_HEADER_TIMEOUT_MS", "header_timeout_ms"))
    o.header_timeout = std::chrono::milliseconds(parse_int(*r, 1, kMaxSize));
  if (auto r = src.get(flags.idle_timeout_ms, "--idle-timeout-ms", "NEURON_IDLE_TIMEOUT_MS", "idle_timeout_ms"))
    o.idle_timeout = std::chrono::milliseconds(parse_int(*r, 1, kMaxSize));
  if (auto r = src.get(flags.write_timeout_ms, "--write-timeout-ms", "NEURON_WRITE_TIMEOUT_MS", "write_timeout_ms"))
    o.write_timeout = std::chrono::milliseconds(parse_int(*r, 1, kMaxSize));
  if (auto r = src.get(flags.keep_alive, "--keep-alive", "NEURON_KEEP_ALIVE", "keep_alive")) {
    try {
      o.keep_alive = parse_keep_alive(std::string_view(r->text));
    } catch (const Error& e) {
      fail(errc::invalid_argument, r->source + ": " + e.what());
    }
  }
  if (auto r = src.get(flags.load_on_request, "--load-on-request", "NEURON_LOAD_ON_REQUEST", "load_on_request"))
    o.load_on_request = parse_bool(*r);
  if (auto r = src.get(flags.served_model_name, "--served-model-name", "NEURON_SERVED_MODEL_NAME", "served_model_name")) {
    if (r->text.empty()) fail(errc::invalid_argument, r->source + " must not be empty");
    o.served_model_name = r->text;
  }
  if (auto r = src.get(flags.allowed_origins, "--allowed-origins", "NEURON_ALLOWED_ORIGINS", "allowed_origins")) {
    CorsPolicy::parse(r->text, r->source);  // refused here, at startup, when an entry is not an origin
    o.allowed_origins = r->text;
  }
  if (auto r = src.get(flags.cpu_activations, "--cpu-activations", "NEURON_CPU_ACTIVATIONS", "cpu_activations")) {
    if (!backend::cpu::parse_activations(r->text))
      fail(errc::invalid_argument, r->source + " must be f32, bf16, int8 or auto, got '" + r->text + "'");
    o.cpu_activations = r->text;
  }
  o.models = src.list(flags.models, "NEURON_MODEL", "models");
  for (auto& d : src.list(flags.models_dirs, "NEURON_MODELS_DIR", "models_dirs")) o.models_dirs.emplace_back(d);
  return o;
}

}  // namespace neuron::server
