// Elementwise, normalisation, RoPE and GEMV kernels (attention lives in attention.cu).
#include <cuda_bf16.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <type_traits>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/launch.cuh"
#include "util/error.hpp"

namespace neuron::backend::cuda::kernels {
namespace {



// Sum over the block; every thread gets the result. blockDim.x is a multiple of 32, at most 1024.
__device__ float block_sum(float v) {
  __shared__ float partial[32];
  __shared__ float total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < static_cast<int>(blockDim.x >> 5) ? partial[lane] : 0.f;
    s = warp_sum(s);
    if (lane == 0) total = s;
  }
  __syncthreads();
  return total;
}

__device__ __forceinline__ std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

__global__ void fill_random_kernel(bf16_t* out, std::int64_t rows, std::int64_t cols, std::int64_t row_begin,
                                   std::int64_t col_begin, std::int64_t full_cols, std::uint64_t seed, float scale) {
  const std::size_t count = static_cast<std::size_t>(rows) * cols;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < count;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const std::uint64_t r = i / cols, c = i % cols;
    const std::uint64_t global = (row_begin + r) * full_cols + col_begin + c;
    const std::uint64_t h = splitmix64(seed ^ splitmix64(global));
    const float u = static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    out[i] = to_bf((2.f * u - 1.f) * scale);
  }
}

__global__ void embed_kernel(const std::int32_t* tokens, const bf16_t* table, int hidden, int vocab, float* x) {
  grid_dependency_wait();
  const int row = blockIdx.x;
  int t = tokens[row];
  t = t < 0 ? 0 : (t >= vocab ? vocab - 1 : t);
  const bf16_t* src = table + static_cast<std::size_t>(t) * hidden;
  float* dst = x + static_cast<std::size_t>(row) * hidden;
  for (int c = threadIdx.x; c < hidden; c += blockDim.x) dst[c] = bf(src[c]);
}

__global__ void add_rmsnorm_kernel(float* x, const float* delta, const bf16_t* w, bf16_t* out, int hidden, float eps) {
  grid_dependency_wait();
  const std::size_t base = static_cast<std::size_t>(blockIdx.x) * hidden;
  float* xr = x + base;
  float ss = 0.f;
  for (int c = threadIdx.x; c < hidden; c += blockDim.x) {
    float v = xr[c];
    if (delta) {
      v += delta[base + c];
      xr[c] = v;
    }
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(hidden) + eps);
  for (int c = threadIdx.x; c < hidden; c += blockDim.x) out[base + c] = to_bf(bf(to_bf(xr[c] * inv)) * bf(w[c]));
}

// One block per (token, head slot): slots [0, hq) are query heads, [hq, hq + hkv)
// key heads, [hq + hkv, hq + 2 hkv) value heads.
__global__ void qk_norm_rope_kernel(const bf16_t* qkv, int hq, int d, const bf16_t* q_norm, const bf16_t* k_norm,
                                    const float* inv_freq, const std::int32_t* positions, const std::int32_t* slots,
                                    float eps, bf16_t* q_out, PagedKv kv, QkvLayout layout) {
  grid_dependency_wait();
  extern __shared__ float row[];  // [d]
  const int token = blockIdx.x, slot = blockIdx.y;
  const int hkv = kv.hkv;
  const bool gated = layout.gate_out != nullptr;
  const int q_rows = (gated ? 2 : 1) * hq * d;
  const int width = q_rows + 2 * hkv * d;
  const bf16_t* src = qkv + static_cast<std::size_t>(token) * width +
                      (slot < hq ? static_cast<std::size_t>(slot) * (gated ? 2 : 1) * d
                                 : static_cast<std::size_t>(q_rows) + static_cast<std::size_t>(slot - hq) * d);
  const int pos = positions[token];
  const int at = slots[token];
  // Where head `h` of this token's position lives in the pool: [block, hkv, block_size, d].
  auto pool_row = [&](int h) {
    return (((static_cast<std::size_t>(at / kv.block_size)) * hkv + h) * kv.block_size + at % kv.block_size) * d;
  };
  if (slot >= hq + hkv) {  // value head: straight into the pool
    bf16_t* dst = kv.v + pool_row(slot - hq - hkv);
    for (int c = threadIdx.x; c < d; c += blockDim.x) dst[c] = src[c];
    return;
  }
  const bool is_q = slot < hq;
  if (is_q && gated) {  // the head's output gate follows its query rows
    bf16_t* g = layout.gate_out + (static_cast<std::size_t>(token) * hq + slot) * d;
    for (int c = threadIdx.x; c < d; c += blockDim.x) g[c] = src[d + c];
  }
  const bf16_t* w = is_q ? q_norm : k_norm;
  float ss = 0.f;
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    const float v = bf(src[c]);
    row[c] = v;
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss) / static_cast<float>(d) + eps);  // block_sum synchronises
  bf16_t* dst = is_q ? q_out + (static_cast<std::size_t>(token) * hq + slot) * d : kv.k + pool_row(slot - hq);
  // Normalised values are rounded to bf16 as the reference model does before RoPE.
  // Without norm weights (Llama) the projection's bf16 values rotate as they are.
  auto normed = [&](int c) { return w ? bf(to_bf(bf(to_bf(row[c] * inv)) * bf(w[c]))) : row[c]; };
  const int rot = layout.rotary_dim > 0 ? layout.rotary_dim : d;
  const int half = rot / 2;
  for (int j = threadIdx.x; j < half; j += blockDim.x) {
    const float a = normed(j), b = normed(j + half);
    float s, c;
    sincosf(static_cast<float>(pos) * inv_freq[j], &s, &c);
    dst[j] = to_bf(a * c - b * s);
    dst[j + half] = to_bf(b * c + a * s);
  }
  for (int j = rot + threadIdx.x; j < d; j += blockDim.x) dst[j] = to_bf(normed(j));  // lanes past the rotary ones
}

__global__ void scatter_add_rows_kernel(const float* src, const std::int32_t* rows, const float* weights, int cols,
                                        float* dst) {
  grid_dependency_wait();
  const float w = weights[blockIdx.x];
  const float* from = src + static_cast<std::size_t>(blockIdx.x) * cols;
  float* to = dst + static_cast<std::size_t>(rows[blockIdx.x]) * cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) to[c] += w * from[c];
}

__global__ void gather_rows_kernel(const bf16_t* src, const std::int32_t* rows, int cols, bf16_t* dst) {
  grid_dependency_wait();
  const bf16_t* from = src + static_cast<std::size_t>(rows[blockIdx.x]) * cols;
  bf16_t* to = dst + static_cast<std::size_t>(blockIdx.x) * cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) to[c] = from[c];
}

constexpr int kArgmaxThreads = 1024;

// One block a row: each thread scans a strided slice keeping its first
// maximum, then the block keeps the larger value, the lower id on a tie.
__global__ void __launch_bounds__(kArgmaxThreads) argmax_rows_kernel(const float* logits, int vocab,
                                                                     const std::int32_t* rows, std::int32_t* out) {
  grid_dependency_wait();
  const float* row = logits + static_cast<std::size_t>(rows ? rows[blockIdx.x] : blockIdx.x) * vocab;
  float best = -INFINITY;
  int id = INT_MAX;
  for (int i = threadIdx.x; i < vocab; i += kArgmaxThreads) {
    const float v = row[i];
    if (v > best) {
      best = v;
      id = i;
    }
  }
  auto better = [](float v, int i, float bv, int bi) { return v > bv || (v == bv && i < bi); };
  for (int off = 16; off > 0; off >>= 1) {
    const float v = __shfl_down_sync(0xffffffffu, best, off);
    const int i = __shfl_down_sync(0xffffffffu, id, off);
    if (better(v, i, best, id)) {
      best = v;
      id = i;
    }
  }
  __shared__ float warp_best[kArgmaxThreads / 32];
  __shared__ int warp_id[kArgmaxThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) {
    warp_best[warp] = best;
    warp_id[warp] = id;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kArgmaxThreads / 32; ++w)
      if (better(warp_best[w], warp_id[w], best, id)) {
        best = warp_best[w];
        id = warp_id[w];
      }
    out[blockIdx.x] = best > -INFINITY ? id : 0;
  }
}

__global__ void mul_sigmoid_kernel(bf16_t* x, const bf16_t* gate, std::size_t count) {
  grid_dependency_wait();
  for (std::size_t i = blockIdx.x * static_cast<std::size_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    x[i] = to_bf(bf(x[i]) / (1.f + __expf(-bf(gate[i]))));
}

__global__ void add_sigmoid_scaled_kernel(const float* src, const float* logit, int cols, float* dst) {
  grid_dependency_wait();
  const std::size_t base = static_cast<std::size_t>(blockIdx.x) * cols;
  const float g = 1.f / (1.f + __expf(-logit[blockIdx.x]));
  for (int c = threadIdx.x; c < cols; c += blockDim.x) dst[base + c] += g * src[base + c];
}

// out[r, c] = silu(g) * u with g = gate_up[r, c], u = gate_up[r, f + c], the SiLU
// rounded to bf16 first as the CPU does. V values a thread: 8 (16-byte loads and
// stores; f % 8 == 0 and 16-byte aligned rows) or 1. gate_up: [n, 2f], out: [n, f].
template <int V>
__global__ void swiglu_kernel(const bf16_t* gate_up, int f, bf16_t* out) {
  grid_dependency_wait();
  const int row = blockIdx.y;
  const bf16_t* g = gate_up + static_cast<std::size_t>(row) * 2 * f;
  const bf16_t* u = g + f;
  bf16_t* o = out + static_cast<std::size_t>(row) * f;
  const auto one = [](float gv, float uv) {
    const float act = bf(to_bf(gv / (1.f + __expf(-gv))));
    return to_bf(act * uv);
  };
  for (int c = (blockIdx.x * blockDim.x + threadIdx.x) * V; c < f; c += gridDim.x * blockDim.x * V) {
    if constexpr (V == 1) {
      o[c] = one(bf(g[c]), bf(u[c]));
    } else {
      static_assert(V == 8);
      const uint4 gv = *reinterpret_cast<const uint4*>(g + c), uv = *reinterpret_cast<const uint4*>(u + c);
      const unsigned gw[4] = {gv.x, gv.y, gv.z, gv.w}, uw[4] = {uv.x, uv.y, uv.z, uv.w};
      unsigned ow[4];
      for (int i = 0; i < 4; ++i) {
        const bf16_t lo = one(__uint_as_float(gw[i] << 16), __uint_as_float(uw[i] << 16));
        const bf16_t hi = one(__uint_as_float(gw[i] & 0xffff0000u), __uint_as_float(uw[i] & 0xffff0000u));
        ow[i] = static_cast<unsigned>(lo) | static_cast<unsigned>(hi) << 16;
      }
      *reinterpret_cast<uint4*>(o + c) = make_uint4(ow[0], ow[1], ow[2], ow[3]);
    }
  }
}

__device__ __forceinline__ void store(float* y, int r, float v) { y[r] = v; }
__device__ __forceinline__ void store(bf16_t* y, int r, float v) { y[r] = to_bf(v); }

constexpr int kGemvRows = 4;  // rows per block

// A block owns kGemvRows rows and its threads split the columns in 16-byte
// chunks, so even a matrix of few rows puts enough warps on every SM and each
// thread has kGemvRows x 2 independent loads in flight; partial sums meet
// through warp shuffles and one shared-memory step.
// How a GEMV reads its input vector, 8 values (one 16-byte chunk) at a time:
// as stored, as silu(gate) * up of a fused [gate | up] activation (the MLP's
// SwiGLU folded into the down projection), or as the RMSNorm of the residual.
// prepare() runs once per block after the dependency wait.
struct PlainInput {  // as stored, bf16
  const bf16_t* x;
  __device__ void prepare() {}
  __device__ uint4 load(int c) const { return __ldg(reinterpret_cast<const uint4*>(x) + c); }
};
struct SwigluInput {  // silu(gate) * up of a fused [gate | up] activation: the MLP's SwiGLU
  const bf16_t* gate_up;
  int f;
  __device__ void prepare() {}
  __device__ uint4 load(int c) const {
    const uint4 g = __ldg(reinterpret_cast<const uint4*>(gate_up) + c);
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(gate_up + f) + c);
    const bf16_t* ge = reinterpret_cast<const bf16_t*>(&g);
    const bf16_t* ue = reinterpret_cast<const bf16_t*>(&u);
    uint4 out;
    bf16_t* oe = reinterpret_cast<bf16_t*>(&out);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float gv = bf(ge[i]);
      const float act = bf(to_bf(gv / (1.f + __expf(-gv))));
      oe[i] = to_bf(act * bf(ue[i]));
    }
    return out;
  }
};
struct RmsNormInput {  // rmsnorm(x) * w of the f32 residual stream, rounded as add_rmsnorm rounds
  const float* x;
  const bf16_t* w;
  int cols;
  float eps;
  float inv;
  __device__ void prepare() {
    __shared__ float red[32];
    __shared__ float inv_s;
    float ss = 0.f;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    for (int i = threadIdx.x; i < cols / 4; i += blockDim.x) {
      const float4 v = x4[i];
      ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    ss = warp_sum(ss);
    if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
    __syncthreads();
    if (threadIdx.x == 0) {
      float t = 0.f;
      for (int i = 0; i < static_cast<int>(blockDim.x >> 5); ++i) t += red[i];
      inv_s = rsqrtf(t / static_cast<float>(cols) + eps);
    }
    __syncthreads();
    inv = inv_s;
  }
  __device__ uint4 load(int c) const {
    const float4 a = reinterpret_cast<const float4*>(x)[2 * c];
    const float4 b = reinterpret_cast<const float4*>(x)[2 * c + 1];
    const uint4 wv = __ldg(reinterpret_cast<const uint4*>(w) + c);
    const bf16_t* we = reinterpret_cast<const bf16_t*>(&wv);
    const float xs[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
    uint4 out;
    bf16_t* oe = reinterpret_cast<bf16_t*>(&out);
#pragma unroll
    for (int i = 0; i < 8; ++i) oe[i] = to_bf(bf(to_bf(xs[i] * inv)) * bf(we[i]));
    return out;
  }
};

// A GEMV's row result goes through emit (device_math.cuh): stored, or added
// to the f32 residual stream.

template <int Threads, class Input, class OutT, bool Accumulate>
__global__ void __launch_bounds__(Threads) gemv_vec_kernel(const bf16_t* w, Input in, int rows, int cols, OutT* y) {
  constexpr int warps = Threads / 32;
  __shared__ float part[warps][kGemvRows];
  const int row0 = blockIdx.x * kGemvRows;
  const int chunks = cols / 8;
  const uint4* wr[kGemvRows];
#pragma unroll
  for (int r = 0; r < kGemvRows; ++r)
    wr[r] = reinterpret_cast<const uint4*>(w + static_cast<std::size_t>(min(row0 + r, rows - 1)) * cols);
  float acc[kGemvRows] = {};
  // Software pipeline: the next chunk's weights are in flight while this one is
  // multiplied. The first weights are requested before waiting on the
  // previous kernel: they do not depend on it.
  int c = threadIdx.x;
  uint4 wv[kGemvRows];
  if (c < chunks) {
#pragma unroll
    for (int r = 0; r < kGemvRows; ++r) wv[r] = __ldcs(wr[r] + c);
  }
  grid_dependency_wait();
  in.prepare();
  while (c < chunks) {
    const uint4 xv = in.load(c);
    const int next = c + Threads;
    uint4 wn[kGemvRows];
    if (next < chunks) {
#pragma unroll
      for (int r = 0; r < kGemvRows; ++r) wn[r] = __ldcs(wr[r] + next);
    }
#pragma unroll
    for (int r = 0; r < kGemvRows; ++r) {
      acc[r] += dot8(wv[r], xv);
      wv[r] = wn[r];
    }
    c = next;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int r = 0; r < kGemvRows; ++r) {
    const float v = warp_sum(acc[r]);
    if (lane == 0) part[warp][r] = v;
  }
  __syncthreads();
  if (threadIdx.x < kGemvRows && row0 + threadIdx.x < rows) {
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < warps; ++i) sum += part[i][threadIdx.x];
    emit(y, row0 + threadIdx.x, sum, Accumulate);
  }
}

// Any shape or alignment: one warp per row, scalar loads.
template <class OutT>
__global__ void gemv_scalar_kernel(const bf16_t* w, const bf16_t* x, int rows, int cols, OutT* y) {
  grid_dependency_wait();
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (row >= rows) return;
  const bf16_t* wr = w + static_cast<std::size_t>(row) * cols;
  float acc = 0.f;
  for (int c = lane; c < cols; c += 32) acc = fmaf(bf(wr[c]), bf(x[c]), acc);
  acc = warp_sum(acc);
  if (lane == 0) store(y, row, acc);
}

template <bool Accumulate, class Input, class OutT>
void gemv_launch(const bf16_t* w, Input in, int rows, int cols, OutT* y, cudaStream_t stream) {
  // Threads per block: at least two chunks each, between 64 and 256.
  const int chunks = cols / 8;
  const dim3 blocks(static_cast<unsigned>((rows + kGemvRows - 1) / kGemvRows));
  if (chunks >= 512)
    launch(gemv_vec_kernel<256, Input, OutT, Accumulate>, blocks, 256, 0, stream, "gemv", w, in, rows, cols, y);
  else if (chunks >= 256)
    launch(gemv_vec_kernel<128, Input, OutT, Accumulate>, blocks, 128, 0, stream, "gemv", w, in, rows, cols, y);
  else
    launch(gemv_vec_kernel<64, Input, OutT, Accumulate>, blocks, 64, 0, stream, "gemv", w, in, rows, cols, y);
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

template <class OutT>
void gemv_plain(const bf16_t* w, const bf16_t* x, int rows, int cols, OutT* y, bool accumulate, cudaStream_t stream) {
  if (rows <= 0) return;
  if (cols % 8 == 0 && aligned16(w) && aligned16(x)) {
    if (accumulate)
      gemv_launch<true>(w, PlainInput{x}, rows, cols, y, stream);
    else
      gemv_launch<false>(w, PlainInput{x}, rows, cols, y, stream);
  } else {
    NEURON_ASSERT(!accumulate);
    launch(gemv_scalar_kernel<OutT>, dim3((rows + 3) / 4), 128, 0, stream, "gemv", w, x, rows, cols, y);
  }
}


}  // namespace

void fill_random_bf16(bf16_t* out, std::int64_t rows, std::int64_t cols, std::int64_t row_begin,
                      std::int64_t col_begin, std::int64_t full_cols, std::uint64_t seed, float scale,
                      cudaStream_t stream) {
  const std::size_t count = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols);
  if (count == 0) return;
  fill_random_kernel<<<grid_for(count, 256), 256, 0, stream>>>(out, rows, cols, row_begin, col_begin, full_cols, seed,
                                                               scale);
  check_launch("fill_random_bf16");
}

void embed(const std::int32_t* tokens, int n, const bf16_t* table, int hidden, int vocab, float* x,
           cudaStream_t stream) {
  if (n <= 0) return;
  launch(embed_kernel, dim3(n), 256, 0, stream, "embed", tokens, table, hidden, vocab, x);
}

void add_rmsnorm(float* x, const float* delta, const bf16_t* w, bf16_t* out, int n, int hidden, float eps,
                 cudaStream_t stream) {
  if (n <= 0) return;
  // Two columns a thread from 2048 on: at a decode step's one row the block is the whole kernel, and its two
  // passes over the row are latency, not bandwidth (256 threads took 9.4 us of a 30B-A3B layer, twice).
  const int threads = hidden >= 2048 ? 1024 : (hidden >= 1024 ? 256 : 128);
  launch(add_rmsnorm_kernel, dim3(n), threads, 0, stream, "add_rmsnorm", x, delta, w, out, hidden, eps);
}

void qk_norm_rope(const bf16_t* qkv, int n, int hq, int d, const bf16_t* q_norm, const bf16_t* k_norm,
                  const float* inv_freq, const std::int32_t* positions, const std::int32_t* slots, float eps,
                  bf16_t* q_out, PagedKv kv, cudaStream_t stream, QkvLayout layout) {
  if (n <= 0) return;
  const dim3 grid(static_cast<unsigned>(n), static_cast<unsigned>(hq + 2 * kv.hkv));
  launch(qk_norm_rope_kernel, grid, 64, d * sizeof(float), stream, "qk_norm_rope", qkv, hq, d, q_norm, k_norm,
         inv_freq, positions, slots, eps, q_out, kv, layout);
}

void gather_rows(const bf16_t* src, const std::int32_t* rows, int n, int cols, bf16_t* dst, cudaStream_t stream) {
  if (n <= 0) return;
  launch(gather_rows_kernel, dim3(static_cast<unsigned>(n)), 256, 0, stream, "gather_rows", src, rows, cols, dst);
}

void scatter_add_rows(const float* src, const std::int32_t* rows, const float* weights, int m, int cols, float* dst,
                      cudaStream_t stream) {
  if (m <= 0) return;
  launch(scatter_add_rows_kernel, dim3(static_cast<unsigned>(m)), 256, 0, stream, "scatter_add_rows", src, rows, weights,
         cols, dst);
}

void argmax_rows(const float* logits, int vocab, const std::int32_t* rows, int n, std::int32_t* out, cudaStream_t stream) {
  if (n <= 0) return;
  launch(argmax_rows_kernel, dim3(static_cast<unsigned>(n)), kArgmaxThreads, 0, stream, "argmax_rows", logits, vocab,
         rows, out);
}

void mul_sigmoid(bf16_t* x, const bf16_t* gate, std::size_t count, cudaStream_t stream) {
  if (count == 0) return;
  const auto blocks = static_cast<unsigned>(std::min<std::size_t>((count + 255) / 256, 4096));
  launch(mul_sigmoid_kernel, dim3(blocks), 256, 0, stream, "mul_sigmoid", x, gate, count);
}

void add_sigmoid_scaled(const float* src, const float* logit, int n, int cols, float* dst, cudaStream_t stream) {
  if (n <= 0) return;
  launch(add_sigmoid_scaled_kernel, dim3(static_cast<unsigned>(n)), 256, 0, stream, "add_sigmoid_scaled", src, logit,
         cols, dst);
}

void swiglu(const bf16_t* gate_up, int n, int f, bf16_t* out, cudaStream_t stream) {
  if (n <= 0 || f <= 0) return;
  // Rows 16-byte aligned: gate_up's row stride is 4f bytes, out's 2f.
  if (f % 8 == 0 && aligned16(gate_up) && aligned16(out)) {
    const dim3 grid(static_cast<unsigned>(std::min((f / 8 + 255) / 256, 64)), static_cast<unsigned>(n));
    launch(swiglu_kernel<8>, grid, 256, 0, stream, "swiglu", gate_up, f, out);
  } else {
    const dim3 grid(static_cast<unsigned>(std::min((f + 255) / 256, 64)), static_cast<unsigned>(n));
    launch(swiglu_kernel<1>, grid, 256, 0, stream, "swiglu", gate_up, f, out);
  }
}

void gemv(const bf16_t* w, const bf16_t* x, int rows, int cols, float* y, cudaStream_t stream) {
  gemv_plain(w, x, rows, cols, y, false, stream);
}
void gemv(const bf16_t* w, const bf16_t* x, int rows, int cols, bf16_t* y, cudaStream_t stream) {
  gemv_plain(w, x, rows, cols, y, false, stream);
}
void gemv_accumulate(const bf16_t* w, const bf16_t* x, int rows, int cols, float* y, cudaStream_t stream) {
  NEURON_ASSERT(cols % 8 == 0);
  gemv_plain(w, x, rows, cols, y, true, stream);
}

bool gemv_swiglu_supported(int f) noexcept { return f % 8 == 0; }

void gemv_swiglu(const bf16_t* w, const bf16_t* gate_up, int rows, int f, float* y, bool accumulate,
                 cudaStream_t stream) {
  NEURON_ASSERT(gemv_swiglu_supported(f) && aligned16(w) && aligned16(gate_up));
  if (rows <= 0) return;
  if (accumulate)
    gemv_launch<true>(w, SwigluInput{gate_up, f}, rows, f, y, stream);
  else
    gemv_launch<false>(w, SwigluInput{gate_up, f}, rows, f, y, stream);
}

void gemv_rmsnorm(const bf16_t* w, const float* x, const bf16_t* norm_w, float eps, int rows, int cols, bf16_t* y,
                  cudaStream_t stream) {
  NEURON_ASSERT(cols % 8 == 0 && aligned16(w) && aligned16(x) && aligned16(norm_w));
  if (rows <= 0) return;
  gemv_launch<false>(w, RmsNormInput{x, norm_w, cols, eps, 0.f}, rows, cols, y, stream);
}

namespace {
std::atomic<bool> g_programmatic{true};
}
void set_programmatic_launch(bool on) noexcept { g_programmatic = on; }
bool programmatic_launch() noexcept { return g_programmatic; }

}  // namespace neuron::backend::cuda::kernels
