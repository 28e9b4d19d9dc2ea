#pragma once
// `neuron serve` settings from three sources with one precedence:
// command-line flag > NEURON_* environment variable > JSON config file >
// default. Every value is validated here and a bad one names its source
// ("--port", "NEURON_PORT", "config file 'port'"), so the CLI can exit 2
// with a message the operator can act on.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace neuron::server {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 13131;  // 0: any free port (tests); the bound port is logged
  std::vector<std::string> models;  // model specs loaded at startup (see parse_model_spec_text)
  std::string api_key;              // empty: no authentication
  std::vector<std::filesystem::path> models_dirs;  // where /models/load may find model directories
  std::size_t queue_depth = 64;
  std::size_t max_body_bytes = 8u << 20;
  std::chrono::milliseconds step_timeout{30000};
  int threads = 64;      // handler threads (Api::handle); an open stream holds none
  int io_threads = 0;    // HTTP IO threads; 0: min(4, hardware threads)
  std::size_t max_connections = 4096;  // open connections; past it 503 and close
  std::chrono::milliseconds header_timeout{10000};  // a request head must arrive within this
  std::chrono::milliseconds idle_timeout{60000};    // idle keep-alive connection; longest pause in a body
  std::chrono::milliseconds write_timeout{30000};   // a client that reads nothing this long is cut off (its stream cancelled)
  std::chrono::milliseconds shutdown_grace{10000};  // in-flight requests may finish this long after SIGTERM
  // Continuous batching, per model.
  int max_num_seqs = 64;            // sequences decoded together
  std::size_t max_per_principal = 0;  // sequences one gateway principal may hold per model; 0: a quarter of its capacity (server/admission.hpp)
  int max_batch_tokens = 0;         // new tokens per step; 0: 8192 on a GPU, 512 on the CPU
  std::uint64_t kv_cache_bytes = 0;  // KV pool per rank; 0: the device fraction (GPU) or 2 GiB (CPU)
  double gpu_memory_fraction = 0;   // of each GPU, for weights + KV + activations; 0: 0.9
  bool prefix_caching = true;       // share full KV blocks between requests with the same prefix
  std::optional<int> state_snapshots;  // hybrids: recurrent-state snapshots for prefix reuse; unset: 2 per state slot
  bool auto_reload = true;  // reload a model whose engine failed, with backoff (engine::ReloadPolicy)
  std::chrono::milliseconds keep_alive{-1};  // default idle time before a model unloads; negative: never
  bool load_on_request = false;  // an OpenAI request for a model not loaded loads it (under --models-dir or the HF cache)
  std::string served_model_name;  // vLLM's flag: the name of the one startup model (per spec: `name=` in --model)
  std::string allowed_origins;  // CORS: comma-separated origins or "*" (server/cors.hpp); empty: same origin only
  // How far the CPU products may round the activations: "f32" (exact, the
  // default), "bf16" or "int8" (as llama.cpp; backend/cpu/activations.hpp).
  // Process-wide, TP workers included.
  std::string cpu_activations = "auto";
};

// The values given on the command line (absent: not given).
struct ServeFlags {
  std::optional<std::string> host, api_key, config;
  std::optional<std::string> port, queue_depth, max_body_bytes, step_timeout_ms, threads, shutdown_grace_ms;
  std::optional<std::string> max_per_principal;
  std::optional<std::string> max_num_seqs, max_batch_tokens, kv_cache_bytes, gpu_memory_fraction, prefix_caching;
  std::optional<std::string> state_snapshots;
  std::optional<std::string> auto_reload;  // "0" from --no-auto-reload
  std::optional<std::string> keep_alive, served_model_name;
  std::optional<std::string> task, pooling;  // --task, --pooling: the one --model's (engine/model_task.hpp)
  std::optional<std::string> load_on_request;  // "1" from --load-on-request
  std::optional<std::string> allowed_origins, cpu_activations;
  std::optional<std::string> io_threads, max_connections, header_timeout_ms, idle_timeout_ms, write_timeout_ms;
  std::vector<std::string> models;
  std::vector<std::string> models_dirs;
};

using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
EnvLookup process_env();

// Reads the config file named by --config or NEURON_CONFIG when there is one.
// Throws Error{invalid_argument} naming the offending flag, variable or field.
ServeOptions resolve_serve_options(const ServeFlags& flags, const EnvLookup& env);

// Whether a --host value only accepts connections from this machine:
// 127.0.0.0/8, ::1 (bracketed or not, or v4-mapped 127.x) and "localhost".
// Anything else, 0.0.0.0, :: and host names included, may be reachable.
bool is_loopback_host(std::string_view host);

// The startup warning for settings that expose the API, unauthenticated,
// beyond this machine (a non-loopback host and no API key); empty otherwise.
std::string exposure_warning(const ServeOptions& options);

}  // namespace neuron::server
