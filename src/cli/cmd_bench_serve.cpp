// `neuron bench-serve`: a serving benchmark. Drives a running OpenAI-compatible
// server (neuron serve, llama.cpp's llama-server, ...) with N concurrent
// streaming clients per level and reports TTFT, time per output token,
// latency and output tokens/s, per level.
//   neuron bench-serve --url http://127.0.0.1:13131 [--model NAME] --concurrency 1,8,32
//                      --prompt-len 128 --gen 128 [--requests-per-client N | --duration S]
//                      [--warmup N] [--vocab V] [--json] [--json-out FILE] [--api-key KEY] [--wait S]
//
// Each request is a random prompt of exactly --prompt-len token ids with
// max_tokens = --gen and ignore_eos, streamed with stream_options.include_usage
// (loadgen/load.hpp). TTFT: request sent -> first chunk with content. TPOT:
// (last content chunk - first) / (tokens - 1). Output tokens/s: the ok
// requests' tokens over the level's wall time (first request sent -> last
// response ended). Every failed request (refused, non-200, error event,
// truncated stream, wrong token count) is counted with its reason; any error
// makes the exit status 1.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "cli/command.hpp"
#include "loadgen/load.hpp"
#include "loadgen/stats.hpp"
#include "util/error.hpp"

namespace neuron::cli {
namespace {

using nlohmann::json;

struct BenchServeArgs {
  std::string url = "http://127.0.0.1:13131";
  std::string model;
  std::string api_key;
  std::vector<int> concurrency{1};
  std::int32_t prompt_len = 128;
  std::int32_t gen = 128;
  int requests_per_client = 4;
  bool requests_per_client_given = false;
  double duration_s = 0;
  int warmup = 1;
  std::int32_t vocab = 151643;
  double temperature = 0;
  bool server_sampling = false;
  std::uint64_t seed = 0;
  int timeout_s = 600;
  double wait_s = 0;
  std::string label;
  bool json = false;
  std::string json_out;
};

void check(bool ok, const std::string& message) {
  if (!ok) fail(errc::invalid_argument, message);
}

void validate(const BenchServeArgs& a) {
  check(!a.concurrency.empty(), "--concurrency needs at least one value");
  for (int c : a.concurrency) check(c >= 1 && c <= 4096, "--concurrency values must be in [1, 4096] (got " + std::to_string(c) + ")");
  check(a.prompt_len >= 1, "--prompt-len must be at least 1");
  check(a.gen >= 1, "--gen must be at least 1");
  check(a.requests_per_client >= 1, "--requests-per-client must be at least 1");
  check(a.duration_s >= 0, "--duration must not be negative");
  check(!(a.requests_per_client_given && a.duration_s > 0), "--requests-per-client and --duration exclude each other");
  check(a.warmup >= 0, "--warmup must not be negative");
  check(a.vocab >= 1, "--vocab must be at least 1");
  check(a.timeout_s >= 1, "--timeout must be at least 1 second");
  check(a.wait_s >= 0, "--wait must not be negative");
}

httplib::Client info_client(const loadgen::Target& t) {
  httplib::Client c(t.endpoint.host, t.endpoint.port);
  c.set_connection_timeout(std::chrono::seconds(5));
  c.set_read_timeout(std::chrono::seconds(30));
  return c;
}

httplib::Headers auth(const loadgen::Target& t) {
  if (t.api_key.empty()) return {};
  return {{"Authorization", "Bearer " + t.api_key}};
}

// The ids of GET /v1/models, or nullopt while the server does not answer 200
// with a model list (not up yet, or still loading).
std::optional<std::vector<std::string>> served_models(const loadgen::Target& t, std::string* why) {
  auto res = info_client(t).Get((t.endpoint.base_path + "/v1/models").c_str(), auth(t));
  if (!res) {
    *why = "GET /v1/models: " + httplib::to_string(res.error());
    return std::nullopt;
  }
  if (res->status != 200) {
    *why = "GET /v1/models: HTTP " + std::to_string(res->status) + " " + res->body.substr(0, 300);
    return std::nullopt;
  }
  json body = json::parse(res->body, nullptr, false);
  if (body.is_discarded() || !body.contains("data") || !body["data"].is_array() || body["data"].empty()) {
    *why = "GET /v1/models lists no model yet";
    return std::nullopt;
  }
  std::vector<std::string> ids;
  for (const auto& m : body["data"])
    if (m.is_object() && m.contains("id") && m["id"].is_string()) ids.push_back(m["id"]);
  return ids;
}

int run_bench_serve(BenchServeArgs a) {
  try {
    validate(a);
  } catch (const Error& e) {
    std::fprintf(stderr, "neuron bench-serve: %s\n", e.what());
    return 2;
  }
  loadgen::Target target;
  try {
    target.endpoint = loadgen::parse_url(a.url);
  } catch (const Error& e) {
    std::fprintf(stderr, "neuron bench-serve: %s\n", e.what());
    return 2;
  }
  target.model = a.model;
  target.api_key = a.api_key;
  target.timeout = std::chrono::seconds(a.timeout_s);

  // Wait for the server (and its model) when asked to, then name the model.
  std::string why;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(a.wait_s);
  std::optional<std::vector<std::string>> models = served_models(target, &why);
  while (!models && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
    models = served_models(target, &why);
  }
  if (!models) fail(errc::not_found, "the server at " + a.url + " is not ready: " + why);
  if (target.model.empty()) target.model = models->front();

  loadgen::Workload w;
  w.prompt_len = a.prompt_len;
  w.gen = a.gen;
  w.vocab = a.vocab;
  w.seed = a.seed;
  if (a.server_sampling) w.temperature.reset();
  else w.temperature = a.temperature;

  // Warm-up: sequential requests of the same shape, not recorded; a failure
  // here means the benchmark would measure nothing, so it stops.
  if (a.warmup > 0) {
    loadgen::Client client(target);
    for (int i = 0; i < a.warmup; ++i) {
      const auto body = loadgen::completion_body(target, w, loadgen::random_prompt(w, ~0ULL, 0, static_cast<std::uint64_t>(i)));
      const loadgen::RequestRecord r = client.complete(body.dump(), w.gen);
      if (!r.ok) fail(errc::io, "warm-up request " + std::to_string(i + 1) + " failed: " + r.error);
    }
  }

  std::ofstream json_file;
  if (!a.json_out.empty()) {
    json_file.open(a.json_out, std::ios::app);
    if (!json_file) fail(errc::io, "cannot open --json-out " + a.json_out);
  }
  if (!a.json) {
    char per_level[64];
    if (a.duration_s > 0) std::snprintf(per_level, sizeof per_level, "%g s per level", a.duration_s);
    else std::snprintf(per_level, sizeof per_level, "%d requests per client", a.requests_per_client);
    std::printf("bench-serve %s model %s: prompt %d ids, gen %d (ignore_eos), %s, warm-up %d\n", a.url.c_str(),
                target.model.c_str(), a.prompt_len, a.gen, per_level, a.warmup);
    std::printf("%s\n", loadgen::table_header().c_str());
    std::fflush(stdout);
  }
  std::size_t total_errors = 0;
  for (std::size_t level = 0; level < a.concurrency.size(); ++level) {
    loadgen::LevelOptions o;
    o.concurrency = a.concurrency[level];
    o.requests_per_client = a.requests_per_client;
    o.duration = std::chrono::duration<double>(a.duration_s);
    const loadgen::LevelRun run = loadgen::run_level(target, w, o, level);
    const loadgen::LevelSummary s = loadgen::summarize(o.concurrency, run.wall_s, run.records);
    total_errors += s.errors;
    {
      nlohmann::ordered_json out;
      if (!a.label.empty()) out["label"] = a.label;
      out["url"] = a.url;
      out["model"] = target.model;
      out["prompt_len"] = a.prompt_len;
      out["gen"] = a.gen;
      if (a.duration_s > 0) out["duration_s"] = a.duration_s;
      else out["requests_per_client"] = a.requests_per_client;
      out["temperature"] = w.temperature ? json(*w.temperature) : json(nullptr);
      const nlohmann::ordered_json level = loadgen::to_json(s);
      for (const auto& [k, v] : level.items()) out[k] = v;
      if (a.json) std::printf("%s\n", out.dump().c_str());
      if (json_file.is_open()) json_file << out.dump() << std::endl;
    }
    if (!a.json) {
      std::printf("%s\n", loadgen::table_row(s).c_str());
      for (const auto& [reason, n] : s.error_counts) std::printf("      %zu x %s\n", n, reason.c_str());
    }
    std::fflush(stdout);
  }
  if (total_errors > 0) {
    std::fprintf(stderr, "neuron bench-serve: %zu request(s) failed\n", total_errors);
    return 1;
  }
  return 0;
}

Run setup_bench_serve(CLI::App& sub) {
  auto a = std::make_shared<BenchServeArgs>();
  sub.add_option("--url", a->url, "Server base URL, http://host[:port][/prefix]")->capture_default_str();
  sub.add_option("--model", a->model, "The request's model (default: the first of GET /v1/models)");
  sub.add_option("--api-key", a->api_key, "Sent as Authorization: Bearer KEY");
  sub.add_option("--concurrency", a->concurrency, "Concurrent clients per level, comma separated (e.g. 1,8,32)")
      ->delimiter(',')
      ->capture_default_str();
  sub.add_option("--prompt-len", a->prompt_len, "Prompt length in tokens (random ids)")->capture_default_str();
  sub.add_option("--gen", a->gen, "Tokens each request generates (max_tokens, ignore_eos)")->capture_default_str();
  auto* rpc = sub.add_option("--requests-per-client", a->requests_per_client, "Requests each client sends back to back")
                  ->capture_default_str();
  sub.add_option("--duration", a->duration_s, "Seconds per level each client keeps starting requests (instead of --requests-per-client)");
  sub.add_option("--warmup", a->warmup, "Unrecorded sequential requests before the first level")->capture_default_str();
  sub.add_option("--vocab", a->vocab, "Prompt ids are uniform in [0, vocab)")->capture_default_str();
  sub.add_option("--temperature", a->temperature, "Sampling temperature sent with each request")->capture_default_str();
  sub.add_flag("--server-sampling", a->server_sampling, "Send no temperature: use the server's default sampling");
  sub.add_option("--seed", a->seed, "Seed of the random prompts")->capture_default_str();
  sub.add_option("--timeout", a->timeout_s, "Seconds to wait for the next bytes of a response")->capture_default_str();
  sub.add_option("--wait", a->wait_s, "Seconds to wait for the server to list a model before starting")->capture_default_str();
  sub.add_option("--label", a->label, "Free text copied into each JSON line (e.g. the server and model)");
  sub.add_flag("--json", a->json, "One JSON object per level on stdout instead of the table");
  sub.add_option("--json-out", a->json_out, "Also append each level's JSON object to FILE (one per line)");
  return [a, rpc] {
    a->requests_per_client_given = rpc->count() > 0;
    return run_bench_serve(*a);
  };
}

// Registered by hand: NEURON_COMMAND would spell the name with an underscore.
const bool bench_serve_registered = register_command({"bench-serve", "Serving benchmark: concurrent streaming clients against an OpenAI-compatible server", setup_bench_serve});

}  // namespace
}  // namespace neuron::cli
