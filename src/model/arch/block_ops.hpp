#pragma once
// The blocks a family's layer graph (family.hpp) is written over. A backend
// implements each one over the residual stream of its current step
// (x: [tokens, hidden]); a block reads n = rmsnorm(x) with its own norm weight
// and adds its output to x (after the all-reduce of a tensor-parallel rank's
// partial sums). Which weights a block uses, and their shapes, are the
// layer's LayerSpecs (shard_weights.hpp), as the backend loaded them.
#include <cstdint>

namespace neuron::model {

class BlockOps {
 public:
  virtual ~BlockOps() = default;
  // x += o_proj(attention(q, k, v)) over n = rmsnorm(x): q/k/v = n W^T; with
  // q_norm/k_norm an RMSNorm over head_dim per head; RoPE at each token's
  // position (model/rope.hpp); causal paged attention over the sequence's KV
  // cache (this token's K and V stored first), GQA, scale 1/sqrt(head_dim).
  virtual void attention(std::int64_t layer) = 0;
  // x += down(silu(gate(n)) * up(n)), n = rmsnorm(x).
  virtual void mlp(std::int64_t layer) = 0;
  // x += sum over the router's top k experts e of w_e * down_e(silu(gate_e(n)) * up_e(n)):
  // p = softmax(n W_router^T) in f32, the k largest (renormalized to sum 1
  // when norm_topk_prob). Only the chosen experts' weights are read.
  virtual void moe(std::int64_t layer) = 0;
};

}  // namespace neuron::model
