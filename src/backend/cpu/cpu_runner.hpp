#pragma once
// The CPU backend: one rank's shard of a Qwen3 model computed in f32 over
// weights held in bf16 (2 bytes per parameter, read once per decode token).
//
// Prefill multiplies all the prompt's tokens at once (matmul_bf16: OpenBLAS
// sgemm over L2-sized f32 tiles); decode is one bf16 x f32 GEMV per weight,
// memory-bound (gemv_bf16). Tensor parallelism follows ShardPlan: q/k/v and
// gate/up hold the rank's output rows, o_proj and down_proj its input columns,
// each followed by an all-reduce of the partial sums over the communicator;
// with world 1 (LocalCommunicator) that is the whole model.
#include <memory>

#include "backend/model_runner.hpp"

namespace neuron::backend::cpu {

// max_context defaults to min(max_position_embeddings, kDefaultMaxContext).
inline constexpr std::int32_t kDefaultMaxContext = 4096;

// Throws Error{not_found|bad_model} for missing or misshapen tensors,
// Error{unsupported_arch} for biases, Error{bad_tensor_parallel} when `comm`
// does not match the plan, Error{invalid_argument} for a bad max_context.
std::unique_ptr<ModelRunner> make_cpu_runner(const model::Qwen3Config& cfg, const io::Checkpoint* checkpoint,
                                             const model::ShardPlan& plan, std::shared_ptr<dist::Communicator> comm,
                                             const RunnerOptions& options);

}  // namespace neuron::backend::cpu
