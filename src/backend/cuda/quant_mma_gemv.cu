// Quantized GEMV on the tensor cores (quant_mma_gemv.hpp).
//
// A warp multiplies 16 weight rows by a tile of 8 tokens with mma.m16n8k16
// (bf16 in, f32 accumulate): A is the rows' quants q as exact bf16 integers,
// B the tokens' bf16 activations, and a scale group's product is finished in
// f32 as a * sum(q x) + b * sum(x), the group's scale a and offset b taken
// from the block (Q4_K: a = d * sc, b = -dmin * m; Q6_K folds its -32 into
// q; Q8_0's int8 is q itself), sum(x) from an mma with an all-ones A. So the
// GEMV does one tensor-core instruction per 256 weight-token products where
// the FMA path did 256, and 8 tokens cost what one does; up to 4 tiles share
// each A fragment.
//
// Register layouts (PTX ISA, m16n8k16 .bf16), lane = 4 g + t:
//   A: a[0] = row g, k 2t..2t+1; a[1] = row g+8, same k; a[2] = row g,
//      k 2t+8..2t+9; a[3] = row g+8, same k.
//   B: b[0] = k 2t..2t+1 of token g; b[1] = k 2t+8..2t+9.
//   D: d[0], d[1] = row g, tokens 2t, 2t+1; d[2], d[3] = row g+8.
// Which column of a group a k slot stands for is each view's choice, made
// so a lane's quants and activations are contiguous bytes; A and B agree.
//
// Exactness: a K-quant's q is an integer below 2^7, so 0x4300 | q is the
// bf16 of 128 + q and one bf16x2 subtraction gives q (or q - 32) exactly
// (Q8_0's int8 goes through a biased f32, also exactly); q x is exact in f32,
// and a = d * sc is exact (11 + 7 bits). What is rounded is f32
// accumulation, as in the FMA path.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/quant_mma_gemv.hpp"
#include "util/error.hpp"

namespace neuron::backend::cuda::kernels {
namespace {

using quant::GgmlType;

// A block's warps split a 16-row tile's units; two blocks an SM (at most 128
// registers a thread). Measured on the H200 against 4 warps, 4 or 5 blocks,
// and against staging each unit in shared memory with cp.async (coalesced
// 512-byte copies): no faster (bench/QUANT.md).
constexpr int kWarps = 8, kMinBlocks = 2;
static_assert(kQuantMmaGemvMaxTokens == 32, "token tiles of 8: 1, 2 or 4");

// Two small integers v (bits 0..6 of each 16-bit half) as bf16x2 v - bias, exactly.
template <unsigned Bias>
__device__ __forceinline__ unsigned bf16_ints(unsigned v) {
  constexpr unsigned magic = 0x43004300u;  // 128.0 in each half
  const unsigned m = v | magic;
  const __nv_bfloat162 r = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&m),
                                   __floats2bfloat162_rn(128.f + Bias, 128.f + Bias));
  return *reinterpret_cast<const unsigned*>(&r);
}
// Bytes 0, 1 (or 2, 3) of w spread to the low byte of each 16-bit half.
__device__ __forceinline__ unsigned spread_lo(unsigned w) { return __byte_perm(w, 0, 0x4140); }
__device__ __forceinline__ unsigned spread_hi(unsigned w) { return __byte_perm(w, 0, 0x4342); }

__device__ __forceinline__ float half_lo(unsigned v) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(v & 0xffffu)));
}
__device__ __forceinline__ unsigned ld_u16(const std::uint8_t* p) {
  return __ldg(reinterpret_cast<const unsigned short*>(p));
}

// Q4_K: f16 d, f16 dmin, u8 scales[12], u8 qs[128]. Group G = sub-block G
// (32 weights, two mmas): chunk j = G / 2 of 32 quant bytes holds sub-block
// 2j in its low nibbles and 2j + 1 in its high ones. Lane t reads bytes
// 8t .. 8t + 7 of every chunk; mma m takes 4 of them, k slots 2t, 2t + 1 the
// first two (columns 8t + 4m, + 1), slots 2t + 8, 2t + 9 the next two.
struct MmaQ4_K {
  static constexpr int kUnitCols = 256, kGroups = 8, kMmas = 2;
  static constexpr bool kOffset = true;
  static constexpr std::size_t kBytes = quant::kQ4_KBytes;
  struct Raw {
    uint4 h;     // d | dmin << 16, then the 12 packed scale bytes
    uint2 q[4];  // bytes 8t .. 8t + 7 of each chunk
  };
  __device__ static Raw load(const std::uint8_t* row, int u, int t) {
    const std::uint8_t* p = row + static_cast<std::size_t>(u) * kBytes;
    Raw r;
    r.h = __ldg(reinterpret_cast<const uint4*>(p));
#pragma unroll
    for (int j = 0; j < 4; ++j) r.q[j] = __ldg(reinterpret_cast<const uint2*>(p + 16 + 32 * j + 8 * t));
    return r;
  }
  template <int G, int M, int Half>
  __device__ static unsigned a_pair(const Raw& r) {
    const unsigned word = M ? r.q[G / 2].y : r.q[G / 2].x;
    const unsigned p = Half ? spread_hi(word) : spread_lo(word);
    return bf16_ints<0>((p >> (4 * (G & 1))) & 0x000F000Fu);
  }
  template <int G, int M>
  __device__ static void x_pair(const bf16_t* xb, int t, unsigned& b0, unsigned& b1) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(xb + 64 * (G / 2) + 32 * (G & 1) + 8 * t + 4 * M));
    b0 = v.x;
    b1 = v.y;
  }
  // a = d * sc, b = -(dmin * m) of sub-block G (ggml's get_scale_min_k4 on the words).
  template <int G>
  __device__ static void scale(const Raw& r, float& a, float& b) {
    unsigned s, m;
    if constexpr (G < 4) {
      s = (r.h.y >> (8 * G)) & 63u;
      m = (r.h.z >> (8 * G)) & 63u;
    } else {
      constexpr int k = 8 * (G - 4);
      s = ((r.h.w >> k) & 0xFu) | (((r.h.y >> (k + 6)) & 3u) << 4);
      m = ((r.h.w >> (k + 4)) & 0xFu) | (((r.h.z >> (k + 6)) & 3u) << 4);
    }
    a = half_lo(r.h.x) * static_cast<float>(s);
    b = -(half_lo(r.h.x >> 16) * static_cast<float>(m));
  }
};

// Q6_K: u8 ql[128], u8 qh[64], i8 scales[16], f16 d. Weight 128 h + 32 k
// + l (l < 32) is the low (k < 2) or high nibble of ql[64 h + 32 (k & 1) +
// l] with bits 2k, 2k + 1 of qh[32 h + l] above it, minus 32, scaled by
// sc[8 h + 2 k + l / 16]. A unit is half h of a block (128 weights); its
// group G = 4 i + k is l0 = 16 i and k: 16 weights, one mma. Lane t takes
// l = l0 + 4t .. l0 + 4t + 3 (k slots 2t, 2t + 1, then 2t + 8, 2t + 9):
// one word from each ql half and one from qh.
struct MmaQ6_K {
  static constexpr int kUnitCols = 128, kGroups = 8, kMmas = 1;
  static constexpr bool kOffset = false;
  static constexpr std::size_t kBytes = quant::kQ6_KBytes;
  struct Raw {
    unsigned ql[2][2];  // [i][ql half c]: bytes l0 + 4t .. + 3
    unsigned qh[2];     // [i]
    unsigned sc[2];     // the half's 8 scale bytes
    unsigned d;         // f16 d in the low half
  };
  // Blocks are 210 bytes, so every other one starts 2 bytes past a word:
  // its words are funnel-shifted out of aligned pairs (the whole warp reads
  // the same block, so the branch does not diverge).
  template <bool Aligned>
  __device__ static unsigned word(const std::uint8_t* p, int off) {
    if constexpr (Aligned) return __ldg(reinterpret_cast<const unsigned*>(p + off));
    const auto* q = reinterpret_cast<const unsigned*>(p + off - 2);
    return __funnelshift_r(__ldg(q), __ldg(q + 1), 16);
  }
  template <bool Aligned>
  __device__ static Raw load_at(const std::uint8_t* p, int h, int t) {
    Raw r;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int l = 16 * i + 4 * t;
      r.ql[i][0] = word<Aligned>(p, 64 * h + l);
      r.ql[i][1] = word<Aligned>(p, 64 * h + 32 + l);
      r.qh[i] = word<Aligned>(p, 128 + 32 * h + l);
    }
    r.sc[0] = word<Aligned>(p, 192 + 8 * h);
    r.sc[1] = word<Aligned>(p, 196 + 8 * h);
    r.d = ld_u16(p + 208);
    return r;
  }
  __device__ static Raw load(const std::uint8_t* row, int u, int t) {
    const std::uint8_t* p = row + static_cast<std::size_t>(u / 2) * kBytes;
    return (reinterpret_cast<std::uintptr_t>(p) & 3) ? load_at<false>(p, u % 2, t) : load_at<true>(p, u % 2, t);
  }
  template <int G, int M, int Half>
  __device__ static unsigned a_pair(const Raw& r) {
    constexpr int i = G / 4, k = G & 3;
    const unsigned ql = r.ql[i][k & 1], qh = r.qh[i];
    const unsigned lo = (Half ? spread_hi(ql) : spread_lo(ql)) >> (4 * (k >> 1));
    const unsigned hi = (Half ? spread_hi(qh) : spread_lo(qh)) >> (2 * k);
    return bf16_ints<32>((lo & 0x000F000Fu) | ((hi & 0x00030003u) << 4));
  }
  template <int G, int M>
  __device__ static void x_pair(const bf16_t* xu, int t, unsigned& b0, unsigned& b1) {
    constexpr int i = G / 4, k = G & 3;
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(xu + 32 * k + 16 * i + 4 * t));
    b0 = v.x;
    b1 = v.y;
  }
  template <int G>
  __device__ static void scale(const Raw& r, float& a, float& b) {
    constexpr int i = G / 4, k = G & 3, at = 2 * k + i;
    const int sc = static_cast<std::int8_t>((r.sc[at / 4] >> (8 * (at % 4))) & 0xffu);
    a = half_lo(r.d) * static_cast<float>(sc);
    b = 0.f;
  }
};

// Q5_K: f16 d, f16 dmin, u8 scales[12], u8 qh[32], u8 qs[128]: Q4_K's
// layout (and lane mapping) with a fifth bit per weight, bit G of qh[l] for
// sub-block G's column l; lane t reads qh[8t .. 8t + 7] with its quants.
struct MmaQ5_K {
  static constexpr int kUnitCols = 256, kGroups = 8, kMmas = 2;
  static constexpr bool kOffset = true;
  static constexpr std::size_t kBytes = quant::kQ5_KBytes;
  struct Raw {
    uint4 h;     // d | dmin << 16, then the 12 packed scale bytes
    uint2 qh;    // qh[8t .. 8t + 7]
    uint2 q[4];  // bytes 8t .. 8t + 7 of each 32-byte chunk of qs
  };
  __device__ static Raw load(const std::uint8_t* row, int u, int t) {
    const std::uint8_t* p = row + static_cast<std::size_t>(u) * kBytes;
    Raw r;
    r.h = __ldg(reinterpret_cast<const uint4*>(p));
    r.qh = __ldg(reinterpret_cast<const uint2*>(p + 16 + 8 * t));
#pragma unroll
    for (int j = 0; j < 4; ++j) r.q[j] = __ldg(reinterpret_cast<const uint2*>(p + 48 + 32 * j + 8 * t));
    return r;
  }
  template <int G, int M, int Half>
  __device__ static unsigned a_pair(const Raw& r) {
    const unsigned word = M ? r.q[G / 2].y : r.q[G / 2].x, high = M ? r.qh.y : r.qh.x;
    const unsigned p = Half ? spread_hi(word) : spread_lo(word);
    const unsigned h = Half ? spread_hi(high) : spread_lo(high);
    return bf16_ints<0>(((p >> (4 * (G & 1))) & 0x000F000Fu) | (((h >> G) & 0x00010001u) << 4));
  }
  template <int G, int M>
  __device__ static void x_pair(const bf16_t* xu, int t, unsigned& b0, unsigned& b1) {
    MmaQ4_K::x_pair<G, M>(xu, t, b0, b1);
  }
  template <int G>
  __device__ static void scale(const Raw& r, float& a, float& b) {
    MmaQ4_K::scale<G>(MmaQ4_K::Raw{r.h, {}}, a, b);
  }
};

// Q8_0: f16 d, i8 qs[32] (34 bytes: 2-byte aligned). A unit is 4 blocks;
// group G is block G (two mmas, Q4_K's lane mapping over its 32 columns:
// lane t reads qs[8t .. 8t + 7]). An int8 goes under 2^23's exponent biased
// by 128 and comes out exact as a float, then as a bf16 (|q| <= 128).
struct MmaQ8_0 {
  static constexpr int kUnitCols = 128, kGroups = 4, kMmas = 2;
  static constexpr bool kOffset = false;
  static constexpr std::size_t kBytes = quant::kQ8_0Bytes;
  struct Raw {
    uint2 q[4];     // qs[8t .. 8t + 7] of each block, biased by 128
    unsigned d[2];  // the blocks' f16 d, two a word
  };
  __device__ static Raw load(const std::uint8_t* row, int u, int t) {
    const std::uint8_t* p = row + static_cast<std::size_t>(4 * u) * kBytes;
    Raw r;
#pragma unroll
    for (int b = 0; b < 4; ++b) {
      unsigned w[2];
      load_words<2>(p + b * kBytes + 2 + 8 * t, w);
      r.q[b].x = w[0] ^ 0x80808080u;
      r.q[b].y = w[1] ^ 0x80808080u;
    }
    r.d[0] = ld_u16(p) | (ld_u16(p + kBytes) << 16);
    r.d[1] = ld_u16(p + 2 * kBytes) | (ld_u16(p + 3 * kBytes) << 16);
    return r;
  }
  template <int G, int M, int Half>
  __device__ static unsigned a_pair(const Raw& r) {
    const unsigned word = M ? r.q[G].y : r.q[G].x;
    constexpr unsigned sel = 0x7540u + 2 * Half;
    const float lo = __uint_as_float(__byte_perm(word, 0x4B000000u, sel)) - 8388736.f;  // 2^23 + 128
    const float hi = __uint_as_float(__byte_perm(word, 0x4B000000u, sel + 1)) - 8388736.f;
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const unsigned*>(&v);
  }
  template <int G, int M>
  __device__ static void x_pair(const bf16_t* xu, int t, unsigned& b0, unsigned& b1) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(xu + 32 * G + 8 * t + 4 * M));
    b0 = v.x;
    b1 = v.y;
  }
  template <int G>
  __device__ static void scale(const Raw& r, float& a, float& b) {
    a = half_lo(r.d[G / 2] >> (16 * (G & 1)));
    b = 0.f;
  }
};

template <int G, int End, class F>
__device__ __forceinline__ void for_groups(F&& f) {
  if constexpr (G < End) {
    f(std::integral_constant<int, G>{});
    for_groups<G + 1, End>(f);
  }
}

// acc[p][T] (rows g, g + 8 of row pair p x tokens 8T + 2t, 8T + 2t + 1: the
// D layout of token tile T) += a unit's product: rows g, g + 8 of pair p in
// r[p][0], r[p][1]; x_of(T) this lane's token of tile T (token 8T + g) at the
// unit's first column, read only where that token exists (8T < tokens_from_g).
// The quants become A fragments once for all the tiles, and the tokens' B
// fragments (and their sums) serve every pair.
template <class V, int Tiles, int P, class XOf>
__device__ __forceinline__ void multiply_unit(const typename V::Raw (&r)[P][2], XOf&& x_of, int tokens_from_g, int t,
                                              float (&acc)[P][Tiles][4]) {
  constexpr unsigned kOnes = 0x3F803F80u;  // bf16 1.0, 1.0
  for_groups<0, V::kGroups>([&](auto gc) {
    constexpr int G = decltype(gc)::value;
    float s[P][Tiles][4] = {};
    [[maybe_unused]] float sx[Tiles][4] = {};
    for_groups<0, V::kMmas>([&](auto mc) {
      constexpr int M = decltype(mc)::value;
      unsigned a[P][4];
#pragma unroll
      for (int p = 0; p < P; ++p) {
        a[p][0] = V::template a_pair<G, M, 0>(r[p][0]);
        a[p][1] = V::template a_pair<G, M, 0>(r[p][1]);
        a[p][2] = V::template a_pair<G, M, 1>(r[p][0]);
        a[p][3] = V::template a_pair<G, M, 1>(r[p][1]);
      }
#pragma unroll
      for (int T = 0; T < Tiles; ++T) {
        unsigned b0 = 0, b1 = 0;
        if (8 * T < tokens_from_g) V::template x_pair<G, M>(x_of(T), t, b0, b1);
#pragma unroll
        for (int p = 0; p < P; ++p) mma_bf16(s[p][T], a[p], b0, b1);
        if constexpr (V::kOffset) {
          const unsigned ones[4] = {kOnes, kOnes, kOnes, kOnes};
          mma_bf16(sx[T], ones, b0, b1);
        }
      }
    });
#pragma unroll
    for (int p = 0; p < P; ++p) {
      float a0, o0, a1, o1;
      V::template scale<G>(r[p][0], a0, o0);
      V::template scale<G>(r[p][1], a1, o1);
#pragma unroll
      for (int T = 0; T < Tiles; ++T) {
        float(&c)[4] = acc[p][T];
        c[0] = fmaf(a0, s[p][T][0], c[0]);
        c[1] = fmaf(a0, s[p][T][1], c[1]);
        c[2] = fmaf(a1, s[p][T][2], c[2]);
        c[3] = fmaf(a1, s[p][T][3], c[3]);
        if constexpr (V::kOffset) {
          c[0] = fmaf(o0, sx[T][0], c[0]);
          c[1] = fmaf(o0, sx[T][1], c[1]);
          c[2] = fmaf(o1, sx[T][0], c[2]);
          c[3] = fmaf(o1, sx[T][1], c[3]);
        }
      }
    }
  });
}

// A block owns 16 rows; its warps take the rows' units u = warp, warp +
// kWarps, ... (neighbouring stretches of the same rows at once), lane (g, t)
// reading rows g and g + 8 from global memory, with the next unit's loads in
// flight while one is multiplied; Tiles tiles of 8 tokens share each unit's
// fragments. A block's first two units are requested before the wait on the
// previous kernel. The warps' partial sums meet in shared memory; a thread
// per (row, token) emits.
template <class V, int Tiles, class OutT, bool Accumulate>
__global__ void __launch_bounds__(kWarps * 32, Tiles < 4 ? kMinBlocks : 1)  // 4 tiles: registers over blocks
    mma_gemv_kernel(const std::uint8_t* w, std::size_t row_bytes, int rows, int cols, const bf16_t* x, int n,
                    OutT* y, int ldy) {
  __shared__ float part[kWarps][16][8 * Tiles];  // [warp][row][token]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int row0 = blockIdx.x * 16;
  const std::uint8_t* w0 = w + static_cast<std::size_t>(min(row0 + g, rows - 1)) * row_bytes;
  const std::uint8_t* w1 = w + static_cast<std::size_t>(min(row0 + g + 8, rows - 1)) * row_bytes;
  const int units = cols / V::kUnitCols;
  const bf16_t* xt = x + static_cast<std::size_t>(g) * cols;  // token g (tile 0); read only where g + 8T < n
  const std::size_t tile_stride = static_cast<std::size_t>(8) * cols;
  auto load = [&](int u, typename V::Raw& r0, typename V::Raw& r1) {
    r0 = V::load(w0, u, t);
    r1 = V::load(w1, u, t);
  };
  float acc[1][Tiles][4] = {};
  int u = warp;
  typename V::Raw c[1][2], nx[1][2];
  if (u < units) load(u, c[0][0], c[0][1]);
  if (u + kWarps < units) load(u + kWarps, nx[0][0], nx[0][1]);
  grid_dependency_wait();
  while (u < units) {
    const bf16_t* xu = xt + static_cast<std::size_t>(u) * V::kUnitCols;
    multiply_unit<V, Tiles, 1>(c, [&](int T) { return xu + T * tile_stride; }, n - g, t, acc);
    u += kWarps;
    c[0][0] = nx[0][0];
    c[0][1] = nx[0][1];
    if (u + kWarps < units) load(u + kWarps, nx[0][0], nx[0][1]);
  }
#pragma unroll
  for (int T = 0; T < Tiles; ++T) {
    part[warp][g][8 * T + 2 * t] = acc[0][T][0];
    part[warp][g][8 * T + 2 * t + 1] = acc[0][T][1];
    part[warp][g + 8][8 * T + 2 * t] = acc[0][T][2];
    part[warp][g + 8][8 * T + 2 * t + 1] = acc[0][T][3];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < 16 * n; i += kWarps * 32) {
    const int r = i & 15, tok = i >> 4;
    if (row0 + r >= rows) continue;
    float v = 0.f;
#pragma unroll
    for (int k = 0; k < kWarps; ++k) v += part[k][r][tok];
    emit(y, static_cast<std::size_t>(tok) * ldy + row0 + r, v, Accumulate);
  }
}

// quant_mma_moe: a block per (up to kMoeWarps 16-row tiles of an expert, expert in use blockIdx.y), over
// the expert's slots 8 Tiles at a time (Tiles tiles of 8 tokens, each lane gathering its tokens' rows; the
// host picks Tiles from the slots an expert has on average, so a decode step's one or two do not pay for
// four tiles' registers). Rows with
// few units (a down projection over a narrow intermediate) put several tiles in a block, kMoeWarps / units
// of them, so no warp idles; a tile's warps split its units. P = 2 (Swiglu): the gate rows and the up rows
// of the tile (rows r and rows + r of gate_up) share the tokens' fragments, and the block stores
// silu(gate . x) * (up . x) as swiglu_kernel rounds it. y: [slots, rows] (f32, or bf16 act).
constexpr int kMoeWarps = 4;
__host__ __device__ constexpr int moe_tiles_per_block(int units) { return kMoeWarps / (units < kMoeWarps ? units : kMoeWarps); }

template <class V, int Tiles, bool Swiglu, class OutT>
__global__ void __launch_bounds__(kMoeWarps * 32)
    mma_moe_kernel(const std::uint8_t* const* w, std::size_t row_bytes, int rows, int cols, const bf16_t* x, int k,
                   bool x_by_token, MoeRoute route, OutT* y) {
  constexpr int kMoeSlots = 8 * Tiles, P = Swiglu ? 2 : 1;  // slots a pass over the expert's rows
  __shared__ float part[P][kMoeWarps][16][kMoeSlots];  // [pair][warp][row][slot]
  grid_dependency_wait();
  if (static_cast<int>(blockIdx.y) >= route.active[0]) return;
  const int e = route.active[1 + blockIdx.y];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int units = cols / V::kUnitCols;
  const int per_block = moe_tiles_per_block(units), wp = kMoeWarps / per_block;  // tiles a block, warps a tile
  const int row0 = (static_cast<int>(blockIdx.x) * per_block + warp / wp) * 16;
  const bool live = row0 < rows;
  const std::uint8_t* wr[P][2];
#pragma unroll
  for (int p = 0; p < P; ++p)
#pragma unroll
    for (int h = 0; h < 2; ++h)
      wr[p][h] = w[e] + static_cast<std::size_t>(p * rows + min(row0 + g + 8 * h, rows - 1)) * row_bytes;
  using Raw = typename V::Raw;
  auto load = [&](int u, Raw (&r)[P][2]) {
#pragma unroll
    for (int p = 0; p < P; ++p)
#pragma unroll
      for (int h = 0; h < 2; ++h) r[p][h] = V::load(wr[p][h], u, t);
  };
  const int end = route.offsets[e + 1];
  for (int s0 = route.offsets[e]; s0 < end; s0 += kMoeSlots) {
    const int m = min(kMoeSlots, end - s0);
    float acc[P][Tiles][4] = {};
    if (live) {
      const bf16_t* xt[Tiles];  // this lane's token of each tile (the last slot's where past m: never read)
#pragma unroll
      for (int T = 0; T < Tiles; ++T) {
        const int s = s0 + min(8 * T + g, m - 1);
        xt[T] = x + static_cast<std::size_t>(x_by_token ? route.slot_pair[s] / k : s) * cols;
      }
      int u = warp % wp;
      Raw c[P][2], nx[P][2];
      if (u < units) load(u, c);
      if (u + wp < units) load(u + wp, nx);
      while (u < units) {
        const std::size_t col = static_cast<std::size_t>(u) * V::kUnitCols;
        multiply_unit<V, Tiles, P>(c, [&](int T) { return xt[T] + col; }, m - g, t, acc);
        u += wp;
#pragma unroll
        for (int p = 0; p < P; ++p) {
          c[p][0] = nx[p][0];
          c[p][1] = nx[p][1];
        }
        if (u + wp < units) load(u + wp, nx);
      }
    }
#pragma unroll
    for (int p = 0; p < P; ++p)
#pragma unroll
      for (int T = 0; T < Tiles; ++T) {
        part[p][warp][g][8 * T + 2 * t] = acc[p][T][0];
        part[p][warp][g][8 * T + 2 * t + 1] = acc[p][T][1];
        part[p][warp][g + 8][8 * T + 2 * t] = acc[p][T][2];
        part[p][warp][g + 8][8 * T + 2 * t + 1] = acc[p][T][3];
      }
    __syncthreads();
    // A thread per (row, slot), rows fastest: each tile's warps summed in order.
    for (int i = threadIdx.x; i < per_block * 16 * m; i += kMoeWarps * 32) {
      const int r = i & 15, tile = (i >> 4) % per_block, slot = (i >> 4) / per_block;
      const int row = (static_cast<int>(blockIdx.x) * per_block + tile) * 16 + r;
      if (row >= rows) continue;
      float v[P] = {};
#pragma unroll
      for (int p = 0; p < P; ++p)
        for (int q = tile * wp; q < (tile + 1) * wp; ++q) v[p] += part[p][q][r][slot];
      const std::size_t at = static_cast<std::size_t>(s0 + slot) * rows + row;
      if constexpr (Swiglu) {
        const float gv = bf(to_bf(v[0])), uv = bf(to_bf(v[1]));
        emit(y, at, bf(to_bf(gv / (1.f + __expf(-gv)))) * uv, false);
      } else {
        emit(y, at, v[0], false);
      }
    }
    __syncthreads();  // part is the next pass's
  }
}

template <class F>
void with_view(GgmlType type, F&& f) {
  switch (type) {
    case GgmlType::q4_k: return f(MmaQ4_K{});
    case GgmlType::q5_k: return f(MmaQ5_K{});
    case GgmlType::q6_k: return f(MmaQ6_K{});
    case GgmlType::q8_0: return f(MmaQ8_0{});
    default: NEURON_ASSERT(false && "quant_mma_gemv: unsupported type");
  }
}

// f(std::integral_constant<int, T>) with the token tiles of 8 (1, 2 or 4) that `tokens` tokens need.
template <class F>
void with_tiles(long long tokens, F&& f) {
  if (tokens <= 8)
    f(std::integral_constant<int, 1>{});
  else if (tokens <= 16)
    f(std::integral_constant<int, 2>{});
  else
    f(std::integral_constant<int, 4>{});
}

template <class OutT, bool Accumulate>
void dispatch(GgmlType type, const void* w, std::size_t row_bytes, int rows, int cols, const bf16_t* x, int n,
              OutT* y, int ldy, cudaStream_t stream) {
  if (rows <= 0 || n <= 0) return;
  NEURON_ASSERT(n <= kQuantMmaGemvMaxTokens && reinterpret_cast<std::uintptr_t>(x) % 16 == 0);
  with_view(type, [&](auto v) {
    using V = decltype(v);
    NEURON_ASSERT(cols % V::kUnitCols == 0);
    auto go = [&](auto kernel) {
      launch(kernel, dim3(static_cast<unsigned>((rows + 15) / 16)), kWarps * 32, 0, stream, "quant_mma_gemv",
             static_cast<const std::uint8_t*>(w), row_bytes, rows, cols, x, n, y, ldy);
    };
    with_tiles(n, [&](auto tiles) { go(mma_gemv_kernel<V, decltype(tiles)::value, OutT, Accumulate>); });
  });
}

template <bool Swiglu, class OutT>
void moe_dispatch(GgmlType type, const void* const* w, std::size_t row_bytes, int rows, int cols, const bf16_t* x,
                  bool x_by_token, int n, int k, int experts, const MoeRoute& route, OutT* y, cudaStream_t stream) {
  if (rows <= 0 || n <= 0 || experts <= 0) return;
  NEURON_ASSERT(quant_mma_gemv_supported(type, cols) && reinterpret_cast<std::uintptr_t>(x) % 16 == 0);
  with_view(type, [&](auto v) {
    using V = decltype(v);
    const int per_block = moe_tiles_per_block(cols / V::kUnitCols);
    const int tiles = (rows + 15) / 16;
    const long long pairs = static_cast<long long>(n) * k;
    const dim3 grid(static_cast<unsigned>((tiles + per_block - 1) / per_block),
                    static_cast<unsigned>(std::min<long long>(pairs, experts)));
    // Token tiles by the slots an expert has on average (rounded up).
    with_tiles((pairs + experts - 1) / experts, [&](auto token_tiles) {
      launch(mma_moe_kernel<V, decltype(token_tiles)::value, Swiglu, OutT>, grid, kMoeWarps * 32, 0, stream,
             "quant_mma_moe", reinterpret_cast<const std::uint8_t* const*>(w), row_bytes, rows, cols, x, k, x_by_token,
             route, y);
    });
  });
}

}  // namespace

bool quant_mma_gemv_supported(GgmlType type, int cols) noexcept {
  auto whole_units = [cols](auto v) { return cols > 0 && cols % decltype(v)::kUnitCols == 0; };
  switch (type) {
    case GgmlType::q4_k: return whole_units(MmaQ4_K{});
    case GgmlType::q5_k: return whole_units(MmaQ5_K{});
    case GgmlType::q6_k: return whole_units(MmaQ6_K{});
    case GgmlType::q8_0: return whole_units(MmaQ8_0{});
    default: return false;
  }
}

void quant_mma_gemv(GgmlType type, const void* w, std::size_t row_bytes, int rows, int cols, const bf16_t* x, int n,
                    float* y, int ldy, bool accumulate, cudaStream_t stream) {
  if (accumulate)
    dispatch<float, true>(type, w, row_bytes, rows, cols, x, n, y, ldy, stream);
  else
    dispatch<float, false>(type, w, row_bytes, rows, cols, x, n, y, ldy, stream);
}

void quant_mma_gemv(GgmlType type, const void* w, std::size_t row_bytes, int rows, int cols, const bf16_t* x, int n,
                    bf16_t* y, int ldy, cudaStream_t stream) {
  dispatch<bf16_t, false>(type, w, row_bytes, rows, cols, x, n, y, ldy, stream);
}

void quant_mma_moe_rows(GgmlType type, const void* const* w, std::size_t row_bytes, int rows, int cols,
                        const bf16_t* x, bool x_by_token, int n, int k, int experts, const MoeRoute& route, float* y,
                        cudaStream_t stream) {
  moe_dispatch<false>(type, w, row_bytes, rows, cols, x, x_by_token, n, k, experts, route, y, stream);
}

void quant_mma_moe_swiglu(GgmlType type, const void* const* gate_up, std::size_t row_bytes, int ff, int cols,
                          const bf16_t* h, int n, int k, int experts, const MoeRoute& route, bf16_t* act,
                          cudaStream_t stream) {
  moe_dispatch<true>(type, gate_up, row_bytes, ff, cols, h, true, n, k, experts, route, act, stream);
}

}  // namespace neuron::backend::cuda::kernels
