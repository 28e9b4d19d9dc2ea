// `neuron serve`: the daemon. Settings resolve flag > NEURON_* env > config
// file > default (server/serve_options.hpp); invalid settings exit 2. The
// HTTP server answers at once while startup models load in the background.
// SIGTERM/SIGINT: refuse new work, let in-flight requests finish within the
// grace period, cancel the rest, stop HTTP, unload every model (reaping TP
// workers), exit 0. Under systemd (NOTIFY_SOCKET): READY=1 once the startup
// models' loads ended, WATCHDOG=1 while the engines run, STOPPING=1 at SIGTERM.
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <system_error>
#include <thread>
#include <tuple>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "backend/cpu/activations.hpp"
#include "cli/command.hpp"
#include "engine/registry.hpp"
#include "server/activation.hpp"
#include "server/api.hpp"
#include "server/http_server.hpp"
#include "server/model_spec.hpp"
#include "server/serve_options.hpp"
#include "server/service_watchdog.hpp"
#include "server/systemd_notify.hpp"
#include "util/error.hpp"

namespace neuron::cli {
namespace {

namespace fs = std::filesystem;

constexpr const char* kBundledModel = "qwen3-tiny-a";

// The bundled model, for `neuron serve` with no model and no --models-dir (a
// node with a models dir, as under the helexa gateway, starts empty and loads
// what it is asked for): next to the binary (build/neuron -> models/;
// installed: /usr/bin/neuron -> /usr/share/neuron/models), or under the
// current directory.
std::optional<std::string> find_bundled_model() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    const fs::path prefix = exe.parent_path().parent_path();
    for (const fs::path& base : {prefix, exe.parent_path(), prefix / "share" / "neuron"}) {
      fs::path dir = base / "models" / kBundledModel;
      if (fs::exists(dir / "config.json", ec)) return dir.lexically_normal().string();
    }
  }
  fs::path rel = fs::path("models") / kBundledModel;
  if (fs::exists(rel / "config.json", ec)) return rel.string();
  return std::nullopt;
}

// A model named on the command line may live anywhere: a directory's parent,
// or a .gguf file itself (not its folder), becomes a model root (HTTP clients
// still only reach configured roots).
void allow_directory_of(const std::string& model_id, std::vector<fs::path>& roots) {
  std::error_code ec;
  fs::path p(model_id);
  const bool directory = fs::is_directory(p, ec);
  if (!directory && !fs::is_regular_file(p, ec)) return;
  fs::path canonical = fs::canonical(p, ec);
  if (!ec) roots.push_back(directory ? canonical.parent_path() : canonical);
}

// Every client connection is a descriptor: take the whole hard limit (the
// soft one is often 1024). The HTTP server caps its connections to fit.
void raise_fd_limit() {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == rl.rlim_max) return;
  const rlim_t was = rl.rlim_cur;
  rl.rlim_cur = rl.rlim_max;
  if (::setrlimit(RLIMIT_NOFILE, &rl) != 0) spdlog::warn("cannot raise the descriptor limit from {} (ulimit -n)", was);
}

int run_serve(const server::ServeFlags& flags) {
  server::ServeOptions opts;
  std::vector<engine::ModelSpec> specs;
  io::HubOptions hub;
  server::SystemdNotify systemd;  // NOTIFY_SOCKET, WATCHDOG_USEC: set when systemd runs us (Type=notify)
  try {
    opts = server::resolve_serve_options(flags, server::process_env());
    systemd = server::SystemdNotify::from_env();
    hub = io::HubOptions::from_env();  // HF_ENDPOINT, HF_TOKEN, HF_HUB_OFFLINE
    for (const auto& text : opts.models) specs.push_back(server::parse_model_spec_text(text));
    if (!opts.served_model_name.empty()) {
      if (specs.size() != 1)
        fail(errc::invalid_argument, "--served-model-name names the one --model; with several, give each its name= option");
      if (!specs[0].served_name.empty() && specs[0].served_name != opts.served_model_name)
        fail(errc::invalid_argument, "--served-model-name and the --model spec's name= disagree");
      specs[0].served_name = opts.served_model_name;
    }
    for (const auto& [flag, value, field] : {std::tuple{"--task", &flags.task, &engine::ModelSpec::task},
                                             std::tuple{"--pooling", &flags.pooling, &engine::ModelSpec::pooling}}) {
      if (!*value) continue;
      if (specs.size() != 1)
        fail(errc::invalid_argument, std::string(flag) + " applies to the one --model; with several, give each its " +
                                         (flag + 2) + "= option");
      specs[0].*field = **value;
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "neuron serve: %s\n", e.what());
    return 2;
  }

  spdlog::set_default_logger(std::make_shared<spdlog::logger>("neuron", std::make_shared<spdlog::sinks::stderr_color_sink_mt>()));
  if (const std::string warning = server::exposure_warning(opts); !warning.empty()) spdlog::warn("{}", warning);
  // This process's CPU kernels, and through the environment its TP workers'.
  const auto activations =
      backend::cpu::parse_activations(opts.cpu_activations).value_or(backend::cpu::Activations::automatic);
  backend::cpu::set_cpu_activations(activations);
  ::setenv("NEURON_CPU_ACTIVATIONS", opts.cpu_activations.c_str(), 1);
  if (activations != backend::cpu::Activations::f32 && activations != backend::cpu::Activations::automatic)
    spdlog::info("cpu: products may round the activations to {} (--cpu-activations)", opts.cpu_activations);
  // A client that disconnects mid-write must fail the write, not kill the daemon.
  ::signal(SIGPIPE, SIG_IGN);
  raise_fd_limit();
  // Every thread started from here on inherits the blocked mask, so the
  // signals reach only the sigwait() below.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  engine::RegistryOptions ropts;
  ropts.model_roots = opts.models_dirs;
  std::optional<std::string> bundled = find_bundled_model();
  if (bundled) allow_directory_of(*bundled, ropts.model_roots);
  if (specs.empty() && opts.models_dirs.empty()) {
    if (bundled) {
      engine::ModelSpec spec;
      spec.model_id = *bundled;
      specs.push_back(spec);
    } else {
      spdlog::warn("no --model given and the bundled model (models/{}) was not found; serving no model", kBundledModel);
    }
  }
  for (const auto& spec : specs) allow_directory_of(spec.model_id, ropts.model_roots);
  ropts.engine.queue_depth = opts.queue_depth;
  ropts.engine.max_num_seqs = opts.max_num_seqs;
  ropts.engine.max_batch_tokens = opts.max_batch_tokens;
  ropts.engine.prefix_caching = opts.prefix_caching;
  ropts.state_snapshots = opts.state_snapshots;
  ropts.kv_budget = backend::KvBudget{.bytes = opts.kv_cache_bytes, .device_fraction = opts.gpu_memory_fraction};
  ropts.step_timeout = opts.step_timeout;
  ropts.reload.enabled = opts.auto_reload;
  ropts.keep_alive = opts.keep_alive;
  server::Activation activation;  // the startup models' pre-warm, for /health
  ropts.on_load_end = [&activation](const engine::ModelInfo& info) { activation.load_ended(info); };
  ropts.hub = std::move(hub);

  engine::Registry registry(ropts);
  server::ApiOptions api_opts;
  api_opts.api_key = opts.api_key;
  api_opts.activation = &activation;
  api_opts.load_on_request = opts.load_on_request;
  api_opts.admission.per_principal = opts.max_per_principal;
  server::Api api(registry, std::move(api_opts));
  server::HttpServerOptions http_opts;
  http_opts.host = opts.host;
  http_opts.port = opts.port;
  http_opts.max_body_bytes = opts.max_body_bytes;
  http_opts.handler_threads = opts.threads;
  http_opts.io_threads = opts.io_threads;
  http_opts.max_connections = opts.max_connections;
  http_opts.header_timeout = opts.header_timeout;
  http_opts.idle_timeout = opts.idle_timeout;
  http_opts.write_timeout = opts.write_timeout;
  http_opts.cors = server::CorsPolicy::parse(opts.allowed_origins, "--allowed-origins");
  server::HttpServer http(std::move(http_opts),
                          [&api](const server::HttpRequest& r) { return api.handle(r); },
                          [&api](const std::string& m, const std::string& p, int s, double ms) { api.record_exchange(m, p, s, ms); });
  // Queued before the socket opens, so the first /health already lists them
  // as loading (they build one after another: activation shows which). A spec
  // refused outright (missing directory, bad tensor_parallel) is an operator
  // error: exit 2 rather than serve without it.
  for (const auto& spec : specs) {
    try {
      activation.expect(registry.load(spec, /*wait=*/false).model_id);
      spdlog::info("loading model {} (tensor_parallel {})", spec.model_id, spec.tensor_parallel);
    } catch (const Error& e) {
      std::fprintf(stderr, "neuron serve: cannot load model %s: (%s) %s\n", spec.model_id.c_str(), e.kind().c_str(), e.what());
      return 2;
    }
  }

  activation.close_startup();

  int port = 0;
  try {
    port = http.start();
  } catch (const Error& e) {
    // A busy port or an address this host does not have: the operator's to fix, like a bad flag.
    std::fprintf(stderr, "neuron serve: %s\n", e.what());
    return 2;
  }
  spdlog::info("neuron {} listening on http://{}:{}{}", NEURON_VERSION, opts.host, port, opts.api_key.empty() ? "" : " (API key required)");

  // systemd: ready once every startup model's load has ended (loaded or failed);
  // the watchdog fed while the engines go round their loops.
  std::atomic<bool> stopping{false};
  std::thread readiness;
  if (systemd.active()) {
    readiness = std::thread([&] {
      while (!stopping && !activation.wait_ready(std::chrono::milliseconds(200))) {
      }
      if (!stopping) systemd.notify("READY=1\nSTATUS=serving on port " + std::to_string(port));
    });
  }
  server::ServiceWatchdog watchdog(systemd, registry);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  stopping = true;
  if (readiness.joinable()) readiness.join();
  systemd.notify("STOPPING=1");
  spdlog::info("{} received: shutting down (grace {} ms)", sig == SIGTERM ? "SIGTERM" : "SIGINT", opts.shutdown_grace.count());
  api.begin_shutdown();
  if (!api.wait_idle(opts.shutdown_grace)) {
    spdlog::warn("cancelling {} in-flight request(s) after the grace period", api.in_flight());
    api.cancel_all();
    api.wait_idle(std::chrono::milliseconds(5000));
  }
  http.stop();
  spdlog::info("HTTP stopped; unloading models");
  return 0;  // the registry's destructor unloads every model and reaps TP workers
}

Run setup_serve(CLI::App& sub) {
  auto flags = std::make_shared<server::ServeFlags>();
  auto text = std::make_shared<std::map<std::string, std::string>>();
  auto opt = [&sub, text](const char* name, const char* help) {
    return sub.add_option(name, (*text)[name], help);
  };
  opt("--host", "Address to listen on (NEURON_HOST; default 127.0.0.1)");
  opt("--port", "Port to listen on, 0 = any free port (NEURON_PORT; default 13131)");
  sub.add_option("--model", flags->models,
                 "Model to load at startup: a directory, a .gguf file or a Hugging Face id, optionally 'ID:tp=2,device=cuda', or a ModelSpec JSON "
                 "object; repeatable (NEURON_MODEL, ';'-separated; default the bundled models/qwen3-tiny-a, unless --models-dir is given)");
  opt("--config", "JSON config file with the same settings (NEURON_CONFIG)");
  opt("--api-key", "Require 'Authorization: Bearer KEY' (or 'x-api-key: KEY') on every route but /health (NEURON_API_KEY)");
  opt("--allowed-origins",
      "Browser origins allowed to call the API (CORS), comma-separated, or '*' (NEURON_ALLOWED_ORIGINS; default none beyond the same origin)");
  sub.add_option("--models-dir", flags->models_dirs, "Directory POST /models/load may load models from; repeatable (NEURON_MODELS_DIR)");
  opt("--queue-depth", "Waiting requests per model before 503 (NEURON_QUEUE_DEPTH; default 64)");
  opt("--max-body-bytes", "Largest request body accepted, else 413 (NEURON_MAX_BODY_BYTES; default 8 MiB)");
  opt("--step-timeout-ms", "Deadline for one TP step before the model is marked failed (NEURON_STEP_TIMEOUT_MS; default 30000)");
  opt("--threads", "Handler threads for requests (NEURON_THREADS; default 64); streams hold none");
  opt("--io-threads", "HTTP IO threads (NEURON_IO_THREADS; default 0 = min(4, cores))");
  opt("--max-connections", "Open connections before new ones get 503 (NEURON_MAX_CONNECTIONS; default 4096; needs ulimit -n above it)");
  opt("--header-timeout-ms", "Deadline for a request's head (NEURON_HEADER_TIMEOUT_MS; default 10000)");
  opt("--idle-timeout-ms", "Idle keep-alive connections and stalled bodies close after this (NEURON_IDLE_TIMEOUT_MS; default 60000)");
  opt("--write-timeout-ms", "A client that reads nothing this long is cut off, its generation cancelled (NEURON_WRITE_TIMEOUT_MS; default 30000)");
  opt("--shutdown-grace-ms", "How long in-flight requests may finish after SIGTERM (NEURON_SHUTDOWN_GRACE_MS; default 10000)");
  opt("--max-num-seqs", "Sequences a model decodes together (NEURON_MAX_NUM_SEQS; default 64)");
  opt("--max-per-principal", "Sequences (running and queued) one helexa gateway principal (x-helexa-account-id + "
                              "x-helexa-key-id) may hold per model; over it 429 with Retry-After; anonymous callers share "
                              "what is left after one such share (NEURON_MAX_PER_PRINCIPAL; default 0: a quarter of "
                              "max-num-seqs + queue-depth)");
  opt("--max-batch-tokens", "New tokens per batched step, decodes plus prefill chunks (NEURON_MAX_BATCH_TOKENS; default 8192 on a GPU, 512 on the CPU)");
  opt("--kv-cache-bytes", "KV cache per model and rank, in bytes (NEURON_KV_CACHE_BYTES; default: the GPU memory fraction, 2 GiB on the CPU)");
  opt("--gpu-memory-fraction", "Share of each GPU a model's weights, KV cache and activations may use (NEURON_GPU_MEMORY_FRACTION; default 0.9)");
  opt("--prefix-caching", "true|false: reuse the KV blocks of earlier requests' shared prefixes (NEURON_PREFIX_CACHING; default true)");
  opt("--state-snapshots", "Hybrid (Gated DeltaNet) models: recurrent-state snapshots kept per model for prefix reuse, "
                           "counted in its memory; 0 turns their prefix caching off (NEURON_STATE_SNAPSHOTS; default 2 "
                           "per state slot: 32)");
  opt("--served-model-name", "The name clients use for the one --model, echoed in responses (NEURON_SERVED_MODEL_NAME; "
                             "per model: name= in its --model spec)");
  opt("--task", "What the one --model serves: generate, embed (/v1/embeddings) or rerank (/v1/rerank, /v1/score); "
                "default: detected (a sentence-transformers folder embeds, a name with 'reranker' reranks; per model: "
                "task= in its --model spec)");
  opt("--pooling", "With --task embed on a generative model: last, mean or cls (per model: pooling= in its --model spec)");
  opt("--keep-alive", "How long a model stays loaded after its last request: '5m', '30s', seconds, 0 = unload at once, "
                      "negative = never (NEURON_KEEP_ALIVE; default never; a load's keep_alive overrides it)");
  opt("--cpu-activations", "auto|f32|bf16|int8: how far the CPU products may round the activations: auto (default): "
                            "products with quantized weights round them to int8 per 256 columns, as llama.cpp, the rest "
                            "stay f32; f32: exact; bf16: prefill and batched decode round them to bf16 and the KV cache "
                            "holds bf16; int8: that, and quantized products round them to int8 (NEURON_CPU_ACTIVATIONS)");
  sub.add_flag("--load-on-request")
      ->description("A request for a model that is not loaded loads it, when it is a folder under --models-dir or a "
                    "Hugging Face id in the local cache (NEURON_LOAD_ON_REQUEST=1; config load_on_request: true)");
  sub.add_flag("--no-auto-reload")
      ->description("Leave a model whose engine failed (a TP worker died) failed instead of reloading it with backoff "
                    "(NEURON_AUTO_RELOAD=0; config auto_reload: false)");
  return [flags, text, &sub]() {
    auto given = [&](const char* name) -> std::optional<std::string> {
      if (sub.count(name) == 0) return std::nullopt;
      return (*text)[name];
    };
    flags->host = given("--host");
    flags->port = given("--port");
    flags->config = given("--config");
    flags->api_key = given("--api-key");
    flags->queue_depth = given("--queue-depth");
    flags->max_body_bytes = given("--max-body-bytes");
    flags->step_timeout_ms = given("--step-timeout-ms");
    flags->threads = given("--threads");
    flags->shutdown_grace_ms = given("--shutdown-grace-ms");
    flags->max_num_seqs = given("--max-num-seqs");
    flags->max_batch_tokens = given("--max-batch-tokens");
    flags->max_per_principal = given("--max-per-principal");
    flags->kv_cache_bytes = given("--kv-cache-bytes");
    flags->gpu_memory_fraction = given("--gpu-memory-fraction");
    flags->prefix_caching = given("--prefix-caching");
    flags->state_snapshots = given("--state-snapshots");
    if (sub.count("--no-auto-reload") > 0) flags->auto_reload = "0";
    if (sub.count("--load-on-request") > 0) flags->load_on_request = "1";
    flags->keep_alive = given("--keep-alive");
    flags->served_model_name = given("--served-model-name");
    flags->task = given("--task");
    flags->pooling = given("--pooling");
    flags->io_threads = given("--io-threads");
    flags->max_connections = given("--max-connections");
    flags->header_timeout_ms = given("--header-timeout-ms");
    flags->idle_timeout_ms = given("--idle-timeout-ms");
    flags->write_timeout_ms = given("--write-timeout-ms");
    flags->allowed_origins = given("--allowed-origins");
    flags->cpu_activations = given("--cpu-activations");
    return run_serve(*flags);
  };
}

}  // namespace

NEURON_COMMAND(serve, "Run the HTTP daemon (OpenAI-compatible API)", setup_serve);

}  // namespace neuron::cli
