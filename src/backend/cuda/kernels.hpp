#pragma once
// The CUDA kernels of the Qwen3 forward, as host-callable functions over
// device pointers, so the runner and the kernel tests stay plain C++.
//
// Conventions: bf16 buffers are passed as std::uint16_t* (the bit pattern, as
// in tensor/dtype.hpp); accumulation is always f32. Every function enqueues on
// `stream`, returns without synchronising, and throws Error{cuda} if the
// launch fails. Shapes are row-major; weights are [out, in] as in the
// checkpoint. The KV cache of one layer is [kv_heads, max_ctx, head_dim] per
// K and V, so attention for one KV head reads a contiguous run of positions.
//
// Positions come from device memory (`offset` = first position of this step)
// so a captured CUDA graph replays for every decode step unchanged.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace neuron::backend::cuda::kernels {

using bf16_t = std::uint16_t;

// Uniform values in [-scale, scale) for the block [row_begin, +rows) x
// [col_begin, +cols) of a [*, full_cols] tensor, each element a hash of (seed,
// its global index): the ranks of a sharded random model hold slices of one
// model, and a seed gives the same tensor on every run and device. out is [rows, cols].
void fill_random_bf16(bf16_t* out, std::int64_t rows, std::int64_t cols, std::int64_t row_begin,
                      std::int64_t col_begin, std::int64_t full_cols, std::uint64_t seed, float scale,
                      cudaStream_t stream);
void fill_bf16(bf16_t* out, std::size_t count, float value, cudaStream_t stream);

// x[i, :] = table[tokens[i], :] as f32. Token ids are validated by the caller;
// an id outside [0, vocab) here is clamped rather than read out of bounds.
void embed(const std::int32_t* tokens, int n, const bf16_t* table, int hidden, int vocab, float* x,
           cudaStream_t stream);

// Residual add fused with RMSNorm: x += delta (when delta is not null), then
// out = bf16(rmsnorm(x) * w), for n rows of `hidden`. x is the f32 residual stream.
void add_rmsnorm(float* x, const float* delta, const bf16_t* w, bf16_t* out, int n, int hidden, float eps,
                 cudaStream_t stream);

// Splits the fused projection qkv [n, (hq + 2 hkv) * d] into heads, applies
// the per-head RMSNorm (q_norm / k_norm over d) and rotate-half RoPE at
// position *offset + i, writes q to q_out [n, hq, d] and k, v into the layer's
// cache at those positions. inv_freq [d / 2] f32 holds theta^(-2j/d).
void qk_norm_rope(const bf16_t* qkv, int n, int hq, int hkv, int d, const bf16_t* q_norm, const bf16_t* k_norm,
                  const float* inv_freq, const std::int32_t* offset, float eps, bf16_t* q_out, bf16_t* k_cache,
                  bf16_t* v_cache, int max_ctx, cudaStream_t stream);

// out[i, j] = silu(gate_up[i, j]) * gate_up[i, f + j]; gate_up [n, 2f], out [n, f].
void swiglu(const bf16_t* gate_up, int n, int f, bf16_t* out, cudaStream_t stream);

// Head dimensions the attention kernels are instantiated for.
bool attention_supports_head_dim(int d) noexcept;

// Causal attention of n queries at positions *offset + i over cache positions
// [0, *offset + i], GQA (query head h reads KV head h / (hq / hkv)). Flash
// style: tensor-core tiles, online softmax, no score matrix in memory.
// q [n, hq, d], out [n, hq, d].
void attention_prefill(const bf16_t* q, const bf16_t* k_cache, const bf16_t* v_cache, int n, int hq, int hkv, int d,
                       int max_ctx, const std::int32_t* offset, float scale, bf16_t* out, cudaStream_t stream);

// One query (decode) over cache positions [0, *offset]: the KV length is split
// across `splits` blocks per head, and the last block of a head to finish
// merges their partial softmax states. scratch holds
// decode_scratch_floats(hq, d, splits) floats and must be zeroed once before
// first use (its per-head counters are re-armed by every call).
std::size_t decode_scratch_floats(int hq, int d, int splits) noexcept;
void attention_decode(const bf16_t* q, const bf16_t* k_cache, const bf16_t* v_cache, int hq, int hkv, int d,
                      int max_ctx, const std::int32_t* offset, float scale, int splits, float* scratch, bf16_t* out,
                      cudaStream_t stream);

// attention_decode with qk_norm_rope folded in: reads the raw projection
// qkv [1, (hq + 2 hkv) * d] of the step's token, makes the query itself and
// writes the new key and value into the cache at *offset (one kernel less per
// layer and step). Same scratch contract as attention_decode.
void attention_decode_fused(const bf16_t* qkv, const bf16_t* q_norm, const bf16_t* k_norm, const float* inv_freq,
                            float eps, bf16_t* k_cache, bf16_t* v_cache, int hq, int hkv, int d, int max_ctx,
                            const std::int32_t* offset, float scale, int splits, float* scratch, bf16_t* out,
                            cudaStream_t stream);

// Batch-1 matrix-vector product y[r] = sum_c w[r, c] * x[c] (w [rows, cols]),
// bandwidth-bound: 16-byte loads, several rows per warp, warp reductions.
void gemv(const bf16_t* w, const bf16_t* x, int rows, int cols, float* y, cudaStream_t stream);
void gemv(const bf16_t* w, const bf16_t* x, int rows, int cols, bf16_t* y, cudaStream_t stream);

// y[r] += sum_c w[r, c] * x[c]: a row-parallel projection added straight into
// the f32 residual stream (one thread owns each row: deterministic). cols % 8 == 0.
void gemv_accumulate(const bf16_t* w, const bf16_t* x, int rows, int cols, float* y, cudaStream_t stream);

// The MLP's down projection with SwiGLU folded into the input read:
// y[r] (+)= sum_c w[r, c] * silu(gate_up[c]) * gate_up[f + c], w [rows, f]. Needs f % 8 == 0.
bool gemv_swiglu_supported(int f) noexcept;
void gemv_swiglu(const bf16_t* w, const bf16_t* gate_up, int rows, int f, float* y, bool accumulate,
                 cudaStream_t stream);

// A projection of rmsnorm(x) * norm_w (x the f32 residual stream [cols]),
// the norm computed by every block as it starts: y = bf16(W h). cols % 8 == 0.
void gemv_rmsnorm(const bf16_t* w, const float* x, const bf16_t* norm_w, float eps, int rows, int cols, bf16_t* y,
                  cudaStream_t stream);

// Programmatic dependent launch for every forward kernel (on by default):
// each may start while its predecessor drains. Process-wide; for benchmarks.
void set_programmatic_launch(bool on) noexcept;

}  // namespace neuron::backend::cuda::kernels
