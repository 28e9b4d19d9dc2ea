#pragma once
// The backend seam. A ModelRunner is one rank's shard of a Qwen3 model on
// one device: it owns that shard's weights and its pool of KV blocks, and runs
// batched steps over sequences whose blocks the engine assigns.
// CPU and CUDA implement it; a tensor-parallel leader (tp::TpRunner) also
// implements it by driving its workers, so the engine treats Single and Tp
// models alike.
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/batch.hpp"
#include "backend/device.hpp"
#include "quant/ggml_type.hpp"
#include "model/config.hpp"
#include "model/shard.hpp"

namespace neuron::io { class Checkpoint; }
namespace neuron::dist { class Communicator; }

namespace neuron::backend {

struct MemoryStats {
  std::uint64_t weight_bytes = 0;  // this rank's weights as held on its device
  std::uint64_t kv_cache_bytes = 0;
  std::string device;              // "cpu", "cuda:0"
};

struct RunnerOptions {
  std::int32_t max_context = 0;    // positions per sequence; 0 = min(max_position_embeddings, backend default)
  std::int32_t kv_block_size = 0;  // positions per KV block; 0 = kDefaultKvBlockSize
  std::int32_t kv_blocks = 0;      // blocks in the pool; 0 = enough for one sequence of max_context
  // Quantize-at-load: the projection weights (q/k/v/o, gate/up/down) of a
  // float checkpoint stored in this GGUF block type (q8_0, q4_k, q6_k; others
  // are refused by make_runner). A GGUF checkpoint's quantized tensors stay
  // as they are either way.
  std::optional<quant::GgmlType> quantize = std::nullopt;
  // Recurrent-state slots of a hybrid model (batch.hpp): how many sequences
  // may run at once; 0 = kDefaultStateSlots. Ignored for a model without linear attention.
  std::int32_t state_slots = 0;
  // Snapshot slots of that state (prefix reuse for hybrids, batch.hpp): nullopt =
  // kDefaultSnapshotsPerSlot per state slot; 0: none. Ignored for a model without linear attention.
  std::optional<std::int32_t> state_snapshots = std::nullopt;
  // The model only encodes (task embed or rerank: prefill-only sequences, nothing sampled). On the CPU
  // its products take cpu::model_activations' level (bf16 activations under the default auto).
  // Tensor-parallel ranks keep the process's level.
  bool encode_only = false;
};

inline constexpr std::int32_t kDefaultKvBlockSize = 16;
inline constexpr std::int32_t kDefaultStateSlots = 16;
inline constexpr std::int32_t kDefaultSnapshotsPerSlot = 2;

// The snapshot slots `requested` asks for beside `state_slots` state slots
// (RunnerOptions::state_snapshots' rule): nullopt gives kDefaultSnapshotsPerSlot
// per slot. Throws Error{invalid_argument} for a negative count.
std::int32_t resolve_state_snapshots(std::optional<std::int32_t> requested, std::int32_t state_slots);

// Bytes of one sequence's recurrent state on rank plan.rank on the CPU (f32):
// per linear layer the conv's last K - 1 inputs of the rank's C channels and
// [dk, dv] delta-rule matrices of its Hv value heads (model::ShardPlan). 0 for a
// model without linear attention.
std::uint64_t state_bytes_per_slot(const model::ModelConfig& cfg, const model::ShardPlan& plan);

// max_context for a runner built without a load plan (tools and tests that call
// make_runner with max_context 0): the CPU keeps it short (its KV is f32 and its
// prefill slow); a GPU takes 8192. Loads through engine::plan_load (the daemon,
// `neuron generate`) take the model's max_position_embeddings bounded by what
// the KV budget holds (kv_budget_positions) instead.
std::int32_t default_max_context(const Device& device) noexcept;

// Host memory a runner fills fastest (page-locked on CUDA, so a device copy
// runs at the link's full speed); frees itself through the runner's own call.
struct HostFloatsDeleter {
  void (*release)(float*) = nullptr;
  void operator()(float* p) const noexcept {
    if (p && release) release(p);
  }
};
using HostFloats = std::unique_ptr<float[], HostFloatsDeleter>;

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  // `count` floats for step()'s logits: the engine keeps its logits buffer
  // here. The default is ordinary memory; the CUDA runner pins it. The buffer
  // may outlive the runner.
  virtual HostFloats alloc_logits(std::size_t count) const;

  // Runs one step of a batch (backend/batch.hpp): writes the keys and values
  // of every new token into the sequences' blocks, attends each token to its
  // own sequence's positions [0, its own], and writes logits as the batch asks
  // ([batch.logit_rows(), vocab] f32, sequence by sequence) and the greedy pick
  // of each `argmax` sequence ([batch.pick_rows()] ids, sequence by sequence).
  // `hidden_last` / `hidden_all` sequences get the final-norm hidden state
  // instead ([batch.hidden_rows(), hidden_size] f32 into `hidden`, sequence
  // by sequence: embeddings), with no LM head for them.
  // Every rank of a tensor-parallel model runs the same batch; workers pass
  // empty spans (no LM head; rank 0's hidden rows are the model's). Validates with check_batch() before touching any
  // memory; a step that throws leaves the new tokens' slots undefined, nothing
  // else. A runner whose picks_on_device() is false never sees an `argmax`
  // sequence: they reach run_step() as `last` ones and are picked here.
  void step(const Batch& batch, std::span<float> logits, std::span<std::int32_t> picks = {},
            std::span<float> hidden = {});
  // True when run_step() makes the `argmax` picks itself (next to the logits).
  virtual bool picks_on_device() const noexcept { return false; }

  // A hybrid's prefix reuse (batch.hpp): copies the recurrent state in state
  // slot `slot` into snapshot slot `snapshot` (save), or a snapshot into a
  // state slot (restore). Called between steps. Throws Error{invalid_argument}
  // for a slot outside [0, kv_pool().state_slots) or a snapshot outside
  // [0, kv_pool().state_snapshots) (so a runner without snapshots refuses both).
  void save_state(std::int32_t slot, std::int32_t snapshot);
  void restore_state(std::int32_t snapshot, std::int32_t slot);

  virtual const model::ModelConfig& config() const noexcept = 0;
  virtual std::int32_t max_context() const noexcept = 0;  // positions one sequence may reach
  virtual KvPoolShape kv_pool() const noexcept = 0;
  virtual MemoryStats memory() const = 0;

 protected:
  // The backend's step, as step() describes it.
  virtual void run_step(const Batch& batch, std::span<float> logits, std::span<std::int32_t> picks,
                        std::span<float> hidden) = 0;
  // The backend's copies, indices checked. Only a runner whose pool has state_snapshots is ever asked;
  // the default (every runner without linear attention) treats a call as a broken invariant.
  virtual void run_save_state(std::int32_t slot, std::int32_t snapshot);
  virtual void run_restore_state(std::int32_t snapshot, std::int32_t slot);

 private:
  Batch host_pick_batch_;          // the batch with `argmax` sequences turned into `last` ones
  std::vector<float> host_rows_;   // [its logit_rows(), vocab] f32
};

// How much memory a model's KV pool may take on each rank.
struct KvBudget {
  std::uint64_t bytes = 0;       // > 0: this many bytes of KV blocks per rank
  double device_fraction = 0;    // else, CUDA: the fraction of the device's total memory that weights, KV
                                 // and activations together may use (vLLM's gpu_memory_utilization)
  std::uint64_t weight_bytes = 0;  // with a device fraction: the rank's weights as it will hold them
                                   // (quantized loads); 0: bf16 (model::weight_elements x 2)
  int ranks_on_device = 1;         // with a device fraction: the ranks that share this CUDA device, each
                                   // taking an equal part of the fraction (engine::plan_load counts them)
};

// Bytes of one KV block of rank plan.rank on `device` (CUDA bf16; the CPU
// f32, or bf16 when the process allows bf16 activations: cpu::kv_element()).
std::uint64_t kv_bytes_per_block(const model::ModelConfig& cfg, const model::ShardPlan& plan, const Device& device,
                                 std::int32_t block_size);
// The same with `element_bytes` bytes an element.
std::uint64_t kv_bytes_per_block(const model::ModelConfig& cfg, const model::ShardPlan& plan,
                                 std::uint64_t element_bytes, std::int32_t block_size);
// Blocks of `block_size` positions that `budget` buys for rank plan.rank on
// `device`, at least enough for one sequence of max_context. A budget of
// neither kind gives the backend default (CPU: kDefaultCpuKvBytes; CUDA: a
// device fraction of 0.9). Throws Error{out_of_memory} when the budget cannot
// hold one sequence of max_context, naming needed and available bytes.
std::int32_t plan_kv_blocks(const model::ModelConfig& cfg, const model::ShardPlan& plan, const Device& device,
                            const KvBudget& budget, std::int32_t block_size, std::int32_t max_context);

inline constexpr std::uint64_t kDefaultCpuKvBytes = 2ull << 30;

// Positions (whole blocks of `block_size`) that `budget` buys for rank
// plan.rank on `device`: the longest sequence its KV pool could hold.
std::int64_t kv_budget_positions(const model::ModelConfig& cfg, const model::ShardPlan& plan, const Device& device,
                                 const KvBudget& budget, std::int32_t block_size);

// Builds rank plan.rank's shard on `device` (CPU or CUDA; any ShardPlan,
// expert-parallel ones included). `checkpoint` null means random
// weights (benchmarks); the runner copies what it needs, so the checkpoint may
// be closed afterwards. The runner shares ownership of `comm`.
std::unique_ptr<ModelRunner> make_runner(const model::ModelConfig& cfg, const io::Checkpoint* checkpoint,
                                         const model::ShardPlan& plan, const Device& device,
                                         std::shared_ptr<dist::Communicator> comm, const RunnerOptions& options);

}  // namespace neuron::backend
