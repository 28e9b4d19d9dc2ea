#pragma once
// The small device helpers every kernel file shares: bf16 to and from f32
// (the bit pattern, as kernels.hpp passes it), an 8-wide bf16 dot product, warp reductions, storing a
// result row (f32 stored or added, bf16 rounded), words from a 2-byte
// aligned address (packed quantized blocks), and a grid-stride launch size.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "backend/cuda/kernels.hpp"

namespace neuron::backend::cuda::kernels {

__device__ __forceinline__ float bf(bf16_t v) { return __uint_as_float(static_cast<unsigned>(v) << 16); }
__device__ __forceinline__ bf16_t to_bf(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The dot product of eight bf16 weights and eight bf16 inputs (16-byte vectors), in f32.
__device__ __forceinline__ float dot8(uint4 w, uint4 x) {
  const __nv_bfloat162* wp = reinterpret_cast<const __nv_bfloat162*>(&w);
  const __nv_bfloat162* xp = reinterpret_cast<const __nv_bfloat162*>(&x);
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = __bfloat1622float2(wp[i]);
    const float2 b = __bfloat1622float2(xp[i]);
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
  }
  return acc;
}

// y[i] = v, or y[i] += v (f32; one thread owns each output, so the sum is deterministic); bf16 rounds.
__device__ __forceinline__ void emit(float* y, std::size_t i, float v, bool accumulate) {
  y[i] = accumulate ? y[i] + v : v;
}
__device__ __forceinline__ void emit(bf16_t* y, std::size_t i, float v, bool) { y[i] = to_bf(v); }

// W words (4 W bytes) from a 2-byte aligned address: W + 1 aligned word
// loads, realigned by a funnel shift (lanes of a warp may differ in alignment).
template <int W>
__device__ __forceinline__ void load_words(const std::uint8_t* p, unsigned* out) {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  const auto* base = reinterpret_cast<const unsigned*>(addr & ~std::uintptr_t{3});
  const unsigned shift = static_cast<unsigned>(addr & 3) * 8;
  unsigned v[W + 1];
#pragma unroll
  for (int i = 0; i < W; ++i) v[i] = __ldg(base + i);
  v[W] = shift ? __ldg(base + W) : 0u;  // an aligned range reads nothing past its end
#pragma unroll
  for (int i = 0; i < W; ++i) out[i] = __funnelshift_r(v[i], v[i + 1], shift);
}

// Blocks of `threads` for a grid-stride loop over `count` items (capped; the loop covers the rest).
inline unsigned grid_for(std::size_t count, int threads) {
  return static_cast<unsigned>(std::min<std::size_t>((count + threads - 1) / threads, 65535u * 16));
}

}  // namespace neuron::backend::cuda::kernels
