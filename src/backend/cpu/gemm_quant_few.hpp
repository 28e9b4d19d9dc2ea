#pragma once
// Y = X W^T for one or a few tokens with W in Q8_0, Q4_K or Q6_K blocks: the
// decode step's products on a quantized model (batch 1 and batched decode).
//
// The quantized counterpart of gemm_bf16_few: each thread takes chunks of W's
// rows; four rows' blocks are dequantized in registers, 32 columns at a time,
// exactly as quant::dequantize_row computes them (up to one fused
// multiply-add for Q4_K's minimum), and multiplied with every token of the
// call, four tokens at a time, while the rows' blocks are in L1. W is read
// from memory once per call; the activations stay f32 (no int8 rounding of
// x), so the result is a dequantize-then-f32 product up to summation order.
// AVX-512 (4 rows, 32 columns a step) and AVX2 + FMA + F16C (2 rows, 16
// columns); matmul_quant keeps its other paths for the scalar CPU and types.
#include <cstdint>

#include "backend/cpu/isa.hpp"
#include "backend/cpu/matmul_quant.hpp"
#include "backend/cpu/row_walk.hpp"
#include "quant/ggml_type.hpp"

namespace neuron::backend::cpu {

// This kernel handles `type` with `isa` (any but scalar; Q8_0, Q4_K, Q6_K).
bool gemm_quant_few_supported(Isa isa, quant::GgmlType type) noexcept;

// x: [n, w.cols] f32 (row stride ldx), y: [n, w.rows] f32 (row stride ldy).
// Rows split in chunks over ChunkPool::shared() and walked as row_walk(w.type, n) says;
// `isa` must be supported for w.type.
void gemm_quant_few(Isa isa, const float* x, std::int64_t n, std::int64_t ldx, const QuantMatrix& w, float* y,
                    std::int64_t ldy);

// Rows [r0, r1) of the same product on the calling thread, walked as `walk`
// says (row_walk.hpp: blocks of four rows (two with AVX2), or one; the same
// sums either way). Tests compare it with the reference.
void gemm_quant_few_rows(Isa isa, RowWalk walk, const float* x, std::int64_t n, std::int64_t ldx, const QuantMatrix& w,
                         std::int64_t r0, std::int64_t r1, float* y, std::int64_t ldy);

}  // namespace neuron::backend::cpu
