#include "server/serve_options.hpp"

#include <cstdlib>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "util/error.hpp"

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

json read_config_file(const std::string& path, const std::string& source) {
  std::ifstream in(path);
  if (!in) fail(errc::invalid_argument, source + ": cannot read config file '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  json j;
  try {
    j = json::parse(ss.str());
  } catch (const json::exception& e) {  // parse_error, and out_of_range for a number that overflows
    fail(errc::invalid_argument, "config file '" + path + "' is not valid JSON: " + e.what());
  }
  if (!j.is_object()) fail(errc::invalid_argument, "config file '" + path + "' must hold a JSON object");
  static const char* kKnown[] = {"host",           "port",            "models",           "api_key",
                                 "models_dirs",    "queue_depth",     "max_body_bytes",   "step_timeout_ms",
                                 "threads",        "shutdown_grace_ms", "io_threads",     "max_connections",
                                 "header_timeout_ms", "idle_timeout_ms", "write_timeout_ms"};
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
  o.models = src.list(flags.models, "NEURON_MODEL", "models");
  for (auto& d : src.list(flags.models_dirs, "NEURON_MODELS_DIR", "models_dirs")) o.models_dirs.emplace_back(d);
  return o;
}

}  // namespace neuron::server
