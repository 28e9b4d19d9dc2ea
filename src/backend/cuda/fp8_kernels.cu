// FP8 e4m3 row quantization, GEMV and scale epilogue (fp8_kernels.hpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/fp8_kernels.hpp"
#include "backend/cuda/launch.cuh"
#include "util/error.hpp"

namespace neuron::backend::cuda::kernels {
namespace {


constexpr int kQuantThreads = 256;

// One block per row: the row's absolute maximum, then every element divided by its scale.
__global__ void __launch_bounds__(kQuantThreads)
    quantize_rows_kernel(const bf16_t* src, int src_cols, int col0, int cols, std::uint8_t* q, float* scale) {
  grid_dependency_wait();
  __shared__ float part[kQuantThreads / 32];
  const std::size_t row = blockIdx.x;
  const bf16_t* s = src + row * src_cols;
  float m = 0.f;
  for (int c = threadIdx.x; c < src_cols; c += kQuantThreads) m = fmaxf(m, fabsf(bf(s[c])));
  m = warp_max(m);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = m;
  __syncthreads();
  float amax = 0.f;
#pragma unroll
  for (int i = 0; i < kQuantThreads / 32; ++i) amax = fmaxf(amax, part[i]);
  const float sc = amax > 0.f ? amax / kFp8Max : 1.f;
  if (threadIdx.x == 0) scale[row] = sc;
  const float inv = 1.f / sc;
  for (int c = threadIdx.x; c < cols; c += kQuantThreads)
    q[row * cols + c] = __nv_cvt_float_to_fp8(bf(s[col0 + c]) * inv, __NV_SATFINITE, __NV_E4M3);
}


constexpr int kGemvWarps = 4;        // warps per block
constexpr int kGemvRowsPerWarp = 2;  // rows a warp serves together (sharing each x load)

// x[16] (16 bf16 from a 32-byte aligned address) as f32.
__device__ __forceinline__ void load_x16(const bf16_t* x, float* xf) {
  const uint4 v[2] = {__ldg(reinterpret_cast<const uint4*>(x)), __ldg(reinterpret_cast<const uint4*>(x) + 1)};
  const auto* w = reinterpret_cast<const unsigned*>(v);
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    xf[2 * k] = __uint_as_float(w[k] << 16);
    xf[2 * k + 1] = __uint_as_float(w[k] & 0xffff0000u);
  }
}

// 16 e4m3 weights (one uint4) dotted with 16 f32 activations.
__device__ __forceinline__ float dot16(uint4 wq, const float* xf) {
  const auto* pairs = reinterpret_cast<const __nv_fp8x2_storage_t*>(&wq);
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const float2 w = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pairs[k], __NV_E4M3)));
    s = fmaf(w.x, xf[2 * k], s);
    s = fmaf(w.y, xf[2 * k + 1], s);
  }
  return s;
}

constexpr int kGemvGroup = 4;  // chunks of 16 weights a lane loads at once, per row

template <int N, class OutT, bool Accumulate>
__global__ void __launch_bounds__(kGemvWarps * 32)
    fp8_gemv_kernel(const std::uint8_t* q, const float* scale, int rows, int cols, const bf16_t* x, int n, OutT* y,
                    int ldy) {
  constexpr int R = kGemvRowsPerWarp, G = kGemvGroup;
  const int lane = threadIdx.x & 31;
  const int row0 = (blockIdx.x * kGemvWarps + static_cast<int>(threadIdx.x >> 5)) * R;
  const int chunks = cols / 16;
  const uint4* wr[R];
#pragma unroll
  for (int i = 0; i < R; ++i)
    wr[i] = reinterpret_cast<const uint4*>(q + static_cast<std::size_t>(min(row0 + i, rows - 1)) * cols);
  // A lane takes chunks lane, lane + 32, ... in groups of G, a group's loads
  // in flight together; the first group's are requested before waiting on
  // the previous kernel (weights do not depend on it).
  uint4 cur[G][R];
  auto load_group = [&](int c0) {
#pragma unroll
    for (int g = 0; g < G; ++g)
      if (c0 + 32 * g < chunks)
#pragma unroll
        for (int i = 0; i < R; ++i) cur[g][i] = __ldcs(wr[i] + c0 + 32 * g);
  };
  if (row0 < rows) load_group(lane);
  grid_dependency_wait();
  if (row0 >= rows) return;
  float acc[R][N] = {};
  for (int c0 = lane; c0 < chunks; c0 += 32 * G) {
    if (c0 != lane) load_group(c0);
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int c = c0 + 32 * g;
      if (c >= chunks) break;
#pragma unroll
      for (int t = 0; t < N; ++t) {
        if (N > 1 && t >= n) break;
        float xf[16];
        load_x16(x + static_cast<std::size_t>(t) * cols + 16 * c, xf);
#pragma unroll
        for (int i = 0; i < R; ++i) acc[i][t] += dot16(cur[g][i], xf);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < R; ++i) {
    if (row0 + i >= rows) break;
    const float sc = scale[row0 + i];
#pragma unroll
    for (int t = 0; t < N; ++t) {
      if (N > 1 && t >= n) break;
      const float v = warp_sum(acc[i][t]);
      if (lane == 0) emit(y, static_cast<std::size_t>(t) * ldy + row0 + i, v * sc, Accumulate);
    }
  }
}

template <class OutT>
__global__ void scale_rows_kernel(const float* acc, int n, int rows, const float* w_scale, const float* x_scale,
                                  OutT* y, int ldy) {
  grid_dependency_wait();
  const std::size_t total = static_cast<std::size_t>(n) * rows;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < total;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t t = i / rows, r = i % rows;
    emit(y, t * ldy + r, acc[i] * w_scale[r] * x_scale[t], false);
  }
}


template <class OutT, bool Accumulate>
void gemv_dispatch(const std::uint8_t* q, const float* scale, int rows, int cols, const bf16_t* x, int n, OutT* y,
                   int ldy, cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return;
  NEURON_ASSERT(n <= kFp8GemvMaxTokens && cols % 16 == 0 && reinterpret_cast<std::uintptr_t>(q) % 16 == 0 &&
                reinterpret_cast<std::uintptr_t>(x) % 16 == 0);
  const int rows_per_block = kGemvWarps * kGemvRowsPerWarp;
  const dim3 grid(static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block));
  auto go = [&](auto kernel) {
    launch(kernel, grid, kGemvWarps * 32, 0, stream, "fp8_gemv", q, scale, rows, cols, x, n, y, ldy);
  };
  if (n == 1)
    go(fp8_gemv_kernel<1, OutT, Accumulate>);
  else if (n == 2)
    go(fp8_gemv_kernel<2, OutT, Accumulate>);
  else if (n <= 4)
    go(fp8_gemv_kernel<4, OutT, Accumulate>);
  else
    go(fp8_gemv_kernel<8, OutT, Accumulate>);
}

}  // namespace

void fp8_quantize_rows(const bf16_t* src, int rows, int src_cols, int col0, int cols, std::uint8_t* q, float* scale,
                       cudaStream_t stream) {
  if (rows <= 0) return;
  NEURON_ASSERT(col0 >= 0 && cols >= 0 && col0 + cols <= src_cols);
  launch(quantize_rows_kernel, dim3(static_cast<unsigned>(rows)), kQuantThreads, 0, stream, "fp8_quantize_rows", src,
         src_cols, col0, cols, q, scale);
}

void fp8_gemv(const std::uint8_t* q, const float* scale, int rows, int cols, const bf16_t* x, int n, float* y, int ldy,
              bool accumulate, cudaStream_t stream) {
  if (accumulate)
    gemv_dispatch<float, true>(q, scale, rows, cols, x, n, y, ldy, stream);
  else
    gemv_dispatch<float, false>(q, scale, rows, cols, x, n, y, ldy, stream);
}

void fp8_gemv(const std::uint8_t* q, const float* scale, int rows, int cols, const bf16_t* x, int n, bf16_t* y, int ldy,
              cudaStream_t stream) {
  gemv_dispatch<bf16_t, false>(q, scale, rows, cols, x, n, y, ldy, stream);
}

void fp8_scale_rows(const float* acc, int n, int rows, const float* w_scale, const float* x_scale, float* y, int ldy,
                    cudaStream_t stream) {
  if (n <= 0 || rows <= 0) return;
  launch(scale_rows_kernel<float>, grid_for(static_cast<std::size_t>(n) * rows, 256), 256, 0, stream,
         "fp8_scale_rows", acc, n, rows, w_scale, x_scale, y, ldy);
}

void fp8_scale_rows(const float* acc, int n, int rows, const float* w_scale, const float* x_scale, bf16_t* y, int ldy,
                    cudaStream_t stream) {
  if (n <= 0 || rows <= 0) return;
  launch(scale_rows_kernel<bf16_t>, grid_for(static_cast<std::size_t>(n) * rows, 256), 256, 0, stream,
         "fp8_scale_rows", acc, n, rows, w_scale, x_scale, y, ldy);
}

}  // namespace neuron::backend::cuda::kernels
