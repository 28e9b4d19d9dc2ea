// Causal attention over the paged bf16 KV pool (kernels.hpp): a
// FlashAttention-2 style prefill kernel on tensor cores (mma.sync) for
// sequences with several new tokens, and a split-K decode kernel for
// sequences with one, where a block's query heads share every K/V load.
// Softmax runs in the exp2 domain in f32; scores never leave the chip.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/cuda_check.hpp"
#include "backend/cuda/device_math.cuh"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma.cuh"
#include "util/error.hpp"

namespace neuron::backend::cuda::kernels {
namespace {

constexpr float kLog2e = 1.4426950408889634f;


// Where position `pos` of KV head `kv_head` lives in one layer's pool, in elements.
__device__ __forceinline__ std::size_t pool_offset(const std::int32_t* table, int pos, int kv_head, int hkv, int bs,
                                                   int d) {
  const int block = table[pos / bs];
  return ((static_cast<std::size_t>(block) * hkv + kv_head) * bs + pos % bs) * static_cast<std::size_t>(d);
}

// ---- prefill -------------------------------------------------------------
//
// A block is 4 warps x 16 query rows of one sequence and one query head; Q
// stays in registers, K/V tiles of 64 positions stream through shared memory
// with cp.async, gathered through the block table, and S and P never leave
// registers: the S accumulator of two adjacent n8 tiles is exactly the A
// operand of the P V product. One K and one V buffer, in FlashAttention-2's
// order: the next K tile loads while P V runs, the next V tile while Q K^T and
// the softmax run, so head_dim 256 takes 101 KB of shared memory and two
// blocks share an SM.

constexpr int kFlashRows = kPrefillTileRows, kFlashKeys = 64, kFlashThreads = 128;

// 64 rows x D bf16 from global (row stride src_ld) into shared (stride LD); rows >= valid become zeros.
template <int D, int LD>
__device__ __forceinline__ void flash_load(bf16_t* dst, const bf16_t* src, int src_ld, int valid) {
  constexpr int chunks = D / 8;
  for (int i = threadIdx.x; i < kFlashKeys * chunks; i += kFlashThreads) {
    const int r = i / chunks, c = (i % chunks) * 8;
    const bool ok = r < valid;
    cp_async16(dst + r * LD + c, src + static_cast<std::size_t>(ok ? r : 0) * src_ld + c, ok);
  }
}

// Positions [t0, t0 + 64) of one KV head, gathered through the block table
// into shared (stride LD); rows >= valid become zeros and read nothing (the
// slots past a sequence's context may hold anything, and 0 * NaN would poison
// the product).
template <int D, int LD>
__device__ __forceinline__ void paged_load(bf16_t* dst, const bf16_t* layer, const std::int32_t* table, int t0,
                                           int valid, int kv_head, int hkv, int bs) {
  constexpr int chunks = D / 8;
  for (int i = threadIdx.x; i < kFlashKeys * chunks; i += kFlashThreads) {
    const int r = i / chunks, c = (i % chunks) * 8;
    const bool ok = r < valid;
    const bf16_t* src = ok ? layer + pool_offset(table, t0 + r, kv_head, hkv, bs, D) + c : layer;
    cp_async16(dst + r * LD + c, src, ok);
  }
}

template <int D>
constexpr std::size_t prefill_smem_bytes = sizeof(bf16_t) * (kFlashRows + 2 * kFlashKeys) * (D + 8);

template <int D>
__global__ void __launch_bounds__(kFlashThreads) prefill_kernel(const bf16_t* q, PagedKv kv, StepSeqs seqs,
                                                                const std::int32_t* tiles_of_rows, int hq,
                                                                float scale, bf16_t* out) {
  grid_dependency_wait();
  constexpr int LD = D + 8;  // 16-byte row padding: the 8 rows of an ldmatrix hit 8 different bank groups
  constexpr int KS = D / 16; // k-steps of Q K^T
  constexpr int NT = kFlashKeys / 8;  // n8 tiles of S
  constexpr int DT = D / 8;           // n8 tiles of O
  extern __shared__ __align__(128) unsigned char smem[];
  bf16_t* qs = reinterpret_cast<bf16_t*>(smem);  // [64][LD]
  bf16_t* ks = qs + kFlashRows * LD;             // [64][LD]
  bf16_t* vs = ks + kFlashKeys * LD;             // [64][LD]

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int g = lane >> 2, t = lane & 3;
  const int head = blockIdx.y, kv_head = head / (hq / kv.hkv);
  // The tile: rows [r0, r0 + 64) of sequence `seq`'s new tokens (the host lists the longest first).
  const int seq = tiles_of_rows[2 * blockIdx.x], r0 = tiles_of_rows[2 * blockIdx.x + 1];
  const int n = seqs.num_tokens[seq], q0 = seqs.q_start[seq], offset = seqs.position[seq];
  const std::int32_t* table = seqs.block_tables + seqs.block_offset[seq];
  const int kv_end = offset + min(r0 + kFlashRows, n);

  // cp.async groups in flight, in order: (Q, K 0), V 0; then per tile K t+1 after Q K^T, V t+1 after P V.
  flash_load<D, LD>(qs, q + (static_cast<std::size_t>(q0 + r0) * hq + head) * D, hq * D, n - r0);
  paged_load<D, LD>(ks, kv.k, table, 0, kv_end, kv_head, kv.hkv, kv.block_size);
  cp_async_commit();
  paged_load<D, LD>(vs, kv.v, table, 0, kv_end, kv_head, kv.hkv, kv.block_size);
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
    const bool more = tile + 1 < tiles;
    const bool active = t0 <= warp_last;  // otherwise every key of the tile is in this warp's future
    cp_async_wait<1>();                   // K tile (and Q) landed; V tile may be in flight
    __syncthreads();
    if (tile == 0) {
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
        const int row = warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
        ldmatrix_x4(qf[kk], qs + row * LD + kk * 16 + (lane >> 4) * 8);
      }
    }
    float s[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.f;
    if (active) {
#pragma unroll
      for (int kk = 0; kk < KS; ++kk) {
#pragma unroll
        for (int nt = 0; nt < NT; nt += 2) {
          unsigned b[4];
          const int key = (nt + (lane >> 4)) * 8 + (lane & 7);
          ldmatrix_x4(b, ks + key * LD + kk * 16 + ((lane >> 3) & 1) * 8);
          mma_bf16(s[nt], qf[kk], b[0], b[1]);
          mma_bf16(s[nt + 1], qf[kk], b[2], b[3]);
        }
      }
    }
    unsigned pf[NT / 2][4];
    if (active) {
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
    }
    __syncthreads();  // every warp is done with the K buffer
    if (more) {  // after the softmax: S's registers are free for the loads' addresses
      paged_load<D, LD>(ks, kv.k, table, t0 + kFlashKeys, kv_end - t0 - kFlashKeys, kv_head, kv.hkv, kv.block_size);
      cp_async_commit();
      cp_async_wait<1>();  // the V tile landed; the next K tile may be in flight
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    if (active) {
#pragma unroll
      for (int kk = 0; kk < NT / 2; ++kk) {
#pragma unroll
        for (int dt = 0; dt < DT; dt += 2) {
          unsigned b[4];
          const int key = kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8;
          ldmatrix_x4_trans(b, vs + key * LD + (dt + (lane >> 4)) * 8);
          mma_bf16(o[dt], pf[kk], b[0], b[1]);
          mma_bf16(o[dt + 1], pf[kk], b[2], b[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with the V buffer
    if (more) {
      paged_load<D, LD>(vs, kv.v, table, t0 + kFlashKeys, kv_end - t0 - kFlashKeys, kv_head, kv.hkv, kv.block_size);
      cp_async_commit();
    }
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
      *reinterpret_cast<unsigned*>(out + (static_cast<std::size_t>(q0 + row0) * hq + head) * D + c) =
          pack_bf16(o[dt][0] * inv0, o[dt][1] * inv0);
    if (row0 + 8 < n)
      *reinterpret_cast<unsigned*>(out + (static_cast<std::size_t>(q0 + row0 + 8) * hq + head) * D + c) =
          pack_bf16(o[dt][2] * inv1, o[dt][3] * inv1);
  }
}

template <int D>
void launch_prefill(const bf16_t* q, PagedKv kv, StepSeqs seqs, const std::int32_t* tiles, int n_tiles, int hq,
                    float scale, bf16_t* out, cudaStream_t stream) {
  static const bool configured = [] {
    NEURON_CUDA_CHECK(cudaFuncSetAttribute(prefill_kernel<D>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(prefill_smem_bytes<D>)));
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>(n_tiles), static_cast<unsigned>(hq));
  launch(prefill_kernel<D>, grid, kFlashThreads, prefill_smem_bytes<D>, stream, "attention_prefill", q, kv, seqs,
         tiles, hq, scale, out);
}

// ---- decode --------------------------------------------------------------

constexpr int kDecodeThreads = 128;

// Query heads one block serves: the smallest of 1, 2, 4, 8 that holds a KV head's group (8 at most).
constexpr int group_heads(int group) { return group <= 1 ? 1 : group <= 2 ? 2 : group <= 4 ? 4 : 8; }

// A split's partial softmax state of one head in the scratch: m, l, two
// unused floats (so acc is 16-byte aligned), acc [d].
constexpr int part_floats(int d) { return d + 4; }
template <int D>
constexpr int kPartFloats = part_floats(D);

// Combines the splits' partial softmax states of a block's nh heads: out = sum_s e^(m_s - M) acc_s /
// sum_s e^(m_s - M) l_s. The whole block reads the splits' (m, l) at once; then each thread owns 4 output
// values of a head and sums them over the splits with 16-byte loads, 16 splits' loads in flight at a time,
// so the merge costs a few L2 round trips. The parts were written by other blocks of this grid: read
// through L2 (ld.cg), never a stale L1 line. parts: [nh heads][splits][kPartFloats<D>].
template <int D, int G>
__device__ void merge_splits(const float* parts, int nh, int splits, bf16_t* out) {
  constexpr int stride = kPartFloats<D>;
  __shared__ float weight[G][kDecodeMaxSplits];  // e^(m_s - M) / total, 0 for an empty split
  for (int e = threadIdx.x; e < nh * splits; e += blockDim.x) {
    const int g = e / splits, s = e % splits;
    weight[g][s] = __ldcg(parts + (static_cast<std::size_t>(g) * splits + s) * stride);
  }
  __syncthreads();
  // One warp per head: the maximum and the total over the splits, by shuffles.
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int g = warp; g < nh; g += static_cast<int>(blockDim.x / 32)) {
    float big = -INFINITY;
    for (int s = lane; s < splits; s += 32) big = fmaxf(big, weight[g][s]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) big = fmaxf(big, __shfl_xor_sync(0xffffffffu, big, o));
    float total = 0.f;
    for (int s = lane; s < splits; s += 32) {
      const float m = weight[g][s];
      const float w = m == -INFINITY ? 0.f : exp2f(m - big);
      total += __ldcg(parts + (static_cast<std::size_t>(g) * splits + s) * stride + 1) * w;
      weight[g][s] = w;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) total += __shfl_xor_sync(0xffffffffu, total, o);
    const float inv = 1.f / total;
    for (int s = lane; s < splits; s += 32) weight[g][s] *= inv;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < nh * D / 4; e += blockDim.x) {
    const int g = e / (D / 4), c = 4 * (e % (D / 4));
    const float* p = parts + static_cast<std::size_t>(g) * splits * stride + 4 + c;
    float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int s0 = 0; s0 < splits; s0 += 16) {
      float4 v[16];
#pragma unroll
      for (int k = 0; k < 16; ++k)
        if (s0 + k < splits) v[k] = __ldcg(reinterpret_cast<const float4*>(p + static_cast<std::size_t>(s0 + k) * stride));
#pragma unroll
      for (int k = 0; k < 16; ++k)
        if (s0 + k < splits) {
          const float w = weight[g][s0 + k];
          a.x += v[k].x * w;
          a.y += v[k].y * w;
          a.z += v[k].z * w;
          a.w += v[k].w * w;
        }
    }
    bf16_t* o = out + static_cast<std::size_t>(g) * D + c;
    o[0] = to_bf(a.x);
    o[1] = to_bf(a.y);
    o[2] = to_bf(a.z);
    o[3] = to_bf(a.w);
  }
}

// RMSNorm of `heads` heads of D values, each times its weight (none when the
// weight is null), then rotate-half RoPE at `pos`, into dst[h] (shared, f32 holding bf16-rounded
// values, as qk_norm_rope stores them). src[h] and w[h] give head h's row and
// norm weight. Called by the whole block: every head's values are read in one
// pass (one memory round trip for all of them), each warp reduces whole heads,
// and the rotations of all heads run together.
template <int D, int H, class Src, class Weight>
__device__ void norm_rope_heads(int heads, Src src, Weight w, const float* inv_freq, int pos, float eps,
                                float (*dst)[D]) {
  __shared__ float inv_s[H];
  for (int e = threadIdx.x; e < heads * D; e += blockDim.x) dst[e / D][e % D] = bf(src(e / D)[e % D]);
  __syncthreads();
  const int lane = threadIdx.x % 32, warps = static_cast<int>(blockDim.x / 32);
  for (int h = static_cast<int>(threadIdx.x / 32); h < heads; h += warps) {
    float ss = 0.f;
    for (int c = lane; c < D; c += 32) ss += dst[h][c] * dst[h][c];
    ss = warp_sum(ss);
    if (lane == 0) inv_s[h] = rsqrtf(ss / static_cast<float>(D) + eps);
  }
  __syncthreads();
  constexpr int half = D / 2;
  for (int e = threadIdx.x; e < heads * half; e += blockDim.x) {  // entries j and j + half of head h: one thread
    const int h = e / half, j = e % half;
    const float inv = inv_s[h];
    const bf16_t* wh = w(h);
    const float a = wh ? bf(to_bf(bf(to_bf(dst[h][j] * inv)) * bf(wh[j]))) : dst[h][j];  // no weights: no norm
    const float b = wh ? bf(to_bf(bf(to_bf(dst[h][j + half] * inv)) * bf(wh[j + half]))) : dst[h][j + half];
    float sn, cs;
    sincosf(static_cast<float>(pos) * inv_freq[j], &sn, &cs);
    dst[h][j] = bf(to_bf(a * cs - b * sn));
    dst[h][j + half] = bf(to_bf(b * cs + a * sn));
  }
  __syncthreads();
}

// One block per (sequence, KV head and up to G of its query heads, split of
// the positions). Threads in groups of D/8 lanes share one position, each
// holding 8 of its D values; a group keeps an online softmax state per head,
// and the groups' states meet in shared memory at the end.
template <int D, int G>
__global__ void __launch_bounds__(kDecodeThreads) decode_kernel(const bf16_t* q, DecodeRope rope, PagedKv kv,
                                                                StepSeqs seqs, const std::int32_t* items, int hq,
                                                                float scale, float* scratch, unsigned* counters,
                                                                bf16_t* out) {
  constexpr int tpk = D / 8;                    // threads per position
  constexpr int groups = kDecodeThreads / tpk;  // positions in flight per block
  __shared__ float g_m[groups][G], g_l[groups][G];
  __shared__ float g_acc[groups][G][D];  // 4 KB per head
  __shared__ float head_big[G], head_total[G];

  const int hkv = kv.hkv, bs = kv.block_size;
  const int item = blockIdx.x, split = blockIdx.z, splits = gridDim.z;
  const int seq = items[item];
  const int group_size = hq / hkv;
  const int chunks = (group_size + G - 1) / G;
  const int kv_head = blockIdx.y / chunks;
  const int h0 = kv_head * group_size + (blockIdx.y % chunks) * G;  // this block's first query head
  const int nh = min(G, (kv_head + 1) * group_size - h0);
  const int kv_len = seqs.ctx_len[seq];
  const int row = seqs.q_start[seq];  // the sequence's one new token
  const std::int32_t* table = seqs.block_tables + seqs.block_offset[seq];
  const int per = max((kv_len + splits - 1) / splits, kDecodeMinSplitKeys);
  const int begin = min(kv_len, split * per), end = min(kv_len, begin + per);
  const int group = threadIdx.x / tpk, sub = threadIdx.x % tpk;
  const float q_scale = scale * kLog2e;
  // A split past the context (short sequences in a grid sized for long ones)
  // only reports an empty state to the merge.
  const bool empty = begin >= end;

  // Positions stream through in passes of kPass, each group taking kUnroll of
  // them; the next pass's K/V loads are in flight while this one is computed.
  // Plain loads, not the read-only path: the fused variant writes the pool.
  constexpr int kUnroll = G <= 4 && G * D <= 512 ? 8 : 4;  // registers: queries and sums grow with G and D
  constexpr int kPass = groups * kUnroll;
  auto load_key = [&](int key, uint4& kk, uint4& vv) {  // this thread's 8 values of position key
    const std::size_t at = pool_offset(table, key, kv_head, hkv, bs, D) + sub * 8;
    kk = *reinterpret_cast<const uint4*>(kv.k + at);
    vv = *reinterpret_cast<const uint4*>(kv.v + at);
  };
  auto load_pass = [&](int base, int limit, uint4 (&kk)[kUnroll], uint4 (&vv)[kUnroll]) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int key = base + u * groups + group;
      kk[u] = vv[u] = make_uint4(0, 0, 0, 0);
      if (key < limit) load_key(key, kk[u], vv[u]);
    }
  };
  // The first pass goes out before the wait on the previous kernel, all but
  // the new position: earlier steps wrote the others (like the step's inputs
  // above, written before the step's first kernel). The new one is this
  // step's, made by the previous kernel or below, and is read after it.
  uint4 kr[kUnroll], vr[kUnroll];
  load_pass(begin, min(end, kv_len - 1), kr, vr);
  grid_dependency_wait();
  float qv[G][8] = {};
  if (rope.qkv && !empty) {
    // Fused q/k norm + RoPE: the block makes its heads' queries, and the
    // block whose split holds the new position also makes that position's
    // key and value and stores them in the pool before reading it (the
    // blocks of one KV head's head groups store identical bits).
    __shared__ float heads_s[G + 1][D];  // [query heads, then the new key when this split holds it][D]
    const int pos = kv_len - 1;
    const bool own_key = end == kv_len;
    const bf16_t* src = rope.qkv + static_cast<std::size_t>(row) * (hq + 2 * hkv) * D;
    norm_rope_heads<D, G + 1>(
        nh + (own_key ? 1 : 0),
        [&](int h) { return src + static_cast<std::size_t>(h < nh ? h0 + h : hq + kv_head) * D; },
        [&](int h) { return h < nh ? rope.q_norm : rope.k_norm; }, rope.inv_freq, pos, rope.eps, heads_s);
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
      for (int i = 0; i < 8; ++i) qv[g][i] = g < nh ? heads_s[g][sub * 8 + i] * q_scale : 0.f;
    if (own_key) {
      const bf16_t* v_new = src + static_cast<std::size_t>(hq + hkv + kv_head) * D;
      const std::size_t at = pool_offset(table, pos, kv_head, hkv, bs, D);
      for (int c = threadIdx.x; c < D; c += kDecodeThreads) {
        kv.k[at + c] = to_bf(heads_s[nh][c]);
        kv.v[at + c] = v_new[c];
      }
      __syncthreads();  // the block's own pool writes are visible to its loads below
    }
  } else if (!empty) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      uint4 raw = make_uint4(0, 0, 0, 0);
      if (g < nh) raw = *reinterpret_cast<const uint4*>(q + (static_cast<std::size_t>(row) * hq + h0 + g) * D + sub * 8);
      const bf16_t* e = reinterpret_cast<const bf16_t*>(&raw);
#pragma unroll
      for (int i = 0; i < 8; ++i) qv[g][i] = bf(e[i]) * q_scale;
    }
  }

  if (end == kv_len) {  // the new position, when the first pass holds it
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (begin + u * groups + group == kv_len - 1) load_key(kv_len - 1, kr[u], vr[u]);
  }

  float m[G], l[G], acc[G][8];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[g][i] = 0.f;
  }
  // Whole warps iterate together (the shuffles need every lane); a group past
  // the end idles.
  for (int base = begin; base < end; base += kPass) {
    uint4 kn[kUnroll], vn[kUnroll];
    if (base + kPass < end) load_pass(base + kPass, end, kn, vn);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const bf16_t* ke = reinterpret_cast<const bf16_t*>(&kr[u]);
      const bf16_t* ve = reinterpret_cast<const bf16_t*>(&vr[u]);
      float s[G];
#pragma unroll
      for (int g = 0; g < G; ++g) {
        s[g] = 0.f;
#pragma unroll
        for (int i = 0; i < 8; ++i) s[g] = fmaf(qv[g][i], bf(ke[i]), s[g]);
#pragma unroll
        for (int o = tpk / 2; o > 0; o >>= 1) s[g] += __shfl_xor_sync(0xffffffffu, s[g], o);
      }
      if (base + u * groups + group >= end) continue;
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float m_new = fmaxf(m[g], s[g]);
        const float alpha = exp2f(m[g] - m_new);  // m = -inf on the group's first position: alpha = 0
        const float p = exp2f(s[g] - m_new);
        l[g] = l[g] * alpha + p;
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[g][i] = fmaf(p, bf(ve[i]), acc[g][i] * alpha);
        m[g] = m_new;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      kr[u] = kn[u];
      vr[u] = vn[u];
    }
  }
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (sub == 0) {
      g_m[group][g] = m[g];
      g_l[group][g] = l[g];
    }
#pragma unroll
    for (int i = 0; i < 8; ++i) g_acc[group][g][sub * 8 + i] = acc[g][i];
  }
  __syncthreads();
  if (threadIdx.x < nh) {
    const int g = threadIdx.x;
    float big = -INFINITY;
    for (int k = 0; k < groups; ++k) big = fmaxf(big, g_m[k][g]);
    float total = 0.f;
    for (int k = 0; k < groups; ++k)
      if (g_m[k][g] != -INFINITY) total += g_l[k][g] * exp2f(g_m[k][g] - big);
    head_big[g] = big;
    head_total[g] = total;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < nh * D; e += kDecodeThreads) {
    const int g = e / D, d = e % D;
    const float big = head_big[g];
    float a = 0.f;
    for (int k = 0; k < groups; ++k)
      if (g_m[k][g] != -INFINITY) a += g_acc[k][g][d] * exp2f(g_m[k][g] - big);
    if (splits == 1) {
      out[(static_cast<std::size_t>(row) * hq + h0 + g) * D + d] = to_bf(a / head_total[g]);
    } else {
      float* part = scratch + ((static_cast<std::size_t>(item) * hq + h0 + g) * splits + split) * kPartFloats<D>;
      part[4 + d] = a;
      if (d == 0) {
        part[0] = big;  // -inf for a split past the context: the merge skips it
        part[1] = head_total[g];
      }
    }
  }
  if (splits == 1) return;
  // The last block of this (sequence, head group) to finish merges all
  // splits (no second kernel), then re-arms its counter for the next call.
  __shared__ bool last;
  __threadfence();
  __syncthreads();
  unsigned* counter = counters + static_cast<std::size_t>(item) * gridDim.y + blockIdx.y;
  if (threadIdx.x == 0) last = atomicAdd(counter, 1u) == static_cast<unsigned>(splits - 1);
  __syncthreads();
  if (!last) return;
  __threadfence();
  merge_splits<D, G>(scratch + (static_cast<std::size_t>(item) * hq + h0) * splits * kPartFloats<D>, nh, splits,
                     out + (static_cast<std::size_t>(row) * hq + h0) * D);
  if (threadIdx.x == 0) *counter = 0;
}

template <int D, int G>
void launch_decode(const bf16_t* q, const DecodeRope& rope, PagedKv kv, StepSeqs seqs, const std::int32_t* items,
                   int n_items, int hq, float scale, int splits, float* scratch, unsigned* counters, bf16_t* out,
                   cudaStream_t stream) {
  NEURON_ASSERT(splits <= kDecodeMaxSplits);
  const dim3 grid(static_cast<unsigned>(n_items), static_cast<unsigned>(kv.hkv * decode_head_chunks(hq, kv.hkv)),
                  static_cast<unsigned>(splits));
  launch(decode_kernel<D, G>, grid, kDecodeThreads, 0, stream, "attention_decode", q, rope, kv, seqs, items, hq, scale,
         scratch, counters, out);
}

template <int D>
void decode_for_dim(const bf16_t* q, const DecodeRope& rope, PagedKv kv, StepSeqs seqs, const std::int32_t* items,
                    int n_items, int hq, float scale, int splits, float* scratch, unsigned* counters, bf16_t* out,
                    cudaStream_t stream) {
  switch (group_heads(hq / kv.hkv)) {
    case 1: launch_decode<D, 1>(q, rope, kv, seqs, items, n_items, hq, scale, splits, scratch, counters, out, stream); break;
    case 2: launch_decode<D, 2>(q, rope, kv, seqs, items, n_items, hq, scale, splits, scratch, counters, out, stream); break;
    case 4: launch_decode<D, 4>(q, rope, kv, seqs, items, n_items, hq, scale, splits, scratch, counters, out, stream); break;
    default: launch_decode<D, 8>(q, rope, kv, seqs, items, n_items, hq, scale, splits, scratch, counters, out, stream); break;
  }
}

}  // namespace

bool attention_supports_head_dim(int d) noexcept { return d == 16 || d == 64 || d == 128 || d == 256; }

void attention_prefill(const bf16_t* q, PagedKv kv, StepSeqs seqs, const std::int32_t* tiles, int n_tiles, int hq,
                       int d, float scale, bf16_t* out, cudaStream_t stream) {
  if (n_tiles <= 0) return;
  switch (d) {
    case 16: launch_prefill<16>(q, kv, seqs, tiles, n_tiles, hq, scale, out, stream); break;
    case 64: launch_prefill<64>(q, kv, seqs, tiles, n_tiles, hq, scale, out, stream); break;
    case 128: launch_prefill<128>(q, kv, seqs, tiles, n_tiles, hq, scale, out, stream); break;
    case 256: launch_prefill<256>(q, kv, seqs, tiles, n_tiles, hq, scale, out, stream); break;
    default: NEURON_ASSERT(!"attention_prefill: head_dim not instantiated (checked at load)");
  }
}

int decode_head_chunks(int hq, int hkv) noexcept {
  const int group = hq / hkv;
  return (group + group_heads(group) - 1) / group_heads(group);
}

std::size_t decode_scratch_floats(int n_items, int hq, int d, int splits) noexcept {
  if (splits <= 1) return 0;
  return static_cast<std::size_t>(n_items) * hq * splits * part_floats(d);
}

std::size_t decode_counters(int n_items, int hq, int hkv) noexcept {
  return static_cast<std::size_t>(n_items) * hkv * decode_head_chunks(hq, hkv);
}

void attention_decode(const bf16_t* q, const DecodeRope& rope, PagedKv kv, StepSeqs seqs, const std::int32_t* items,
                      int n_items, int hq, int d, float scale, int splits, float* scratch, unsigned* counters,
                      bf16_t* out, cudaStream_t stream) {
  if (n_items <= 0) return;
  NEURON_ASSERT(splits >= 1 && hq % kv.hkv == 0);
  switch (d) {
    case 16: decode_for_dim<16>(q, rope, kv, seqs, items, n_items, hq, scale, splits, scratch, counters, out, stream); break;
    case 64: decode_for_dim<64>(q, rope, kv, seqs, items, n_items, hq, scale, splits, scratch, counters, out, stream); break;
    case 128: decode_for_dim<128>(q, rope, kv, seqs, items, n_items, hq, scale, splits, scratch, counters, out, stream); break;
    case 256: decode_for_dim<256>(q, rope, kv, seqs, items, n_items, hq, scale, splits, scratch, counters, out, stream); break;
    default: NEURON_ASSERT(!"attention_decode: head_dim not instantiated (checked at load)");
  }
}

}  // namespace neuron::backend::cuda::kernels
