#pragma once
// A mixture-of-experts layer on the device, for passes of a few tokens
// (decode steps and short prompts): routing, grouping by expert, the chosen
// experts' SwiGLU and down products over bf16 weights, and the weighted sum,
// with no host synchronisation, so a decode step stays one CUDA graph.
//
//   moe_route     logits [n, E] f32 -> each token's k experts and weights
//                 (model/moe_routing.hpp's definition: softmax in f32, the k
//                 largest, ties to the lower expert, renormalized when
//                 norm_topk; a NaN logit counts as -inf, and a token whose
//                 logits are all NaN still gets k distinct experts)
//   moe_group     the n k (token, expert) pairs grouped by expert, tokens
//                 ascending within an expert; which experts have a token
//   moe_gate_up   act[slot] = silu(gate_e . h[token]) * (up_e . h[token])
//   moe_down      out[slot] = down_e . act[slot]
//   moe_combine   delta[token] = sum over its k experts, in routing order,
//                 of weight * out[slot]
//   moe_down_combine  the two above in one launch, for one token
//
// An expert's products read its weight rows once for up to eight of its
// tokens (they sit in registers while those tokens' inputs stream past):
// only the chosen experts' weights are read, and each once a step while an
// expert has at most eight tokens. Grids are sized from n (an upper bound on
// the experts in use), so a graph captured for a batch size replays for any
// routing. Same conventions as kernels.hpp.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.hpp"

namespace neuron::backend::cuda::kernels {

// The device buffers of one pass's routing, for at most `n` tokens of k experts among E.
struct MoeRoute {
  std::int32_t* expert = nullptr;     // [n, k] each token's experts, by falling probability
  float* weight = nullptr;            // [n, k] their weights
  std::int32_t* offsets = nullptr;    // [E + 1] expert e's slots are [offsets[e], offsets[e + 1])
  std::int32_t* slot_pair = nullptr;  // [n k] slot -> pair (token * k + j), grouped by expert
  std::int32_t* pair_slot = nullptr;  // [n k] pair -> slot
  std::int32_t* active = nullptr;     // [E + 1] active[0] experts with a token, then those experts ascending
};

// Whether the expert kernels take these widths (rows of 16-byte vectors).
bool moe_experts_supported(int hidden, int moe_ff) noexcept;
// The most tokens moe_group takes (its pairs sit in shared memory).
constexpr int kMoeMaxPairs = 4096;

void moe_route(const float* logits, int n, int experts, int k, bool norm_topk, const MoeRoute& r,
               cudaStream_t stream);
// Needs n k <= kMoeMaxPairs.
void moe_group(int n, int experts, int k, const MoeRoute& r, cudaStream_t stream);
// moe_route then moe_group, in one launch where the shared memory allows (E up to ~300 experts); one warp
// for a pass of one token.
void moe_route_group(const float* logits, int n, int experts, int k, bool norm_topk, const MoeRoute& r,
                     cudaStream_t stream);
// gate_up: [E] device pointers, each to an expert's [2 ff, hidden] bf16 (gate rows, then up rows).
// h: [n, hidden] bf16; act: [n k, ff] bf16 by slot.
void moe_gate_up(const bf16_t* const* gate_up, const bf16_t* h, int n, int k, int experts, int hidden, int ff,
                 const MoeRoute& r, bf16_t* act, cudaStream_t stream);
// down: [E] device pointers, each to an expert's [hidden, ff] bf16. out: [n k, hidden] f32 by slot.
void moe_down(const bf16_t* const* down, const bf16_t* act, int n, int k, int experts, int hidden, int ff,
              const MoeRoute& r, float* out, cudaStream_t stream);
// delta: [n, hidden] f32, overwritten.
void moe_combine(const float* out, int n, int k, int hidden, const MoeRoute& r, float* delta, cudaStream_t stream);

// moe_down then moe_combine in one launch, for a pass of one token (a batch-1 decode step): the token's k
// rows of each output row are read together and no out buffer is written. The same sums in the same order
// as the two. The kernel takes up to kMoeDownCombineMaxTokens tokens (each token's experts read for it
// alone), but at four tokens of Qwen3-30B-A3B it took the step from 8.8 to 9.7 ms (four waves of
// 102-register blocks), so moe_down_combine_supported admits one token.
constexpr int kMoeDownCombineMaxTokens = 4;
constexpr int kMoeDownCombineMaxK = 16;
bool moe_down_combine_supported(int n, int k) noexcept;  // one token, k <= kMoeDownCombineMaxK
void moe_down_combine(const bf16_t* const* down, const bf16_t* act, int n, int k, int hidden, int ff, const MoeRoute& r,
                      float* delta, cudaStream_t stream);

}  // namespace neuron::backend::cuda::kernels
