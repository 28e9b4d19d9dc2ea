#pragma once
// FP8 (e4m3) weight-only quantization on Hopper (DESIGN.md section 3b): a
// weight matrix W [rows, cols] is held as q [rows, cols] e4m3 bytes and one
// f32 scale per row, W[r, c] ~ e4m3(q[r, c]) * scale[r], scale[r] =
// max_c |W[r, c]| / 448 (448: e4m3's largest finite value), so each row uses
// the format's whole range. Half the bytes of bf16 per decode step.
//
// Decode multiplies the bf16 activations by the exactly decoded weights in
// f32 (fp8_gemv). Prefill runs on the FP8 tensor cores: the activations are
// quantized per token the same way (fp8_quantize_rows over x), cuBLASLt
// multiplies the two e4m3 operands, and both scales are applied to its f32
// result (Blas::fp8_linear, or fp8_scale_rows after a plain product).
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.hpp"

namespace neuron::backend::cuda::kernels {

inline constexpr float kFp8Max = 448.f;  // largest finite e4m3

// Per row r of src [rows, src_cols] bf16: scale[r] = max |src[r, :]| / 448
// (1 for an all-zero row), q[r, c] = e4m3(src[r, col0 + c] / scale[r]) for
// c < cols, rounded to nearest even, saturating. q [rows, cols] bytes, scale
// [rows] f32. A tensor-parallel rank holding columns [col0, col0 + cols) of a
// row passes the whole row, so its scale, and so its bytes, are TP=1's.
void fp8_quantize_rows(const bf16_t* src, int rows, int src_cols, int col0, int cols, std::uint8_t* q, float* scale,
                       cudaStream_t stream);

// y[t * ldy + r] (+)= scale[r] * sum_c e4m3(q[r, c]) * x[t * cols + c], for
// t < n <= kFp8GemvMaxTokens: q [rows, cols] (16-byte aligned, cols % 16 == 0), x [n, cols] bf16.
inline constexpr int kFp8GemvMaxTokens = 8;
void fp8_gemv(const std::uint8_t* q, const float* scale, int rows, int cols, const bf16_t* x, int n, float* y, int ldy,
              bool accumulate, cudaStream_t stream);
void fp8_gemv(const std::uint8_t* q, const float* scale, int rows, int cols, const bf16_t* x, int n, bf16_t* y, int ldy,
              cudaStream_t stream);

// act[t * ld_act + j] = silu(g) * u for j < f, t < n <= kFp8GemvMaxTokens,
// where g and u are rows j and f + j of the product with q [2f, cols] (a
// stacked [gate | up]), each rounded to bf16 first: bit-equal to fp8_gemv
// into [n, 2f] bf16 followed by kernels::swiglu, in one kernel.
void fp8_gemv_swiglu(const std::uint8_t* q, const float* scale, int f, int cols, const bf16_t* x, int n, bf16_t* act,
                     int ld_act, cudaStream_t stream);

// y[t * ldy + r] = acc[t * rows + r] * w_scale[r] * x_scale[t] for t < n: a
// product of e4m3 operands brought back to its units.
void fp8_scale_rows(const float* acc, int n, int rows, const float* w_scale, const float* x_scale, float* y, int ldy,
                    cudaStream_t stream);
void fp8_scale_rows(const float* acc, int n, int rows, const float* w_scale, const float* x_scale, bf16_t* y, int ldy,
                    cudaStream_t stream);

}  // namespace neuron::backend::cuda::kernels
