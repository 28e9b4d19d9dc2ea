#include "backend/cuda/moe_kernels.hpp"

#include <climits>

#include "backend/cuda/device_math.cuh"
#include "backend/cuda/launch.cuh"
#include "util/error.hpp"

namespace neuron::backend::cuda::kernels {
namespace {

constexpr int kRouteWarps = 4;   // tokens a routing block takes, one a warp
constexpr int kGroupThreads = 1024;
constexpr int kExpertWarps = 4;  // weight rows an expert block takes, one a warp
constexpr int kExpertTokens = 8; // an expert's tokens multiplied per pass over a weight row

// One warp, one token: softmax over the E logits (in the warp's `p`, shared
// memory), then k rounds of a warp-wide argmax (the larger probability, the
// lower expert on a tie), each taking its expert out of the running. A NaN
// logit counts as -inf (probability 0); a token whose logits are all NaN or
// infinite gets probabilities of -0.5, below every number and above a taken
// expert's -1, so every token gets k distinct experts whatever its logits.
__device__ void route_token(const float* logits, int token, int experts, int k, bool norm_topk, float* p,
                            const MoeRoute& r) {
  const int lane = threadIdx.x & 31;
  const float* row = logits + static_cast<std::size_t>(token) * experts;
  float top = -INFINITY;
  for (int e = lane; e < experts; e += 32) {
    const float v = row[e];
    p[e] = isnan(v) ? -INFINITY : v;
    top = fmaxf(top, p[e]);
  }
  top = warp_max(top);
  float sum = 0.f;
  for (int e = lane; e < experts; e += 32) sum += (p[e] = expf(p[e] - top));
  sum = warp_sum(sum);
  for (int e = lane; e < experts; e += 32) {
    const float v = p[e] / sum;
    p[e] = isnan(v) ? -0.5f : v;
  }
  __syncwarp();
  int* chosen_expert = r.expert + static_cast<std::size_t>(token) * k;
  float* chosen_weight = r.weight + static_cast<std::size_t>(token) * k;
  float chosen = 0.f;
  for (int j = 0; j < k; ++j) {
    float best = -INFINITY;
    int id = INT_MAX;
    for (int e = lane; e < experts; e += 32)
      if (p[e] > best) {  // ascending e: a lane keeps its first maximum
        best = p[e];
        id = e;
      }
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
      const float ob = __shfl_xor_sync(0xffffffffu, best, off);
      const int oi = __shfl_xor_sync(0xffffffffu, id, off);
      if (ob > best || (ob == best && oi < id)) {
        best = ob;
        id = oi;
      }
    }
    chosen += best;
    if (lane == 0) {
      chosen_expert[j] = id;
      chosen_weight[j] = best;
      p[id] = -1.f;
    }
    __syncwarp();
  }
  if (norm_topk)
    for (int j = lane; j < k; j += 32) chosen_weight[j] /= chosen;
  __syncwarp();
}

__global__ void __launch_bounds__(32 * kRouteWarps)
    moe_route_kernel(const float* logits, int n, int experts, int k, bool norm_topk, MoeRoute r) {
  extern __shared__ float probs[];  // [kRouteWarps, experts]
  grid_dependency_wait();
  const int warp = threadIdx.x >> 5;
  const int token = blockIdx.x * kRouteWarps + warp;
  if (token < n) route_token(logits, token, experts, k, norm_topk, probs + warp * experts, r);
}

// The whole block, over the rank's `experts` experts from `begin` (local ids): count each one's pairs (a pair
// of another expert gets no slot), their offsets (thread 0; E is small), then each warp places the pairs of
// its experts in pair order, 32 pairs a ballot. ids: [pairs] shared, the pairs' local experts (-1: not the
// rank's); count, first: [experts] shared.
__device__ void group_pairs(int pairs, int begin, int experts, int* ids, int* count, int* first, const MoeRoute& r) {
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int e = r.expert[p] - begin;
    const bool mine = static_cast<unsigned>(e) < static_cast<unsigned>(experts);
    ids[p] = mine ? e : -1;
    if (!mine) r.pair_slot[p] = -1;
  }
  for (int e = threadIdx.x; e < experts; e += blockDim.x) count[e] = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < pairs; p += blockDim.x)
    if (ids[p] >= 0) atomicAdd(&count[ids[p]], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int at = 0, used = 0;
    for (int e = 0; e < experts; ++e) {
      first[e] = at;
      r.offsets[e] = at;
      at += count[e];
      if (count[e] > 0) r.active[1 + used++] = e;
    }
    r.offsets[experts] = at;
    r.active[0] = used;
  }
  __syncthreads();
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int e = warp; e < experts; e += warps) {
    if (count[e] == 0) continue;
    int slot = first[e];
    for (int p0 = 0; p0 < pairs; p0 += 32) {
      const int p = p0 + lane;
      const bool hit = p < pairs && ids[p] == e;
      const unsigned mask = __ballot_sync(0xffffffffu, hit);
      if (hit) {
        const int s = slot + __popc(mask & ((1u << lane) - 1u));
        r.slot_pair[s] = p;
        r.pair_slot[p] = s;
      }
      slot += __popc(mask);
    }
  }
}

__global__ void __launch_bounds__(kGroupThreads) moe_group_kernel(int pairs, int begin, int experts, MoeRoute r) {
  extern __shared__ int group_smem[];  // ids [pairs], count [experts], first [experts] (the rank's experts)
  grid_dependency_wait();
  group_pairs(pairs, begin, experts, group_smem, group_smem + pairs, group_smem + pairs + experts, r);
}

// Both in one block, for passes whose every warp's probabilities fit in shared memory beside the grouping:
// its warps route the tokens over all `experts` (token = warp, warp + 32, ...), then the block groups their
// pairs of the rank's `local` experts from `begin`.
__global__ void __launch_bounds__(kGroupThreads) moe_route_group_kernel(const float* logits, int n, int experts,
                                                                        int begin, int local, int k, bool norm_topk,
                                                                        MoeRoute r) {
  extern __shared__ int fused_smem[];  // probabilities [32, experts] f32, then ids [n k], count, first [local]
  grid_dependency_wait();
  const int warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  float* probs = reinterpret_cast<float*>(fused_smem) + warp * experts;
  for (int token = warp; token < n; token += warps) route_token(logits, token, experts, k, norm_topk, probs, r);
  __syncthreads();  // the block's writes of r.expert are visible to the block
  int* ids = fused_smem + warps * experts;
  const int pairs = n * k;
  group_pairs(pairs, begin, local, ids, ids + pairs, ids + pairs + local, r);
}

// A pass of one token (k <= 32 pairs) in one warp, with no block-wide barrier: the warp routes the token
// over all `experts`, then places its pairs of the rank's `local` experts from `begin`, a pair a lane. The
// slots, offsets and active list are group_pairs' (a pair's slot counts the pairs of lower experts and the
// earlier pairs of its own). A 1024-thread block for one token's routing took 11 us of a 30B-A3B layer
// (bench/cuda/runs/profile-2026-12-07).
__global__ void __launch_bounds__(32) moe_route_group_warp_kernel(const float* logits, int experts, int begin,
                                                                  int local, int k, bool norm_topk, MoeRoute r) {
  extern __shared__ float warp_smem[];  // probabilities [experts] f32, then the pairs' local experts [32]
  grid_dependency_wait();
  route_token(logits, 0, experts, k, norm_topk, warp_smem, r);
  int* ids = reinterpret_cast<int*>(warp_smem + experts);
  const int lane = static_cast<int>(threadIdx.x), pairs = k;
  // route_token's writes are the warp's (__syncwarp). A lane past the pairs, or a pair of another rank's
  // expert, takes no slot: INT_MAX sorts after every local expert.
  const int e = lane < pairs ? r.expert[lane] - begin : -1;
  const bool mine = static_cast<unsigned>(e) < static_cast<unsigned>(local);
  const int id = mine ? e : INT_MAX;
  ids[lane] = id;
  __syncwarp();
  int slot = 0;
  bool first = true;  // the first pair of its expert
  for (int q = 0; q < pairs; ++q) {
    const int other = ids[q];
    slot += other < id || (other == id && q < lane);
    first = first && !(other == id && q < lane);
  }
  first = first && mine;
  const unsigned firsts = __ballot_sync(0xffffffffu, first);
  int rank = 0;  // experts in use below this pair's
  for (int q = 0; q < pairs; ++q) rank += ((firsts >> q) & 1u) && ids[q] < id;
  if (mine) {
    r.slot_pair[slot] = lane;
    r.pair_slot[lane] = slot;
    if (first) r.active[1 + rank] = id;
  } else if (lane < pairs) {
    r.pair_slot[lane] = -1;
  }
  if (lane == 0) r.active[0] = __popc(firsts);
  for (int le = lane; le <= local; le += 32) {
    int below = 0;
    for (int q = 0; q < pairs; ++q) below += ids[q] < le;
    r.offsets[le] = below;
  }
}

// Block (row tile, a): the a-th expert in use (none: the block returns). Warp w takes row
// j = tile * kExpertWarps + w of the expert's [rows, cols] weights; for each run of up to kExpertTokens of
// the expert's slots, every lane holds its 16-byte pieces of the row while it meets each slot's input row,
// then the warp sums each slot's partial products. Emit(slot, j, sum) stores.
template <class Input, class Emit>
__device__ __forceinline__ void expert_rows(const bf16_t* const* weights, int rows, int cols, const MoeRoute& r,
                                            Input input, Emit emit) {
  const int a = blockIdx.y;
  if (a >= r.active[0]) return;
  const int e = r.active[1 + a];
  const int j = blockIdx.x * kExpertWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (j >= rows) return;
  const int chunks = cols / 8;
  const uint4* w = reinterpret_cast<const uint4*>(weights[e] + static_cast<std::size_t>(j) * cols);
  const int end = r.offsets[e + 1];
  for (int s0 = r.offsets[e]; s0 < end; s0 += kExpertTokens) {
    const int m = min(kExpertTokens, end - s0);
    const uint4* x[kExpertTokens];
#pragma unroll
    for (int t = 0; t < kExpertTokens; ++t) x[t] = reinterpret_cast<const uint4*>(input(s0 + min(t, m - 1)));
    float acc[kExpertTokens] = {};
#pragma unroll 4
    for (int c = lane; c < chunks; c += 32) {
      const uint4 wv = __ldg(w + c);
#pragma unroll
      for (int t = 0; t < kExpertTokens; ++t)
        if (t < m) acc[t] += dot8(wv, __ldg(x[t] + c));
    }
#pragma unroll
    for (int t = 0; t < kExpertTokens; ++t)
      if (t < m) {  // m is the same in every lane
        const float v = warp_sum(acc[t]);
        if (lane == 0) emit(s0 + t, j, v);
      }
  }
}

// Gate row j and up row j in one warp: the SwiGLU needs both, rounded as swiglu_kernel rounds them.
__global__ void __launch_bounds__(32 * kExpertWarps)
    moe_gate_up_kernel(const bf16_t* const* gate_up, const bf16_t* h, int k, int hidden, int ff, MoeRoute r,
                       bf16_t* act) {
  grid_dependency_wait();
  const int a = blockIdx.y;
  if (a >= r.active[0]) return;
  const int e = r.active[1 + a];
  const int j = blockIdx.x * kExpertWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (j >= ff) return;
  const int chunks = hidden / 8;
  const uint4* g = reinterpret_cast<const uint4*>(gate_up[e] + static_cast<std::size_t>(j) * hidden);
  const uint4* u = reinterpret_cast<const uint4*>(gate_up[e] + static_cast<std::size_t>(ff + j) * hidden);
  const int end = r.offsets[e + 1];
  for (int s0 = r.offsets[e]; s0 < end; s0 += kExpertTokens) {
    const int m = min(kExpertTokens, end - s0);
    const uint4* x[kExpertTokens];
#pragma unroll
    for (int t = 0; t < kExpertTokens; ++t)
      x[t] = reinterpret_cast<const uint4*>(h + static_cast<std::size_t>(r.slot_pair[s0 + min(t, m - 1)] / k) * hidden);
    float ag[kExpertTokens] = {}, au[kExpertTokens] = {};
#pragma unroll 2
    for (int c = lane; c < chunks; c += 32) {
      const uint4 wg = __ldg(g + c), wu = __ldg(u + c);
#pragma unroll
      for (int t = 0; t < kExpertTokens; ++t)
        if (t < m) {
          const uint4 xv = __ldg(x[t] + c);
          ag[t] += dot8(wg, xv);
          au[t] += dot8(wu, xv);
        }
    }
#pragma unroll
    for (int t = 0; t < kExpertTokens; ++t)
      if (t < m) {
        const float gv = bf(to_bf(warp_sum(ag[t]))), uv = bf(to_bf(warp_sum(au[t])));
        if (lane == 0) {
          const float silu = bf(to_bf(gv / (1.f + __expf(-gv))));
          act[static_cast<std::size_t>(s0 + t) * ff + j] = to_bf(silu * uv);
        }
      }
  }
}

struct ActRows {
  const bf16_t* act;
  int ff;
  __device__ const bf16_t* operator()(int slot) const { return act + static_cast<std::size_t>(slot) * ff; }
};
struct StoreOut {
  float* out;
  int hidden;
  __device__ void operator()(int slot, int row, float v) const { out[static_cast<std::size_t>(slot) * hidden + row] = v; }
};

__global__ void __launch_bounds__(32 * kExpertWarps)
    moe_down_kernel(const bf16_t* const* down, const bf16_t* act, int hidden, int ff, MoeRoute r, float* out) {
  grid_dependency_wait();
  expert_rows(down, hidden, ff, r, ActRows{act, ff}, StoreOut{out, hidden});
}

constexpr int kCombineThreads = 256;  // columns a combine block takes

// Block (column tile, token): each thread one column, the token's k experts' rows summed in routing order
// (deterministic). !kWhole: a pair without a slot (another rank's expert) adds nothing; the whole case keeps
// the loop tuned without expert parallelism. Tiles of columns rather than one block a token: at a decode step's one token, a single
// block left all but one SM idle and took 16.6 us of a 30B-A3B layer (bench/cuda/runs/profile-2026-12-07).
template <bool kWhole>
__global__ void __launch_bounds__(kCombineThreads)
    moe_combine_kernel(const float* out, int k, int hidden, MoeRoute r, float* delta) {
  grid_dependency_wait();
  const int t = blockIdx.y;
  const int c = blockIdx.x * kCombineThreads + threadIdx.x;
  if (c >= hidden) return;
  const int* slot = r.pair_slot + static_cast<std::size_t>(t) * k;
  const float* w = r.weight + static_cast<std::size_t>(t) * k;
  float acc = 0.f;
  for (int j = 0; j < k; ++j)
    if (const int s = slot[j]; kWhole || s >= 0) acc += w[j] * out[static_cast<std::size_t>(s) * hidden + c];
  delta[static_cast<std::size_t>(t) * hidden + c] = acc;
}

// Block (row tile, token t), for up to kMoeDownCombineMaxTokens tokens (the runner sends one): warp w takes row j of each of t's k experts, in routing
// order, and writes delta[t][j] itself. A lane forms each expert's partial product over its chunks (c = lane,
// lane + 32, ...) in the order expert_rows does, with the k experts' loads of a chunk in flight together; the
// warp sums them and adds them up weighted in routing order, as moe_combine does, so the result is moe_down's
// then moe_combine's, in one launch and without the [n k, hidden] out buffer. At a decode step's one token the
// two took 15.6 + 3.7 us of a 30B-A3B layer (a warp's row of 768 is three loads a lane).
// kWhole: every expert is the rank's (down[] by global id, every pair a slot). Otherwise the token's m pairs
// with a slot, in routing order, from down[] by local id (the q-th is the token's pair at the q-th set bit of
// `mine`); a token with none gets zeros. Two instantiations, so that the whole case's code is the one tuned
// without expert parallelism.
template <bool kWhole>
__global__ void __launch_bounds__(32 * kExpertWarps)
    moe_down_combine_kernel(const bf16_t* const* down, const bf16_t* act, int k, int hidden, int ff, int begin,
                            MoeRoute r, float* delta) {
  grid_dependency_wait();
  const int t = blockIdx.y;
  const int j = blockIdx.x * kExpertWarps + (threadIdx.x >> 5), lane = threadIdx.x & 31;
  if (j >= hidden) return;
  const int chunks = ff / 8;
  int m = k;          // the pairs summed, the same in every lane
  unsigned mine = 0;  // !kWhole: bit i, the token's i-th pair has a slot
  if constexpr (!kWhole) {
#pragma unroll
    for (int q = 0; q < kMoeDownCombineMaxK; ++q)
      if (q < k && r.pair_slot[t * k + q] >= 0) mine |= 1u << q;
    m = __popc(mine);
    if (m == 0) {
      if (lane == 0) delta[static_cast<std::size_t>(t) * hidden + j] = 0.f;
      return;
    }
  }
  const uint4* w[kMoeDownCombineMaxK];
  const uint4* x[kMoeDownCombineMaxK];
  unsigned rest = mine;
  int i = 0;  // the q-th summed pair's place among the token's k (past m: the last summed)
#pragma unroll
  for (int q = 0; q < kMoeDownCombineMaxK; ++q) {
    if constexpr (kWhole) {
      i = min(q, k - 1);
    } else if (rest != 0) {
      i = __ffs(static_cast<int>(rest)) - 1;
      rest &= rest - 1;
    }
    const int pair = t * k + i;
    const int e = kWhole ? r.expert[pair] : r.expert[pair] - begin;
    w[q] = reinterpret_cast<const uint4*>(down[e] + static_cast<std::size_t>(j) * ff);
    x[q] = reinterpret_cast<const uint4*>(act + static_cast<std::size_t>(r.pair_slot[pair]) * ff);
  }
  float acc[kMoeDownCombineMaxK] = {};
  for (int c = lane; c < chunks; c += 32) {
#pragma unroll
    for (int q = 0; q < kMoeDownCombineMaxK; ++q)
      if (q < m) acc[q] += dot8(__ldg(w[q] + c), __ldg(x[q] + c));
  }
  const float* weight = r.weight + static_cast<std::size_t>(t) * k;
  float sum = 0.f;
  rest = mine;
#pragma unroll
  for (int q = 0; q < kMoeDownCombineMaxK; ++q)
    if (q < m) {  // m is the same in every lane
      i = q;
      if constexpr (!kWhole) {
        i = __ffs(static_cast<int>(rest)) - 1;
        rest &= rest - 1;
      }
      sum += weight[i] * warp_sum(acc[q]);
    }
  if (lane == 0) delta[static_cast<std::size_t>(t) * hidden + j] = sum;
}

unsigned experts_in_use(int n, int k, int experts) {
  return static_cast<unsigned>(std::min<long long>(static_cast<long long>(n) * k, experts));
}

bool valid(MoeExperts mine) { return mine.count >= 1 && mine.begin >= 0 && mine.begin + mine.count <= mine.total; }

}  // namespace

bool moe_experts_supported(int hidden, int moe_ff) noexcept {
  return hidden > 0 && moe_ff > 0 && hidden % 8 == 0 && moe_ff % 8 == 0;
}

void moe_route(const float* logits, int n, int experts, int k, bool norm_topk, const MoeRoute& r,
               cudaStream_t stream) {
  if (n <= 0) return;
  NEURON_ASSERT(k >= 1 && k <= experts);
  const dim3 grid(static_cast<unsigned>((n + kRouteWarps - 1) / kRouteWarps));
  launch(moe_route_kernel, grid, 32 * kRouteWarps, sizeof(float) * kRouteWarps * experts, stream, "moe_route", logits,
         n, experts, k, norm_topk, r);
}

void moe_group(int n, MoeExperts mine, int k, const MoeRoute& r, cudaStream_t stream) {
  if (n <= 0) return;
  const int pairs = n * k;
  NEURON_ASSERT(pairs <= kMoeMaxPairs && valid(mine));
  launch(moe_group_kernel, dim3(1), kGroupThreads, sizeof(int) * (pairs + 2 * static_cast<std::size_t>(mine.count)),
         stream, "moe_group", pairs, mine.begin, mine.count, r);
}

void moe_route_group(const float* logits, int n, MoeExperts mine, int k, bool norm_topk, const MoeRoute& r,
                     cudaStream_t stream) {
  if (n <= 0) return;
  const int experts = mine.total;
  NEURON_ASSERT(k >= 1 && k <= experts && n * k <= kMoeMaxPairs && valid(mine));
  if (n == 1 && k <= 32) {
    launch(moe_route_group_warp_kernel, dim3(1), 32, sizeof(float) * (static_cast<std::size_t>(experts) + 32), stream,
           "moe_route_group", logits, experts, mine.begin, mine.count, k, norm_topk, r);
    return;
  }
  const std::size_t fused = sizeof(int) * ((kGroupThreads / 32) * static_cast<std::size_t>(experts) + n * k +
                                           2 * static_cast<std::size_t>(mine.count));
  if (fused <= 48 * 1024) {  // the default shared-memory limit of a block
    launch(moe_route_group_kernel, dim3(1), kGroupThreads, fused, stream, "moe_route_group", logits, n, experts,
           mine.begin, mine.count, k, norm_topk, r);
    return;
  }
  moe_route(logits, n, experts, k, norm_topk, r, stream);
  moe_group(n, mine, k, r, stream);
}

void moe_gate_up(const bf16_t* const* gate_up, const bf16_t* h, int n, int k, int experts, int hidden, int ff,
                 const MoeRoute& r, bf16_t* act, cudaStream_t stream) {
  if (n <= 0) return;
  NEURON_ASSERT(moe_experts_supported(hidden, ff));
  const dim3 grid(static_cast<unsigned>((ff + kExpertWarps - 1) / kExpertWarps), experts_in_use(n, k, experts));
  launch(moe_gate_up_kernel, grid, 32 * kExpertWarps, 0, stream, "moe_gate_up", gate_up, h, k, hidden, ff, r, act);
}

void moe_down(const bf16_t* const* down, const bf16_t* act, int n, int k, int experts, int hidden, int ff,
              const MoeRoute& r, float* out, cudaStream_t stream) {
  if (n <= 0) return;
  NEURON_ASSERT(moe_experts_supported(hidden, ff));
  const dim3 grid(static_cast<unsigned>((hidden + kExpertWarps - 1) / kExpertWarps), experts_in_use(n, k, experts));
  launch(moe_down_kernel, grid, 32 * kExpertWarps, 0, stream, "moe_down", down, act, hidden, ff, r, out);
}

void moe_combine(const float* out, int n, int k, int hidden, MoeExperts mine, const MoeRoute& r, float* delta,
                 cudaStream_t stream) {
  if (n <= 0) return;
  NEURON_ASSERT(valid(mine));
  const dim3 grid(static_cast<unsigned>((hidden + kCombineThreads - 1) / kCombineThreads), static_cast<unsigned>(n));
  if (mine.whole())
    launch(moe_combine_kernel<true>, grid, kCombineThreads, 0, stream, "moe_combine", out, k, hidden, r, delta);
  else
    launch(moe_combine_kernel<false>, grid, kCombineThreads, 0, stream, "moe_combine", out, k, hidden, r, delta);
}

bool moe_down_combine_supported(int n, int k) noexcept { return n == 1 && k >= 1 && k <= kMoeDownCombineMaxK; }

void moe_down_combine(const bf16_t* const* down, const bf16_t* act, int n, int k, int hidden, int ff, MoeExperts mine,
                      const MoeRoute& r, float* delta, cudaStream_t stream) {
  NEURON_ASSERT(n >= 1 && n <= kMoeDownCombineMaxTokens && k >= 1 && k <= kMoeDownCombineMaxK &&
                moe_experts_supported(hidden, ff) && valid(mine));
  const dim3 grid(static_cast<unsigned>((hidden + kExpertWarps - 1) / kExpertWarps), static_cast<unsigned>(n));
  if (mine.whole())
    launch(moe_down_combine_kernel<true>, grid, 32 * kExpertWarps, 0, stream, "moe_down_combine", down, act, k, hidden,
           ff, 0, r, delta);
  else
    launch(moe_down_combine_kernel<false>, grid, 32 * kExpertWarps, 0, stream, "moe_down_combine", down, act, k,
           hidden, ff, mine.begin, r, delta);
}

}  // namespace neuron::backend::cuda::kernels
