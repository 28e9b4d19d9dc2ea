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

// A block owns R rows; its threads split the columns in 16-byte chunks (16
// weights), thread i taking chunks i, i + Threads, ... of every row, so a
// row's bytes are requested by the whole block at once and a thread has R
// loads in flight (2R inside the loop: the next chunk's while this one is
// multiplied). Each x chunk is converted once and serves the R rows. The
// first loads go out before the wait on the previous kernel. Partial sums
// meet in shared memory; one thread per (row, token) emits.
//
// Swiglu: W is a stacked [gate | up] of rows = 2f; the block owns gate rows
// j0 .. j0 + R/2 and the up rows f + j0 .. of the same units, and emits
// y[t * ldy + j] = silu(gate) * up for j < f, rounded as the unfused path
// rounds (each product to bf16, silu to bf16, the result to bf16).
template <int Threads, int R, int N, class OutT, bool Accumulate, bool Swiglu = false>
__global__ void __launch_bounds__(Threads)
    fp8_gemv_kernel(const std::uint8_t* q, const float* scale, int rows, int cols, const bf16_t* x, int n, OutT* y,
                    int ldy) {
  constexpr int warps = Threads / 32;
  __shared__ float part[warps][R * N];  // [warp][row * N + token] partial sums
  const int f = rows / 2;
  const int row0 = blockIdx.x * (Swiglu ? R / 2 : R);
  // The matrix row of the block's r-th row (gate rows first, then their up rows).
  auto matrix_row = [&](int r) { return Swiglu ? (r < R / 2 ? row0 + r : f + row0 + r - R / 2) : row0 + r; };
  const int out_rows = Swiglu ? f : rows;
  const int chunks = cols / 16;
  const uint4* wr[R];
#pragma unroll
  for (int r = 0; r < R; ++r)
    wr[r] = reinterpret_cast<const uint4*>(q + static_cast<std::size_t>(min(matrix_row(r), rows - 1)) * cols);
  int c = threadIdx.x;
  uint4 wv[R];
  if (c < chunks)
#pragma unroll
    for (int r = 0; r < R; ++r) wv[r] = __ldcs(wr[r] + c);
  grid_dependency_wait();
  float acc[R][N] = {};
  while (c < chunks) {
    const int next = c + Threads;
    uint4 wn[R];
    if (next < chunks)
#pragma unroll
      for (int r = 0; r < R; ++r) wn[r] = __ldcs(wr[r] + next);
#pragma unroll
    for (int t = 0; t < N; ++t) {
      if (N > 1 && t >= n) break;
      float xf[16];
      load_x16(x + static_cast<std::size_t>(t) * cols + 16 * c, xf);
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r][t] += dot16(wv[r], xf);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) wv[r] = wn[r];
    c = next;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < N; ++t) {
      const float v = warp_sum(acc[r][t]);
      if (lane == 0) part[warp][r * N + t] = v;
    }
  __syncthreads();
  const int r = static_cast<int>(threadIdx.x) / N, t = static_cast<int>(threadIdx.x) % N;
  auto row_sum = [&](int rr) {
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < warps; ++i) sum += part[i][rr * N + t];
    return sum * scale[matrix_row(rr)];
  };
  if constexpr (Swiglu) {
    if (threadIdx.x < R / 2 * N && row0 + r < out_rows && t < n) {
      const float g = bf(to_bf(row_sum(r)));
      const float act = bf(to_bf(g / (1.f + __expf(-g))));
      emit(y, static_cast<std::size_t>(t) * ldy + row0 + r, act * bf(to_bf(row_sum(r + R / 2))), Accumulate);
    }
  } else if (threadIdx.x < R * N && row0 + r < out_rows && t < n) {
    emit(y, static_cast<std::size_t>(t) * ldy + row0 + r, row_sum(r), Accumulate);
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


// Threads per block cover the columns' 16-byte chunks (at most 256). One
// token takes 4 rows a block (4 loads in flight a thread, 1024 blocks for a
// 4096-row matrix); more tokens take 2, their accumulators being n times
// larger (measured on the H200: bench/QUANT.md).
template <bool Swiglu, int N, class OutT, bool Accumulate>
void gemv_launch(const std::uint8_t* q, const float* scale, int rows, int cols, const bf16_t* x, int n, OutT* y,
                 int ldy, cudaStream_t stream) {
  constexpr int R = N == 1 ? 4 : 2;
  const int chunks = cols / 16;
  const int out_rows = Swiglu ? rows / 2 : rows;
  constexpr int per_block = Swiglu ? R / 2 : R;
  const dim3 grid(static_cast<unsigned>((out_rows + per_block - 1) / per_block));
  auto go = [&](auto kernel, int threads) {
    launch(kernel, grid, threads, 0, stream, "fp8_gemv", q, scale, rows, cols, x, n, y, ldy);
  };
  if (chunks >= 256)
    go(fp8_gemv_kernel<256, R, N, OutT, Accumulate, Swiglu>, 256);
  else if (chunks >= 128)
    go(fp8_gemv_kernel<128, R, N, OutT, Accumulate, Swiglu>, 128);
  else
    go(fp8_gemv_kernel<64, R, N, OutT, Accumulate, Swiglu>, 64);
}

template <bool Swiglu, class OutT, bool Accumulate>
void gemv_dispatch(const std::uint8_t* q, const float* scale, int rows, int cols, const bf16_t* x, int n, OutT* y,
                   int ldy, cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return;
  NEURON_ASSERT(n <= kFp8GemvMaxTokens && cols % 16 == 0 && (!Swiglu || rows % 2 == 0) &&
                reinterpret_cast<std::uintptr_t>(q) % 16 == 0 && reinterpret_cast<std::uintptr_t>(x) % 16 == 0);
  if (n == 1)
    gemv_launch<Swiglu, 1, OutT, Accumulate>(q, scale, rows, cols, x, n, y, ldy, stream);
  else if (n == 2)
    gemv_launch<Swiglu, 2, OutT, Accumulate>(q, scale, rows, cols, x, n, y, ldy, stream);
  else if (n <= 4)
    gemv_launch<Swiglu, 4, OutT, Accumulate>(q, scale, rows, cols, x, n, y, ldy, stream);
  else
    gemv_launch<Swiglu, 8, OutT, Accumulate>(q, scale, rows, cols, x, n, y, ldy, stream);
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
    gemv_dispatch<false, float, true>(q, scale, rows, cols, x, n, y, ldy, stream);
  else
    gemv_dispatch<false, float, false>(q, scale, rows, cols, x, n, y, ldy, stream);
}

void fp8_gemv(const std::uint8_t* q, const float* scale, int rows, int cols, const bf16_t* x, int n, bf16_t* y, int ldy,
              cudaStream_t stream) {
  gemv_dispatch<false, bf16_t, false>(q, scale, rows, cols, x, n, y, ldy, stream);
}

void fp8_gemv_swiglu(const std::uint8_t* q, const float* scale, int f, int cols, const bf16_t* x, int n, bf16_t* act,
                     int ld_act, cudaStream_t stream) {
  gemv_dispatch<true, bf16_t, false>(q, scale, 2 * f, cols, x, n, act, ld_act, stream);
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
