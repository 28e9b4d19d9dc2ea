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

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/quant_kernels.hpp"
#include "backend/cuda/quant_mma_gemv.hpp"
#include "util/error.hpp"

namespace neuron::backend::cuda::kernels {
namespace {

using quant::GgmlType;

__device__ __forceinline__ float half_at(const std::uint8_t* p) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const unsigned short*>(p)));
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

// ---- GEMV --------------------------------------------------------------
// The GEMV never forms the weights: within a run of 16 columns every type is
// w = a * q + b with q a small unsigned integer (Q4_K: a = d * sc, b = -dmin
// * m; Q6_K: a = d * sc, b = -32 a; Q8_0: q biased by 128), so
//   sum_k w_k x_k = a * sum_k q_k x_k + b * sum_k x_k.
// q reaches f32 without a conversion instruction: its byte goes under the
// exponent of 2^23 (one byte permute) and 2^23 is subtracted (exact). The
// run's x sum is shared by the rows a lane serves (kGemvRowsPerWarp).

// q[16] as floats from four words of bytes: each byte goes under 2^23's
// exponent (one byte permute) and 2^23 is subtracted, exactly. (Quants below
// 128 could become 0.5 + q / 256 by the permute alone, but undoing that map
// multiplies the f32 rounding of a run's sum by up to 64 against the result:
// measured 1.2e-5 of sum |w x| on a Q4_0 row, over the 1e-5 asked.)
__device__ __forceinline__ void bytes_float(const unsigned (&w)[4], float* q) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int k = 0; k < 4; ++k)
      q[4 * i + k] = __uint_as_float(__byte_perm(w[i], 0x4B000000u, 0x7540u + k)) - 8388608.f;
}

// Each GEMV view: Raw is what a lane loads for one unit of one row (issued
// early, before the previous kernel finishes); run() turns run r of it into
// q[16] and the run's a, b; col() is the run's first column.
struct GemvQ8_0 {
  static constexpr int kGroup = 2;  // units a lane loads at once
  static constexpr int kBlock = 32, kUnits = 1, kRuns = 2;
  struct Raw {
    unsigned q[8];
    unsigned short d;
  };
  __device__ static Raw load(const std::uint8_t* row, int u) {
    const std::uint8_t* p = row + static_cast<std::size_t>(u) * quant::kQ8_0Bytes;
    Raw r;
    r.d = __ldg(reinterpret_cast<const unsigned short*>(p));
    load_words<8>(p + 2, r.q);
    return r;
  }
  __device__ static int col(int u, int r) { return 32 * u + 16 * r; }
  __device__ static void run(const Raw& raw, int, int r, float* q, float& a, float& b) {
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = raw.q[4 * r + i] ^ 0x80808080u;  // int8 + 128
    bytes_float(w, q);
    a = __half2float(__ushort_as_half(raw.d));
    b = -128.f * a;
  }
};

struct GemvQ4_0 {
  static constexpr int kGroup = 2;  // units a lane loads at once
  static constexpr int kBlock = 32, kUnits = 1, kRuns = 2;
  struct Raw {
    unsigned q[4];
    unsigned short d;
  };
  __device__ static Raw load(const std::uint8_t* row, int u) {
    const std::uint8_t* p = row + static_cast<std::size_t>(u) * quant::kQ4_0Bytes;
    Raw r;
    r.d = __ldg(reinterpret_cast<const unsigned short*>(p));
    load_words<4>(p + 2, r.q);
    return r;
  }
  __device__ static int col(int u, int r) { return 32 * u + 16 * r; }
  __device__ static void run(const Raw& raw, int, int r, float* q, float& a, float& b) {
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = (raw.q[i] >> (4 * r)) & 0x0F0F0F0Fu;
    bytes_float(w, q);
    a = __half2float(__ushort_as_half(raw.d));
    b = -8.f * a;
  }
};

// The Q4_K / Q5_K super-block header: d, dmin and the 12 packed 6-bit scales and mins.
struct KHeader {
  unsigned dd;     // f16 d (low half), f16 dmin (high half)
  unsigned sc[3];  // the 12 packed bytes
  __device__ void load(const std::uint8_t* p) {  // p 16-byte aligned: the block's first 16 bytes in one load
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
    dd = v.x;
    sc[0] = v.y;
    sc[1] = v.z;
    sc[2] = v.w;
  }
  // a, b of sub-block j: a = d * scale, b = -(dmin * min); get_scale_min_k4 on
  // the words, without branches or a byte array (which would live in local memory).
  __device__ void scale(int j, float& a, float& b) const {
    const int k = 8 * (j & 3);
    const unsigned lo_s = (sc[0] >> k) & 0xffu, lo_m = (sc[1] >> k) & 0xffu, hi = (sc[2] >> k) & 0xffu;
    const unsigned s = j < 4 ? (lo_s & 63u) : ((hi & 0xFu) | ((lo_s >> 6) << 4));
    const unsigned m = j < 4 ? (lo_m & 63u) : ((hi >> 4) | ((lo_m >> 6) << 4));
    a = __half2float(__ushort_as_half(static_cast<unsigned short>(dd & 0xffff))) * static_cast<float>(s);
    b = -(__half2float(__ushort_as_half(static_cast<unsigned short>(dd >> 16))) * static_cast<float>(m));
  }
};

// The units of a Q4_K / Q5_K block: unit u is chunk j = (u & 7) / 2 of 64 weights at offset l0 = 16 (u & 1);
// run r holds sub-block 2j + r (the low nibbles, then the high ones).
struct KUnits {
  static constexpr int kGroup = 2;  // units a lane loads at once
  static constexpr int kBlock = 256, kUnits = 8, kRuns = 2;
  __device__ static int chunk(int u) { return (u & 7) >> 1; }
  __device__ static int offset(int u) { return 16 * (u & 1); }
  __device__ static int col(int u, int r) { return (u >> 3) * 256 + 64 * chunk(u) + offset(u) + 32 * r; }
};

// Q4_K: Q5_K's view without the fifth bit.
struct GemvQ4_K : KUnits {
  struct Raw {
    uint4 ql;
    KHeader h;
  };
  __device__ static Raw load(const std::uint8_t* row, int u) {
    const std::uint8_t* p = row + static_cast<std::size_t>(u >> 3) * quant::kQ4_KBytes;
    Raw r;
    r.h.load(p);
    r.ql = __ldg(reinterpret_cast<const uint4*>(p + 16 + 32 * chunk(u) + offset(u)));
    return r;
  }
  __device__ static void run(const Raw& raw, int u, int r, float* q, float& a, float& b) {
    const unsigned lo[4] = {raw.ql.x, raw.ql.y, raw.ql.z, raw.ql.w};
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = (lo[i] >> (4 * r)) & 0x0F0F0F0Fu;
    bytes_float(w, q);
    raw.h.scale(2 * chunk(u) + r, a, b);
  }
};

struct GemvQ5_K : KUnits {
  struct Raw {
    uint4 ql, qh;
    KHeader h;
  };
  __device__ static Raw load(const std::uint8_t* row, int u) {
    const int j = (u & 7) >> 1, l0 = 16 * (u & 1);
    const std::uint8_t* p = row + static_cast<std::size_t>(u >> 3) * quant::kQ5_KBytes;
    Raw r;
    r.h.load(p);
    r.ql = __ldg(reinterpret_cast<const uint4*>(p + 48 + 32 * j + l0));
    r.qh = __ldg(reinterpret_cast<const uint4*>(p + 16 + l0));
    return r;
  }
  __device__ static void run(const Raw& raw, int u, int r, float* q, float& a, float& b) {
    const int j = (u & 7) >> 1, bit = 2 * j + r;
    const unsigned lo[4] = {raw.ql.x, raw.ql.y, raw.ql.z, raw.ql.w};
    const unsigned hi[4] = {raw.qh.x, raw.qh.y, raw.qh.z, raw.qh.w};
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = ((lo[i] >> (4 * r)) & 0x0F0F0F0Fu) | (((hi[i] >> bit) & 0x01010101u) << 4);
    bytes_float(w, q);
    raw.h.scale(2 * j + r, a, b);
  }
};

struct GemvQ6_K {
  static constexpr int kGroup = 1;  // units a lane loads at once
  static constexpr int kBlock = 256, kUnits = 4, kRuns = 4;
  struct Raw {
    unsigned lo[4], hi[4], qh[4];
    unsigned sc;  // the run scales sc[is], sc[is + 2], sc[is + 4], sc[is + 6] as bytes
    unsigned short d;
  };
  __device__ static Raw load(const std::uint8_t* row, int u) {
    const int i = u & 3, h = i >> 1, l0 = 16 * (i & 1);
    const std::uint8_t* p = row + static_cast<std::size_t>(u >> 2) * quant::kQ6_KBytes;
    Raw r;
    load_words<4>(p + 64 * h + l0, r.lo);
    load_words<4>(p + 64 * h + 32 + l0, r.hi);
    load_words<4>(p + 128 + 32 * h + l0, r.qh);
    const std::uint8_t* sc = p + 192 + 8 * h + (i & 1);
    r.sc = static_cast<unsigned>(__ldg(sc)) | (static_cast<unsigned>(__ldg(sc + 2)) << 8) |
           (static_cast<unsigned>(__ldg(sc + 4)) << 16) | (static_cast<unsigned>(__ldg(sc + 6)) << 24);
    r.d = __ldg(reinterpret_cast<const unsigned short*>(p + 208));
    return r;
  }
  __device__ static int col(int u, int r) { return (u >> 2) * 256 + 128 * ((u & 3) >> 1) + 16 * (u & 1) + 32 * r; }
  __device__ static void run(const Raw& raw, int, int r, float* q, float& a, float& b) {
    const unsigned* src = (r & 1) ? raw.hi : raw.lo;  // runs 0, 2: ql[l]; runs 1, 3: ql[l + 32]
    const int nib = (r >> 1) * 4, hb = 2 * r;
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) w[i] = ((src[i] >> nib) & 0x0F0F0F0Fu) | (((raw.qh[i] >> hb) & 0x03030303u) << 4);
    bytes_float(w, q);
    const float d = __half2float(__ushort_as_half(raw.d));
    a = d * static_cast<float>(static_cast<std::int8_t>((raw.sc >> (8 * r)) & 0xff));
    b = -32.f * a;
  }
};


constexpr int kFmaGemvTokens = 8;    // tokens a pass of the FMA GEMV serves
constexpr int kGemvWarps = 4;        // warps per block
constexpr int kGemvRowsPerWarp = 2;  // rows a warp serves together (sharing each x load)
constexpr int kGemvMinBlocks = 5;    // one token: blocks an SM should hold, 20 warps (at most 102 registers)

template <class Q, int N, class OutT, bool Accumulate>
__global__ void __launch_bounds__(kGemvWarps * 32, N == 1 ? kGemvMinBlocks : 1)
    quant_gemv_kernel(const std::uint8_t* w, std::size_t row_bytes, int rows, int cols, const bf16_t* x, int n,
                      OutT* y, int ldy) {
  constexpr int R = kGemvRowsPerWarp, G = Q::kGroup;
  const int lane = threadIdx.x & 31;
  const int row0 = (blockIdx.x * kGemvWarps + static_cast<int>(threadIdx.x >> 5)) * R;
  const int units = cols / Q::kBlock * Q::kUnits;
  const std::uint8_t* wr[R];
#pragma unroll
  for (int i = 0; i < R; ++i) wr[i] = w + static_cast<std::size_t>(min(row0 + i, rows - 1)) * row_bytes;
  // A lane takes units lane, lane + 32, ... in groups of G, all of a group's
  // loads in flight together; the first group's are requested before waiting
  // on the previous kernel (weights do not depend on it).
  typename Q::Raw raw[G][R];
  auto load_group = [&](int u0) {
#pragma unroll
    for (int g = 0; g < G; ++g)
      if (u0 + 32 * g < units)
#pragma unroll
        for (int i = 0; i < R; ++i) raw[g][i] = Q::load(wr[i], u0 + 32 * g);
  };
  if (row0 < rows) load_group(lane);
  grid_dependency_wait();
  if (row0 >= rows) return;
  float acc[R][N] = {};
  for (int u0 = lane; u0 < units; u0 += 32 * G) {
    if (u0 != lane) load_group(u0);
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const int u = u0 + 32 * g;
      if (u >= units) break;
#pragma unroll
      for (int r = 0; r < Q::kRuns; ++r) {
        float q[R][16], a[R], b[R];
#pragma unroll
        for (int i = 0; i < R; ++i) Q::run(raw[g][i], u, r, q[i], a[i], b[i]);
        const int c = Q::col(u, r);
#pragma unroll
        for (int t = 0; t < N; ++t) {
          if (N > 1 && t >= n) break;
          const uint4* xp = reinterpret_cast<const uint4*>(x + static_cast<std::size_t>(t) * cols + c);
          const uint4 xv[2] = {__ldg(xp), __ldg(xp + 1)};
          const unsigned* xw = reinterpret_cast<const unsigned*>(xv);
          float xf[16], sx = 0.f;
#pragma unroll
          for (int k = 0; k < 8; ++k) {
            xf[2 * k] = __uint_as_float(xw[k] << 16);
            xf[2 * k + 1] = __uint_as_float(xw[k] & 0xffff0000u);
            sx += xf[2 * k] + xf[2 * k + 1];
          }
#pragma unroll
          for (int i = 0; i < R; ++i) {
            float s = 0.f;
#pragma unroll
            for (int k = 0; k < 16; ++k) s = fmaf(q[i][k], xf[k], s);
            acc[i][t] = fmaf(a[i], s, fmaf(b[i], sx, acc[i][t]));
          }
        }
      }
    }
  }
#pragma unroll
  for (int i = 0; i < R; ++i)
#pragma unroll
    for (int t = 0; t < N; ++t) {
      if (N > 1 && t >= n) break;
      const float v = warp_sum(acc[i][t]);
      if (lane == 0 && row0 + i < rows) emit(y, static_cast<std::size_t>(t) * ldy + row0 + i, v, Accumulate);
    }
}

// quant_moe_rows: quant_gemv_kernel's rows and runs, for the slots of the expert in use blockIdx.y, up to
// kFmaGemvTokens of them a pass over the rows. A warp takes two rows: consecutive ones, or with Swiglu
// gate row j and up row j (rows j and rows + j of a [2 rows, cols] gate_up), whose SwiGLU it stores as
// swiglu_kernel rounds it (y: [slots, rows] either way).
template <class Q, class OutT, bool Swiglu>
__global__ void __launch_bounds__(kGemvWarps * 32)
    quant_moe_kernel(const std::uint8_t* const* w, std::size_t row_bytes, int rows, int cols, const bf16_t* x, int k,
                     bool x_by_token, MoeRoute route, OutT* y) {
  constexpr int R = kGemvRowsPerWarp, G = Q::kGroup, N = kFmaGemvTokens;
  static_assert(!Swiglu || R == 2);
  grid_dependency_wait();
  if (static_cast<int>(blockIdx.y) >= route.active[0]) return;
  const int e = route.active[1 + blockIdx.y];
  const int lane = threadIdx.x & 31;
  const int warp_index = blockIdx.x * kGemvWarps + static_cast<int>(threadIdx.x >> 5);
  const int row0 = Swiglu ? warp_index : warp_index * R;
  if (row0 >= rows) return;
  const int units = cols / Q::kBlock * Q::kUnits;
  const std::uint8_t* wr[R];
#pragma unroll
  for (int i = 0; i < R; ++i)
    wr[i] = w[e] + static_cast<std::size_t>(Swiglu ? row0 + i * rows : min(row0 + i, rows - 1)) * row_bytes;
  const int end = route.offsets[e + 1];
  for (int s0 = route.offsets[e]; s0 < end; s0 += N) {
    const int m = min(N, end - s0);
    const bf16_t* xr[N];
#pragma unroll
    for (int t = 0; t < N; ++t) {
      const int s = s0 + min(t, m - 1);
      xr[t] = x + static_cast<std::size_t>(x_by_token ? route.slot_pair[s] / k : s) * cols;
    }
    float acc[R][N] = {};
    typename Q::Raw raw[G][R];
    for (int u0 = lane; u0 < units; u0 += 32 * G) {
#pragma unroll
      for (int g = 0; g < G; ++g)
        if (u0 + 32 * g < units)
#pragma unroll
          for (int i = 0; i < R; ++i) raw[g][i] = Q::load(wr[i], u0 + 32 * g);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const int u = u0 + 32 * g;
        if (u >= units) break;
#pragma unroll
        for (int run = 0; run < Q::kRuns; ++run) {
          float q[R][16], a[R], b[R];
#pragma unroll
          for (int i = 0; i < R; ++i) Q::run(raw[g][i], u, run, q[i], a[i], b[i]);
          const int c = Q::col(u, run);
#pragma unroll
          for (int t = 0; t < N; ++t) {
            if (t >= m) break;
            const uint4* xp = reinterpret_cast<const uint4*>(xr[t] + c);
            const uint4 xv[2] = {__ldg(xp), __ldg(xp + 1)};
            const unsigned* xw = reinterpret_cast<const unsigned*>(xv);
            float xf[16], sx = 0.f;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
              xf[2 * j] = __uint_as_float(xw[j] << 16);
              xf[2 * j + 1] = __uint_as_float(xw[j] & 0xffff0000u);
              sx += xf[2 * j] + xf[2 * j + 1];
            }
#pragma unroll
            for (int i = 0; i < R; ++i) {
              float dot = 0.f;
#pragma unroll
              for (int j = 0; j < 16; ++j) dot = fmaf(q[i][j], xf[j], dot);
              acc[i][t] = fmaf(a[i], dot, fmaf(b[i], sx, acc[i][t]));
            }
          }
        }
      }
    }
    if constexpr (Swiglu) {
#pragma unroll
      for (int t = 0; t < N; ++t) {
        if (t >= m) break;  // m is the same in every lane
        const float g = bf(to_bf(warp_sum(acc[0][t]))), u = bf(to_bf(warp_sum(acc[1][t])));
        if (lane == 0) {
          const float silu = bf(to_bf(g / (1.f + __expf(-g))));
          emit(y, static_cast<std::size_t>(s0 + t) * rows + row0, silu * u, false);
        }
      }
    } else {
#pragma unroll
      for (int i = 0; i < R; ++i)
#pragma unroll
        for (int t = 0; t < N; ++t) {
          if (t >= m) break;
          const float v = warp_sum(acc[i][t]);
          if (lane == 0 && row0 + i < rows) emit(y, static_cast<std::size_t>(s0 + t) * rows + row0 + i, v, false);
        }
    }
  }
}

// Where dequantize_kernel puts a run of 16 weights (16-element aligned): f32,
// or two bf16 terms; 16-byte stores, so a warp writes whole sectors.
struct F32Out {
  float* out;
  __device__ void put(std::size_t at, const float* w) const {
    auto* o = reinterpret_cast<float4*>(out + at);
#pragma unroll
    for (int k = 0; k < 4; ++k) o[k] = make_float4(w[4 * k], w[4 * k + 1], w[4 * k + 2], w[4 * k + 3]);
  }
};
struct SplitOut {
  bf16_t* hi;
  bf16_t* lo;
  __device__ void put(std::size_t at, const float* w) const {
    uint4 h[2], l[2];
    auto* hs = reinterpret_cast<bf16_t*>(h);
    auto* ls = reinterpret_cast<bf16_t*>(l);
#pragma unroll
    for (int k = 0; k < 16; ++k) {
      hs[k] = to_bf(w[k]);
      ls[k] = to_bf(w[k] - bf(hs[k]));
    }
    auto* ho = reinterpret_cast<uint4*>(hi + at);
    auto* lo_out = reinterpret_cast<uint4*>(lo + at);
    ho[0] = h[0];
    ho[1] = h[1];
    lo_out[0] = l[0];
    lo_out[1] = l[1];
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

// Calls f(Q{}) with the GEMV view of `type`.
template <class F>
void with_gemv_view(GgmlType type, F&& f) {
  switch (type) {
    case GgmlType::q8_0: return f(GemvQ8_0{});
    case GgmlType::q4_0: return f(GemvQ4_0{});
    case GgmlType::q4_k: return f(GemvQ4_K{});
    case GgmlType::q5_k: return f(GemvQ5_K{});
    case GgmlType::q6_k: return f(GemvQ6_K{});
    default:
      with_decoder(type, [](auto) {});  // throws, naming the type, where no kernel takes it
      NEURON_ASSERT(false && "with_gemv_view: a decoder without a GEMV view");
  }
}

void check_shape(GgmlType type, const void* w, int cols) {
  const std::int64_t block = quant::traits(type).block_size;
  NEURON_ASSERT(cols > 0 && cols % block == 0);
  const std::uintptr_t align = (type == GgmlType::q4_k || type == GgmlType::q5_k) ? 16 : 2;
  NEURON_ASSERT(reinterpret_cast<std::uintptr_t>(w) % align == 0);
}

// The token count from which the tensor-core GEMV is the faster (H200,
// bench/QUANT.md): Q4_K at one; Q5_K and Q6_K at two; Q8_0 at four. Below
// that the FMA path streams the rows faster, its loads covering whole rows.
int mma_from_tokens(GgmlType type) { return type == GgmlType::q4_k ? 1 : type == GgmlType::q8_0 ? 4 : 2; }

template <class OutT, bool Accumulate>
void gemv_dispatch(GgmlType type, const void* w, int rows, int cols, const bf16_t* x, int n, OutT* y, int ldy,
                   cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return;
  check_shape(type, w, cols);
  NEURON_ASSERT(n <= kQuantGemvMaxTokens && cols % 8 == 0 && reinterpret_cast<std::uintptr_t>(x) % 16 == 0);
  const std::size_t row_bytes = quant::row_bytes(type, cols);
  if (n >= mma_from_tokens(type) && quant_mma_gemv_supported(type, cols)) {
    if constexpr (std::is_same_v<OutT, float>)
      quant_mma_gemv(type, w, row_bytes, rows, cols, x, n, y, ldy, Accumulate, stream);
    else
      quant_mma_gemv(type, w, row_bytes, rows, cols, x, n, y, ldy, stream);
    return;
  }
  const auto* wb = static_cast<const std::uint8_t*>(w);
  const int rows_per_block = kGemvWarps * kGemvRowsPerWarp;
  const dim3 grid(static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block));
  with_gemv_view(type, [&](auto q) {
    using Q = decltype(q);
    for (int t0 = 0; t0 < n; t0 += kFmaGemvTokens) {  // passes of up to 8 tokens
      const int k = std::min(kFmaGemvTokens, n - t0);
      const bf16_t* xt = x + static_cast<std::size_t>(t0) * cols;
      OutT* yt = y + static_cast<std::size_t>(t0) * ldy;
      auto go = [&](auto kernel) {
        launch(kernel, grid, kGemvWarps * 32, 0, stream, "quant_gemv", wb, row_bytes, rows, cols, xt, k, yt, ldy);
      };
      if (k == 1)
        go(quant_gemv_kernel<Q, 1, OutT, Accumulate>);
      else if (k == 2)
        go(quant_gemv_kernel<Q, 2, OutT, Accumulate>);
      else if (k <= 4)
        go(quant_gemv_kernel<Q, 4, OutT, Accumulate>);
      else
        go(quant_gemv_kernel<Q, 8, OutT, Accumulate>);
    }
  });
}

template <bool Swiglu, class OutT>
void quant_moe_dispatch(GgmlType type, const void* const* w, int rows, int cols, const bf16_t* x, bool x_by_token, int n,
                        int k, int experts, const MoeRoute& route, OutT* y, cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return;
  NEURON_ASSERT(quant_moe_supported(type) && cols > 0 && cols % quant::traits(type).block_size == 0 && cols % 8 == 0);
  const std::size_t row_bytes = quant::row_bytes(type, cols);
  // The tensor cores from the pass's token count where the GEMV takes them (a pass of n tokens puts up to n
  // slots on an expert).
  if (n >= mma_from_tokens(type) && quant_mma_gemv_supported(type, cols)) {
    if constexpr (Swiglu)
      quant_mma_moe_swiglu(type, w, row_bytes, rows, cols, x, n, k, experts, route, y, stream);
    else
      quant_mma_moe_rows(type, w, row_bytes, rows, cols, x, x_by_token, n, k, experts, route, y, stream);
    return;
  }
  const int rows_per_block = Swiglu ? kGemvWarps : kGemvWarps * kGemvRowsPerWarp;
  const dim3 grid(static_cast<unsigned>((rows + rows_per_block - 1) / rows_per_block),
                  static_cast<unsigned>(std::min<long long>(static_cast<long long>(n) * k, experts)));
  with_gemv_view(type, [&](auto q) {
    using Q = decltype(q);
    launch(quant_moe_kernel<Q, OutT, Swiglu>, grid, kGemvWarps * 32, 0, stream, "quant_moe_rows",
           reinterpret_cast<const std::uint8_t* const*>(w), row_bytes, rows, cols, x, k, x_by_token, route, y);
  });
}

}  // namespace

bool quant_moe_supported(GgmlType type) noexcept { return quant_supported(type); }

void quant_moe_rows(GgmlType type, const void* const* w, int rows, int cols, const bf16_t* x, bool x_by_token, int n,
                    int k, int experts, const MoeRoute& route, float* y, cudaStream_t stream) {
  quant_moe_dispatch<false>(type, w, rows, cols, x, x_by_token, n, k, experts, route, y, stream);
}
void quant_moe_swiglu(GgmlType type, const void* const* gate_up, int ff, int cols, const bf16_t* h, int n, int k,
                      int experts, const MoeRoute& route, bf16_t* act, cudaStream_t stream) {
  quant_moe_dispatch<true>(type, gate_up, ff, cols, h, true, n, k, experts, route, act, stream);
}

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
    launch(dequantize_kernel<Q, F32Out>, grid_for(units, 256), 256, 0, stream, "dequantize_f32",
           static_cast<const std::uint8_t*>(w), row_bytes, rows, cols, F32Out{out});
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
    launch(dequantize_kernel<Q, SplitOut>, grid_for(units, 256), 256, 0, stream, "dequantize_bf16_split",
           static_cast<const std::uint8_t*>(w), row_bytes, rows, cols, SplitOut{hi, lo});
  });
}

void store_rows_bf16(const float* src, int n, int rows, bf16_t* y, int ldy, cudaStream_t stream) {
  if (n <= 0 || rows <= 0) return;
  launch(store_rows_bf16_kernel, grid_for(static_cast<std::size_t>(n) * rows, 256), 256, 0, stream,
         "store_rows_bf16", src, n, rows, y, ldy);
}

}  // namespace neuron::backend::cuda::kernels
