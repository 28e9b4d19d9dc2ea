#pragma once
// The scale searches of the k-quant reference quantizers (quantize.cpp),
// eight sub-blocks at a time in the lanes of AVX2 registers. Each lane runs
// the reference's float operations on its sub-block in the reference's
// order (no FMA contraction, the same comparisons and rounding), so the
// results are bit-equal to the scalar ports; only the sub-blocks run side by
// side. Used by quantize_row when the CPU has AVX2.
#include <cstdint>

namespace neuron::quant::avx2 {

bool supported() noexcept;  // this CPU has AVX2

// x [256]: one Q4_K super-block. For each of its 8 sub-blocks j of 32 values,
// make_qkx2_quants(32, 15, x + 32 j, av_x + |x|, ...; -1, 0.1, 20 steps):
// L [256] the sub-block's levels, scales [8], mins [8] (the min as a positive offset).
void q4_k_sub_blocks(const float* x, std::uint8_t* L, float* scales, float* mins) noexcept;

// x [256]: one Q6_K super-block. For each of its 16 sub-blocks of 16 values,
// make_qx_quants(16, 32, x + 16 ib, ..., rmse_type 1): L [256] (stored + 32), scales [16].
void q6_k_sub_blocks(const float* x, std::int8_t* L, float* scales) noexcept;

}  // namespace neuron::quant::avx2
