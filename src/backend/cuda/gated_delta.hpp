#pragma once
// Gated DeltaNet linear attention on the device (model::BlockOps::linear_attention's math,
// as backend/cpu/gated_delta.hpp computes it), over a pass's sequences, each from its
// recurrent-state slot:
//
//   delta_conv   [q k v] = silu(causal depthwise conv1d over the last K rows of the
//                in-projection), q and k l2-normalized per key head (eps 1e-6), q scaled
//                by 1/sqrt(dk); the conv's last K - 1 inputs kept in the slot
//   delta_rule   per value head, token after token: g = -exp(A_log) softplus(a + dt_bias),
//                beta = sigmoid(b), S = exp(g) S, S += k (beta (v - S^T k))^T, o = S^T q,
//                then o = rmsnorm(o) * norm_w * silu(z) in bf16 for out_proj
//   delta_rule_chunked  the same rule in the chunked (WY / UT) form, for prompts: chunks of 64
//                tokens solved in parallel, then one pass over a sequence's chunks carrying the
//                state (backend/cpu/gated_delta.hpp's gated_delta_rule_chunked)
//
// A sequence at position 0 starts from a zero state (its slot is not read), so a
// graph's padding sequences (position 0, the scratch slot) and fresh prompts need no
// reset. The state is f32 in the slot; a decode step reads and writes each value
// head's [dk, dv] matrix once. Grids are sized by the host from the pass (sequences,
// their longest run of tokens), so a decode graph replays for any slots and
// positions. Same conventions as kernels.hpp (PDL waits before any read of a
// predecessor's output).
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/kernels.hpp"

namespace neuron::backend::cuda::kernels {

// One linear-attention layer's state in the runner's state pool: slot s's conv inputs
// at base + s * slot_floats + conv_offset ([C, K - 1] f32, oldest first) and its
// delta-rule matrices at base + s * slot_floats + delta_offset ([Hv, dk, dv] f32).
struct LinearState {
  float* base = nullptr;
  std::size_t slot_floats = 0;
  std::size_t conv_offset = 0;
  std::size_t delta_offset = 0;
};

// The pass's sequences as the linear layers read them (StepLayout arrays).
struct LinearSeqs {
  const std::int32_t* q_start = nullptr;     // [S] first row of each sequence's tokens
  const std::int32_t* num_tokens = nullptr;  // [S]
  const std::int32_t* position = nullptr;    // [S] position of its first token (0: a zero state)
  const std::int32_t* state_slot = nullptr;  // [S] its slot in the state pool
};

struct LinearShape {
  int key_heads = 0, value_heads = 0;  // this rank's Hk, Hv (value head h reads key head h / (Hv / Hk))
  int key_dim = 0, value_dim = 0;      // dk, dv
  int kernel = 0;                      // K
  int channels() const noexcept { return 2 * key_heads * key_dim + value_heads * value_dim; }
};

// Whether the kernels take this shape: dk one of 16, 32, 64, 128, 256; dv <= 512 / (dk / 32, at least 1);
// K in [2, 8].
bool linear_shape_supported(const LinearShape& shape) noexcept;

// in: [T, width] f32 the in-projection, whose first C columns are the conv's inputs (q, k, v);
// w: [C, K] f32 taps (w[c, K - 1] meets the newest input); out: [T, C] f32. `max_tokens`: the most
// tokens any sequence of the pass has (sizes the grid).
void delta_conv(const float* in, int width, const float* w, const LinearShape& shape, LinearSeqs seqs, int n_seqs,
                int max_tokens, LinearState state, float* out, cudaStream_t stream);

// conv: [T, C] delta_conv's output; in: [T, width] the in-projection, z at column z_col ([Hv dv]), b at b_col and
// a at a_col ([Hv] each); neg_a, dt_bias: [Hv] f32 (-exp(A_log), dt_bias); norm_w: [dv] bf16; out: [T, Hv dv] bf16.
void delta_rule(const float* conv, const float* in, int width, int z_col, int b_col, int a_col, const float* neg_a,
                const float* dt_bias, const bf16_t* norm_w, float eps, const LinearShape& shape, LinearSeqs seqs,
                int n_seqs, LinearState state, bf16_t* out, cudaStream_t stream);

// The chunked form. A pass's chunks are prepared in parallel (per chunk and value head: the UT system's inverse T,
// w = T (k beta exp(G)), u = T (v beta), q k^T decayed), then each (64 state columns (32 at dk 256), value head,
// sequence) walks its sequence's chunks in order (v_new = u - w S; o = (q exp(G)) S + (q k^T decayed) v_new; S = exp(G_last) S +
// (k exp(G_last - G))^T v_new), then the gated norm: three kernels whose cost grows linearly in the tokens, with
// [64, dk] x [dk, 64] products on tensor cores (tf32; 3xTF32 where the state depends on them) in place of a
// rank-1 update a token. Same contract as delta_rule, plus
// `max_tokens` (the most tokens of a sequence in the pass) and `scratch`: [tokens of the pass, Hv (dk + dv + 65)
// rounded up to 4] f32, delta_chunk_scratch_floats. conv and scratch start on 16 bytes (device allocations do).
// Sequences of any length, one token included.
inline constexpr int kDeltaChunkTokens = 64;
std::size_t delta_chunk_scratch_floats(const LinearShape& shape, int tokens) noexcept;
// Whether delta_rule_chunked takes this shape: linear_shape_supported's, dv a multiple of 4, and its shared
// memory fits sm_90's 227 KiB.
bool delta_chunked_supported(const LinearShape& shape) noexcept;
void delta_rule_chunked(const float* conv, const float* in, int width, int z_col, int b_col, int a_col,
                        const float* neg_a, const float* dt_bias, const bf16_t* norm_w, float eps, const LinearShape& shape,
                        LinearSeqs seqs, int n_seqs, int max_tokens, LinearState state, float* scratch, bf16_t* out,
                        cudaStream_t stream);

}  // namespace neuron::backend::cuda::kernels
