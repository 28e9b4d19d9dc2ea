#pragma once
// The Gated DeltaNet kernels of the CPU runner, in f32 (the math is
// model::BlockOps::linear_attention's, as transformers' torch reference
// computes it: torch_causal_conv1d_update and torch_recurrent_gated_delta_rule).
#include <cstdint>

namespace neuron::backend::cpu {

// Causal depthwise conv1d with SiLU over one sequence's n new tokens,
// continuing from `state`. x: [n, C] (row stride ldx) the new inputs; w: [C, K]
// taps (w[c, K - 1] meets the newest input); state: [C, K - 1] the K - 1
// inputs before x, oldest first, updated to the last K - 1 inputs of x's
// sequence; out: [n, C] (row stride ld_out): out[t, c] = silu(sum_j w[c, j] x[t - K + 1 + j, c]).
void causal_conv1d_silu(const float* x, std::int64_t n, std::int64_t channels, std::int64_t ldx, const float* w,
                        std::int64_t kernel, float* state, float* out, std::int64_t ld_out);

// x / sqrt(sum x^2 + eps), in place, over dim elements (transformers' l2norm, FLA's eps 1e-6).
void l2_normalize(float* x, std::int64_t dim, float eps);

struct DeltaRuleShape {
  std::int64_t key_heads = 0, value_heads = 0;  // value head h reads key head h / (value_heads / key_heads)
  std::int64_t key_dim = 0, value_dim = 0;     // dk, dv
};

// The gated delta rule over one sequence's n tokens in order, recurrent form,
// from `state` ([Hv, dk, dv] f32, updated in place). q, k: [n, Hk dk] (row
// stride ld_qk), q already l2-normalized and scaled by 1/sqrt(dk), k
// l2-normalized; v: [n, Hv dv] (row stride ld_v); g, beta: [n, Hv] (row stride
// ld_gb) the log decay and the write strength; out: [n, Hv dv] (row stride
// ld_out). Per token and value head: S = exp(g) S; S += k (beta (v - S^T k))^T;
// out = S^T q. The value heads run in parallel.
void gated_delta_rule(const float* q, const float* k, std::int64_t ld_qk, const float* v, std::int64_t ld_v,
                      const float* g, const float* beta, std::int64_t ld_gb, std::int64_t n, const DeltaRuleShape& shape,
                      float* state, float* out, std::int64_t ld_out);

// The same rule over the same inputs in the chunked (WY / UT) form, chunks of
// kDeltaChunk tokens: within a chunk the delta-rule updates are solved as one
// unit lower-triangular system (forward substitution) and applied with
// matrix products (BLAS), so a long prompt costs products of [64, dk] and
// [dk, dv] blocks instead of a rank-1 update per token (transformers'
// torch_chunk_gated_delta_rule). Equal to the recurrent form up to float
// rounding; the value heads run in parallel.
inline constexpr std::int64_t kDeltaChunk = 64;
void gated_delta_rule_chunked(const float* q, const float* k, std::int64_t ld_qk, const float* v, std::int64_t ld_v,
                              const float* g, const float* beta, std::int64_t ld_gb, std::int64_t n,
                              const DeltaRuleShape& shape, float* state, float* out, std::int64_t ld_out);

}  // namespace neuron::backend::cpu
