#pragma once
// The daemon's loaded models. Each entry is a LoadedHandle: Single (one
// runner in this process) or Tp (a leader runner driving worker processes);
// both sit behind an Engine, so every route walks them alike. Loads run in
// the background: an entry is visible as "loading" at once.
//
// Recovery: when a loaded model's engine fails (a TP worker died, a
// collective broke: Engine's on_failed), the entry shows as failed and, unless
// ReloadPolicy::enabled is off, a reload is scheduled after a backoff (1 s,
// 2 s, 4 s ... up to 60 s; the count restarts once a reloaded model ran for
// `stable_after`). While the attempt runs the entry shows as reloading; a
// failed attempt schedules the next one. The old engine is shut down (its
// workers reaped) before the new one loads. Unload works in every one of these
// states and ends the loop (waiting for an attempt already running to finish).
//
// Loads run one at a time (a model waiting for its turn is loading with
// `queued` set), so two loads never race for the memory both were admitted to.
//
// A first load that fails leaves nothing behind: load(wait) and wait_loaded()
// rethrow its error, on_load_end reports it, and from then on the model is
// not listed and a new load of the same id starts afresh (no conflict).
//
// Idle unload: a loaded model with a keep_alive >= 0 is unloaded once no
// request has held its engine for keep_alive (Ollama's semantics: 0 unloads
// right after the last request ends, negative never). Every engine() hands out
// a lease (the returned shared_ptr): while any is held the model is in use;
// when the last one is dropped its idle time starts. A reaper thread unloads
// expired models the same way unload() does. peek() reads stats without
// counting as use (/models, /metrics polls never keep a model alive).
#include <chrono>
#include <functional>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backend/device.hpp"
#include "backend/model_runner.hpp"
#include "engine/engine.hpp"
#include "io/hub_client.hpp"

namespace neuron::engine {

// Bytes and files of a model being fetched from the Hugging Face hub (io/hub_download).
struct DownloadProgress {
  std::int64_t bytes_done = 0;
  std::int64_t bytes_total = 0;
  std::int64_t files_done = 0;
  std::int64_t files_total = 0;
};

// POST /models/load body (the seed's ModelSpec).
struct ModelSpec {
  std::string model_id;            // HF id resolved in the local cache, or a directory; the name clients use
  int tensor_parallel = 1;
  bool expert_parallel = false;    // a MoE's experts dealt out whole over the ranks (LoadOptions::expert_parallel)
  std::vector<int> devices;        // CUDA ordinals, one per rank (or one shared by all ranks)
  std::optional<std::string> device;  // "cpu" | "cuda" | "cuda:N"
  // null / "none" / "bf16"; q8_0, q4_k, q6_k, fp8 (CUDA) (quantize a safetensors
  // model at load); or the tag of one GGUF file in a cached GGUF repo ("Q4_K_M").
  std::optional<std::string> quant;
  std::int32_t max_context = 0;    // 0: max_position_embeddings, bounded by what the KV budget holds
  std::optional<std::chrono::milliseconds> keep_alive;  // idle time before unload; negative never; unset: RegistryOptions
  std::string served_name;         // another name clients use for it, echoed in responses; empty: none
  // What it serves (engine/model_task.hpp): generate | embed | rerank; unset: detected from the checkpoint.
  std::optional<std::string> task;
  std::optional<std::string> pooling;  // task embed: last | mean | cls (a sentence-transformers folder names its own)
};

enum class ModelStatus { loading, loaded, failed, reloading };
std::string_view to_string(ModelStatus s) noexcept;

struct ModelInfo {
  std::string model_id;  // the spec's id; for a directory, its real path (the registry's key)
  // How clients and the helexa gateway name it, the one id every answer uses:
  // the served name; else the id it was loaded by when that is a Hugging Face
  // id or a folder under a model root ("qwen3-tiny-a", "Qwen/Qwen3-8B"); else
  // (a path) the folder or file name. Never a path; unique among the models.
  std::string name;
  ModelStatus status = ModelStatus::loading;
  std::string error_kind, error_message;  // when failed, and while reloading (why)
  // Automatic recovery of a model whose engine failed (failed or reloading):
  int reload_attempt = 0;                  // attempts since it last ran stably (the scheduled or running one included)
  std::optional<std::chrono::steady_clock::time_point> next_reload;  // failed, with a reload scheduled
  std::string kind;                        // "single" | "tp"
  int tensor_parallel = 1;
  bool expert_parallel = false;
  std::vector<std::string> devices;        // per rank: "cpu", "cuda:0", ...
  std::int32_t max_context = 0;
  backend::MemoryStats memory;
  std::filesystem::path path;
  std::chrono::system_clock::time_point created;
  double load_ms = 0;
  std::string served_name;                 // the spec's alias (empty: none)
  std::string quant;                       // the spec's quant ("" when none was asked for)
  bool queued = false;                     // loading, waiting for another model's load to end
  std::chrono::milliseconds keep_alive{-1};  // idle time before unload; negative: never
  int active = 0;                          // requests holding its engine now
  std::optional<std::chrono::steady_clock::time_point> idle_since;  // loaded, no request holds it: since when
  std::optional<DownloadProgress> download;  // while its files are being fetched
};

// How a model whose engine failed is brought back.
struct ReloadPolicy {
  bool enabled = true;                              // off: it stays failed until unloaded (--no-auto-reload)
  std::chrono::milliseconds first_backoff{1000};    // before the first attempt; doubles per failed attempt
  std::chrono::milliseconds max_backoff{60000};
  std::chrono::milliseconds stable_after{60000};    // loaded this long: the next failure starts over at first_backoff
};

struct RegistryOptions {
  std::vector<std::filesystem::path> model_roots;  // directories model ids may resolve into (besides the HF cache)
  bool allow_any_directory = false;                // CLI/--model may name any directory; HTTP may not
  EngineOptions engine;                            // max_batch_tokens 0: 8192 on a GPU, 512 on the CPU
  backend::KvBudget kv_budget;                     // each model's KV pool (per rank)
  std::optional<std::int32_t> state_snapshots;     // hybrids' prefix-reuse snapshots (LoadOptions::state_snapshots)
  std::chrono::milliseconds step_timeout{30000};
  std::filesystem::path worker_binary;             // default /proc/self/exe
  ReloadPolicy reload;
  std::chrono::milliseconds keep_alive{-1};        // a spec's default: idle time before unload; negative never
  // Called on the loading thread when a load (not a reload) ends, loaded or failed.
  std::function<void(const ModelInfo&)> on_load_end;
  // Set: a Hugging Face id missing from the cache is downloaded from the hub
  // (io::download_snapshot) as part of its background load. Unset, or offline:
  // such an id is not_found.
  std::optional<io::HubOptions> hub;
};

class Registry {
 public:
  explicit Registry(RegistryOptions options);
  ~Registry();  // unloads everything (joins loads, engines, reaps workers)

  // Validates the spec synchronously: the id (length, control characters, and with
  // allow_any_directory off, ".." components and directories outside model_roots:
  // invalid_argument), tensor_parallel in [1, 16] and dividing the model's heads
  // (bad_tensor_parallel, from its config.json), device and devices (invalid_argument),
  // quant (unsupported_arch), an id not in the local cache (not_found; with a hub, one
  // API call first: no such repo or revision, no config.json or safetensors there
  // (not_found), gated (gated), refused credentials (unauthorized), hub unreachable
  // (unavailable); a model that downloads is checked for shape and memory once its
  // files are here, and shows its progress in ModelInfo::download), a model already
  // present in any state, failed included (conflict: unload it first). A directory's id
  // is its real path (io::canonical_model_ref), so every spelling of it is the same
  // model; two ids for the same files are a conflict too. A relative id that names a
  // folder with a config.json under a model root loads that folder ("qwen3-tiny-a"
  // with --models-dir /srv/models), before it is tried as a Hugging Face id. A
  // served_name must not be another model's id or name, nor may ModelInfo::name
  // (conflict). A first load whose background part fails is dropped (see
  // above), so the same id may be loaded again at once. Then tokenizer,
  // chat template, weights and engine load in the background; the entry shows as
  // loading at once. `wait` blocks until the load ends and rethrows its error.
  ModelInfo load(const ModelSpec& spec, bool wait);
  // Waits up to `timeout` (none: for good) while `model_id` loads. Returns its info
  // (still loading when the time ran out; loaded, even when it was unloaded since);
  // throws the load's error when it failed to load, Error{not_found} when there
  // is no such model.
  ModelInfo wait_loaded(const std::string& model_id,
                        std::optional<std::chrono::milliseconds> timeout = std::nullopt) const;
  // Error{not_found} for unknown ids, Error{busy} while loading (the first load) or
  // when requests are still queued or running after `drain`. A failed or reloading
  // model unloads at once (after a reload attempt already running ends), which stops
  // its reloads. Otherwise frees the model before returning: the engine thread is
  // joined, weights and KV cache released (and given back to the OS), TP workers
  // shut down and reaped.
  void unload(const std::string& model_id, std::chrono::milliseconds drain = std::chrono::milliseconds{0});
  std::vector<ModelInfo> list() const;
  std::optional<ModelInfo> info(const std::string& model_id) const;
  // Where `model_id` would load from, resolved as load() resolves it (model
  // roots, the local Hugging Face cache; nothing is downloaded or loaded):
  // the model's directory or .gguf file, or nullopt when it is not here.
  std::optional<std::filesystem::path> locate(const std::string& model_id) const;
  // The directories model ids may resolve into (RegistryOptions::model_roots).
  const std::vector<std::filesystem::path>& model_roots() const noexcept;
  // The engine of a loaded model, as a lease (see above: holding it is using the
  // model); Error{not_found} unknown, Error{"loading"} still loading,
  // Error{"model_failed"} failed to load; a model whose engine failed (failed or
  // reloading) throws RetryLaterError{model_failed} with the time to its next reload
  // attempt. The shared_ptr keeps it alive for the request's duration.
  std::shared_ptr<Engine> engine(const std::string& model_id) const;
  // The engine of a loaded model for reporting (stats, options): no lease, no
  // errors; null when it is not loaded.
  std::shared_ptr<const Engine> peek(const std::string& model_id) const;
  // Tokenizer and chat format of a loaded model (same errors as engine()).
  std::shared_ptr<const struct ModelAssets> assets(const std::string& model_id) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace neuron::engine
