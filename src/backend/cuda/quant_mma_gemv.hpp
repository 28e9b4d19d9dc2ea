#pragma once
// The GEMV over GGUF block formats on the tensor cores, behind
// quant_kernels.hpp's quant_gemv for the types it covers: a warp takes 16
// weight rows through bf16 mma instructions, the quants entering exactly as
// bf16 integers and each scale group's scale and offset applied to its f32
// sums, so the result is a dequantize-then-f32 product to rounding. Tokens
// go in tiles of 8 (up to 4) that share the weights' fragments: eight tokens
// cost about what one does, 32 about what two passes of 8 did.
//
// W packed [rows, cols] (rows of row_bytes, 16-byte aligned for Q4_K and
// Q5_K), cols as quant_mma_gemv_supported asks; x [n, cols] bf16, 16-byte
// aligned; y[t * ldy + r] for t < n <= kQuantMmaGemvMaxTokens, r < rows;
// `accumulate` adds into f32 y.
#include <cuda_runtime_api.h>

#include <cstddef>

#include "backend/cuda/kernels.hpp"
#include "backend/cuda/moe_kernels.hpp"
#include "quant/ggml_type.hpp"

namespace neuron::backend::cuda::kernels {

inline constexpr int kQuantMmaGemvMaxTokens = 32;  // four tiles of 8 tokens, sharing the weights' fragments

// True where this GEMV computes with `type` at `cols`: Q4_K, Q5_K, Q6_K, and
// Q8_0 with cols a multiple of 128 (its unit of four blocks).
bool quant_mma_gemv_supported(quant::GgmlType type, int cols) noexcept;

void quant_mma_gemv(quant::GgmlType type, const void* w, std::size_t row_bytes, int rows, int cols, const bf16_t* x,
                    int n, float* y, int ldy, bool accumulate, cudaStream_t stream);
void quant_mma_gemv(quant::GgmlType type, const void* w, std::size_t row_bytes, int rows, int cols, const bf16_t* x,
                    int n, bf16_t* y, int ldy, cudaStream_t stream);

// The grouped products of a MoE layer's block-quantized experts (quant_kernels.hpp's quant_moe_rows and
// quant_moe_swiglu, same arguments and results, for the types and widths quant_mma_gemv_supported takes):
// an expert's rows are read once per 8, 16 or 32 of its slots (by the slots an expert has on average), each
// slot's tokens gathered by the lanes.
void quant_mma_moe_rows(quant::GgmlType type, const void* const* w, std::size_t row_bytes, int rows, int cols,
                        const bf16_t* x, bool x_by_token, int n, int k, int experts, const MoeRoute& route, float* y,
                        cudaStream_t stream);
void quant_mma_moe_swiglu(quant::GgmlType type, const void* const* gate_up, std::size_t row_bytes, int ff, int cols,
                          const bf16_t* h, int n, int k, int experts, const MoeRoute& route, bf16_t* act,
                          cudaStream_t stream);

}  // namespace neuron::backend::cuda::kernels
