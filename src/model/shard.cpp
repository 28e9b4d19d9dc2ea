#include "model/shard.hpp"

#include <string>

#include "util/error.hpp"

namespace neuron::model {

ShardPlan ShardPlan::make(const ModelConfig& cfg, int rank, int world, bool expert_parallel) {
  auto bad = [&](const std::string& why) {
    fail(errc::bad_tensor_parallel, "cannot split the model " + std::to_string(world) + " ways: " + why);
  };
  if (world < 1) bad("tensor_parallel must be at least 1");
  if (rank < 0 || rank >= world) bad("rank " + std::to_string(rank) + " is outside [0, " + std::to_string(world) + ")");
  const std::int64_t H = cfg.num_attention_heads, KV = cfg.num_key_value_heads;
  if (H % world != 0) bad("num_attention_heads " + std::to_string(H) + " is not divisible by " + std::to_string(world));
  const std::int64_t E = cfg.moe.num_experts;
  if (expert_parallel) {
    if (E == 0) bad("expert_parallel needs a mixture-of-experts model, and model_type '" + cfg.model_type + "' has no experts");
    if (world < 2) bad("expert_parallel needs tensor_parallel of 2 or more ranks to deal the experts over");
    if (E % world != 0)
      bad("expert_parallel: num_experts " + std::to_string(E) + " is not divisible by " + std::to_string(world));
  } else if (E > 0 && cfg.moe.intermediate_size % world != 0) {
    bad("moe_intermediate_size " + std::to_string(cfg.moe.intermediate_size) + " is not divisible by " +
        std::to_string(world));
  }
  if (const std::int64_t fs = cfg.moe.shared_expert_intermediate_size; fs > 0 && fs % world != 0)
    bad("shared_expert_intermediate_size " + std::to_string(fs) + " is not divisible by " + std::to_string(world));
  if (cfg.intermediate_size % world != 0)
    bad("intermediate_size " + std::to_string(cfg.intermediate_size) + " is not divisible by " + std::to_string(world));
  if (KV >= world ? KV % world != 0 : world % KV != 0)
    bad("num_key_value_heads " + std::to_string(KV) + " and " + std::to_string(world) +
        " ranks: one must divide the other");
  const LinearAttentionConfig& lin = cfg.linear;
  if (cfg.linear.hybrid() && lin.num_key_heads % world != 0)
    bad("linear_num_key_heads " + std::to_string(lin.num_key_heads) + " is not divisible by " + std::to_string(world));
  ShardPlan p;
  p.rank = rank;
  p.world = world;
  p.q_heads = H / world;
  p.q_head_begin = rank * p.q_heads;
  if (KV >= world) {
    p.kv_heads = KV / world;
    p.kv_head_begin = rank * p.kv_heads;
  } else {
    // Fewer KV heads than ranks: each rank's query heads all read one KV head, replicated.
    p.kv_heads = 1;
    p.kv_head_begin = p.q_head_begin / (H / KV);
  }
  p.ff_size = cfg.intermediate_size / world;
  p.ff_begin = rank * p.ff_size;
  p.expert_parallel = expert_parallel;
  if (expert_parallel) {  // whole experts, E / N of them
    p.experts = E / world;
    p.expert_begin = rank * p.experts;
    p.moe_ff_size = cfg.moe.intermediate_size;
  } else {  // every expert, a slice of each
    p.experts = E;
    p.moe_ff_size = cfg.moe.intermediate_size / world;
    p.moe_ff_begin = rank * p.moe_ff_size;
  }
  p.shared_ff_size = cfg.moe.shared_expert_intermediate_size / world;  // split alike with or without EP
  p.shared_ff_begin = rank * p.shared_ff_size;
  if (cfg.linear.hybrid()) {
    p.linear_key_heads = lin.num_key_heads / world;
    p.linear_key_head_begin = rank * p.linear_key_heads;
    p.linear_value_heads = lin.num_value_heads / world;  // Hv is a multiple of Hk (parse_hybrid)
    p.linear_value_head_begin = rank * p.linear_value_heads;
  }
  return p;
}

std::int64_t ShardPlan::kv_of_q(std::int64_t local_q, const ModelConfig& cfg) const {
  const std::int64_t group = cfg.num_attention_heads / cfg.num_key_value_heads;
  return (q_head_begin + local_q) / group - kv_head_begin;
}

std::int64_t linear_conv_channels(const ModelConfig& cfg, const ShardPlan& plan) {
  return 2 * plan.linear_key_heads * cfg.linear.key_head_dim + plan.linear_value_heads * cfg.linear.value_head_dim;
}

std::int64_t kv_elements_per_position(const ModelConfig& cfg, const ShardPlan& plan) {
  return 2 * cfg.kv_layers() * plan.kv_heads * cfg.head_dim;  // full-attention layers only
}

}  // namespace neuron::model
