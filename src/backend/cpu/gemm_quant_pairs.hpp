#pragma once
// Y = X W^T for many tokens (prefill) with W in a GGUF block format, on
// AVX-512 BF16 dot products (vdpbf16ps), for CPUs without AMX tiles.
//
// Every supported type stores a weight as scale * q + constant per
// sub-block, q a small integer: Q8_0 q (32 columns a sub-block), Q4_0 q - 8
// (32), Q4_K q - 8 with constant 8 d sc - dmin m (32), Q5_K q - 16 with
// 16 d sc - dmin m (32), Q6_K q - 32 (16). Such a q is exact in bf16, so
// each thread unpacks a block of 6 rows of W into bf16 q (a few KiB, in L1)
// with each sub-block's f32 scale and constant, and multiplies q with x's
// bf16 terms (packed_terms.hpp) as gemm_bf16_pairs does: a sub-block's
// 32 token sums then take its scale in one FMA, and its constant meets
// the tokens' sums of x over the sub-block in another. W is read from
// memory once per call, and never dequantized to f32.
//
// The terms of x are the precision, as in gemm_bf16_pairs: two (the exact
// mode; within 1e-5 of sum |w x| of the dequantize-then-f32 product) or one
// (x rounded to bf16).
#include <cstdint>

#include "backend/cpu/matmul_quant.hpp"
#include "quant/ggml_type.hpp"

namespace neuron::backend::cpu {

// The product can run here: gemm_bf16_pairs_fits(w.cols) and `type` is one of
// Q8_0, Q4_0, Q4_K, Q5_K, Q6_K.
bool gemm_quant_pairs_fits(quant::GgmlType type, std::int64_t cols) noexcept;

// x: [n, w.cols] f32 (row stride ldx), y: [n, w.rows] f32 (row stride ldy);
// terms of x: 1 or 2. Requires gemm_quant_pairs_fits(w.type, w.cols).
void gemm_quant_pairs(const float* x, std::int64_t n, std::int64_t ldx, const QuantMatrix& w, float* y,
                      std::int64_t ldy, int terms);

}  // namespace neuron::backend::cpu
