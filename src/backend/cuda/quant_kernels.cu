// GEMV and dequantization over GGUF block formats (quant_kernels.hpp).
//
// Every type is read in "units": 16, 32 or 64 weights one thread decodes from
// one contiguous stretch of its block, landing in `kRuns` runs of 16
// consecutive columns (a Q4_K unit's 16 quant bytes hold columns l..l+15 of
// one sub-block in their low nibbles and of the next in their high nibbles).
// A warp walks a row's units, 32 at a time, so its loads cover consecutive
// bytes of the row.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/quant_kernels.hpp"
#include "util/error.hpp"

namespace neuron::backend::cuda::kernels {
namespace {

using quant::GgmlType;

__device__ __forceinline__ float bf(bf16_t v) { return __uint_as_float(static_cast<unsigned>(v) << 16); }
__device__ __forceinline__ bf16_t to_bf(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }
__device__ __forceinline__ float half_at(const std::uint8_t* p) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(p)));
}
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// 16 bytes from a 16-byte aligned address, or from a 2-byte aligned one in eight loads.
struct Bytes16 {
  std::uint8_t b[16];
};
__device__ __forceinline__ Bytes16 load16_aligned(const std::uint8_t* p) {
  Bytes16 out;
  *reinterpret_cast<uint4*>(out.b) = __ldg(reinterpret_cast<const uint4*>(p));
  return out;
}
__device__ __forceinline__ Bytes16 load16_u16(const std::uint8_t* p) {
  Bytes16 out;
  const auto* s = reinterpret_cast<const unsigned short*>(p);
#pragma unroll
  for (int i = 0; i < 8; ++i) reinterpret_cast<unsigned short*>(out.b)[i] = __ldg(s + i);
  return out;
}

// ggml's get_scale_min_k4: 6-bit scale and min of sub-block j of a Q4_K / Q5_K super-block.
__device__ __forceinline__ void scale_min_k4(int j, const std::uint8_t* q, int& d, int& m) {
  if (j < 4) {
    d = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}
// a * b - c with both roundings, as the C reference computes it (no FMA).
__device__ __forceinline__ float mul_sub(float a, float b, float c) { return __fsub_rn(__fmul_rn(a, b), c); }

// Each decoder: kBlock weights in kBytes per block, kUnits units per block,
// a unit's weights w[kRuns * 16] land in columns c[r] .. c[r] + 15 of the row.
struct Q8_0 {  // f16 d, i8 qs[32]
  static constexpr int kBlock = 32, kUnits = 1, kRuns = 2;
  static constexpr std::size_t kBytes = quant::kQ8_0Bytes;
  __device__ static void decode(const std::uint8_t* row, int u, float* w, int* c) {
    const std::uint8_t* p = row + static_cast<std::size_t>(u) * kBytes;
    const float d = half_at(p);
    const Bytes16 a = load16_u16(p + 2), b = load16_u16(p + 18);
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      w[k] = __fmul_rn(static_cast<float>(static_cast<std::int8_t>(a.b[k])), d);
      w[16 + k] = __fmul_rn(static_cast<float>(static_cast<std::int8_t>(b.b[k])), d);
    }
    c[0] = u * 32;
    c[1] = u * 32 + 16;
  }
};

struct Q4_0 {  // f16 d, u8 qs[16]: low nibbles are weights 0..15, high ones 16..31, each minus 8
  static constexpr int kBlock = 32, kUnits = 1, kRuns = 2;
  static constexpr std::size_t kBytes = quant::kQ4_0Bytes;
  __device__ static void decode(const std::uint8_t* row, int u, float* w, int* c) {
    const std::uint8_t* p = row + static_cast<std::size_t>(u) * kBytes;
    const float d = half_at(p);
    const Bytes16 q = load16_u16(p + 2);
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      w[k] = __fmul_rn(static_cast<float>((q.b[k] & 0x0F) - 8), d);
      w[16 + k] = __fmul_rn(static_cast<float>((q.b[k] >> 4) - 8), d);
    }
    c[0] = u * 32;
    c[1] = u * 32 + 16;
  }
};

// Q4_K: f16 d, f16 dmin, u8 scales[12], u8 qs[128]. Unit i (8 per block):
// quant bytes 16 i .. 16 i + 15, i.e. chunk j = i / 2 of 64 weights, offset
// l0 = 16 (i % 2): low nibbles are sub-block 2j, high ones sub-block 2j + 1.
struct Q4_K {
  static constexpr int kBlock = 256, kUnits = 8, kRuns = 2;
  static constexpr std::size_t kBytes = quant::kQ4_KBytes;
  __device__ static void decode(const std::uint8_t* row, int u, float* w, int* c) {
    const int i = u & 7, j = i >> 1, l0 = (i & 1) * 16;
    const std::uint8_t* p = row + static_cast<std::size_t>(u >> 3) * kBytes;
    const float d = half_at(p), dmin = half_at(p + 2);
    int sc0, m0, sc1, m1;
    scale_min_k4(2 * j, p + 4, sc0, m0);
    scale_min_k4(2 * j + 1, p + 4, sc1, m1);
    const float d1 = __fmul_rn(d, static_cast<float>(sc0)), mn1 = __fmul_rn(dmin, static_cast<float>(m0));
    const float d2 = __fmul_rn(d, static_cast<float>(sc1)), mn2 = __fmul_rn(dmin, static_cast<float>(m1));
    const Bytes16 q = load16_aligned(p + 16 + 16 * i);
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      w[k] = mul_sub(d1, static_cast<float>(q.b[k] & 0xF), mn1);
      w[16 + k] = mul_sub(d2, static_cast<float>(q.b[k] >> 4), mn2);
    }
    c[0] = (u >> 3) * 256 + 64 * j + l0;
    c[1] = c[0] + 32;
  }
};

// Q5_K: f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]: Q4_K's layout
// plus a fifth bit per weight, bit 2j (low nibbles) / 2j + 1 (high) of qh[l].
struct Q5_K {
  static constexpr int kBlock = 256, kUnits = 8, kRuns = 2;
  static constexpr std::size_t kBytes = quant::kQ5_KBytes;
  __device__ static void decode(const std::uint8_t* row, int u, float* w, int* c) {
    const int i = u & 7, j = i >> 1, l0 = (i & 1) * 16;
    const std::uint8_t* p = row + static_cast<std::size_t>(u >> 3) * kBytes;
    const float d = half_at(p), dmin = half_at(p + 2);
    int sc0, m0, sc1, m1;
    scale_min_k4(2 * j, p + 4, sc0, m0);
    scale_min_k4(2 * j + 1, p + 4, sc1, m1);
    const float d1 = __fmul_rn(d, static_cast<float>(sc0)), mn1 = __fmul_rn(dmin, static_cast<float>(m0));
    const float d2 = __fmul_rn(d, static_cast<float>(sc1)), mn2 = __fmul_rn(dmin, static_cast<float>(m1));
    const Bytes16 ql = load16_aligned(p + 48 + 32 * j + l0);
    const Bytes16 qh = load16_aligned(p + 16 + l0);
    const int u1 = 1 << (2 * j), u2 = 2 << (2 * j);
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      w[k] = mul_sub(d1, static_cast<float>((ql.b[k] & 0xF) + (qh.b[k] & u1 ? 16 : 0)), mn1);
      w[16 + k] = mul_sub(d2, static_cast<float>((ql.b[k] >> 4) + (qh.b[k] & u2 ? 16 : 0)), mn2);
    }
    c[0] = (u >> 3) * 256 + 64 * j + l0;
    c[1] = c[0] + 32;
  }
};

// Q6_K: u8 ql[128], u8 qh[64], i8 scales[16], f16 d. Half h of a block
// (128 weights) reads ql[64 h ..], qh[32 h ..]; unit i (4 per block) is half
// h = i / 2 at offset l0 = 16 (i % 2): 64 weights in 4 runs 32 apart.
struct Q6_K {
  static constexpr int kBlock = 256, kUnits = 4, kRuns = 4;
  static constexpr std::size_t kBytes = quant::kQ6_KBytes;
  __device__ static void decode(const std::uint8_t* row, int u, float* w, int* c) {
    const int i = u & 3, h = i >> 1, l0 = (i & 1) * 16;
    const std::uint8_t* p = row + static_cast<std::size_t>(u >> 2) * kBytes;
    const float d = half_at(p + 208);
    const auto* sc = reinterpret_cast<const std::int8_t*>(p + 192) + 8 * h + (i & 1);
    float ds[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) ds[k] = __fmul_rn(d, static_cast<float>(sc[2 * k]));
    const Bytes16 lo = load16_u16(p + 64 * h + l0), hi = load16_u16(p + 64 * h + 32 + l0);
    const Bytes16 qh = load16_u16(p + 128 + 32 * h + l0);
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      const int q1 = ((lo.b[k] & 0xF) | (((qh.b[k] >> 0) & 3) << 4)) - 32;
      const int q2 = ((hi.b[k] & 0xF) | (((qh.b[k] >> 2) & 3) << 4)) - 32;
      const int q3 = ((lo.b[k] >> 4) | (((qh.b[k] >> 4) & 3) << 4)) - 32;
      const int q4 = ((hi.b[k] >> 4) | (((qh.b[k] >> 6) & 3) << 4)) - 32;
      w[k] = __fmul_rn(ds[0], static_cast<float>(q1));
      w[16 + k] = __fmul_rn(ds[1], static_cast<float>(q2));
      w[32 + k] = __fmul_rn(ds[2], static_cast<float>(q3));
      w[48 + k] = __fmul_rn(ds[3], static_cast<float>(q4));
    }
    const int base = (u >> 2) * 256 + 128 * h + l0;
#pragma unroll
    for (int r = 0; r < 4; ++r) c[r] = base + 32 * r;
  }
};

__device__ __forceinline__ float dot16(const float* w, const bf16_t* x) {
  const uint4 a = __ldg(reinterpret_cast<const uint4*>(x));
  const uint4 b = __ldg(reinterpret_cast<const uint4*>(x) + 1);
  const bf16_t* xa = reinterpret_cast<const bf16_t*>(&a);
  const bf16_t* xb = reinterpret_cast<const bf16_t*>(&b);
  float s = 0.f;
#pragma unroll
  for (int k = 0; k < 8; ++k) s = fmaf(w[k], bf(xa[k]), s);
#pragma unroll
  for (int k = 0; k < 8; ++k) s = fmaf(w[8 + k], bf(xb[k]), s);
  return s;
}

__device__ __forceinline__ void emit(float* y, std::size_t i, float v, bool accumulate) {
  y[i] = accumulate ? y[i] + v : v;
}
__device__ __forceinline__ void emit(bf16_t* y, std::size_t i, float v, bool) { y[i] = to_bf(v); }

constexpr int kGemvWarps = 4;  // rows per block

template <class Q, int N, class OutT, bool Accumulate>
__global__ void __launch_bounds__(kGemvWarps * 32)
    quant_gemv_kernel(const std::uint8_t* w, std::size_t row_bytes, int rows, int cols, const bf16_t* x, int n,
                      OutT* y, int ldy) {
  const int lane = threadIdx.x & 31;
  const int row = blockIdx.x * kGemvWarps + static_cast<int>(threadIdx.x >> 5);
  grid_dependency_wait();
  if (row >= rows) return;
  const std::uint8_t* wr = w + static_cast<std::size_t>(row) * row_bytes;
  const int units = cols / Q::kBlock * Q::kUnits;
  float acc[N] = {};
#pragma unroll 2
  for (int u = lane; u < units; u += 32) {
    float wv[Q::kRuns * 16];
    int c[Q::kRuns];
    Q::decode(wr, u, wv, c);
#pragma unroll
    for (int t = 0; t < N; ++t) {
      if (N > 1 && t >= n) break;
      const bf16_t* xt = x + static_cast<std::size_t>(t) * cols;
#pragma unroll
      for (int r = 0; r < Q::kRuns; ++r) acc[t] += dot16(wv + 16 * r, xt + c[r]);
    }
  }
#pragma unroll
  for (int t = 0; t < N; ++t) {
    if (N > 1 && t >= n) break;
    const float v = warp_sum(acc[t]);
    if (lane == 0) emit(y, static_cast<std::size_t>(t) * ldy + row, v, Accumulate);
  }
}

template <class Q>
struct F32Out {
  float* out;
  __device__ void put(std::size_t at, const float* w) const {
#pragma unroll
    for (int k = 0; k < 16; ++k) out[at + k] = w[k];
  }
};
template <class Q>
struct SplitOut {
  bf16_t* hi;
  bf16_t* lo;
  __device__ void put(std::size_t at, const float* w) const {
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      const bf16_t h = to_bf(w[k]);
      hi[at + k] = h;
      lo[at + k] = to_bf(w[k] - bf(h));
    }
  }
};

template <class Q, class Out>
__global__ void dequantize_kernel(const std::uint8_t* w, std::size_t row_bytes, int rows, int cols, Out out) {
  grid_dependency_wait();
  const int units = cols / Q::kBlock * Q::kUnits;
  const std::size_t total = static_cast<std::size_t>(rows) * units;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < total;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const int row = static_cast<int>(i / units), u = static_cast<int>(i % units);
    float wv[Q::kRuns * 16];
    int c[Q::kRuns];
    Q::decode(w + static_cast<std::size_t>(row) * row_bytes, u, wv, c);
#pragma unroll
    for (int r = 0; r < Q::kRuns; ++r) out.put(static_cast<std::size_t>(row) * cols + c[r], wv + 16 * r);
  }
}

__global__ void store_rows_bf16_kernel(const float* src, int n, int rows, bf16_t* y, int ldy) {
  grid_dependency_wait();
  const std::size_t total = static_cast<std::size_t>(n) * rows;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < total;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const std::size_t t = i / rows, r = i % rows;
    y[t * ldy + r] = to_bf(src[i]);
  }
}

unsigned grid_for(std::size_t count, int threads) {
  return static_cast<unsigned>(std::min<std::size_t>((count + threads - 1) / threads, 65535u * 16));
}

// Calls f(Q{}) with the decoder of `type`.
template <class F>
void with_decoder(GgmlType type, F&& f) {
  switch (type) {
    case GgmlType::q8_0: return f(Q8_0{});
    case GgmlType::q4_0: return f(Q4_0{});
    case GgmlType::q4_k: return f(Q4_K{});
    case GgmlType::q5_k: return f(Q5_K{});
    case GgmlType::q6_k: return f(Q6_K{});
    default:
      throw Error(errc::unsupported_arch, "CUDA: no kernel for " + std::string(quant::ggml_type_name(type)) +
                                              " weights (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)");
  }
}

void check_shape(GgmlType type, const void* w, int cols) {
  const std::int64_t block = quant::traits(type).block_size;
  NEURON_ASSERT(cols > 0 && cols % block == 0);
  const std::uintptr_t align = (type == GgmlType::q4_k || type == GgmlType::q5_k) ? 16 : 2;
  NEURON_ASSERT(reinterpret_cast<std::uintptr_t>(w) % align == 0);
}

template <class OutT, bool Accumulate>
void gemv_dispatch(GgmlType type, const void* w, int rows, int cols, const bf16_t* x, int n, OutT* y, int ldy,
                   cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return;
  check_shape(type, w, cols);
  NEURON_ASSERT(n <= kQuantGemvMaxTokens && cols % 8 == 0 && reinterpret_cast<std::uintptr_t>(x) % 16 == 0);
  const std::size_t row_bytes = quant::row_bytes(type, cols);
  const auto* wb = static_cast<const std::uint8_t*>(w);
  const dim3 grid(static_cast<unsigned>((rows + kGemvWarps - 1) / kGemvWarps));
  with_decoder(type, [&](auto q) {
    using Q = decltype(q);
    auto go = [&](auto kernel) {
      launch(kernel, grid, kGemvWarps * 32, 0, stream, "quant_gemv", wb, row_bytes, rows, cols, x, n, y, ldy);
    };
    if (n == 1)
      go(quant_gemv_kernel<Q, 1, OutT, Accumulate>);
    else if (n == 2)
      go(quant_gemv_kernel<Q, 2, OutT, Accumulate>);
    else if (n <= 4)
      go(quant_gemv_kernel<Q, 4, OutT, Accumulate>);
    else
      go(quant_gemv_kernel<Q, 8, OutT, Accumulate>);
  });
}

}  // namespace

bool quant_supported(GgmlType type) noexcept {
  return type == GgmlType::q8_0 || type == GgmlType::q4_0 || type == GgmlType::q4_k || type == GgmlType::q5_k ||
         type == GgmlType::q6_k;
}

void quant_gemv(GgmlType type, const void* w, int rows, int cols, const bf16_t* x, int n, float* y, int ldy,
                bool accumulate, cudaStream_t stream) {
  if (accumulate)
    gemv_dispatch<float, true>(type, w, rows, cols, x, n, y, ldy, stream);
  else
    gemv_dispatch<float, false>(type, w, rows, cols, x, n, y, ldy, stream);
}

void quant_gemv(GgmlType type, const void* w, int rows, int cols, const bf16_t* x, int n, bf16_t* y, int ldy,
                cudaStream_t stream) {
  gemv_dispatch<bf16_t, false>(type, w, rows, cols, x, n, y, ldy, stream);
}

void dequantize_f32(GgmlType type, const void* w, int rows, int cols, float* out, cudaStream_t stream) {
  if (rows <= 0) return;
  check_shape(type, w, cols);
  const std::size_t row_bytes = quant::row_bytes(type, cols);
  with_decoder(type, [&](auto q) {
    using Q = decltype(q);
    const std::size_t units = static_cast<std::size_t>(rows) * (cols / Q::kBlock * Q::kUnits);
    launch(dequantize_kernel<Q, F32Out<Q>>, grid_for(units, 256), 256, 0, stream, "dequantize_f32",
           static_cast<const std::uint8_t*>(w), row_bytes, rows, cols, F32Out<Q>{out});
  });
}

void dequantize_bf16_split(GgmlType type, const void* w, int rows, int cols, bf16_t* hi, bf16_t* lo,
                           cudaStream_t stream) {
  if (rows <= 0) return;
  check_shape(type, w, cols);
  const std::size_t row_bytes = quant::row_bytes(type, cols);
  with_decoder(type, [&](auto q) {
    using Q = decltype(q);
    const std::size_t units = static_cast<std::size_t>(rows) * (cols / Q::kBlock * Q::kUnits);
    launch(dequantize_kernel<Q, SplitOut<Q>>, grid_for(units, 256), 256, 0, stream, "dequantize_bf16_split",
           static_cast<const std::uint8_t*>(w), row_bytes, rows, cols, SplitOut<Q>{hi, lo});
  });
}

void store_rows_bf16(const float* src, int n, int rows, bf16_t* y, int ldy, cudaStream_t stream) {
  if (n <= 0 || rows <= 0) return;
  launch(store_rows_bf16_kernel, grid_for(static_cast<std::size_t>(n) * rows, 256), 256, 0, stream,
         "store_rows_bf16", src, n, rows, y, ldy);
}

}  // namespace neuron::backend::cuda::kernels
