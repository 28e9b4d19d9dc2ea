// Prometheus text rendering and server settings precedence.
#include <gtest/gtest.h>

#include <filesystem>

#include <cstdio>
#include <fstream>
#include <map>

#include "server/discovery.hpp"
#include "server/metrics.hpp"
#include "server/serve_options.hpp"
#include "util/error.hpp"

namespace neuron::server {
namespace {

TEST(ServerMetrics, RendersCountersGaugesAndHistograms) {
  Metrics m;
  m.declare_counter("neuron_http_requests_total", "HTTP requests");
  m.declare_gauge("neuron_models_loaded", "models");
  m.declare_histogram("neuron_ttft_seconds", "ttft", {0.1, 1});
  m.inc("neuron_http_requests_total", {{"route", "/health"}, {"status", "200"}});
  m.inc("neuron_http_requests_total", {{"route", "/health"}, {"status", "200"}});
  m.inc("neuron_http_requests_total", {{"route", "/x\"y"}, {"status", "404"}});
  m.set("neuron_models_loaded", {}, 2);
  m.observe("neuron_ttft_seconds", 0.05);
  m.observe("neuron_ttft_seconds", 0.5);
  m.observe("neuron_ttft_seconds", 5);
  std::string text = m.render();
  EXPECT_NE(text.find("# TYPE neuron_http_requests_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("neuron_http_requests_total{route=\"/health\",status=\"200\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("route=\"/x\\\"y\""), std::string::npos);
  EXPECT_NE(text.find("neuron_models_loaded 2\n"), std::string::npos);
  EXPECT_NE(text.find("neuron_ttft_seconds_bucket{le=\"0.1\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("neuron_ttft_seconds_bucket{le=\"1\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("neuron_ttft_seconds_bucket{le=\"+Inf\"} 3\n"), std::string::npos);
  EXPECT_NE(text.find("neuron_ttft_seconds_count 3\n"), std::string::npos);
  EXPECT_NE(text.find("neuron_ttft_seconds_sum 5.55\n"), std::string::npos) << text;
  EXPECT_EQ(m.value("neuron_http_requests_total", {{"route", "/health"}, {"status", "200"}}), 2);
}

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

TEST(ServerServeOptions, DefaultsWhenNothingIsSet) {
  ServeOptions o = resolve_serve_options({}, env_of({}));
  EXPECT_EQ(o.host, "127.0.0.1");
  EXPECT_EQ(o.port, 13131);
  EXPECT_TRUE(o.api_key.empty());
  EXPECT_TRUE(o.models.empty());
}

TEST(ServerServeOptions, FlagBeatsEnvBeatsFileBeatsDefault) {
  std::string path = testing::TempDir() + "/neuron-serve-config.json";
  std::ofstream(path) << R"({"port": 2000, "host": "0.0.0.0", "queue_depth": 3, "api_key": "file-key", "models": ["a", {"model_id": "b", "tensor_parallel": 2}]})";
  ServeFlags flags;
  flags.config = path;
  flags.port = "4000";
  ServeOptions o = resolve_serve_options(flags, env_of({{"NEURON_PORT", "3000"}, {"NEURON_HOST", "10.0.0.1"}}));
  EXPECT_EQ(o.port, 4000);          // flag
  EXPECT_EQ(o.host, "10.0.0.1");    // env over file
  EXPECT_EQ(o.queue_depth, 3u);     // file over default
  EXPECT_EQ(o.api_key, "file-key");
  ASSERT_EQ(o.models.size(), 2u);
  EXPECT_EQ(nlohmann::json::parse(o.models[1])["tensor_parallel"], 2);
  // The config file may also come from the environment.
  ServeOptions from_env = resolve_serve_options({}, env_of({{"NEURON_CONFIG", path}, {"NEURON_MODEL", "x;y"}}));
  EXPECT_EQ(from_env.port, 2000);
  EXPECT_EQ(from_env.models, (std::vector<std::string>{"x", "y"}));
  std::remove(path.c_str());
}

TEST(ServerServeOptions, InvalidValuesNameTheirSource) {
  auto message_of = [](const ServeFlags& f, std::map<std::string, std::string> env) {
    try {
      resolve_serve_options(f, env_of(env));
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), errc::invalid_argument);
      return std::string(e.what());
    }
    return std::string("no error");
  };
  ServeFlags bad_port;
  bad_port.port = "99999";
  EXPECT_NE(message_of(bad_port, {}).find("--port"), std::string::npos);
  EXPECT_NE(message_of({}, {{"NEURON_PORT", "http"}}).find("NEURON_PORT"), std::string::npos);
  EXPECT_NE(message_of({}, {{"NEURON_QUEUE_DEPTH", "0"}}).find("NEURON_QUEUE_DEPTH"), std::string::npos);
  ServeFlags missing_file;
  missing_file.config = "/nonexistent/neuron.json";
  EXPECT_NE(message_of(missing_file, {}).find("/nonexistent/neuron.json"), std::string::npos);
  std::string path = testing::TempDir() + "/neuron-serve-bad.json";
  std::ofstream(path) << R"({"prot": 1})";
  ServeFlags typo;
  typo.config = path;
  EXPECT_NE(message_of(typo, {}).find("prot"), std::string::npos);
  std::remove(path.c_str());
}

TEST(ServerServeOptions, CpuActivationsAreF32Bf16OrInt8FromFlagEnvOrFile) {
  EXPECT_EQ(resolve_serve_options({}, env_of({})).cpu_activations, "auto");
  EXPECT_EQ(resolve_serve_options({}, env_of({{"NEURON_CPU_ACTIVATIONS", "int8"}})).cpu_activations, "int8");
  EXPECT_EQ(resolve_serve_options({}, env_of({{"NEURON_CPU_ACTIVATIONS", "bf16"}})).cpu_activations, "bf16");
  ServeFlags flag;
  flag.cpu_activations = "f32";
  EXPECT_EQ(resolve_serve_options(flag, env_of({{"NEURON_CPU_ACTIVATIONS", "int8"}})).cpu_activations, "f32");
  std::string path = testing::TempDir() + "/neuron-serve-activations.json";
  std::ofstream(path) << R"({"cpu_activations": "int8"})";
  ServeFlags file;
  file.config = path;
  EXPECT_EQ(resolve_serve_options(file, env_of({})).cpu_activations, "int8");
  std::remove(path.c_str());
  ServeFlags bad;
  bad.cpu_activations = "int4";
  try {
    resolve_serve_options(bad, env_of({}));
    ADD_FAILURE() << "int4 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--cpu-activations"), std::string::npos) << e.what();
  }
}

TEST(ServerServeOptions, AutoReloadComesFromFlagEnvOrFile) {
  EXPECT_TRUE(resolve_serve_options({}, env_of({})).auto_reload);
  EXPECT_FALSE(resolve_serve_options({}, env_of({{"NEURON_AUTO_RELOAD", "0"}})).auto_reload);
  EXPECT_TRUE(resolve_serve_options({}, env_of({{"NEURON_AUTO_RELOAD", "true"}})).auto_reload);
  ServeFlags off;
  off.auto_reload = "0";  // --no-auto-reload
  EXPECT_FALSE(resolve_serve_options(off, env_of({{"NEURON_AUTO_RELOAD", "1"}})).auto_reload);
  std::string path = testing::TempDir() + "/neuron-serve-reload.json";
  std::ofstream(path) << R"({"auto_reload": false})";
  ServeFlags file;
  file.config = path;
  EXPECT_FALSE(resolve_serve_options(file, env_of({})).auto_reload);
  EXPECT_TRUE(resolve_serve_options(file, env_of({{"NEURON_AUTO_RELOAD", "yes"}})).auto_reload);
  std::remove(path.c_str());
  try {
    resolve_serve_options({}, env_of({{"NEURON_AUTO_RELOAD", "maybe"}}));
    ADD_FAILURE() << "a non-boolean was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("NEURON_AUTO_RELOAD"), std::string::npos) << e.what();
  }
}

TEST(ServerServeOptions, StateSnapshotsComeFromFlagEnvOrFile) {
  EXPECT_FALSE(resolve_serve_options({}, env_of({})).state_snapshots) << "unset: the loader's default";
  EXPECT_EQ(resolve_serve_options({}, env_of({{"NEURON_STATE_SNAPSHOTS", "0"}})).state_snapshots, 0);
  ServeFlags flag;
  flag.state_snapshots = "8";
  EXPECT_EQ(resolve_serve_options(flag, env_of({{"NEURON_STATE_SNAPSHOTS", "3"}})).state_snapshots, 8);
  std::string path = testing::TempDir() + "/neuron-serve-snapshots.json";
  std::ofstream(path) << R"({"state_snapshots": 5})";
  ServeFlags file;
  file.config = path;
  EXPECT_EQ(resolve_serve_options(file, env_of({})).state_snapshots, 5);
  std::remove(path.c_str());
  for (const char* bad : {"-1", "lots", "70000"}) {
    ServeFlags f;
    f.state_snapshots = bad;
    try {
      resolve_serve_options(f, env_of({}));
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--state-snapshots"), std::string::npos) << e.what();
    }
  }
}

TEST(ServerServeOptions, KeepAliveAndLoadOnRequestComeFromFlagEnvOrFile) {
  const ServeOptions d = resolve_serve_options({}, env_of({}));
  EXPECT_LT(d.keep_alive.count(), 0) << "models stay loaded unless told otherwise";
  EXPECT_FALSE(d.load_on_request);
  ServeFlags flags;
  flags.keep_alive = "5m";
  flags.load_on_request = "1";  // --load-on-request
  const ServeOptions o = resolve_serve_options(flags, env_of({{"NEURON_KEEP_ALIVE", "1s"}}));
  EXPECT_EQ(o.keep_alive, std::chrono::milliseconds(300000));
  EXPECT_TRUE(o.load_on_request);
  EXPECT_EQ(resolve_serve_options({}, env_of({{"NEURON_KEEP_ALIVE", "0"}})).keep_alive, std::chrono::milliseconds(0));
  std::string path = testing::TempDir() + "/neuron-serve-keep-alive.json";
  std::ofstream(path) << R"({"keep_alive": 30, "load_on_request": true})";
  ServeFlags file;
  file.config = path;
  const ServeOptions from_file = resolve_serve_options(file, env_of({}));
  std::remove(path.c_str());
  EXPECT_EQ(from_file.keep_alive, std::chrono::milliseconds(30000));
  EXPECT_TRUE(from_file.load_on_request);
  try {
    resolve_serve_options({}, env_of({{"NEURON_KEEP_ALIVE", "a while"}}));
    ADD_FAILURE() << "a bad duration was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("NEURON_KEEP_ALIVE"), std::string::npos) << e.what();
  }
}

TEST(ServerServeOptions, LoopbackHosts) {
  for (const char* h : {"127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost", "LocalHost", "::ffff:127.0.0.1", "0:0:0:0:0:0:0:1"})
    EXPECT_TRUE(is_loopback_host(h)) << h;
  for (const char* h : {"0.0.0.0", "::", "[::]", "10.0.0.5", "128.0.0.1", "192.168.1.1", "example.com", "localhost.evil.com", "",
                        "::ffff:10.0.0.1", "fe80::1"})
    EXPECT_FALSE(is_loopback_host(h)) << h;
}

TEST(ServerServeOptions, ExposedWithoutAnApiKeyIsWarnedAbout) {
  ServeOptions o;
  EXPECT_EQ(exposure_warning(o), "") << "the default 127.0.0.1 reaches nobody else";
  o.host = "0.0.0.0";
  const std::string warning = exposure_warning(o);
  EXPECT_NE(warning.find("0.0.0.0"), std::string::npos) << warning;
  EXPECT_NE(warning.find("--api-key"), std::string::npos) << warning;
  o.api_key = "k";
  EXPECT_EQ(exposure_warning(o), "");
  o.api_key.clear();
  o.host = "::1";
  EXPECT_EQ(exposure_warning(o), "");
}

TEST(ServerServeOptions, TransportLimitsResolveLikeEveryOtherSetting) {
  ServeOptions d = resolve_serve_options({}, env_of({}));
  EXPECT_EQ(d.max_connections, 4096u);
  EXPECT_EQ(d.io_threads, 0);
  EXPECT_EQ(d.header_timeout, std::chrono::milliseconds(10000));
  EXPECT_EQ(d.idle_timeout, std::chrono::milliseconds(60000));
  EXPECT_EQ(d.write_timeout, std::chrono::milliseconds(30000));

  std::string path = testing::TempDir() + "/neuron-serve-transport.json";
  std::ofstream(path) << R"({"max_connections": 100, "io_threads": 2, "header_timeout_ms": 500, "idle_timeout_ms": 700, "write_timeout_ms": 900})";
  ServeFlags flags;
  flags.config = path;
  flags.write_timeout_ms = "1234";
  ServeOptions o = resolve_serve_options(flags, env_of({{"NEURON_MAX_CONNECTIONS", "50"}, {"NEURON_IO_THREADS", "3"}}));
  EXPECT_EQ(o.max_connections, 50u);                         // env over file
  EXPECT_EQ(o.io_threads, 3);                                 // env over file
  EXPECT_EQ(o.header_timeout, std::chrono::milliseconds(500));  // file
  EXPECT_EQ(o.idle_timeout, std::chrono::milliseconds(700));    // file
  EXPECT_EQ(o.write_timeout, std::chrono::milliseconds(1234));  // flag
  std::remove(path.c_str());

  ServeFlags zero;
  zero.max_connections = "0";
  EXPECT_THROW(resolve_serve_options(zero, env_of({})), Error);
  try {
    resolve_serve_options({}, env_of({{"NEURON_HEADER_TIMEOUT_MS", "soon"}}));
    ADD_FAILURE() << "a non-numeric deadline was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("NEURON_HEADER_TIMEOUT_MS"), std::string::npos) << e.what();
  }
}

TEST(ServerDiscovery, ParsesMeminfo) {
  MemInfo m = parse_meminfo("MemTotal:       16318480 kB\nMemFree:  100 kB\nMemAvailable:   8000000 kB\n");
  EXPECT_EQ(m.total_bytes, 16318480ull * 1024);
  EXPECT_EQ(m.available_bytes, 8000000ull * 1024);
  EXPECT_EQ(parse_meminfo("garbage\n").total_bytes, 0u);
}

TEST(ServerDiscovery, ReportsThisHost) {
  nlohmann::json d = discover();
  EXPECT_GT(d["memory"]["total_bytes"].get<std::uint64_t>(), 0u);
  EXPECT_GT(d["cpu"]["logical_cores"].get<long>(), 0);
  EXPECT_TRUE(d["devices"].is_array());
  EXPECT_FALSE(d["hostname"].get<std::string>().empty());
  EXPECT_FALSE(d["kernel"].get<std::string>().empty());
  EXPECT_EQ(d["harnesses"], nlohmann::json::array({"neuron", "candle"}));
  EXPECT_EQ(d["architectures"], nlohmann::json::array({"qwen3", "llama", "qwen3_moe", "qwen3_next", "qwen3_5", "qwen3_5_moe"}));
  // A reason only for a driver that CUDA cannot use: a host with no NVIDIA driver is a CPU host, not a mismatch.
  if (d["devices"].empty() && !std::filesystem::exists("/proc/driver/nvidia/version")) {
    EXPECT_TRUE(!d.contains("cuda_unavailable_reason") || d["cuda_unavailable_reason"].is_null()) << d.dump();
  }
}

}  // namespace
}  // namespace neuron::server
