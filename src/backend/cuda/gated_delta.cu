#include "backend/cuda/gated_delta.hpp"

#include <algorithm>
#include <string>
#include <type_traits>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"
#include "util/error.hpp"

namespace neuron::backend::cuda::kernels {
namespace {

constexpr int kConvTokens = 16;  // tokens per delta_conv block (a block walks them in order)
constexpr int kMaxKernel = 8;
constexpr int kMaxRuleThreads = 512;  // delta_rule's block: dv columns times R threads (128 registers each)

int round_up32(int v) { return (v + 31) / 32 * 32; }

// LinearShape::channels() on the device (the header is plain C++).
__device__ __forceinline__ int channels_of(const LinearShape& s) {
  return 2 * s.key_heads * s.key_dim + s.value_heads * s.value_dim;
}

// A token's log decay g = -exp(A_log) softplus(a + dt_bias) (neg_a = -exp(A_log); torch's softplus threshold)
// and write strength beta = sigmoid(b), from the in-projection's raw a and b.
__device__ __forceinline__ float delta_log_decay(float a, float dt_bias, float neg_a) {
  const float x = a + dt_bias;
  return neg_a * (x > 20.f ? x : log1pf(expf(x)));
}
__device__ __forceinline__ float sigmoid(float x) { return 1.f / (1.f + expf(-x)); }

// An output element of the gated RMSNorm: o / rms * norm_w * silu(z), rms from the head's sum of squares over dv.
__device__ __forceinline__ bf16_t gated_norm(float o, float sum_sq, int dv, float eps, float norm_w, float z) {
  return to_bf(o * rsqrtf(sum_sq / static_cast<float>(dv) + eps) * norm_w * (z / (1.f + expf(-z))));
}

// Sum over the block (blockDim.x a multiple of 32); every thread gets it. Synchronises.
__device__ float block_total(float v, float* partial /* [32] shared */) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // partial may still be read by the previous call's threads
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float s = 0.f;
  const int warps = static_cast<int>(blockDim.x >> 5);
  for (int i = 0; i < warps; ++i) s += partial[i];
  return s;
}

// Input `i` (may be negative: before this pass) of channel ch of a sequence whose pass rows start at q0.
__device__ __forceinline__ float conv_input(const float* in, int width, int q0, int i, int ch, const float* st, int k1,
                                            bool fresh) {
  if (i >= 0) return in[static_cast<std::size_t>(q0 + i) * width + ch];
  return fresh ? 0.f : st[static_cast<std::size_t>(ch) * k1 + (k1 + i)];
}

// One block per (head group, chunk of kConvTokens tokens, sequence); a thread per channel of the group.
// Groups [0, Hk) are q heads, [Hk, 2 Hk) k heads, then the Hv value heads.
__global__ void delta_conv_kernel(const float* in, int width, const float* w, LinearShape shape, LinearSeqs seqs,
                                  LinearState state, float* out, bool write_state) {
  grid_dependency_wait();
  __shared__ float partial[32];
  const int g = blockIdx.x, si = blockIdx.z;
  const int n = seqs.num_tokens[si], q0 = seqs.q_start[si];
  const int t0 = static_cast<int>(blockIdx.y) * kConvTokens;
  if (t0 >= n) return;  // the whole block
  const int hk = shape.key_heads, dk = shape.key_dim, dv = shape.value_dim, K = shape.kernel, k1 = K - 1;
  const int C = channels_of(shape), key_dim = hk * dk;
  const bool is_q = g < hk, is_k = !is_q && g < 2 * hk;
  const int width_g = g < 2 * hk ? dk : dv;
  const int ch0 = is_q ? g * dk : is_k ? key_dim + (g - hk) * dk : 2 * key_dim + (g - 2 * hk) * dv;
  const bool active = static_cast<int>(threadIdx.x) < width_g;
  const int ch = ch0 + (active ? static_cast<int>(threadIdx.x) : 0);
  const bool fresh = seqs.position[si] == 0;
  float* st = state.base + static_cast<std::size_t>(seqs.state_slot[si]) * state.slot_floats + state.conv_offset;
  float taps[kMaxKernel];
  for (int j = 0; j < K; ++j) taps[j] = w[static_cast<std::size_t>(ch) * K + j];
  const float q_scale = rsqrtf(static_cast<float>(dk));
  const int t1 = min(n, t0 + kConvTokens);
  for (int t = t0; t < t1; ++t) {
    float acc = 0.f;
    for (int j = 0; j < K; ++j) acc += taps[j] * conv_input(in, width, q0, t - k1 + j, ch, st, k1, fresh);
    float v = acc / (1.f + __expf(-acc));  // silu
    if (g < 2 * hk) {  // l2-normalize the head (uniform across the block)
      const float ss = block_total(active ? v * v : 0.f, partial);
      v *= rsqrtf(ss + 1e-6f);
      if (is_q) v *= q_scale;
    }
    if (active) out[static_cast<std::size_t>(q0 + t) * C + ch] = v;
  }
  if (write_state && active) {
    float keep[kMaxKernel];
    for (int j = 0; j < k1; ++j) keep[j] = conv_input(in, width, q0, n - k1 + j, ch, st, k1, fresh);
    for (int j = 0; j < k1; ++j) st[static_cast<std::size_t>(ch) * k1 + j] = keep[j];
  }
}

// The conv state of sequences longer than one delta_conv block: after every block has read the old state.
__global__ void delta_conv_state_kernel(const float* in, int width, LinearShape shape, LinearSeqs seqs,
                                        LinearState state) {
  grid_dependency_wait();
  const int si = blockIdx.y, C = channels_of(shape), k1 = shape.kernel - 1;
  const int ch = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (ch >= C) return;
  const int n = seqs.num_tokens[si], q0 = seqs.q_start[si];
  const bool fresh = seqs.position[si] == 0;
  float* st = state.base + static_cast<std::size_t>(seqs.state_slot[si]) * state.slot_floats + state.conv_offset;
  float keep[kMaxKernel];
  for (int j = 0; j < k1; ++j) keep[j] = conv_input(in, width, q0, n - k1 + j, ch, st, k1, fresh);
  for (int j = 0; j < k1; ++j) st[static_cast<std::size_t>(ch) * k1 + j] = keep[j];
}

// One block per (value head, sequence). Thread (j, r) = (tid / R, tid % R) holds rows
// [r RPT, (r + 1) RPT) of column j of the head's state S [dk, dv] in registers for the
// whole pass; the column's dot products sum over its R threads (adjacent lanes). A token's
// inputs (q, k, the gates in shared memory; v and z in registers) are loaded while the token
// before it computes, so a long prompt does not wait on a load per token.
template <int DK>
__global__ void __launch_bounds__(kMaxRuleThreads) delta_rule_kernel(const float* conv, const float* in, int width,
                                                                     int z_col, int b_col, int a_col,
                                                                     const float* neg_a, const float* dt_bias,
                                                                     const bf16_t* norm_w, float eps, LinearShape shape,
                                                                     LinearSeqs seqs, LinearState state, bf16_t* out) {
  constexpr int RPT = DK < 32 ? DK : 32;
  constexpr int R = DK / RPT;
  grid_dependency_wait();
  __shared__ float qs[2][DK], ks[2][DK];  // [buffer][dk] this token's and the next one's
  __shared__ float gb[2][2];              // [buffer][decay, beta]
  __shared__ float partial[32];
  const int h = blockIdx.x, si = blockIdx.y;
  const int hk = shape.key_heads, hv = shape.value_heads, dv = shape.value_dim;
  const int C = channels_of(shape), key_dim = hk * DK;
  const int kh = h / (hv / hk);
  const int n = seqs.num_tokens[si], q0 = seqs.q_start[si];
  const bool fresh = seqs.position[si] == 0;
  const int tid = static_cast<int>(threadIdx.x);
  const int j = tid / R, r = tid % R;
  const bool active = j < dv;
  float* S = state.base + static_cast<std::size_t>(seqs.state_slot[si]) * state.slot_floats + state.delta_offset +
             static_cast<std::size_t>(h) * DK * dv;
  // Token t's inputs, as one thread loads them: element tid of q and k (tid < DK), the gates' raw a and b
  // (thread 0), and its column's v and z.
  struct Inputs {
    float q = 0.f, k = 0.f, a = 0.f, b = 0.f, v = 0.f, z = 0.f;
  };
  auto load = [&](int t) {
    Inputs x;
    const std::size_t row = static_cast<std::size_t>(q0 + t);
    if (tid < DK) {
      x.q = conv[row * C + kh * DK + tid];
      x.k = conv[row * C + key_dim + kh * DK + tid];
    }
    if (tid == 0) {
      x.a = in[row * width + a_col + h];
      x.b = in[row * width + b_col + h];
    }
    if (active) {
      x.v = conv[row * C + 2 * key_dim + h * dv + j];
      x.z = in[row * width + z_col + h * dv + j];
    }
    return x;
  };
  auto stage = [&](const Inputs& x, int buf) {
    if (tid < DK) {
      qs[buf][tid] = x.q;
      ks[buf][tid] = x.k;
    }
    if (tid == 0) {
      gb[buf][0] = expf(delta_log_decay(x.a, dt_bias[h], neg_a[h]));
      gb[buf][1] = sigmoid(x.b);
    }
  };
  float s[RPT];
#pragma unroll
  for (int i = 0; i < RPT; ++i)
    s[i] = fresh || !active ? 0.f : S[static_cast<std::size_t>(r * RPT + i) * dv + j];
  const float w = active ? bf(norm_w[j]) : 0.f;
  Inputs cur = load(0);
  stage(cur, 0);
  __syncthreads();
  for (int t = 0; t < n; ++t) {
    const int buf = t & 1;
    const Inputs next = t + 1 < n ? load(t + 1) : Inputs{};
    const float decay = gb[buf][0], beta = gb[buf][1];
    float kv = 0.f;
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      s[i] *= decay;
      kv += s[i] * ks[buf][r * RPT + i];
    }
#pragma unroll
    for (int o = R / 2; o > 0; o >>= 1) kv += __shfl_xor_sync(0xffffffffu, kv, o);
    const float d = beta * (cur.v - kv);
    float o_j = 0.f;
#pragma unroll
    for (int i = 0; i < RPT; ++i) {
      s[i] += ks[buf][r * RPT + i] * d;
      o_j += s[i] * qs[buf][r * RPT + i];
    }
#pragma unroll
    for (int o = R / 2; o > 0; o >>= 1) o_j += __shfl_xor_sync(0xffffffffu, o_j, o);
    // The gated RMSNorm over the head's dv outputs, times silu(z). block_total synchronises: after it no
    // thread reads this token's buffers or the last token's, so the next token's inputs go in.
    const float ss = block_total(active && r == 0 ? o_j * o_j : 0.f, partial);
    if (active && r == 0)
      out[static_cast<std::size_t>(q0 + t) * (static_cast<std::size_t>(hv) * dv) + h * dv + j] =
          gated_norm(o_j, ss, dv, eps, w, cur.z);
    if (t + 1 < n) stage(next, buf ^ 1);
    cur = next;
    __syncthreads();
  }
  if (active) {
#pragma unroll
    for (int i = 0; i < RPT; ++i) S[static_cast<std::size_t>(r * RPT + i) * dv + j] = s[i];
  }
}

int rows_per_thread_groups(int dk) { return dk <= 32 ? 1 : dk / 32; }  // R

// f(std::integral_constant<int, dk>) for the key head sizes the kernels are built for.
template <class F>
void with_key_dim(int dk, const char* what, F&& f) {
  switch (dk) {
    case 16: f(std::integral_constant<int, 16>{}); break;
    case 32: f(std::integral_constant<int, 32>{}); break;
    case 64: f(std::integral_constant<int, 64>{}); break;
    case 128: f(std::integral_constant<int, 128>{}); break;
    case 256: f(std::integral_constant<int, 256>{}); break;
    default: throw Error(errc::unsupported_arch, std::string(what) + ": linear_key_head_dim " + std::to_string(dk));
  }
}

// ---- the chunked form (prefill) ------------------------------------------------------------------------------

constexpr int kChunk = kDeltaChunkTokens;
constexpr int kChunkThreads = 256;  // 8 warps
constexpr int kTileCols = 32;       // state columns a scan block carries
constexpr int kTs = kChunk + 4;     // row stride of the [64, 64] tiles (float4 rows)
constexpr int kOptinSmem = 227 * 1024;

// Row strides of the [64, dk] and [64, max(dk, dv)] tiles: float4 rows, banks spread.
__host__ __device__ constexpr int key_stride(int dk) { return dk + 4; }
__host__ __device__ constexpr int prep_x_stride(int dk, int dv) { return ((dk > dv ? dk : dv) + 3) / 4 * 4 + 4; }
std::size_t prep_smem(int dk, int dv) {
  return sizeof(float) * (static_cast<std::size_t>(kChunk) * (key_stride(dk) + prep_x_stride(dk, dv) + 2 * kTs) + 2 * kChunk);
}
std::size_t scan_smem(int dk) {
  return sizeof(float) * (static_cast<std::size_t>(kChunk) * (2 * key_stride(dk) + kTileCols + kTs) +
                          static_cast<std::size_t>(dk) * kTileCols + 3 * kChunk);
}

// The pass's scratch, a row of `row_floats()` per pass row: per value head the row's w [dk], then u (after the
// scan: the output before its norm) [dv], then the row's A_qk [64] (q k^T decayed, causal, within its chunk),
// then G [1] (the cumulative log decay within its chunk).
struct ChunkScratch {
  float* base;
  int hv, dk, dv;
  __device__ std::size_t row_floats() const { return static_cast<std::size_t>(hv) * (dk + dv + kChunk + 1); }
  __device__ float* row(int r) const { return base + static_cast<std::size_t>(r) * row_floats(); }
  __device__ float* w(int r, int h) const { return row(r) + static_cast<std::size_t>(h) * dk; }
  __device__ float* u(int r, int h) const { return row(r) + static_cast<std::size_t>(hv) * dk + static_cast<std::size_t>(h) * dv; }
  __device__ float* aqk(int r, int h) const {
    return row(r) + static_cast<std::size_t>(hv) * (dk + dv) + static_cast<std::size_t>(h) * kChunk;
  }
  __device__ float* g(int r, int h) const { return row(r) + static_cast<std::size_t>(hv) * (dk + dv + kChunk) + h; }
};

__device__ __forceinline__ float dot4(float4 a, float4 b) { return a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w; }

// One block per (chunk, value head, sequence): the chunk's gates and G, T = (I + strictly-lower(beta k k^T
// decayed))^-1 by forward substitution (unit diagonal), u = T (v beta), w = T (k beta exp(G)), and A_qk, into
// the scratch (gated_delta_rule_chunked's first half, backend/cpu/gated_delta.cpp).
template <int DK>
__global__ void __launch_bounds__(kChunkThreads) delta_chunk_prep_kernel(const float* conv, const float* in, int width,
                                                                          int b_col, int a_col, const float* neg_a,
                                                                          const float* dt_bias, LinearShape shape,
                                                                          LinearSeqs seqs, ChunkScratch sc) {
  grid_dependency_wait();
  extern __shared__ float4 smem4[];
  const int c = blockIdx.x, h = blockIdx.y, si = blockIdx.z;
  const int n = seqs.num_tokens[si], t0 = c * kChunk;
  if (t0 >= n) return;  // the whole block
  const int L = min(kChunk, n - t0), row0 = seqs.q_start[si] + t0;
  const int hk = shape.key_heads, hv = shape.value_heads, dv = shape.value_dim;
  const int C = channels_of(shape), key_dim = hk * DK, kh = h / (hv / hk);
  constexpr int KS = key_stride(DK);
  const int XS = prep_x_stride(DK, dv);
  float* Ks = reinterpret_cast<float*>(smem4);  // [64, KS] keys, then keys * beta * exp(G)
  float* Xs = Ks + kChunk * KS;                 // [64, XS] queries, then values * beta
  float* Tm = Xs + kChunk * XS;                 // [64, kTs] the UT system (strictly lower)
  float* Tn = Tm + kChunk * kTs;                // [64, kTs] T, its inverse with a unit diagonal
  float* G = Tn + kChunk * kTs;                 // [64] cumulative log decay (0 past L)
  float* B = G + kChunk;                        // [64] beta
  const int tid = static_cast<int>(threadIdx.x);
  for (int e = tid; e < kChunk * DK; e += kChunkThreads) {
    const int i = e / DK, d = e % DK;
    const std::size_t row = static_cast<std::size_t>(row0 + i) * C;
    Ks[i * KS + d] = i < L ? conv[row + key_dim + kh * DK + d] : 0.f;
    Xs[i * XS + d] = i < L ? conv[row + kh * DK + d] : 0.f;
  }
  if (tid < kChunk) {
    float g = 0.f, b = 0.f;
    if (tid < L) {
      const float* x = in + static_cast<std::size_t>(row0 + tid) * width;
      g = delta_log_decay(x[a_col + h], dt_bias[h], neg_a[h]);
      b = sigmoid(x[b_col + h]);
    }
    G[tid] = g;
    B[tid] = b;
  }
  __syncthreads();
  if (tid == 0)
    for (int i = 1; i < L; ++i) G[i] += G[i - 1];
  __syncthreads();
  if (tid < L) *sc.g(row0 + tid, h) = G[tid];
  // Tm[i, j] = -beta_i (k_i . k_j) exp(G_i - G_j) for j < i; A_qk[i, j] = (q_i . k_j) exp(G_i - G_j) for j <= i.
  for (int e = tid; e < kChunk * kChunk; e += kChunkThreads) {
    const int i = e / kChunk, j = e % kChunk;
    float kk = 0.f, qk = 0.f;
    if (i < L && j <= i) {
      const auto* ki = reinterpret_cast<const float4*>(Ks + i * KS);
      const auto* kj = reinterpret_cast<const float4*>(Ks + j * KS);
      const auto* qi = reinterpret_cast<const float4*>(Xs + i * XS);
#pragma unroll 8
      for (int d = 0; d < DK / 4; ++d) {
        const float4 k4 = kj[d];
        kk += dot4(ki[d], k4);
        qk += dot4(qi[d], k4);
      }
      const float decay = expf(G[i] - G[j]);
      kk = j < i ? -B[i] * kk * decay : 0.f;
      qk *= decay;
    }
    Tm[i * kTs + j] = kk;
    if (i < L) sc.aqk(row0 + i, h)[j] = qk;
  }
  __syncthreads();
  // Forward substitution by columns: T[i, j] = Tm[i, j] + sum_{j < m < i} Tm[i, m] T[m, j]. Column j of T needs
  // only Tm and its own rows above i, so four lanes of one warp own it (lanes 4c..4c+3 of warp w: column 8w + c),
  // each summing every fourth m, and meet by shuffles: no block barrier between rows (the row-at-a-time form
  // took two a row, with at most i threads busy).
  {
    static_assert(kChunkThreads == 4 * kChunk, "four lanes a column of T");
    const int j = tid >> 2, part = tid & 3;
    for (int i = 0; i < kChunk; ++i) {
      float v = 0.f;
      if (i < L && j < i)
        for (int m = j + 1 + part; m < i; m += 4) v += Tm[i * kTs + m] * Tn[m * kTs + j];
      v += __shfl_xor_sync(0xffffffffu, v, 1);
      v += __shfl_xor_sync(0xffffffffu, v, 2);
      if (part == 0) Tn[i * kTs + j] = i < L && j < i ? Tm[i * kTs + j] + v : (i == j && i < L ? 1.f : 0.f);
      __syncwarp();  // the column's row i before any of its lanes reads it
    }
  }
  for (int e = tid; e < kChunk * dv; e += kChunkThreads) {
    const int i = e / dv, d = e % dv;
    Xs[i * XS + d] = i < L ? conv[static_cast<std::size_t>(row0 + i) * C + 2 * key_dim + h * dv + d] * B[i] : 0.f;
  }
  for (int e = tid; e < kChunk * DK; e += kChunkThreads) {
    const int i = e / DK;
    Ks[e / DK * KS + e % DK] *= B[i] * expf(G[i]);
  }
  __syncthreads();
  // u = T (v beta) [L, dv]; w = T (k beta exp(G)) [L, dk]. T is lower triangular: m runs to i.
  for (int e = tid; e < L * dv; e += kChunkThreads) {
    const int i = e / dv, d = e % dv;
    float acc = 0.f;
    for (int m = 0; m <= i; ++m) acc += Tn[i * kTs + m] * Xs[m * XS + d];
    sc.u(row0 + i, h)[d] = acc;
  }
  for (int e = tid; e < L * DK; e += kChunkThreads) {
    const int i = e / DK, d = e % DK;
    float acc = 0.f;
    for (int m = 0; m <= i; ++m) acc += Tn[i * kTs + m] * Ks[m * KS + d];
    sc.w(row0 + i, h)[d] = acc;
  }
}

// One block per (32 state columns, value head, sequence), walking the sequence's chunks in order with its tile
// of the state S [dk, 32] in shared memory (the columns of S never mix): per chunk, v_new = u - w S, the output
// o = (q exp(G)) S + A_qk v_new (into the scratch's u, for the norm), then S = exp(G_last) S + (k exp(G_last -
// G))^T v_new; the tile goes back to the slot at the end.
template <int DK>
__global__ void __launch_bounds__(kChunkThreads, 2) delta_chunk_scan_kernel(const float* conv, LinearShape shape,
                                                                          LinearSeqs seqs, LinearState state,
                                                                          ChunkScratch sc) {
  grid_dependency_wait();
  extern __shared__ float4 smem4[];
  constexpr int KS = key_stride(DK);
  constexpr int RPW = DK / 8;   // state rows a warp updates
  constexpr int RPT = kChunk / 8;  // chunk rows a thread computes (rows warp + 8 e)
  const int h = blockIdx.y, si = blockIdx.z;
  const int n = seqs.num_tokens[si], q0 = seqs.q_start[si];
  const int hk = shape.key_heads, hv = shape.value_heads, dv = shape.value_dim;
  const int C = channels_of(shape), key_dim = hk * DK, kh = h / (hv / hk);
  float* Ws = reinterpret_cast<float*>(smem4);  // [64, KS] w, then k exp(G_last - G)
  float* Qs = Ws + kChunk * KS;                 // [64, KS] q exp(G)
  float* As = Qs + kChunk * KS;                 // [64, kTs] A_qk
  float* Us = As + kChunk * kTs;                // [64, 32] u, then v_new
  float* Ss = Us + kChunk * kTileCols;          // [DK, 32] the state's tile
  float* Gs = Ss + DK * kTileCols;              // [64] G
  float* Eq = Gs + kChunk;                      // [64] exp(G)
  float* Ek = Eq + kChunk;                      // [64] exp(G_last - G)
  const int tid = static_cast<int>(threadIdx.x), lane = tid & 31, warp = tid >> 5;
  const int col = static_cast<int>(blockIdx.x) * kTileCols + lane;
  const bool active = col < dv;
  const bool fresh = seqs.position[si] == 0;
  float* S = state.base + static_cast<std::size_t>(seqs.state_slot[si]) * state.slot_floats + state.delta_offset +
             static_cast<std::size_t>(h) * DK * dv;
  for (int k = 0; k < RPW; ++k) {
    const int r = warp * RPW + k;
    Ss[r * kTileCols + lane] = fresh || !active ? 0.f : S[static_cast<std::size_t>(r) * dv + col];
  }
  for (int t0 = 0; t0 < n; t0 += kChunk) {
    const int L = min(kChunk, n - t0), row0 = q0 + t0;
    __syncthreads();  // the last chunk's readers are done with every buffer
    if (tid < kChunk) {
      const float g = tid < L ? *sc.g(row0 + tid, h) : 0.f, g_end = *sc.g(row0 + L - 1, h);
      Gs[tid] = g;
      Eq[tid] = expf(g);
      Ek[tid] = expf(g_end - g);
    }
    __syncthreads();
    // The chunk's inputs: a thread's loads unrolled eight steps at a time, so they are in flight together (a
    // load a loop step, each waiting on the one before, made the scan wait on memory most of its time).
    constexpr int kPerKey = kChunk * DK / kChunkThreads, kPerA = kChunk * kChunk / kChunkThreads;
    static_assert(kPerKey * kChunkThreads == kChunk * DK && kPerA * kChunkThreads == kChunk * kChunk);
#pragma unroll 8
    for (int k = 0; k < kPerKey; ++k) {
      const int e = tid + k * kChunkThreads, i = e / DK, d = e % DK;
      const bool in_chunk = i < L;
      Ws[i * KS + d] = in_chunk ? sc.w(row0 + i, h)[d] : 0.f;
      Qs[i * KS + d] = in_chunk ? conv[static_cast<std::size_t>(row0 + i) * C + kh * DK + d] * Eq[i] : 0.f;
    }
#pragma unroll 8
    for (int k = 0; k < kPerA; ++k) {
      const int e = tid + k * kChunkThreads, i = e / kChunk, m = e % kChunk;
      As[i * kTs + m] = i < L ? sc.aqk(row0 + i, h)[m] : 0.f;
    }
#pragma unroll
    for (int k = 0; k < kChunk / 8; ++k) {
      const int i = warp + 8 * k;
      Us[i * kTileCols + lane] = i < L && active ? sc.u(row0 + i, h)[col] : 0.f;
    }
    __syncthreads();
    // v_new and (q exp(G)) S for rows warp + 8 e of column lane.
    float vn[RPT] = {}, oi[RPT] = {};
    for (int r = 0; r < DK; r += 4) {
      const float s0 = Ss[r * kTileCols + lane], s1 = Ss[(r + 1) * kTileCols + lane];
      const float s2 = Ss[(r + 2) * kTileCols + lane], s3 = Ss[(r + 3) * kTileCols + lane];
#pragma unroll
      for (int e = 0; e < RPT; ++e) {
        const int i = warp + 8 * e;
        const float4 w4 = *reinterpret_cast<const float4*>(Ws + i * KS + r);
        const float4 q4 = *reinterpret_cast<const float4*>(Qs + i * KS + r);
        vn[e] += w4.x * s0 + w4.y * s1 + w4.z * s2 + w4.w * s3;
        oi[e] += q4.x * s0 + q4.y * s1 + q4.z * s2 + q4.w * s3;
      }
    }
#pragma unroll
    for (int e = 0; e < RPT; ++e) Us[(warp + 8 * e) * kTileCols + lane] -= vn[e];  // rows past L stay 0
    __syncthreads();
#pragma unroll
    for (int e = 0; e < RPT; ++e) {
      const int i = warp + 8 * e;
      if (i >= L) continue;
      float acc = oi[e];
      for (int m = 0; m <= i; ++m) acc += As[i * kTs + m] * Us[m * kTileCols + lane];
      if (active) sc.u(row0 + i, h)[col] = acc;
    }
    // Nothing reads Ws after the barrier above: it takes k exp(G_last - G).
    const float g_last = Gs[L - 1];
#pragma unroll 8
    for (int k = 0; k < kPerKey; ++k) {
      const int e = tid + k * kChunkThreads, i = e / DK, d = e % DK;
      Ws[i * KS + d] = i < L ? conv[static_cast<std::size_t>(row0 + i) * C + key_dim + kh * DK + d] * Ek[i] : 0.f;
    }
    __syncthreads();
    const float decay = expf(g_last);
    float acc[RPW];
#pragma unroll
    for (int k = 0; k < RPW; ++k) acc[k] = Ss[(warp * RPW + k) * kTileCols + lane] * decay;
    for (int i = 0; i < L; ++i) {
      const float v = Us[i * kTileCols + lane];
      const float* kr = Ws + i * KS + warp * RPW;
      if constexpr (RPW % 4 == 0) {
#pragma unroll
        for (int k = 0; k < RPW; k += 4) {
          const float4 k4 = *reinterpret_cast<const float4*>(kr + k);
          acc[k] += k4.x * v;
          acc[k + 1] += k4.y * v;
          acc[k + 2] += k4.z * v;
          acc[k + 3] += k4.w * v;
        }
      } else {
#pragma unroll
        for (int k = 0; k < RPW; ++k) acc[k] += kr[k] * v;
      }
    }
#pragma unroll
    for (int k = 0; k < RPW; ++k) Ss[(warp * RPW + k) * kTileCols + lane] = acc[k];
  }
  if (active)
    for (int k = 0; k < RPW; ++k) {
      const int r = warp * RPW + k;
      S[static_cast<std::size_t>(r) * dv + col] = Ss[r * kTileCols + lane];
    }
}

// One block per (token, value head, sequence): the gated RMSNorm of the scan's output, times silu(z), in bf16.
__global__ void delta_chunk_norm_kernel(const float* in, int width, int z_col, const bf16_t* norm_w, float eps,
                                        LinearShape shape, LinearSeqs seqs, ChunkScratch sc, bf16_t* out) {
  grid_dependency_wait();
  __shared__ float partial[32];
  const int t = blockIdx.x, h = blockIdx.y, si = blockIdx.z;
  if (t >= seqs.num_tokens[si]) return;  // the whole block
  const int row = seqs.q_start[si] + t, hv = shape.value_heads, dv = shape.value_dim;
  const int j = static_cast<int>(threadIdx.x);
  const bool active = j < dv;
  const float o = active ? sc.u(row, h)[j] : 0.f;
  const float ss = block_total(o * o, partial);
  if (!active) return;
  const float z = in[static_cast<std::size_t>(row) * width + z_col + h * dv + j];
  out[static_cast<std::size_t>(row) * (static_cast<std::size_t>(hv) * dv) + h * dv + j] =
      gated_norm(o, ss, dv, eps, bf(norm_w[j]), z);
}

template <int DK>
void launch_chunked(const float* conv, const float* in, int width, int z_col, int b_col, int a_col, const float* neg_a,
                    const float* dt_bias, const bf16_t* norm_w, float eps, const LinearShape& shape, LinearSeqs seqs,
                    int n_seqs, int max_tokens, LinearState state, float* scratch, bf16_t* out, cudaStream_t stream) {
  static const bool configured = [] {
    NEURON_CUDA_CHECK(cudaFuncSetAttribute(delta_chunk_prep_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           kOptinSmem));
    NEURON_CUDA_CHECK(cudaFuncSetAttribute(delta_chunk_scan_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           kOptinSmem));
    return true;
  }();
  (void)configured;
  const int hv = shape.value_heads, dv = shape.value_dim;
  const ChunkScratch sc{scratch, hv, DK, dv};
  const auto chunks = static_cast<unsigned>((max_tokens + kChunk - 1) / kChunk);
  launch(delta_chunk_prep_kernel<DK>, dim3(chunks, static_cast<unsigned>(hv), static_cast<unsigned>(n_seqs)),
         kChunkThreads, prep_smem(DK, dv), stream, "delta_chunk_prep", conv, in, width, b_col, a_col, neg_a, dt_bias,
         shape, seqs, sc);
  const auto tiles = static_cast<unsigned>((dv + kTileCols - 1) / kTileCols);
  launch(delta_chunk_scan_kernel<DK>, dim3(tiles, static_cast<unsigned>(hv), static_cast<unsigned>(n_seqs)),
         kChunkThreads, scan_smem(DK), stream, "delta_chunk_scan", conv, shape, seqs, state, sc);
  launch(delta_chunk_norm_kernel, dim3(static_cast<unsigned>(max_tokens), static_cast<unsigned>(hv), static_cast<unsigned>(n_seqs)),
         round_up32(dv), 0, stream, "delta_chunk_norm", in, width, z_col, norm_w, eps, shape, seqs, sc, out);
}

}  // namespace

bool linear_shape_supported(const LinearShape& s) noexcept {
  const bool dk_ok = s.key_dim == 16 || s.key_dim == 32 || s.key_dim == 64 || s.key_dim == 128 || s.key_dim == 256;
  const int threads = s.value_dim * rows_per_thread_groups(s.key_dim);  // delta_rule's block (before rounding)
  return dk_ok && s.value_dim > 0 && threads <= kMaxRuleThreads && round_up32(threads) >= s.key_dim &&
         s.key_heads > 0 && s.value_heads > 0 && s.value_heads % s.key_heads == 0 && s.kernel >= 2 &&
         s.kernel <= kMaxKernel;
}

void delta_conv(const float* in, int width, const float* w, const LinearShape& shape, LinearSeqs seqs, int n_seqs,
                int max_tokens, LinearState state, float* out, cudaStream_t stream) {
  if (n_seqs <= 0 || max_tokens <= 0) return;
  const int chunks = (max_tokens + kConvTokens - 1) / kConvTokens;
  const dim3 grid(static_cast<unsigned>(2 * shape.key_heads + shape.value_heads), static_cast<unsigned>(chunks),
                  static_cast<unsigned>(n_seqs));
  const int threads = round_up32(std::max(shape.key_dim, shape.value_dim));
  launch(delta_conv_kernel, grid, threads, 0, stream, "delta_conv", in, width, w, shape, seqs, state, out, chunks == 1);
  if (chunks > 1) {
    const dim3 g2(static_cast<unsigned>((shape.channels() + 255) / 256), static_cast<unsigned>(n_seqs));
    launch(delta_conv_state_kernel, g2, 256, 0, stream, "delta_conv_state", in, width, shape, seqs, state);
  }
}

void delta_rule(const float* conv, const float* in, int width, int z_col, int b_col, int a_col, const float* neg_a,
                const float* dt_bias, const bf16_t* norm_w, float eps, const LinearShape& shape, LinearSeqs seqs,
                int n_seqs, LinearState state, bf16_t* out, cudaStream_t stream) {
  if (n_seqs <= 0) return;
  const dim3 grid(static_cast<unsigned>(shape.value_heads), static_cast<unsigned>(n_seqs));
  const int threads = round_up32(shape.value_dim * rows_per_thread_groups(shape.key_dim));
  with_key_dim(shape.key_dim, "delta_rule", [&](auto dk) {
    launch(delta_rule_kernel<decltype(dk)::value>, grid, threads, 0, stream, "delta_rule", conv, in, width, z_col,
           b_col, a_col, neg_a, dt_bias, norm_w, eps, shape, seqs, state, out);
  });
}

std::size_t delta_chunk_scratch_floats(const LinearShape& shape, int tokens) noexcept {
  return static_cast<std::size_t>(tokens) * static_cast<std::size_t>(shape.value_heads) *
         static_cast<std::size_t>(shape.key_dim + shape.value_dim + kChunk + 1);
}

bool delta_chunked_supported(const LinearShape& shape) noexcept {
  return linear_shape_supported(shape) &&
         std::max(prep_smem(shape.key_dim, shape.value_dim), scan_smem(shape.key_dim)) <= static_cast<std::size_t>(kOptinSmem);
}

void delta_rule_chunked(const float* conv, const float* in, int width, int z_col, int b_col, int a_col,
                        const float* neg_a, const float* dt_bias, const bf16_t* norm_w, float eps, const LinearShape& shape,
                        LinearSeqs seqs, int n_seqs, int max_tokens, LinearState state, float* scratch, bf16_t* out,
                        cudaStream_t stream) {
  if (n_seqs <= 0 || max_tokens <= 0) return;
  if (!delta_chunked_supported(shape))
    throw Error(errc::unsupported_arch, "delta_rule_chunked: linear attention heads of dk " +
                                            std::to_string(shape.key_dim) + ", dv " + std::to_string(shape.value_dim));
  with_key_dim(shape.key_dim, "delta_rule_chunked", [&](auto dk) {
    launch_chunked<decltype(dk)::value>(conv, in, width, z_col, b_col, a_col, neg_a, dt_bias, norm_w, eps, shape, seqs,
                                        n_seqs, max_tokens, state, scratch, out, stream);
  });
}

}  // namespace neuron::backend::cuda::kernels
