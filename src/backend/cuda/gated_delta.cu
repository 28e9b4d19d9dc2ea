#include "backend/cuda/gated_delta.hpp"

#include <algorithm>
#include <string>

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
      const float a = x.a + dt_bias[h];
      const float softplus = a > 20.f ? a : log1pf(expf(a));  // torch's threshold
      gb[buf][0] = expf(neg_a[h] * softplus);
      gb[buf][1] = 1.f / (1.f + expf(-x.b));
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
    if (active && r == 0) {
      const float inv = rsqrtf(ss / static_cast<float>(dv) + eps);
      out[static_cast<std::size_t>(q0 + t) * (static_cast<std::size_t>(hv) * dv) + h * dv + j] =
          to_bf(o_j * inv * w * (cur.z / (1.f + expf(-cur.z))));
    }
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
  auto go = [&](auto kernel) {
    launch(kernel, grid, threads, 0, stream, "delta_rule", conv, in, width, z_col, b_col, a_col, neg_a, dt_bias, norm_w,
           eps, shape, seqs, state, out);
  };
  switch (shape.key_dim) {
    case 16: go(delta_rule_kernel<16>); break;
    case 32: go(delta_rule_kernel<32>); break;
    case 64: go(delta_rule_kernel<64>); break;
    case 128: go(delta_rule_kernel<128>); break;
    case 256: go(delta_rule_kernel<256>); break;
    default: throw Error(errc::unsupported_arch, "delta_rule: linear_key_head_dim " + std::to_string(shape.key_dim));
  }
}

}  // namespace neuron::backend::cuda::kernels
