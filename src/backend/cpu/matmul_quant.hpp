#pragma once
// Y = X W^T with W held in a GGUF block format (Q8_0, Q4_K, Q6_K, ... any
// type quant::dequantize_row knows), never unpacked as a whole.
//
// One token (gemv_quant): each thread takes chunks of W's rows and reads each
// row's blocks once. With AVX2 (chosen at run time as the bf16 kernels are)
// Q8_0 (also AVX-512), Q4_K and Q6_K rows are dotted block by block straight from their
// quants (a sub-block's sum of q x, times its scale); the scalar fallback and
// the other types dequantize one row into an L1-sized f32 buffer and dot that.
// On AVX2 and AVX-512 CPUs, Q8_0 / Q4_K / Q6_K (AVX-512: also Q4_0, Q5_K)
// products of fewer than kFewTokensMax tokens (decode, batched decode) go to
// gemm_quant_few instead, but from kPairsTokensMin tokens to gemm_quant_pairs
// when x takes one bf16 term there (a reduced activation level,
// activations.hpp; 1.5x the few-token kernels at 16 tokens on Zen 4).
// With int8 activations on a CPU whose int8 kernels are the AVX2 ones
// (gemm_quant_few.hpp's Int8Kernels) and which has neither AVX-512 BF16 nor
// AMX, every product of Q4_K, Q5_K and Q6_K goes to gemm_quant_few's int8
// kernels, prefill included (Q8_0 and Q4_0 below kFewTokensMax tokens).
// Several tokens (matmul_quant): on a CPU with AMX-BF16, row chunks are
// dequantized and split into two bf16 terms for the tiles (gemm_bf16_amx
// with its low term), the rows past the last block of 32 by L2-sized tiles
// dequantized to f32 and OpenBLAS sgemm; with AVX-512 BF16 and no AMX,
// gemm_quant_pairs; at the AVX2 level (no AVX-512) panels of rows dequantized
// straight into bf16's prefill kernel (gemm_avx2_widened); elsewhere the f32
// tiles and sgemm. W is read once per call whatever n is.
#include <cstddef>
#include <cstdint>

#include "backend/cpu/isa.hpp"
#include "backend/cpu/weight_buffer.hpp"
#include "quant/ggml_type.hpp"

namespace neuron::backend::cpu {

// [rows, cols] in `type`'s blocks, row-major: row r at data + r * row_bytes,
// except that Q4_K rows [0, grouped_rows) may lie four to a group,
// interleaved (gemm_quant_grouped.hpp: group_rows, ungroup_rows).
struct QuantMatrix {
  quant::GgmlType type = quant::GgmlType::q8_0;
  std::int64_t rows = 0, cols = 0;
  std::size_t row_bytes = 0;        // quant::row_bytes(type, cols)
  WeightVector<std::byte> data;     // [rows * row_bytes]
  std::int64_t grouped_rows = 0;    // a multiple of 4; 0: every row as stored
};

// Every product of W in `type` with `cols` columns goes to the AVX2 int8
// kernels (gemm_quant_int8_avx2.hpp) at the calling thread's activation
// level: int8 products of a K-quant on a CPU whose int8 family is an AVX2
// one and which has neither AVX-512 BF16 pairs nor AMX for the prefill.
bool avx2_int8_products(quant::GgmlType type, std::int64_t cols);

// Several tokens at the AVX2 level: panels of W's rows (grouped ones as
// stored) dequantized straight into gemm_avx2_widened, bf16's prefill kernel.
// x: [n, ldx] f32, y: [n, ldy] f32. Requires gemm_bf16_avx2_fits(w.cols);
// matmul_quant takes it past the few-token kernels where selected_isa() is avx2.
void matmul_quant_avx2(const float* x, std::int64_t n, std::int64_t ldx, const QuantMatrix& w, float* y,
                       std::int64_t ldy);

// x: [n, in] f32 (row stride ldx), w: [out, in], y: [n, out] f32 (row stride ldy).
// Grouped rows take the int8 kernels or, for a prefill, the paths that read a
// row at a time; were the level changed since they were grouped to one
// without int8 products, slabs of them are ungrouped for the f32 kernels.
void matmul_quant(const float* x, std::int64_t n, std::int64_t ldx, const QuantMatrix& w, float* y, std::int64_t ldy);
// y[0, w.rows) = W x (w not grouped, as for the two below).
void gemv_quant(const QuantMatrix& w, const float* x, float* y);
// Rows [r0, r1) of W x on the calling thread with the given ISA's kernel (tests compare ISAs).
void gemv_quant_rows(Isa isa, const QuantMatrix& w, const float* x, std::int64_t r0, std::int64_t r1, float* y);

}  // namespace neuron::backend::cpu
