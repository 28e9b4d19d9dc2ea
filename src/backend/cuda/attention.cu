// Causal attention over the bf16 KV cache: a flash-style prefill kernel on
// tensor cores (WMMA) and a split-KV decode kernel. Softmax runs in the exp2
// domain in f32; the score matrix never leaves shared memory.
#include <cuda_bf16.h>
#include <mma.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/launch.cuh"
#include "util/error.hpp"

namespace neuron::backend::cuda::kernels {
namespace {

namespace wmma = nvcuda::wmma;

constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float bf(bf16_t v) { return __uint_as_float(static_cast<unsigned>(v) << 16); }
__device__ __forceinline__ bf16_t to_bf(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

// ---- prefill -------------------------------------------------------------

constexpr int kBr = 64;             // query rows per block (16 per warp)
constexpr int kBc = 64;             // keys per tile
constexpr int kWarps = kBr / 16;
constexpr int kThreads = kWarps * 32;

template <int D>
struct PrefillSmem {
  static constexpr int ld_qkv = D + 8;  // bf16 elements; padding breaks bank conflicts, keeps 32-byte fragment alignment
  static constexpr int ld_s = kBc + 4;  // f32
  static constexpr int ld_p = kBc + 8;  // bf16
  static constexpr int ld_o = D + 4;    // f32
  static constexpr std::size_t align(std::size_t b) { return (b + 127) / 128 * 128; }
  static constexpr std::size_t q = 0;
  static constexpr std::size_t k = q + align(sizeof(bf16_t) * kBr * ld_qkv);
  static constexpr std::size_t v = k + align(sizeof(bf16_t) * kBc * ld_qkv);
  static constexpr std::size_t s = v + align(sizeof(bf16_t) * kBc * ld_qkv);
  static constexpr std::size_t p = s + align(sizeof(float) * kWarps * 16 * ld_s);
  static constexpr std::size_t o = p + align(sizeof(bf16_t) * kWarps * 16 * ld_p);
  static constexpr std::size_t ml = o + align(sizeof(float) * kWarps * 16 * ld_o);
  static constexpr std::size_t bytes = ml + align(sizeof(float) * kWarps * 16 * 2);
};

// Copies `rows` rows of D bf16 (row stride src_ld elements) into shared memory
// with stride L; rows at or past `valid` are zero (the cache past the written
// positions may hold anything, and 0 * NaN would poison the product).
template <int D, int L>
__device__ __forceinline__ void load_tile(bf16_t* dst, const bf16_t* src, int src_ld, int rows, int valid) {
  constexpr int chunks = D / 8;
  for (int i = threadIdx.x; i < rows * chunks; i += kThreads) {
    const int r = i / chunks, c = (i % chunks) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < valid) v = *reinterpret_cast<const uint4*>(src + static_cast<std::size_t>(r) * src_ld + c);
    *reinterpret_cast<uint4*>(dst + r * L + c) = v;
  }
}

template <int D>
__global__ void __launch_bounds__(kThreads) attention_prefill_kernel(const bf16_t* q, const bf16_t* k_cache,
                                                                     const bf16_t* v_cache, int n, int hq, int hkv,
                                                                     int max_ctx, const std::int32_t* offset_ptr,
                                                                     float scale, bf16_t* out) {
  grid_dependency_wait();
  using S = PrefillSmem<D>;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16_t* qs = reinterpret_cast<bf16_t*>(smem + S::q);
  bf16_t* ks = reinterpret_cast<bf16_t*>(smem + S::k);
  bf16_t* vs = reinterpret_cast<bf16_t*>(smem + S::v);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  float* ss = reinterpret_cast<float*>(smem + S::s) + warp * 16 * S::ld_s;
  bf16_t* ps = reinterpret_cast<bf16_t*>(smem + S::p) + warp * 16 * S::ld_p;
  float* os = reinterpret_cast<float*>(smem + S::o) + warp * 16 * S::ld_o;
  float* row_m = reinterpret_cast<float*>(smem + S::ml) + warp * 32;
  float* row_l = row_m + 16;

  const int head = blockIdx.y, kv_head = head / (hq / hkv);
  const int r0 = blockIdx.x * kBr;
  const int offset = *offset_ptr;
  const int kv_end = offset + min(r0 + kBr, n);  // exclusive: one past the last position any row here sees

  load_tile<D, S::ld_qkv>(qs, q + (static_cast<std::size_t>(r0) * hq + head) * D, hq * D, kBr, n - r0);
  for (int i = lane; i < 16 * S::ld_o; i += 32) os[i] = 0.f;
  if (lane < 16) {
    row_m[lane] = -INFINITY;
    row_l[lane] = 0.f;
  }
  const bf16_t* kh = k_cache + static_cast<std::size_t>(kv_head) * max_ctx * D;
  const bf16_t* vh = v_cache + static_cast<std::size_t>(kv_head) * max_ctx * D;
  const float scale_log2 = scale * kLog2e;
  // Lanes 2r and 2r+1 own row r of this warp's 16, each half of the key tile.
  const int my_row = lane >> 1, my_half = lane & 1;
  const int my_pos = offset + r0 + warp * 16 + my_row;

  for (int t0 = 0; t0 < kv_end; t0 += kBc) {
    __syncthreads();  // previous tile fully consumed
    load_tile<D, S::ld_qkv>(ks, kh + static_cast<std::size_t>(t0) * D, D, kBc, kv_end - t0);
    load_tile<D, S::ld_qkv>(vs, vh + static_cast<std::size_t>(t0) * D, D, kBc, kv_end - t0);
    __syncthreads();

    // S = Q K^T for this warp's 16 rows.
#pragma unroll
    for (int j = 0; j < kBc / 16; ++j) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::fill_fragment(acc, 0.f);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::col_major> b;
        wmma::load_matrix_sync(a, reinterpret_cast<const __nv_bfloat16*>(qs + warp * 16 * S::ld_qkv + kk * 16),
                               S::ld_qkv);
        wmma::load_matrix_sync(b, reinterpret_cast<const __nv_bfloat16*>(ks + j * 16 * S::ld_qkv + kk * 16),
                               S::ld_qkv);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(ss + j * 16, acc, S::ld_s, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax on this lane's half row.
    constexpr int half = kBc / 2;
    float* srow = ss + my_row * S::ld_s + my_half * half;
    float tile_max = -INFINITY;
#pragma unroll 8
    for (int c = 0; c < half; ++c) {
      const int key = t0 + my_half * half + c;
      const float sv = key <= my_pos ? srow[c] * scale_log2 : -INFINITY;
      srow[c] = sv;
      tile_max = fmaxf(tile_max, sv);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_old = row_m[my_row];
    const float m_new = fmaxf(m_old, tile_max);
    // A row sees key 0 in the first tile, so m_new is finite from then on.
    const float alpha = m_old == -INFINITY ? 0.f : exp2f(m_old - m_new);
    float sum = 0.f;
    bf16_t* prow = ps + my_row * S::ld_p + my_half * half;
#pragma unroll 8
    for (int c = 0; c < half; ++c) {
      const float p = srow[c] == -INFINITY ? 0.f : exp2f(srow[c] - m_new);
      const bf16_t pb = to_bf(p);
      prow[c] = pb;
      sum += bf(pb);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    float* orow = os + my_row * S::ld_o + my_half * (D / 2);
#pragma unroll 8
    for (int c = 0; c < D / 2; ++c) orow[c] *= alpha;
    __syncwarp();
    if (my_half == 0) {
      row_m[my_row] = m_new;
      row_l[my_row] = row_l[my_row] * alpha + sum;
    }
    __syncwarp();

    // O += P V.
#pragma unroll
    for (int jd = 0; jd < D / 16; ++jd) {
      wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
      wmma::load_matrix_sync(acc, os + jd * 16, S::ld_o, wmma::mem_row_major);
#pragma unroll
      for (int kk = 0; kk < kBc / 16; ++kk) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> a;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> b;
        wmma::load_matrix_sync(a, reinterpret_cast<const __nv_bfloat16*>(ps + kk * 16), S::ld_p);
        wmma::load_matrix_sync(b, reinterpret_cast<const __nv_bfloat16*>(vs + kk * 16 * S::ld_qkv + jd * 16),
                               S::ld_qkv);
        wmma::mma_sync(acc, a, b, acc);
      }
      wmma::store_matrix_sync(os + jd * 16, acc, S::ld_o, wmma::mem_row_major);
    }
    __syncwarp();
  }

  // out = O / l for the rows that exist.
  const int row = r0 + warp * 16 + my_row;
  if (row < n) {
    const float inv_l = 1.f / row_l[my_row];
    const float* orow = os + my_row * S::ld_o + my_half * (D / 2);
    bf16_t* dst = out + (static_cast<std::size_t>(row) * hq + head) * D + my_half * (D / 2);
    for (int c = 0; c < D / 2; ++c) dst[c] = to_bf(orow[c] * inv_l);
  }
}

template <int D>
void launch_prefill(const bf16_t* q, const bf16_t* k_cache, const bf16_t* v_cache, int n, int hq, int hkv, int max_ctx,
                    const std::int32_t* offset, float scale, bf16_t* out, cudaStream_t stream) {
  constexpr std::size_t bytes = PrefillSmem<D>::bytes;
  static const bool configured = [] {
    NEURON_CUDA_CHECK(cudaFuncSetAttribute(attention_prefill_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(bytes)));
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>((n + kBr - 1) / kBr), static_cast<unsigned>(hq));
  launch(attention_prefill_kernel<D>, grid, kThreads, bytes, stream, "attention_prefill", q, k_cache, v_cache, n, hq,
         hkv, max_ctx, offset, scale, out);
}

// ---- prefill on mma.sync (FlashAttention-2 layout) -------------------------
//
// Head dims 64 and 128. A block is 4 warps x 16 query rows; Q stays in
// registers, K/V tiles of 64 keys stream through shared memory with cp.async
// (double-buffered), S and P never leave registers: the S accumulator of two
// adjacent n8 tiles is exactly the A operand of the P V product.

constexpr int kFlashRows = 64, kFlashKeys = 64, kFlashThreads = 128;

__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int bytes = valid ? 16 : 0;  // 0: zero-fill, nothing read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void mma_bf16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ unsigned pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const unsigned*>(&v);
}

// rows x D bf16 from global (row stride src_ld) into shared (stride LD); rows >= valid become zeros.
template <int D, int LD>
__device__ __forceinline__ void flash_load(bf16_t* dst, const bf16_t* src, int src_ld, int valid) {
  constexpr int chunks = D / 8;
  for (int i = threadIdx.x; i < kFlashKeys * chunks; i += kFlashThreads) {
    const int r = i / chunks, c = (i % chunks) * 8;
    const bool ok = r < valid;
    cp_async16(dst + r * LD + c, src + static_cast<std::size_t>(ok ? r : 0) * src_ld + c, ok);
  }
}

template <int D>
__global__ void __launch_bounds__(kFlashThreads) flash_prefill_kernel(const bf16_t* q, const bf16_t* k_cache,
                                                                      const bf16_t* v_cache, int n, int hq, int hkv,
                                                                      int max_ctx, const std::int32_t* offset_ptr,
                                                                      float scale, bf16_t* out) {
  grid_dependency_wait();
  constexpr int LD = D + 8;  // 16-byte row padding: the 8 rows of an ldmatrix hit 8 different bank groups
  constexpr int KS = D / 16; // k-steps of Q K^T
  constexpr int NT = kFlashKeys / 8;  // n8 tiles of S
  constexpr int DT = D / 8;           // n8 tiles of O
  extern __shared__ __align__(128) unsigned char smem[];
  bf16_t* qs = reinterpret_cast<bf16_t*>(smem);  // [64][LD]
  bf16_t* ks = qs + kFlashRows * LD;             // [2][64][LD]
  bf16_t* vs = ks + 2 * kFlashKeys * LD;         // [2][64][LD]

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int head = blockIdx.y, kv_head = head / (hq / hkv);
  // Longest query tiles first, so the short ones fill the tail.
  const int r0 = (gridDim.x - 1 - blockIdx.x) * kFlashRows;
  const int offset = *offset_ptr;
  const int kv_end = offset + min(r0 + kFlashRows, n);
  const bf16_t* kh = k_cache + static_cast<std::size_t>(kv_head) * max_ctx * D;
  const bf16_t* vh = v_cache + static_cast<std::size_t>(kv_head) * max_ctx * D;

  flash_load<D, LD>(qs, q + (static_cast<std::size_t>(r0) * hq + head) * D, hq * D, n - r0);
  flash_load<D, LD>(ks, kh, D, kv_end);
  flash_load<D, LD>(vs, vh, D, kv_end);
  cp_async_commit();

  const int pos0 = offset + r0 + warp * 16 + g;  // this thread's two rows: pos0 and pos0 + 8
  const int warp_last = offset + r0 + warp * 16 + 15;
  const float scale_log2 = scale * kLog2e;
  unsigned qf[KS][4];
  float o[DT][4];
#pragma unroll
  for (int i = 0; i < DT; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

  const int tiles = (kv_end + kFlashKeys - 1) / kFlashKeys;
  for (int tile = 0; tile < tiles; ++tile) {
    const int t0 = tile * kFlashKeys;
    const int buf = tile & 1;
    if (tile + 1 < tiles) {
      const int t1 = t0 + kFlashKeys;
      flash_load<D, LD>(ks + (buf ^ 1) * kFlashKeys * LD, kh + static_cast<std::size_t>(t1) * D, D, kv_end - t1);
      flash_load<D, LD>(vs + (buf ^ 1) * kFlashKeys * LD, vh + static_cast<std::size_t>(t1) * D, D, kv_end - t1);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (tile == 0) {
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
        const int row = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        ldmatrix_x4(qf[kk], qs + row * LD + kk * 16 + (lane >> 4) * 8);
      }
    }
    const bf16_t* kt = ks + buf * kFlashKeys * LD;
    const bf16_t* vt = vs + buf * kFlashKeys * LD;
    if (t0 <= warp_last) {  // otherwise every key of the tile is in this warp's future
      float s[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
#pragma unroll
        for (int nt = 0; nt < NT; nt += 2) {
          unsigned b[4];
          const int key = (nt + (lane >> 4)) * 8 + (lane & 7);
          ldmatrix_x4(b, kt + key * LD + kk * 16 + ((lane >> 3) & 1) * 8);
          mma_bf16(s[nt], qf[kk], b[0], b[1]);
          mma_bf16(s[nt + 1], qf[kk], b[2], b[3]);
        }
      }
      // Causal mask (only the tiles that reach past this warp's first row need it), then online softmax.
      const bool need_mask = t0 + kFlashKeys - 1 > offset + r0 + warp * 16;
      float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const int key = t0 + nt * 8 + 2 * t + e;
          float a = s[nt][e] * scale_log2, b = s[nt][2 + e] * scale_log2;
          if (need_mask) {
            if (key > pos0) a = -INFINITY;
            if (key > pos0 + 8) b = -INFINITY;
          }
          s[nt][e] = a;
          s[nt][2 + e] = b;
          mx0 = fmaxf(mx0, a);
          mx1 = fmaxf(mx1, b);
        }
      }
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
      mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
      mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
      // Key 0 is in the first tile and never masked, so the maxima are finite from tile 0 on.
      const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
      const float alpha0 = exp2f(m0 - mn0), alpha1 = exp2f(m1 - mn1);
      m0 = mn0;
      m1 = mn1;
      unsigned pf[NT / 2][4];
      float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const float p0 = exp2f(s[nt][0] - mn0), p1 = exp2f(s[nt][1] - mn0);
        const float p2 = exp2f(s[nt][2] - mn1), p3 = exp2f(s[nt][3] - mn1);
        const unsigned lo = pack_bf16(p0, p1), hi = pack_bf16(p2, p3);
        const float2 flo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&lo));
        const float2 fhi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&hi));
        sum0 += flo.x + flo.y;
        sum1 += fhi.x + fhi.y;
        pf[nt / 2][(nt & 1) * 2 + 0] = lo;
        pf[nt / 2][(nt & 1) * 2 + 1] = hi;
      }
      l0 = l0 * alpha0 + sum0;
      l1 = l1 * alpha1 + sum1;
#pragma unroll
      for (int dt = 0; dt < DT; ++dt) {
        o[dt][0] *= alpha0;
        o[dt][1] *= alpha0;
        o[dt][2] *= alpha1;
        o[dt][3] *= alpha1;
      }
#pragma unroll
      for (int kk = 0; kk < NT / 2; ++kk) {
#pragma unroll
        for (int dt = 0; dt < DT; dt += 2) {
          unsigned b[4];
          const int key = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
          ldmatrix_x4_trans(b, vt + key * LD + (dt + (lane >> 4)) * 8);
          mma_bf16(o[dt], pf[kk], b[0], b[1]);
          mma_bf16(o[dt + 1], pf[kk], b[2], b[3]);
        }
      }
    }
    __syncthreads();  // the next prefetch overwrites this buffer
  }

  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const int row0 = r0 + warp * 16 + g;
  const float inv0 = 1.f / l0, inv1 = 1.f / l1;
#pragma unroll
  for (int dt = 0; dt < DT; ++dt) {
    const int c = dt * 8 + 2 * t;
    if (row0 < n)
      *reinterpret_cast<unsigned*>(out + (static_cast<std::size_t>(row0) * hq + head) * D + c) =
          pack_bf16(o[dt][0] * inv0, o[dt][1] * inv0);
    if (row0 + 8 < n)
      *reinterpret_cast<unsigned*>(out + (static_cast<std::size_t>(row0 + 8) * hq + head) * D + c) =
          pack_bf16(o[dt][2] * inv1, o[dt][3] * inv1);
  }
}

template <int D>
void launch_flash_prefill(const bf16_t* q, const bf16_t* k_cache, const bf16_t* v_cache, int n, int hq, int hkv,
                          int max_ctx, const std::int32_t* offset, float scale, bf16_t* out, cudaStream_t stream) {
  constexpr std::size_t bytes = sizeof(bf16_t) * (kFlashRows + 4 * kFlashKeys) * (D + 8);
  static const bool configured = [] {
    NEURON_CUDA_CHECK(cudaFuncSetAttribute(flash_prefill_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(bytes)));
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>((n + kFlashRows - 1) / kFlashRows), static_cast<unsigned>(hq));
  launch(flash_prefill_kernel<D>, grid, kFlashThreads, bytes, stream, "attention_prefill (flash)", q, k_cache, v_cache,
         n, hq, hkv, max_ctx, offset, scale, out);
}

// ---- decode --------------------------------------------------------------

constexpr int kDecodeThreads = 128;

// Combines the splits' partial softmax states of one head: out = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M) l_s.
// The parts were written by other blocks of this grid: read through L2 (ld.cg), never a stale L1 line.
__device__ void merge_splits(const float* parts, int d, int splits, bf16_t* out) {
  float big = -INFINITY;
  for (int s = 0; s < splits; ++s) big = fmaxf(big, __ldcg(parts + s * (d + 2)));
  float total = 0.f;
  for (int s = 0; s < splits; ++s) {
    const float m = __ldcg(parts + s * (d + 2));
    if (m != -INFINITY) total += __ldcg(parts + s * (d + 2) + 1) * exp2f(m - big);
  }
  for (int c = threadIdx.x; c < d; c += blockDim.x) {
    float a = 0.f;
    for (int s = 0; s < splits; ++s) {
      const float m = __ldcg(parts + s * (d + 2));
      if (m != -INFINITY) a += __ldcg(parts + s * (d + 2) + 2 + c) * exp2f(m - big);
    }
    out[c] = to_bf(a / total);
  }
}

// RMSNorm over one head's D values, times w, then rotate-half RoPE at `pos`,
// into dst (shared, f32 holding bf16-rounded values, as qk_norm_rope stores
// them). Called by the whole block; red holds one float per warp.
template <int D>
__device__ void norm_rope(const bf16_t* src, const bf16_t* w, const float* inv_freq, int pos, float eps, float* dst,
                          float* red) {
  float ss = 0.f;
  for (int c = threadIdx.x; c < D; c += blockDim.x) {
    const float v = bf(src[c]);
    dst[c] = v;
    ss += v * v;
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = ss;
  __syncthreads();
  float total = 0.f;
  for (int i = 0; i < static_cast<int>(blockDim.x >> 5); ++i) total += red[i];
  const float inv = rsqrtf(total / static_cast<float>(D) + eps);
  constexpr int half = D / 2;
  for (int j = threadIdx.x; j < half; j += blockDim.x) {  // thread j alone owns entries j and j + half
    const float a = bf(to_bf(bf(to_bf(dst[j] * inv)) * bf(w[j])));
    const float b = bf(to_bf(bf(to_bf(dst[j + half] * inv)) * bf(w[j + half])));
    float sn, cs;
    sincosf(static_cast<float>(pos) * inv_freq[j], &sn, &cs);
    dst[j] = bf(to_bf(a * cs - b * sn));
    dst[j + half] = bf(to_bf(b * cs + a * sn));
  }
  __syncthreads();  // dst complete, red free for the next call
}

// Threads of a group of D/8 lanes share one key; each holds 8 of its D values.
template <int D>
__global__ void __launch_bounds__(kDecodeThreads) attention_decode_kernel(const bf16_t* q, bf16_t* k_cache,
                                                                          bf16_t* v_cache, int hq, int hkv,
                                                                          int max_ctx, const std::int32_t* offset_ptr,
                                                                          float scale, int splits, float* scratch,
                                                                          bf16_t* out, const bf16_t* qkv,
                                                                          const bf16_t* q_norm, const bf16_t* k_norm,
                                                                          const float* inv_freq, float eps) {
  grid_dependency_wait();
  constexpr int tpk = D / 8;                    // threads per key
  constexpr int groups = kDecodeThreads / tpk;  // keys in flight per block
  __shared__ float g_m[groups], g_l[groups];
  __shared__ float g_acc[groups][D];

  const int head = blockIdx.x, split = blockIdx.y;
  const int kv_head = head / (hq / hkv);
  const int kv_len = *offset_ptr + 1;
  const int chunk = (kv_len + splits - 1) / splits;
  const int begin = split * chunk, end = min(kv_len, begin + chunk);
  const int group = threadIdx.x / tpk, sub = threadIdx.x % tpk;

  float qv[8];
  if (qkv) {
    // Fused q/k norm + RoPE: this block makes its head's query, and a block
    // whose split holds the new position also makes that position's key and
    // value and stores them in the cache (the blocks of one KV head's query
    // heads store identical bits) before reading the cache.
    __shared__ float q_s[D], k_s[D];
    __shared__ float red[kDecodeThreads / 32];
    const int pos = kv_len - 1;
    norm_rope<D>(qkv + static_cast<std::size_t>(head) * D, q_norm, inv_freq, pos, eps, q_s, red);
#pragma unroll
    for (int i = 0; i < 8; ++i) qv[i] = q_s[sub * 8 + i] * scale * kLog2e;
    if (end == kv_len && begin < end) {
      norm_rope<D>(qkv + static_cast<std::size_t>(hq + kv_head) * D, k_norm, inv_freq, pos, eps, k_s, red);
      const bf16_t* v_new = qkv + static_cast<std::size_t>(hq + hkv + kv_head) * D;
      const std::size_t at = (static_cast<std::size_t>(kv_head) * max_ctx + pos) * D;
      for (int c = threadIdx.x; c < D; c += kDecodeThreads) {
        k_cache[at + c] = to_bf(k_s[c]);
        v_cache[at + c] = v_new[c];
      }
      __syncthreads();  // the block's own cache writes are visible to its loads below
    }
  } else {
    const uint4 raw = *reinterpret_cast<const uint4*>(q + static_cast<std::size_t>(head) * D + sub * 8);
    const bf16_t* e = reinterpret_cast<const bf16_t*>(&raw);
#pragma unroll
    for (int i = 0; i < 8; ++i) qv[i] = bf(e[i]) * scale * kLog2e;
  }
  const bf16_t* kh = k_cache + static_cast<std::size_t>(kv_head) * max_ctx * D + sub * 8;
  const bf16_t* vh = v_cache + static_cast<std::size_t>(kv_head) * max_ctx * D + sub * 8;
  float m = -INFINITY, l = 0.f, acc[8] = {};
  // Whole warps iterate together (the shuffles need every lane); a group past
  // the end idles. Each group takes kUnroll keys per pass, all loads issued
  // before the first use, so a block keeps many cache lines in flight.
  constexpr int kUnroll = 4;
  for (int base = begin; base < end; base += groups * kUnroll) {
    uint4 kr[kUnroll], vr[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int key = base + u * groups + group;
      kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
      if (key < end) {
        kr[u] = *reinterpret_cast<const uint4*>(kh + static_cast<std::size_t>(key) * D);
        vr[u] = *reinterpret_cast<const uint4*>(vh + static_cast<std::size_t>(key) * D);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const bf16_t* ke = reinterpret_cast<const bf16_t*>(&kr[u]);
      const bf16_t* ve = reinterpret_cast<const bf16_t*>(&vr[u]);
      float s = 0.f;
#pragma unroll
      for (int i = 0; i < 8; ++i) s = fmaf(qv[i], bf(ke[i]), s);
#pragma unroll
      for (int o = tpk / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
      if (base + u * groups + group >= end) continue;
      const float m_new = fmaxf(m, s);
      const float alpha = exp2f(m - m_new);  // m = -inf on the group's first key: alpha = 0
      const float p = exp2f(s - m_new);
      l = l * alpha + p;
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[i] = fmaf(p, bf(ve[i]), acc[i] * alpha);
      m = m_new;
    }
  }
  if (sub == 0) {
    g_m[group] = m;
    g_l[group] = l;
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) g_acc[group][sub * 8 + i] = acc[i];
  __syncthreads();

  float* part = scratch + (static_cast<std::size_t>(head) * splits + split) * (D + 2);
  float big = -INFINITY;
  for (int g = 0; g < groups; ++g) big = fmaxf(big, g_m[g]);
  for (int d = threadIdx.x; d < D; d += kDecodeThreads) {
    float a = 0.f;
    for (int g = 0; g < groups; ++g)
      if (g_m[g] != -INFINITY) a += g_acc[g][d] * exp2f(g_m[g] - big);
    part[2 + d] = a;
  }
  if (threadIdx.x == 0) {
    float total = 0.f;
    for (int g = 0; g < groups; ++g)
      if (g_m[g] != -INFINITY) total += g_l[g] * exp2f(g_m[g] - big);
    part[0] = big;
    part[1] = total;
  }
  // The last block of this head to finish merges all splits (no second
  // kernel), then re-arms the head's counter for the next step.
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  unsigned* counters = reinterpret_cast<unsigned*>(scratch + static_cast<std::size_t>(gridDim.x) * splits * (D + 2));
  if (threadIdx.x == 0) last = atomicAdd(counters + head, 1u) == static_cast<unsigned>(splits - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  merge_splits(scratch + static_cast<std::size_t>(head) * splits * (D + 2), D, splits,
               out + static_cast<std::size_t>(head) * D);
  if (threadIdx.x == 0) counters[head] = 0;
}

template <int D>
void launch_decode(const bf16_t* q, bf16_t* k_cache, bf16_t* v_cache, int hq, int hkv, int max_ctx,
                   const std::int32_t* offset, float scale, int splits, float* scratch, bf16_t* out,
                   const bf16_t* qkv, const bf16_t* q_norm, const bf16_t* k_norm, const float* inv_freq, float eps,
                   cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(hq), static_cast<unsigned>(splits));
  launch(attention_decode_kernel<D>, grid, kDecodeThreads, 0, stream, "attention_decode", q, k_cache, v_cache, hq, hkv,
         max_ctx, offset, scale, splits, scratch, out, qkv, q_norm, k_norm, inv_freq, eps);
}

}  // namespace

bool attention_supports_head_dim(int d) noexcept { return d == 16 || d == 64 || d == 128 || d == 256; }

void attention_prefill(const bf16_t* q, const bf16_t* k_cache, const bf16_t* v_cache, int n, int hq, int hkv, int d,
                       int max_ctx, const std::int32_t* offset, float scale, bf16_t* out, cudaStream_t stream) {
  if (n <= 0) return;
#define NEURON_CALL(D) launch_prefill<D>(q, k_cache, v_cache, n, hq, hkv, max_ctx, offset, scale, out, stream)
  switch (d) {
    case 16: NEURON_CALL(16); break;
    case 64: launch_flash_prefill<64>(q, k_cache, v_cache, n, hq, hkv, max_ctx, offset, scale, out, stream); break;
    case 128: launch_flash_prefill<128>(q, k_cache, v_cache, n, hq, hkv, max_ctx, offset, scale, out, stream); break;
    case 256: NEURON_CALL(256); break;
    default: NEURON_ASSERT(!"attention_prefill: head_dim not instantiated (checked at load)");
  }
#undef NEURON_CALL
}

std::size_t decode_scratch_floats(int hq, int d, int splits) noexcept {
  return static_cast<std::size_t>(hq) * splits * (d + 2) + static_cast<std::size_t>(hq);  // + one counter per head
}

void attention_decode(const bf16_t* q, const bf16_t* k_cache, const bf16_t* v_cache, int hq, int hkv, int d,
                      int max_ctx, const std::int32_t* offset, float scale, int splits, float* scratch, bf16_t* out,
                      cudaStream_t stream) {
  // The unfused path never writes the cache.
  bf16_t* kc = const_cast<bf16_t*>(k_cache);
  bf16_t* vc = const_cast<bf16_t*>(v_cache);
#define NEURON_CALL(D) \
  launch_decode<D>(q, kc, vc, hq, hkv, max_ctx, offset, scale, splits, scratch, out, nullptr, nullptr, nullptr, nullptr, 0.f, stream)
  switch (d) {
    case 16: NEURON_CALL(16); break;
    case 64: NEURON_CALL(64); break;
    case 128: NEURON_CALL(128); break;
    case 256: NEURON_CALL(256); break;
    default: NEURON_ASSERT(!"attention_decode: head_dim not instantiated (checked at load)");
  }
#undef NEURON_CALL
}

void attention_decode_fused(const bf16_t* qkv, const bf16_t* q_norm, const bf16_t* k_norm, const float* inv_freq,
                            float eps, bf16_t* k_cache, bf16_t* v_cache, int hq, int hkv, int d, int max_ctx,
                            const std::int32_t* offset, float scale, int splits, float* scratch, bf16_t* out,
                            cudaStream_t stream) {
#define NEURON_CALL(D)                                                                                          \
  launch_decode<D>(nullptr, k_cache, v_cache, hq, hkv, max_ctx, offset, scale, splits, scratch, out, qkv, q_norm, \
                   k_norm, inv_freq, eps, stream)
  switch (d) {
    case 16: NEURON_CALL(16); break;
    case 64: NEURON_CALL(64); break;
    case 128: NEURON_CALL(128); break;
    case 256: NEURON_CALL(256); break;
    default: NEURON_ASSERT(!"attention_decode_fused: head_dim not instantiated (checked at load)");
  }
#undef NEURON_CALL
}

}  // namespace neuron::backend::cuda::kernels
