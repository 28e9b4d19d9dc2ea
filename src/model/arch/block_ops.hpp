#pragma once
// The blocks a family's layer graph (family.hpp) is written over. A backend
// implements each one over the residual stream of its current step
// (x: [tokens, hidden]); a block reads n = rmsnorm(x) with its own norm weight
// (the scale the runner loaded: model::to_norm_scale adds a zero-centred
// norm's 1 at load) and adds its output to x (after the all-reduce of a tensor-parallel rank's
// partial sums). Which weights a block uses, and their shapes, are the
// layer's LayerSpecs (shard_weights.hpp), as the backend loaded them.
#include <cstdint>

namespace neuron::model {

class BlockOps {
 public:
  virtual ~BlockOps() = default;
  // x += o_proj(attention(q, k, v)) over n = rmsnorm(x): q/k/v = n W^T; with
  // q_norm/k_norm an RMSNorm over head_dim per head; RoPE at each token's
  // position (model/rope.hpp; with a partial_rotary_factor only the first
  // rotary_dim lanes of a head rotate); causal paged attention over the
  // sequence's KV cache (this token's K and V stored first), GQA, scale
  // 1/sqrt(head_dim). With an output gate (AttentionSpecs::output_gate) q_proj
  // also yields g per head and attention's output is multiplied by sigmoid(g)
  // before o_proj.
  virtual void attention(std::int64_t layer) = 0;
  // Gated DeltaNet (model::LinearAttentionConfig), x += out_proj(o) over
  // n = rmsnorm(x), for every token t of a sequence in order:
  //   [q k v] = silu(causal depthwise conv1d, kernel K, over the last K rows of n W_qkv^T),
  //   q, k l2-normalized per key head (eps 1e-6), q scaled by 1/sqrt(dk);
  //   per value head h (key head h / (Hv / Hk)): beta = sigmoid(n W_b^T)_h,
  //   g = -exp(A_log_h) softplus((n W_a^T)_h + dt_bias_h),
  //   S_h = exp(g) S_h;  S_h += k (beta (v_h - S_h^T k))^T;  o_h = S_h^T q;
  //   o_h = rmsnorm(o_h) * gated_norm * silu(z_h), z = n W_z^T.
  // S_h ([dk, dv] f32) and the conv's last K - 1 inputs are the sequence's
  // recurrent state (its SequenceStep::state_slot), zero at position 0 and
  // carried across steps, so a prompt may be fed in chunks.
  virtual void linear_attention(std::int64_t layer) = 0;
  // x += down(silu(gate(n)) * up(n)), n = rmsnorm(x).
  virtual void mlp(std::int64_t layer) = 0;
  // x += sum over the router's top k experts e of w_e * down_e(silu(gate_e(n)) * up_e(n)):
  // p = softmax(n W_router^T) in f32, the k largest (renormalized to sum 1
  // when norm_topk_prob). Only the chosen experts' weights are read. With a
  // shared expert (MoeSpecs::shared_expert) x also gets
  // sigmoid(n . shared_expert_gate) * shared_expert(n).
  virtual void moe(std::int64_t layer) = 0;
};

}  // namespace neuron::model
