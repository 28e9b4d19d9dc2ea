#pragma once
// A tensor-parallel model as one backend::ModelRunner: the leader's own
// rank-0 shard plus a WorkerPool of ranks 1..N-1. step() is a pool round
// (every rank runs the same Batch), so the engine drives a TP model exactly
// like a single-device one. Only rank 0 computes logits; workers skip the LM
// head. Every rank's KV pool has the same shape (kv_pool() is rank 0's): the
// leader sends each the same max_context, kv_block_size and kv_blocks (and a
// hybrid's state_slots and state_snapshots), and the engine's block ids and
// state slots mean the same blocks and slots everywhere; save_state and
// restore_state are a round too (each rank copies the state of its own heads).
//
// After a worker failure the runner is failed for good (every call throws
// Error{worker_failed}); the engine marks the model failed and the registry
// can unload it (destroying the runner reaps whatever is left).
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/model_runner.hpp"
#include "dist/timed_communicator.hpp"
#include "tp/worker_pool.hpp"

#include "quant/ggml_type.hpp"

namespace neuron::tp {

struct TpRunnerOptions {
  std::string model_id;                   // the shards' key on the workers
  int world = 2;
  bool expert_parallel = false;           // model::ShardPlan::expert_parallel on every rank
  std::vector<backend::Device> devices;   // per rank; empty: all on the CPU
  std::int32_t max_context = 0;          // 0: min(max_position_embeddings, backend::default_max_context(rank 0's device))
  std::int32_t kv_block_size = 0;        // 0: backend::kDefaultKvBlockSize
  std::int32_t kv_blocks = 0;            // 0: enough for one sequence of max_context
  std::optional<quant::GgmlType> quantize;  // quantize-at-load on every rank (CPU; backend::RunnerOptions)
  // A hybrid's recurrent-state slots and snapshots on every rank (backend::RunnerOptions' defaults when 0 / nullopt).
  std::int32_t state_slots = 0;
  std::optional<std::int32_t> state_snapshots;
  std::chrono::milliseconds step_timeout{30000};
  std::chrono::milliseconds load_timeout{600000};
  std::filesystem::path worker_binary;    // empty: /proc/self/exe
  std::vector<std::vector<std::string>> worker_args;  // per rank, test hooks
};

// Cumulative counters of where step() time goes on the leader (bench/TP.md).
struct TpStepStats {
  std::uint64_t steps = 0;
  double send_ms = 0;            // writing step to the workers
  double own_forward_ms = 0;     // rank 0's forward, collectives included
  double own_comm_ms = 0;        // ...of which inside collectives
  double wait_ms = 0;            // after rank 0's forward until all replies were read
  double worker_forward_ms = 0;  // slowest worker's forward, summed over steps
  double worker_comm_ms = 0;     // that worker's time inside collectives
};

class TpRunner final : public backend::ModelRunner {
 public:
  // Spawns the workers, joins the communicator (NCCL when every rank has its
  // own GPU, else Gloo), checks it, and loads every rank's shard of
  // `checkpoint_files` (the leader builds its own). Throws what a load throws,
  // Error{worker_failed} when a worker misbehaves.
  static std::unique_ptr<TpRunner> load(const model::ModelConfig& cfg,
                                        const std::vector<std::filesystem::path>& checkpoint_files,
                                        const TpRunnerOptions& options);
  ~TpRunner() override;

  // A round of `step` (messages.hpp); a batch check_batch refuses fails
  // alike on every rank before any collective, and the group stays usable.
  // The leader's own runner computes the logits and picks (on its device when it can).
  bool picks_on_device() const noexcept override { return true; }

 protected:
  void run_step(const backend::Batch& batch, std::span<float> logits, std::span<std::int32_t> picks,
                std::span<float> hidden) override;
  void run_save_state(std::int32_t slot, std::int32_t snapshot) override;
  void run_restore_state(std::int32_t snapshot, std::int32_t slot) override;

 public:
  const model::ModelConfig& config() const noexcept override { return own_->config(); }
  std::int32_t max_context() const noexcept override { return own_->max_context(); }
  backend::KvPoolShape kv_pool() const noexcept override { return own_->kv_pool(); }
  backend::HostFloats alloc_logits(std::size_t count) const override { return own_->alloc_logits(count); }
  backend::MemoryStats memory() const override { return own_->memory(); }  // rank 0's

  int world() const noexcept { return pool_->world(); }
  bool failed() const noexcept { return pool_->failed(); }
  std::vector<pid_t> worker_pids() const { return pool_->worker_pids(); }
  TpStepStats stats() const noexcept { return stats_; }

 private:
  TpRunner() = default;

  std::string model_id_;
  std::unique_ptr<WorkerPool> pool_;
  std::shared_ptr<dist::TimedCommunicator> comm_;    // rank 0's
  std::unique_ptr<backend::ModelRunner> own_;        // rank 0's shard; declared after comm_, so destroyed before it
  TpStepStats stats_;
};

}  // namespace neuron::tp
