#pragma once
// CUDA kernels over weights kept in GGUF block formats (quant/ggml_type.hpp):
// the packed rows are what the device holds, decoded in registers as they
// are read, so a decode step reads each weight's blocks once.
//
// A packed matrix W [rows, cols] is `rows` rows of quant::row_bytes(type,
// cols) bytes, back to back; cols is a multiple of the type's block size.
// Supported types: Q8_0, Q4_0, Q4_K, Q5_K, Q6_K. Q4_K and Q5_K rows must
// start 16-byte aligned (their rows are whole 16-byte multiples, so a matrix
// at an aligned address qualifies); the others need 2-byte alignment.
//
// Dequantization is bit-equal to quant::dequantize_row (the reference's f16
// scales and float operations, in its order, with no contraction into FMAs).
// The GEMV accumulates those exact weights times the bf16 activations in
// f32, so it matches a dequantize-then-f32 product to rounding.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/kernels.hpp"
#include "backend/cuda/moe_kernels.hpp"
#include "quant/ggml_type.hpp"

namespace neuron::backend::cuda::kernels {

// True for the block types these kernels compute with.
bool quant_supported(quant::GgmlType type) noexcept;

inline constexpr int kQuantGemvMaxTokens = 32;  // tokens one quant_gemv call serves

// y[t * ldy + r] (+)= sum_c W[r, c] * x[t * cols + c] for t < n, r < rows:
// W packed [rows, cols], x [n, cols] bf16 (16-byte aligned, cols % 8 == 0),
// 1 <= n <= kQuantGemvMaxTokens: on the tensor cores (quant_mma_gemv.hpp),
// reading W's blocks once for all n tokens, for Q4_K, and for Q5_K, Q6_K and
// Q8_0 from a few tokens; the rest with FMAs, a warp per two rows, reading
// W once per 8 tokens. `accumulate` adds into f32 y (one thread per output: deterministic).
void quant_gemv(quant::GgmlType type, const void* w, int rows, int cols, const bf16_t* x, int n, float* y, int ldy,
                bool accumulate, cudaStream_t stream);
void quant_gemv(quant::GgmlType type, const void* w, int rows, int cols, const bf16_t* x, int n, bf16_t* y, int ldy,
                cudaStream_t stream);

// W packed [rows, cols] to f32 out [rows, cols] (16-byte aligned), bit-equal to quant::dequantize_row.
void dequantize_f32(quant::GgmlType type, const void* w, int rows, int cols, float* out, cudaStream_t stream);

// W packed [rows, cols] as two bf16 terms, hi = bf16(w) and lo = bf16(w - hi),
// each [rows, cols] row-major, 16-byte aligned: hi + lo is w to within 2^-17 |w|, so a bf16
// tensor-core product summed over both terms keeps a quantized prefill within
// ~4e-6 (of sum |w x|) of the f32 product.
void dequantize_bf16_split(quant::GgmlType type, const void* w, int rows, int cols, bf16_t* hi, bf16_t* lo,
                           cudaStream_t stream);

// A MoE layer's block-quantized experts in use (moe_kernels.hpp's grouping of n tokens, k experts each):
// y[s, :] = W_e x(s) for every slot s of every expert e with a token, W_e [rows, cols] packed at w[e] (device
// pointers, [experts]: e is the grouping's local id, `experts` its MoeExperts::count), x(s) = row slot_pair[s] / k of x ([n, cols]) when x_by_token, else row s of x ([n k, cols]).
// y: [n k, rows]. From the token counts where quant_gemv takes the tensor cores, and for the types and widths
// they take, quant_mma_gemv.hpp's grouped kernel (an expert's rows read once per 8 to 32 of its slots); else the FMA
// GEMV's views (every type quant_supported takes), a warp reading its rows' blocks once per eight slots.
bool quant_moe_supported(quant::GgmlType type) noexcept;
void quant_moe_rows(quant::GgmlType type, const void* const* w, int rows, int cols, const bf16_t* x, bool x_by_token,
                    int n, int k, int experts, const MoeRoute& route, float* y, cudaStream_t stream);
// The same over each expert's gate_up ([2 ff, cols] packed: gate rows, then up rows) and the token rows of h
// ([n, cols]), storing act[s, j] = silu(gate_j . h) * (up_j . h) as swiglu_kernel rounds it. act: [n k, ff].
void quant_moe_swiglu(quant::GgmlType type, const void* const* gate_up, int ff, int cols, const bf16_t* h, int n,
                      int k, int experts, const MoeRoute& route, bf16_t* act, cudaStream_t stream);

// y[t * ldy + r] = bf16(src[t * rows + r]) for t < n, r < rows: an f32 product to its bf16 destination.
void store_rows_bf16(const float* src, int n, int rows, bf16_t* y, int ldy, cudaStream_t stream);

}  // namespace neuron::backend::cuda::kernels
