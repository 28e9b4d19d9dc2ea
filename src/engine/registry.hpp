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
#include <chrono>
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

namespace neuron::engine {

// POST /models/load body (the seed's ModelSpec).
struct ModelSpec {
  std::string model_id;            // HF id resolved in the local cache, or a directory; the name clients use
  int tensor_parallel = 1;
  std::vector<int> devices;        // CUDA ordinals, one per rank (or one shared by all ranks)
  std::optional<std::string> device;  // "cpu" | "cuda" | "cuda:N"
  // null / "none" / "bf16"; q8_0, q4_k, q6_k (quantize a safetensors model at
  // load, CPU); or the tag of one GGUF file in a cached GGUF repo ("Q4_K_M").
  std::optional<std::string> quant;
  std::int32_t max_context = 0;
};

enum class ModelStatus { loading, loaded, failed, reloading };
std::string_view to_string(ModelStatus s) noexcept;

struct ModelInfo {
  std::string model_id;  // the spec's id; for a directory, its real path
  ModelStatus status = ModelStatus::loading;
  std::string error_kind, error_message;  // when failed, and while reloading (why)
  // Automatic recovery of a model whose engine failed (failed or reloading):
  int reload_attempt = 0;                  // attempts since it last ran stably (the scheduled or running one included)
  std::optional<std::chrono::steady_clock::time_point> next_reload;  // failed, with a reload scheduled
  std::string kind;                        // "single" | "tp"
  int tensor_parallel = 1;
  std::vector<std::string> devices;        // per rank: "cpu", "cuda:0", ...
  std::int32_t max_context = 0;
  backend::MemoryStats memory;
  std::filesystem::path path;
  std::chrono::system_clock::time_point created;
  double load_ms = 0;
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
  std::chrono::milliseconds step_timeout{30000};
  std::filesystem::path worker_binary;             // default /proc/self/exe
  ReloadPolicy reload;
};

class Registry {
 public:
  explicit Registry(RegistryOptions options);
  ~Registry();  // unloads everything (joins loads, engines, reaps workers)

  // Validates the spec synchronously: the id (length, control characters, and with
  // allow_any_directory off, ".." components and directories outside model_roots:
  // invalid_argument), tensor_parallel in [1, 16] and dividing the model's heads
  // (bad_tensor_parallel, from its config.json), device and devices (invalid_argument),
  // quant (unsupported_arch), an id not in the local cache (not_found), a model already
  // present in any state, failed included (conflict: unload it first). A directory's id
  // is its real path (io::canonical_model_ref), so every spelling of it is the same
  // model; two ids for the same files are a conflict too. Then tokenizer,
  // chat template, weights and engine load in the background; the entry shows as
  // loading at once. `wait` blocks until the load ends and rethrows its error.
  ModelInfo load(const ModelSpec& spec, bool wait);
  // Error{not_found} for unknown ids, Error{busy} while loading (the first load) or
  // when requests are still queued or running after `drain`. A failed or reloading
  // model unloads at once (after a reload attempt already running ends), which stops
  // its reloads. Otherwise frees the model before returning: the engine thread is
  // joined, weights and KV cache released (and given back to the OS), TP workers
  // shut down and reaped.
  void unload(const std::string& model_id, std::chrono::milliseconds drain = std::chrono::milliseconds{0});
  std::vector<ModelInfo> list() const;
  std::optional<ModelInfo> info(const std::string& model_id) const;
  // The engine of a loaded model; Error{not_found} unknown, Error{"loading"} still loading,
  // Error{"model_failed"} failed to load; a model whose engine failed (failed or
  // reloading) throws RetryLaterError{model_failed} with the time to its next reload
  // attempt. The shared_ptr keeps it alive for the request's duration.
  std::shared_ptr<Engine> engine(const std::string& model_id) const;
  // Tokenizer and chat format of a loaded model (same errors as engine()).
  std::shared_ptr<const struct ModelAssets> assets(const std::string& model_id) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace neuron::engine
