#pragma once
// The CUDA kernels of the families' blocks (model/arch/block_ops.hpp), as host-callable functions over
// device pointers, so the runner and the kernel tests stay plain C++.
//
// Conventions: bf16 buffers are passed as std::uint16_t* (the bit pattern, as
// in tensor/dtype.hpp); accumulation is always f32. Every function enqueues on
// `stream`, returns without synchronising, and throws Error{cuda} if the
// launch fails. Shapes are row-major; weights are [out, in] as in the
// checkpoint.
//
// The KV cache is a pool of blocks (backend/batch.hpp): per layer, K and V are
// each [num_blocks, hkv, block_size, head_dim] bf16, so one (block, KV head)
// tile of block_size positions is contiguous (4 KB for 16 x 128) and a KV
// head's positions are found through a sequence's block table. Position p of
// a sequence is in block table[p / block_size], slot p % block_size.
//
// Everything a step varies (token ids, positions, slots, block tables) is read
// from device memory, so a captured CUDA graph replays for every decode step
// of the same batch size unchanged.
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

// x[i, :] = table[tokens[i], :] as f32. Token ids are validated by the caller;
// an id outside [0, vocab) here is clamped rather than read out of bounds.
void embed(const std::int32_t* tokens, int n, const bf16_t* table, int hidden, int vocab, float* x,
           cudaStream_t stream);

// Residual add fused with RMSNorm: x += delta (when delta is not null), then
// out = bf16(rmsnorm(x) * w), for n rows of `hidden`. x is the f32 residual stream.
void add_rmsnorm(float* x, const float* delta, const bf16_t* w, bf16_t* out, int n, int hidden, float eps,
                 cudaStream_t stream);

// One layer's K and V in the paged pool, each [num_blocks, hkv, block_size, d] bf16.
struct PagedKv {
  bf16_t* k = nullptr;
  bf16_t* v = nullptr;
  int hkv = 0;
  int block_size = 0;
};

// A step's sequences as the attention kernels read them: device pointers into
// the step's packed inputs, each [S] i32 but block_tables.
struct StepSeqs {
  const std::int32_t* q_start = nullptr;       // [S] row of its first new token in the step's [T, ...] activations
  const std::int32_t* num_tokens = nullptr;    // [S] new tokens
  const std::int32_t* position = nullptr;      // [S] position of its first new token
  const std::int32_t* block_offset = nullptr;  // [S] where its block table starts in block_tables
  const std::int32_t* ctx_len = nullptr;       // [S] position + num_tokens: the positions it attends to
  const std::int32_t* block_tables = nullptr;  // [sum of tables] block ids
};

// Splits the fused projection qkv [n, (hq + 2 hkv) * d] into heads, applies
// the per-head RMSNorm (q_norm / k_norm over d; both null: no norm, as Llama)
// and rotate-half RoPE at positions[i], writes q to q_out [n, hq, d] and k, v
// into the pool at slots[i] (= block * block_size + slot). inv_freq [d / 2]
// f32 (model::rope_inv_freq). QkvLayout covers the hybrids' gated attention:
// with gate_out, q_proj's rows are [hq, 2, d] (each head's query, then its
// output gate), the gates go to gate_out [n, hq, d] and the row is
// [hq 2 d + 2 hkv d]; with rotary_dim < d only lanes [0, rotary_dim) rotate
// (pairs j, j + rotary_dim / 2; inv_freq [rotary_dim / 2]), the rest are only normed.
struct QkvLayout {
  int rotary_dim = 0;          // 0: d
  bf16_t* gate_out = nullptr;  // [n, hq, d]; null: no output gate
};
void qk_norm_rope(const bf16_t* qkv, int n, int hq, int d, const bf16_t* q_norm, const bf16_t* k_norm,
                  const float* inv_freq, const std::int32_t* positions, const std::int32_t* slots, float eps,
                  bf16_t* q_out, PagedKv kv, cudaStream_t stream, QkvLayout layout = {});

// x[i] *= sigmoid(gate[i]) for count bf16 values (gated attention's output, before o_proj).
void mul_sigmoid(bf16_t* x, const bf16_t* gate, std::size_t count, cudaStream_t stream);
// dst[t, :] += sigmoid(logit[t]) * src[t, :] for n rows of `cols` f32 (a shared expert behind its gate).
void add_sigmoid_scaled(const float* src, const float* logit, int n, int cols, float* dst, cudaStream_t stream);

// dst[i, :] = src[rows[i], :] for n rows of `cols` bf16 (the rows the LM head is asked for).
void gather_rows(const bf16_t* src, const std::int32_t* rows, int n, int cols, bf16_t* dst, cudaStream_t stream);

// dst[rows[i], :] += weights[i] * src[i, :] for m rows of `cols` f32 (a MoE expert's outputs into the layer's
// sum; the rows of one call are distinct).
void scatter_add_rows(const float* src, const std::int32_t* rows, const float* weights, int m, int cols, float* dst,
                      cudaStream_t stream);

// out[i] = model::greedy_pick(logits[r, :]) with r = rows ? rows[i] : i, for n rows of `vocab` f32:
// the first maximum, NaN never winning, 0 when nothing is above -inf. out [n] i32 on the device.
void argmax_rows(const float* logits, int vocab, const std::int32_t* rows, int n, std::int32_t* out, cudaStream_t stream);

// out[i, j] = silu(gate_up[i, j]) * gate_up[i, f + j]; gate_up [n, 2f], out [n, f].
void swiglu(const bf16_t* gate_up, int n, int f, bf16_t* out, cudaStream_t stream);

// Head dimensions the attention kernels are instantiated for.
bool attention_supports_head_dim(int d) noexcept;

inline constexpr int kPrefillTileRows = 64;  // query rows of one attention_prefill work tile

// Causal attention of sequences with several new tokens (prefill chunks), on
// tensor cores, online softmax, no score matrix in memory. A work tile is 64
// query rows of one sequence: tiles [n_tiles, 2] i32 holds (sequence, first
// row within its new tokens); list the longest (largest ctx) first. Row r of
// sequence s (position position[s] + r) attends to its positions
// [0, position[s] + r] through its block table; GQA: query head h reads KV
// head h / (hq / hkv). q [T, hq, d] and out [T, hq, d], row q_start[s] + r.
void attention_prefill(const bf16_t* q, PagedKv kv, StepSeqs seqs, const std::int32_t* tiles, int n_tiles, int hq,
                       int d, float scale, bf16_t* out, cudaStream_t stream);

// Decode attention: one new token per listed sequence (items [n_items] i32,
// sequence indices) over its ctx_len positions. A block serves one sequence,
// one KV head and up to 8 of its query heads (they share every K/V load),
// and one of `splits` ranges of the positions; the last block of a
// (sequence, head group) to finish merges the splits' partial softmax states.
//   scratch: decode_scratch_floats(n_items, hq, d, splits) floats (none when splits == 1)
//   counters: decode_counters(n_items, hq, hkv) u32, zeroed once before first
//             use, re-armed by every call; never share them with other data.
// With `rope.qkv` set, the kernel also does qk_norm_rope for the step's
// tokens (the raw projection qkv [T, (hq + 2 hkv) * d]): it makes the queries
// itself and writes each sequence's new key and value at position
// ctx_len - 1 before reading; q is then unused.
struct DecodeRope {
  const bf16_t* qkv = nullptr;
  const bf16_t* q_norm = nullptr;  // [d]; both null: no q/k norm
  const bf16_t* k_norm = nullptr;  // [d]
  const float* inv_freq = nullptr;
  float eps = 0.f;
};
inline constexpr int kDecodeMinSplitKeys = 32;  // a split covers at least this many positions
inline constexpr int kDecodeMaxSplits = 64;     // splits a decode grid may have
int decode_head_chunks(int hq, int hkv) noexcept;  // blocks per (sequence, KV head, split)
std::size_t decode_scratch_floats(int n_items, int hq, int d, int splits) noexcept;
std::size_t decode_counters(int n_items, int hq, int hkv) noexcept;
void attention_decode(const bf16_t* q, const DecodeRope& rope, PagedKv kv, StepSeqs seqs, const std::int32_t* items,
                      int n_items, int hq, int d, float scale, int splits, float* scratch, unsigned* counters,
                      bf16_t* out, cudaStream_t stream);

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
