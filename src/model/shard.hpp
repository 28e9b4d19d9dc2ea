#pragma once
// Which part of every weight rank r of N holds (DESIGN.md section 4).
// q/k/v/gate/up are split by output rows, o/down by input columns (every
// expert of a MoE layer alike: no all-to-all, one all-reduce); KV heads
// are replicated when num_kv_heads < N so each rank holds the KV heads its
// own query heads read. With expert parallelism a MoE layer's experts are
// instead dealt out whole, E / N contiguous ones a rank (the router
// replicated): a rank computes its experts' share of the routed tokens and
// the same all-reduce sums the ranks. N = 1 is the whole model: one code path for both.
#include <cstdint>

#include "model/config.hpp"

namespace neuron::model {

struct ShardPlan {
  int rank = 0;
  int world = 1;
  std::int64_t q_head_begin = 0, q_heads = 0;    // this rank's query heads
  std::int64_t kv_head_begin = 0, kv_heads = 0;  // this rank's KV heads (global index of the first)
  std::int64_t ff_begin = 0, ff_size = 0;        // this rank's slice of intermediate_size
  std::int64_t moe_ff_begin = 0, moe_ff_size = 0;  // of every expert's moe intermediate_size (0 when dense)
  std::int64_t shared_ff_begin = 0, shared_ff_size = 0;  // of the shared expert's (0 when it has none)
  // The experts this rank holds: [expert_begin, expert_begin + experts) of num_experts (0 when dense). All of
  // them, each its moe_ff slice; with expert_parallel, E / N of them whole (moe_ff_size = moe_intermediate_size).
  bool expert_parallel = false;
  std::int64_t expert_begin = 0, experts = 0;
  // Gated DeltaNet linear attention (hybrids; 0 when the model has none): this rank's key heads and the
  // value heads that read them (value head h reads key head h / (Hv / Hk), so a rank's value heads are
  // those of its key heads).
  std::int64_t linear_key_head_begin = 0, linear_key_heads = 0;
  std::int64_t linear_value_head_begin = 0, linear_value_heads = 0;

  // Throws Error{bad_tensor_parallel} when the shape cannot be split N ways, and for expert_parallel on a
  // model without experts, on one rank, or with num_experts not divisible by N.
  static ShardPlan make(const ModelConfig& cfg, int rank, int world, bool expert_parallel = false);
  bool operator==(const ShardPlan&) const = default;
  // Local KV head a local query head reads (GQA within the shard).
  std::int64_t kv_of_q(std::int64_t local_q, const ModelConfig& cfg) const;
};

// This rank's conv channels of a linear-attention layer: q and k of its key
// heads, v of its value heads (2 Hk dk + Hv dv over the rank's heads; 0 when none).
std::int64_t linear_conv_channels(const ModelConfig& cfg, const ShardPlan& plan);

// K and V elements one position takes on a rank: 2 * layers * kv_heads * head_dim.
std::int64_t kv_elements_per_position(const ModelConfig& cfg, const ShardPlan& plan);

}  // namespace neuron::model
