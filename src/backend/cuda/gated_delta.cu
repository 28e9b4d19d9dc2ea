#include "backend/cuda/gated_delta.hpp"

#include <algorithm>
#include <string>
#include <type_traits>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/mma.cuh"
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
constexpr int kTs = kChunk + 4;     // row stride of the [64, 64] tiles (float4 rows)
constexpr int kOptinSmem = 227 * 1024;

// Row strides of the [64, dk] and [64, max(dk, dv)] tiles: float4 rows, banks spread.
__host__ __device__ constexpr int key_stride(int dk) { return dk + 4; }
__host__ __device__ constexpr int prep_x_stride(int dk, int dv) { return ((dk > dv ? dk : dv) + 3) / 4 * 4 + 4; }
std::size_t prep_smem(int dk, int dv) {
  return sizeof(float) * (static_cast<std::size_t>(kChunk) * (key_stride(dk) + prep_x_stride(dk, dv) + 2 * kTs) + 3 * kChunk);
}
// The scan: state columns a block carries (32 at dk 256, for shared memory), the row stride of its k tile (read
// transposed: k^T's fragments spread over the banks) and of its [.., cols] tiles (the B operands' rows).
__host__ __device__ constexpr int scan_cols(int dk) { return dk >= 256 ? 32 : 64; }
__host__ __device__ constexpr int scan_k_stride(int dk) { return dk + 8; }
__host__ __device__ constexpr int scan_col_stride(int dk) { return scan_cols(dk) + 8; }
std::size_t scan_smem(int dk) {
  return sizeof(float) * (static_cast<std::size_t>(kChunk) * (scan_k_stride(dk) + key_stride(dk) + kTs + scan_col_stride(dk)) +
                          static_cast<std::size_t>(dk) * scan_col_stride(dk) + kChunk);
}

// The pass's scratch, a row of `chunk_row_floats` per pass row: per value head the row's w [dk], then u (after
// the scan: the output before its norm) [dv], then the row's A_qk [64] (q k^T decayed, causal, within its chunk),
// then G [1] (the cumulative log decay within its chunk); rows padded to 16 bytes, so with dv % 4 == 0 every
// head's w, u and A_qk start on 16 bytes (the scan copies them in 16-byte pieces).
__host__ __device__ constexpr std::size_t chunk_row_floats(int hv, int dk, int dv) {
  return (static_cast<std::size_t>(hv) * static_cast<std::size_t>(dk + dv + kChunk + 1) + 3) / 4 * 4;
}
struct ChunkScratch {
  float* base;
  int hv, dk, dv;
  __device__ std::size_t row_floats() const { return chunk_row_floats(hv, dk, dv); }
  __device__ float* row(int r) const { return base + static_cast<std::size_t>(r) * row_floats(); }
  __device__ float* w(int r, int h) const { return row(r) + static_cast<std::size_t>(h) * dk; }
  __device__ float* u(int r, int h) const { return row(r) + static_cast<std::size_t>(hv) * dk + static_cast<std::size_t>(h) * dv; }
  __device__ float* aqk(int r, int h) const {
    return row(r) + static_cast<std::size_t>(hv) * (dk + dv) + static_cast<std::size_t>(h) * kChunk;
  }
  __device__ float* g(int r, int h) const { return row(r) + static_cast<std::size_t>(hv) * (dk + dv + kChunk) + h; }
};

// One block per (chunk, value head, sequence): the chunk's gates and G, T = (I + strictly-lower(beta k k^T
// decayed))^-1 by forward substitution (unit diagonal), u = T (v beta), w = T (k beta exp(G)), and A_qk, into
// the scratch (gated_delta_rule_chunked's first half, backend/cpu/gated_delta.cpp). The products run on tensor
// cores (tf32 m16n8k8): k k^T and the two T products in 3xTF32 (they feed the state), q k^T in one tf32 product
// (it only reaches the output). k and q come in by cp.async while the gates are read; v while T is solved.
template <int DK>
__global__ void __launch_bounds__(kChunkThreads) delta_chunk_prep_kernel(const float* conv, const float* in, int width,
                                                                          int b_col, int a_col, const float* neg_a,
                                                                          const float* dt_bias, LinearShape shape,
                                                                          LinearSeqs seqs, ChunkScratch sc) {
  static_assert(kChunkThreads == 256 && kChunk == 64, "8 warps over the [64, 64] and [64, d] products");
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
  float* Ks = reinterpret_cast<float*>(smem4);  // [64, KS] keys
  float* Xs = Ks + kChunk * KS;                 // [64, XS] queries, then values
  float* Tm = Xs + kChunk * XS;                 // [64, kTs] the UT system (strictly lower)
  float* Tn = Tm + kChunk * kTs;                // [64, kTs] T, its inverse with a unit diagonal
  float* G = Tn + kChunk * kTs;                 // [64] cumulative log decay (0 past L)
  float* B = G + kChunk;                        // [64] beta (0 past L)
  float* BE = B + kChunk;                       // [64] beta exp(G)
  const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5, g = (tid & 31) >> 2, t = tid & 3;
  // Rows [0, 64) of the chunk's `width` floats at column col0 of conv into shared rows of stride ld; rows past L
  // zero-filled (read nothing).
  auto copy_rows = [&](float* dst, int ld, int col0, int cols) {
    const int pieces = cols / 4;
    for (int e = tid; e < kChunk * pieces; e += kChunkThreads) {
      const int i = e / pieces, d = e % pieces * 4;
      const bool ok = i < L;
      cp_async16(dst + i * ld + d, conv + static_cast<std::size_t>(row0 + (ok ? i : 0)) * C + col0 + d, ok);
    }
  };
  copy_rows(Ks, KS, key_dim + kh * DK, DK);
  copy_rows(Xs, XS, kh * DK, DK);
  cp_async_commit();
  if (tid < kChunk) {
    float gv = 0.f, b = 0.f;
    if (tid < L) {
      const float* x = in + static_cast<std::size_t>(row0 + tid) * width;
      gv = delta_log_decay(x[a_col + h], dt_bias[h], neg_a[h]);
      b = sigmoid(x[b_col + h]);
    }
    G[tid] = gv;
    B[tid] = b;
  }
  __syncthreads();
  if (tid == 0)
    for (int i = 1; i < L; ++i) G[i] += G[i - 1];
  __syncthreads();
  if (tid < kChunk) BE[tid] = B[tid] * expf(G[tid]);
  if (tid < L) *sc.g(row0 + tid, h) = G[tid];
  cp_async_wait<0>();
  __syncthreads();
  // Tm[i, j] = -beta_i (k_i . k_j) exp(G_i - G_j) for j < i; A_qk[i, j] = (q_i . k_j) exp(G_i - G_j) for j <= i,
  // rows past L left out. A warp: 16 rows (mi) x 32 columns (four n8 tiles from nb); tiles wholly above the
  // diagonal are zeros and skip the products.
  {
    const int mi = warp >> 1, nb = (warp & 1) * 4;
    const int r0 = mi * 16 + g, r1 = r0 + 8;
    float kk[4][4] = {}, qk[4][4] = {};
    const auto live = [&](int b) { return (nb + b) * 8 <= mi * 16 + 15; };
#pragma unroll 2
    for (int k0 = 0; k0 < DK; k0 += 8) {
      const float ka[4] = {Ks[r0 * KS + k0 + t], Ks[r1 * KS + k0 + t], Ks[r0 * KS + k0 + t + 4],
                           Ks[r1 * KS + k0 + t + 4]};
      const unsigned qa[4] = {tf32_of(Xs[r0 * XS + k0 + t]), tf32_of(Xs[r1 * XS + k0 + t]),
                              tf32_of(Xs[r0 * XS + k0 + t + 4]), tf32_of(Xs[r1 * XS + k0 + t + 4])};
      unsigned ah[4], al[4];
      tf32_split(ka, ah, al);
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        if (!live(b)) continue;
        const int j = (nb + b) * 8 + g;
        const Tf32Split b0 = tf32_split(Ks[j * KS + k0 + t]), b1 = tf32_split(Ks[j * KS + k0 + t + 4]);
        mma_tf32x3(kk[b], ah, al, b0, b1);
        mma_tf32(qk[b], qa, b0.hi, b1.hi);
      }
    }
#pragma unroll
    for (int b = 0; b < 4; ++b) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int i = half ? r1 : r0, j = (nb + b) * 8 + 2 * t;
        float tv[2], av[2];
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const bool lower = i < L && j + e <= i;
          const float decay = lower ? expf(G[i] - G[j + e]) : 0.f;
          tv[e] = lower && j + e < i ? -B[i] * kk[b][half * 2 + e] * decay : 0.f;
          av[e] = lower ? qk[b][half * 2 + e] * decay : 0.f;
        }
        Tm[i * kTs + j] = tv[0];
        Tm[i * kTs + j + 1] = tv[1];
        if (i < L) *reinterpret_cast<float2*>(sc.aqk(row0 + i, h) + j) = make_float2(av[0], av[1]);
      }
    }
  }
  __syncthreads();  // Tm complete; q no longer read
  copy_rows(Xs, XS, 2 * key_dim + h * dv, dv);
  cp_async_commit();
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
  cp_async_wait<0>();
  __syncthreads();  // T and v in place
  // out[i, :cols] = sum_m T[i, m] scale[m] X[m, :cols] for rows i < L (T lower triangular: a 16-row tile's k steps
  // end at its last row): u = T (v beta), w = T (k beta exp(G)). A warp: 16 rows (mi) x groups of four n8 tiles.
  const auto t_product = [&](const float* X, int ld, int cols, const float* scale, auto&& out_row) {
    const int mi = warp & 3, r0 = mi * 16 + g, r1 = r0 + 8;
    const int ksteps = min(2 * (mi + 1), (L + 7) / 8), tiles = (cols + 7) / 8;
    for (int nb = (warp >> 2) * 4; nb < tiles; nb += 8) {
      float acc[4][4] = {};
      for (int ks = 0; ks < ksteps; ++ks) {
        const int k0 = ks * 8;
        const float s0 = scale[k0 + t], s1 = scale[k0 + t + 4];
        const float af[4] = {Tn[r0 * kTs + k0 + t] * s0, Tn[r1 * kTs + k0 + t] * s0, Tn[r0 * kTs + k0 + t + 4] * s1,
                             Tn[r1 * kTs + k0 + t + 4] * s1};
        unsigned ah[4], al[4];
        tf32_split(af, ah, al);
#pragma unroll
        for (int b = 0; b < 4; ++b) {
          if (nb + b >= tiles) break;
          const int col = (nb + b) * 8 + g;
          mma_tf32x3(acc[b], ah, al, tf32_split(X[(k0 + t) * ld + col]), tf32_split(X[(k0 + t + 4) * ld + col]));
        }
      }
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const int col = (nb + b) * 8 + 2 * t;  // even, and cols % 4 == 0: col + 1 < cols with it
        if (col >= cols) continue;
        if (r0 < L) *reinterpret_cast<float2*>(out_row(row0 + r0) + col) = make_float2(acc[b][0], acc[b][1]);
        if (r1 < L) *reinterpret_cast<float2*>(out_row(row0 + r1) + col) = make_float2(acc[b][2], acc[b][3]);
      }
    }
  };
  t_product(Xs, XS, dv, B, [&](int r) { return sc.u(r, h); });
  t_product(Ks, KS, DK, BE, [&](int r) { return sc.w(r, h); });
}

// One block per (state columns [col0, col0 + TC), value head, sequence), walking the sequence's chunks in order
// with its tile of the state S [dk, TC] in registers (the columns of S never mix), as the accumulators of the
// update; per chunk, on tensor cores (tf32, m16n8k8):
//   1. P = [w; q] S ([128, dk] x [dk, TC]; a warp a 16-row tile): v_new = u - w S, into the u tile (3xTF32: it
//      feeds the state), and (q exp(G)) S in the q warps' registers (one tf32 product: it only reaches the output);
//   2. the q warps add A_qk v_new (causal: the k steps past their rows are zeros) and store the output over u;
//   3. S = exp(G_last) S + k^T (exp(G_last - G) v_new) (3xTF32), and S's tile back to shared memory as the next
//      chunk's B operand.
// The chunk's w and u are copied in (cp.async) at its start, its k while step 2 runs, the next chunk's q and A_qk
// while step 3 runs. Rows past a chunk's L are zero-filled, so they add nothing.
template <int DK>
__global__ void __launch_bounds__(kChunkThreads, 1) delta_chunk_scan_kernel(const float* conv, LinearShape shape,
                                                                          LinearSeqs seqs, LinearState state,
                                                                          ChunkScratch sc) {
  static_assert(kChunkThreads == 256 && kChunk == 64, "8 warps: a 16-row tile each of [w; q]");
  grid_dependency_wait();
  extern __shared__ float4 smem4[];
  constexpr int TC = scan_cols(DK), NT = TC / 8;
  constexpr int WS = key_stride(DK), KT = scan_k_stride(DK), CS = scan_col_stride(DK);
  // The state's [16, 8] tiles, MT x NT of them, over the 8 warps: WM x WN a warp.
  constexpr int MT = DK / 16;
  constexpr int WM = MT >= 8 ? MT / 8 : 1;
  constexpr int WN = MT >= 8 ? NT : NT * MT / 8;
  static_assert(WM * WN * 8 == MT * NT, "the state's tiles split evenly over the warps");
  const int h = blockIdx.y, si = blockIdx.z;
  const int n = seqs.num_tokens[si], q0 = seqs.q_start[si];
  const int hk = shape.key_heads, hv = shape.value_heads, dv = shape.value_dim;
  const int C = channels_of(shape), key_dim = hk * DK, kh = h / (hv / hk);
  float* Wk = reinterpret_cast<float*>(smem4);  // [64, WS] w, then [64, KT] k
  float* Qs = Wk + kChunk * KT;                 // [64, WS] q
  float* As = Qs + kChunk * WS;                 // [64, kTs] A_qk
  float* Us = As + kChunk * kTs;                // [64, CS] u, then v_new
  float* Ss = Us + kChunk * CS;                 // [DK, CS] the state's tile
  float* Gs = Ss + DK * CS;                     // [64] G (0 past L)
  const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5, g = (tid & 31) >> 2, t = tid & 3;
  const int col0 = static_cast<int>(blockIdx.x) * TC;
  const bool fresh = seqs.position[si] == 0;
  float* S = state.base + static_cast<std::size_t>(seqs.state_slot[si]) * state.slot_floats + state.delta_offset +
             static_cast<std::size_t>(h) * DK * dv;
  const int mt0 = MT >= 8 ? warp * WM : warp / (8 / MT);
  const int nt0 = MT >= 8 ? 0 : warp % (8 / MT) * WN;
  // s[a][b]: tile (mt0 + a, nt0 + b) as an m16n8 accumulator (mma.cuh's C layout). each_state(f) calls
  // f(entry, r, c) for each of this thread's entries: row r, column c of the block's [DK, TC] tile.
  float s[WM][WN][4];
  auto each_state = [&](auto&& f) {
#pragma unroll
    for (int a = 0; a < WM; ++a)
#pragma unroll
      for (int b = 0; b < WN; ++b)
#pragma unroll
        for (int q = 0; q < 4; ++q) f(s[a][b][q], (mt0 + a) * 16 + g + (q >> 1) * 8, (nt0 + b) * 8 + 2 * t + (q & 1));
  };
  each_state([&](float& v, int r, int c) {
    v = fresh || col0 + c >= dv ? 0.f : S[static_cast<std::size_t>(r) * dv + col0 + c];
  });
  auto store_state = [&] { each_state([&](float& v, int r, int c) { Ss[r * CS + c] = v; }); };
  // Rows [row0, row0 + L) of a [.., DK] source into shared rows of stride ld; rows past L zero-filled.
  constexpr int kPieces = DK / 4;  // 16-byte pieces a row
  auto copy_keyed = [&](float* dst, int ld, int row0, int L, auto&& src_row) {
    for (int e = tid; e < kChunk * kPieces; e += kChunkThreads) {
      const int i = e / kPieces, d = e % kPieces * 4;
      const bool ok = i < L;
      cp_async16(dst + i * ld + d, src_row(row0 + (ok ? i : 0)) + d, ok);
    }
  };
  auto load_q_aqk = [&](int row0, int L) {
    copy_keyed(Qs, WS, row0, L, [&](int r) { return conv + static_cast<std::size_t>(r) * C + kh * DK; });
    for (int e = tid; e < kChunk * (kChunk / 4); e += kChunkThreads) {
      const int i = e / (kChunk / 4), m = e % (kChunk / 4) * 4;
      const bool ok = i < L;
      cp_async16(As + i * kTs + m, sc.aqk(row0 + (ok ? i : 0), h) + m, ok);
    }
    cp_async_commit();
  };
  store_state();  // the barrier at the loop's top publishes it
  if (n > 0) load_q_aqk(q0, min(kChunk, n));
  float acc[NT][4];  // step 1's product; in the q warps, then their output rows
  for (int t0 = 0; t0 < n; t0 += kChunk) {
    const int L = min(kChunk, n - t0), row0 = q0 + t0;
    __syncthreads();  // the last chunk's readers of k, v_new and the state's tile are done
    copy_keyed(Wk, WS, row0, L, [&](int r) { return static_cast<const float*>(sc.w(r, h)); });
    for (int e = tid; e < kChunk * (TC / 4); e += kChunkThreads) {
      const int i = e / (TC / 4), c = e % (TC / 4) * 4;
      const bool ok = i < L && col0 + c < dv;  // dv % 4 == 0: a piece is all in or all out
      cp_async16(Us + i * CS + c, ok ? sc.u(row0 + i, h) + col0 + c : sc.u(row0, h), ok);
    }
    cp_async_commit();
    if (tid < kChunk) Gs[tid] = tid < L ? *sc.g(row0 + tid, h) : 0.f;
    cp_async_wait<0>();
    __syncthreads();
    // 1. [w; q] S.
    const bool w_warp = warp < 4;
    const int r0 = (warp & 3) * 16 + g, r1 = r0 + 8;  // this lane's rows of its 16-row tile
    {
      const float* Ab = w_warp ? Wk : Qs;
#pragma unroll
      for (int b = 0; b < NT; ++b) acc[b][0] = acc[b][1] = acc[b][2] = acc[b][3] = 0.f;
#pragma unroll 2
      for (int k0 = 0; k0 < DK; k0 += 8) {
        const float af[4] = {Ab[r0 * WS + k0 + t], Ab[r1 * WS + k0 + t], Ab[r0 * WS + k0 + t + 4],
                             Ab[r1 * WS + k0 + t + 4]};
        if (w_warp) {
          unsigned ah[4], al[4];
          tf32_split(af, ah, al);
#pragma unroll
          for (int b = 0; b < NT; ++b)
            mma_tf32x3(acc[b], ah, al, tf32_split(Ss[(k0 + t) * CS + b * 8 + g]),
                       tf32_split(Ss[(k0 + t + 4) * CS + b * 8 + g]));
        } else {
          const unsigned a[4] = {tf32_of(af[0]), tf32_of(af[1]), tf32_of(af[2]), tf32_of(af[3])};
#pragma unroll
          for (int b = 0; b < NT; ++b)
            mma_tf32(acc[b], a, tf32_of(Ss[(k0 + t) * CS + b * 8 + g]), tf32_of(Ss[(k0 + t + 4) * CS + b * 8 + g]));
        }
      }
      if (w_warp) {
#pragma unroll
        for (int b = 0; b < NT; ++b) {
          const int c = b * 8 + 2 * t;
          Us[r0 * CS + c] -= acc[b][0];
          Us[r0 * CS + c + 1] -= acc[b][1];
          Us[r1 * CS + c] -= acc[b][2];
          Us[r1 * CS + c + 1] -= acc[b][3];
        }
      } else {
        const float e0 = expf(Gs[r0]), e1 = expf(Gs[r1]);
#pragma unroll
        for (int b = 0; b < NT; ++b) {
          acc[b][0] *= e0;
          acc[b][1] *= e0;
          acc[b][2] *= e1;
          acc[b][3] *= e1;
        }
      }
    }
    __syncthreads();  // v_new complete; w no longer read
    copy_keyed(Wk, KT, row0, L, [&](int r) { return conv + static_cast<std::size_t>(r) * C + key_dim + kh * DK; });
    cp_async_commit();
    // 2. The output rows: (q exp(G)) S + A_qk v_new.
    if (!w_warp) {
      const int ksteps = min(2 * ((warp & 3) + 1), (L + 7) / 8);
      for (int ks = 0; ks < ksteps; ++ks) {
        const int k0 = ks * 8;
        const unsigned a[4] = {tf32_of(As[r0 * kTs + k0 + t]), tf32_of(As[r1 * kTs + k0 + t]),
                               tf32_of(As[r0 * kTs + k0 + t + 4]), tf32_of(As[r1 * kTs + k0 + t + 4])};
#pragma unroll
        for (int b = 0; b < NT; ++b)
          mma_tf32(acc[b], a, tf32_of(Us[(k0 + t) * CS + b * 8 + g]), tf32_of(Us[(k0 + t + 4) * CS + b * 8 + g]));
      }
#pragma unroll
      for (int b = 0; b < NT; ++b) {
        const int col = col0 + b * 8 + 2 * t;  // even, and dv % 4 == 0: col + 1 < dv with it
        if (col >= dv) continue;
        if (r0 < L) *reinterpret_cast<float2*>(sc.u(row0 + r0, h) + col) = make_float2(acc[b][0], acc[b][1]);
        if (r1 < L) *reinterpret_cast<float2*>(sc.u(row0 + r1, h) + col) = make_float2(acc[b][2], acc[b][3]);
      }
    }
    cp_async_wait<0>();
    __syncthreads();  // k in place; q and A_qk no longer read
    if (t0 + kChunk < n) load_q_aqk(row0 + kChunk, min(kChunk, n - t0 - kChunk));
    // 3. S = exp(G_last) S + k^T (exp(G_last - G) v_new).
    const float g_last = Gs[L - 1], decay = expf(g_last);
    each_state([&](float& v, int, int) { v *= decay; });
    const int ksteps = (L + 7) / 8;
    for (int ks = 0; ks < ksteps; ++ks) {
      const int k0 = ks * 8;
      const float e0 = expf(g_last - Gs[k0 + t]), e1 = expf(g_last - Gs[k0 + t + 4]);
      unsigned ah[WM][4], al[WM][4];
#pragma unroll
      for (int a = 0; a < WM; ++a) {
        const int r = (mt0 + a) * 16 + g;
        const float af[4] = {Wk[(k0 + t) * KT + r], Wk[(k0 + t) * KT + r + 8], Wk[(k0 + t + 4) * KT + r],
                             Wk[(k0 + t + 4) * KT + r + 8]};
        tf32_split(af, ah[a], al[a]);
      }
#pragma unroll
      for (int b = 0; b < WN; ++b) {
        const int c = (nt0 + b) * 8 + g;
        const Tf32Split b0 = tf32_split(e0 * Us[(k0 + t) * CS + c]), b1 = tf32_split(e1 * Us[(k0 + t + 4) * CS + c]);
#pragma unroll
        for (int a = 0; a < WM; ++a) mma_tf32x3(s[a][b], ah[a], al[a], b0, b1);
      }
    }
    store_state();
  }
  each_state([&](float& v, int r, int c) {
    if (col0 + c < dv) S[static_cast<std::size_t>(r) * dv + col0 + c] = v;
  });
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
  const auto tiles = static_cast<unsigned>((dv + scan_cols(DK) - 1) / scan_cols(DK));
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
  return static_cast<std::size_t>(tokens) * chunk_row_floats(shape.value_heads, shape.key_dim, shape.value_dim);
}

bool delta_chunked_supported(const LinearShape& shape) noexcept {
  return linear_shape_supported(shape) && shape.value_dim % 4 == 0 &&
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
  if (reinterpret_cast<std::uintptr_t>(conv) % 16 != 0 || reinterpret_cast<std::uintptr_t>(scratch) % 16 != 0)
    throw Error(errc::internal, "delta_rule_chunked: conv and scratch must start on 16 bytes (cp.async)");
  with_key_dim(shape.key_dim, "delta_rule_chunked", [&](auto dk) {
    launch_chunked<decltype(dk)::value>(conv, in, width, z_col, b_col, a_col, neg_a, dt_bias, norm_w, eps, shape, seqs,
                                        n_seqs, max_tokens, state, scratch, out, stream);
  });
}

}  // namespace neuron::backend::cuda::kernels
