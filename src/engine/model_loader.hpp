#pragma once
// Opening a model directory as a runner: one device (tensor_parallel 1) or a
// tensor-parallel group (a tp::TpRunner driving worker processes). Callers
// (the registry, `neuron generate`, benches) get a backend::ModelRunner either way.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/device.hpp"
#include "backend/model_runner.hpp"
#include "model/config.hpp"
#include "quant/ggml_type.hpp"

namespace neuron::engine {

inline constexpr int kMaxTensorParallel = 16;
// A hybrid's recurrent-state slots (the sequences it runs at once) on a GPU, where memory allows
// (plan_load); on the CPU backend::kDefaultStateSlots.
inline constexpr std::int32_t kCudaStateSlots = 64;

// A hybrid's state slots and snapshots on a GPU, from the bytes one slot's state takes and the bytes the KV
// budget leaves (`room`). The slots bound how many sequences run at once, so they come first: the most of
// kCudaStateSlots, 32, ..., backend::kDefaultStateSlots whose states take at most half the room (the default
// where none does). Snapshots are a prefix cache: `requested` when given, else up to
// backend::kDefaultSnapshotsPerSlot per slot within a quarter of what the slots leave. The rest stays KV
// (a hybrid's attention layers are a few of its layers, so its positions are cheap).
struct StateSlots {
  std::int32_t slots = 0, snapshots = 0;
};
StateSlots plan_state_slots(std::uint64_t per_slot, std::uint64_t room, std::optional<std::int32_t> requested);

struct LoadOptions {
  std::filesystem::path model_dir;  // config.json + model.safetensors[.index.json], or a .gguf file
  std::string model_id;             // the shards' key on TP workers; default: the directory name
  int tensor_parallel = 1;
  // A MoE's experts dealt out whole over the ranks (model::ShardPlan::expert_parallel) instead of every
  // expert split; needs tensor_parallel >= 2 dividing num_experts (CPU or CUDA ranks).
  bool expert_parallel = false;
  backend::Device device;           // every rank's device unless `devices` is given
  std::vector<int> devices;         // CUDA ordinals: one per rank, or one shared by all ranks
  std::int32_t max_context = 0;     // 0: min(max_position_embeddings, the positions the KV budget holds)
  // The spec's task and pooling (engine/model_task.hpp's resolve_task): an embedder's checkpoint may lack an
  // LM head (Qwen3-Embedding as released), which it never uses.
  std::optional<std::string> task, pooling;
  backend::KvBudget kv_budget;      // the KV pool's size on each rank (backend/model_runner.hpp)
  std::int32_t kv_block_size = 0;   // 0: backend::kDefaultKvBlockSize
  // Hybrids: recurrent-state snapshots kept for prefix reuse (backend::RunnerOptions::state_snapshots);
  // nullopt: backend::kDefaultSnapshotsPerSlot per state slot; 0: none (no prefix caching).
  std::optional<std::int32_t> state_snapshots;
  std::optional<quant::GgmlType> quantize;  // quantize-at-load (q8_0, q4_k, q6_k; fp8 on CUDA); see backend::RunnerOptions
  std::chrono::milliseconds step_timeout{30000};   // TP: per-step reply deadline and collective timeout
  std::chrono::milliseconds load_timeout{600000};  // TP: deadline for the workers' shard loads
  std::filesystem::path worker_binary;             // TP: the neuron executable (default /proc/self/exe)
  std::vector<std::vector<std::string>> worker_args;  // TP: extra worker arguments per rank (test hooks)
};

// The quantize-at-load type a model spec's `quant` asks for once the model
// resolved to `model` (io::resolve_model with ResolveOptions::gguf_quant):
// nullopt for "", "none" and "bf16", and for a GGUF file (whose tensors are
// used as stored: in a GGUF repo, quant picked the file); q8_0, q4_k, q6_k
// or fp8 for a safetensors model (quant::quantizable_at_load). Throws Error{unsupported_arch} for any other
// quant on a safetensors model, Error{invalid_argument} for one on a .gguf
// file the reference named directly (`named_file`).
std::optional<quant::GgmlType> quantize_for(const std::filesystem::path& model, const std::string& quant, bool named_file);

// What a load will allocate, decided before anything is: each rank's device,
// the runner options (max_context resolved, the KV pool's blocks: the fewest
// any rank's budget buys, so all ranks' pools match) and the bytes each rank
// will hold (weights plus KV pool, a hybrid's state slots and snapshots included).
struct LoadPlan {
  std::vector<backend::Device> devices;   // [tensor_parallel]
  backend::RunnerOptions runner;
  std::vector<std::uint64_t> rank_bytes;  // [tensor_parallel] weights + KV pool
};
// Throws Error{invalid_argument} for a bad device list or max_context,
// Error{bad_tensor_parallel} for a split the model does not allow (expert_parallel
// included), and Error{out_of_memory} when the KV budget cannot hold one sequence
// of max_context.
LoadPlan plan_load(const LoadOptions& options, const model::ModelConfig& cfg);

// Memory admission: the ranks on the CPU together must fit the host's
// available memory (MemAvailable). Throws Error{out_of_memory} giving needed
// and available bytes. (A GPU rank's KV budget is planned from its device's
// memory, and a device allocation that fails fails the load the same way.)
void check_host_memory(const LoadPlan& plan);

// Resolves max_context and the KV pool (the fewest blocks any rank's budget
// buys, so all ranks' pools match) before anything is allocated. Throws
// Error{bad_tensor_parallel} for tensor_parallel outside [1, 16] or a
// model the ranks cannot split (checked before any worker starts),
// Error{out_of_memory} when the KV budget cannot hold one sequence of
// max_context, and what loading throws (not_found, bad_model,
// unsupported_arch, worker_failed, ...).
std::unique_ptr<backend::ModelRunner> open_runner(const LoadOptions& options);

// The per-rank devices `options` asks for (size tensor_parallel). Throws Error{invalid_argument}.
std::vector<backend::Device> rank_devices(const LoadOptions& options);

}  // namespace neuron::engine
