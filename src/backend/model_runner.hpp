#pragma once
// The backend seam. A ModelRunner is one rank's shard of a Qwen3 model on
// one device: it owns that shard's weights and KV cache and runs the forward.
// CPU and CUDA implement it; a tensor-parallel leader (tp::TpRunner) also
// implements it by driving its workers, so the engine treats Single and Tp
// models alike.
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "backend/device.hpp"
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
  std::int32_t max_context = 0;  // KV positions; 0 = min(max_position_embeddings, backend default)
};

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;

  // Runs `tokens` at positions [offset, offset + n). Positions before `offset`
  // must already be in the KV cache from earlier calls (later ones are
  // overwritten), so a caller may resume from any prefix it has fed. Writes
  // logits for the last position ([vocab]) or for every position ([n, vocab])
  // depending on logits.size(); an empty span skips the LM head (TP workers).
  // Throws Error{context_length_exceeded} past max_context().
  virtual void forward(std::span<const std::int32_t> tokens, std::int32_t offset, std::span<float> logits) = 0;
  virtual void clear_kv_cache() = 0;

  virtual const model::Qwen3Config& config() const noexcept = 0;
  virtual std::int32_t max_context() const noexcept = 0;
  virtual MemoryStats memory() const = 0;
};

// Builds rank plan.rank's shard on `device`. `checkpoint` null means random
// weights (benchmarks); the runner copies what it needs, so the checkpoint may
// be closed afterwards. The runner shares ownership of `comm`.
std::unique_ptr<ModelRunner> make_runner(const model::Qwen3Config& cfg, const io::Checkpoint* checkpoint,
                                         const model::ShardPlan& plan, const Device& device,
                                         std::shared_ptr<dist::Communicator> comm, const RunnerOptions& options);

}  // namespace neuron::backend
