#pragma once
// The CPU backend: one rank's shard of a model of any family (its layers as
// model::Family::layer orders the blocks, model/arch/block_ops.hpp) computed in f32 over
// weights held in bf16 (2 bytes per parameter, read once per decode token),
// or in GGUF blocks (Q8_0, Q4_K, Q6_K, ...: a GGUF file's quantized tensors
// as they are, or float weights quantized at load with options.quantize;
// matmul_quant.hpp), never unpacked as a whole.
//
// A step multiplies all its tokens, every sequence's, at once (matmul_bf16:
// OpenBLAS sgemm over L2-sized f32 tiles); a step of one token is one bf16 x
// f32 GEMV per weight, memory-bound (gemv_bf16). Keys and values live in an
// f32 pool of blocks (attention.hpp's KvPool); each sequence attends through
// its block table, one BLAS call per run of consecutive block ids. Tensor parallelism follows ShardPlan: q/k/v and
// gate/up hold the rank's output rows, o_proj and down_proj its input columns,
// each followed by an all-reduce of the partial sums over the communicator;
// with world 1 (LocalCommunicator) that is the whole model. A MoE layer routes
// each token in f32, then runs only the experts some token chose, each over
// its tokens gathered (every expert's ff slice per rank, one all-reduce).
#include <memory>

#include "backend/model_runner.hpp"

namespace neuron::backend::cpu {

// max_context defaults to min(max_position_embeddings,
// default_max_context(cpu)) (model::resolve_max_context); the pool to
// options.kv_blocks blocks of options.kv_block_size positions
// (RunnerOptions' defaults).
// Throws Error{not_found|bad_model} for missing or misshapen tensors,
// Error{unsupported_arch} for biases, a quantize type other than q8_0 / q4_k /
// q6_k or rows that are not whole blocks of it, Error{bad_tensor_parallel}
// when `comm` does not match the plan or a rank's o_proj / down_proj columns
// do not fall on block boundaries, Error{invalid_argument} for a bad max_context or a
// negative kv_block_size / kv_blocks / state_slots / state_snapshots, Error{out_of_memory}
// for a pool past the address space. A hybrid's runner keeps options.state_slots
// recurrent-state slots and resolve_state_snapshots' snapshot slots beside them
// (recurrent_state.hpp), which save_state / restore_state copy between. Its products, in every step,
// and its KV pool's element take model_activations(cpu_activations(), options.encode_only,
// quantized_weights(checkpoint, options.quantize)) (activations.hpp: under the default auto, the int8
// level, with a bf16 KV cache, for an embedder or reranker and for quantized weights).
std::unique_ptr<ModelRunner> make_cpu_runner(const model::ModelConfig& cfg, const io::Checkpoint* checkpoint,
                                             const model::ShardPlan& plan, std::shared_ptr<dist::Communicator> comm,
                                             const RunnerOptions& options);

}  // namespace neuron::backend::cpu
