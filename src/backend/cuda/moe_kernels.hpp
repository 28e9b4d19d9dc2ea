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
//   moe_group     the n k (token, expert) pairs of this rank's experts
//                 grouped by expert, tokens ascending within an expert;
//                 which of its experts have a token
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
//
// Expert parallelism (model::ShardPlan::expert_parallel): a rank holds the
// experts [begin, begin + count) of the E its router scores (MoeExperts).
// Routing is over all E alike on every rank; grouping takes only the rank's
// experts, under their local ids e - begin, so the weight pointer tables and
// the `experts` of the product kernels are the rank's `count`. A pair of
// another rank's expert gets no slot (pair_slot -1) and adds nothing here
// (the ranks' all-reduce adds it); a token with none of the rank's experts
// gets a zero delta. With all E local (MoeExperts::all) the grouping is
// the one without expert parallelism, and the combine kernels run their own
// instantiation of the code tuned for it: the same work and the same bits.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.hpp"

namespace neuron::backend::cuda::kernels {

// The experts a rank holds of the E its router scores: [begin, begin + count), local id e - begin.
struct MoeExperts {
  int total = 0;  // E
  int begin = 0;
  int count = 0;
  static constexpr MoeExperts all(int experts) noexcept { return {experts, 0, experts}; }
  constexpr bool whole() const noexcept { return begin == 0 && count == total; }
};

// The device buffers of one pass's routing, for at most `n` tokens of k experts among E, grouped over the
// rank's L = MoeExperts::count experts (L = E without expert parallelism); e below is a local id.
struct MoeRoute {
  std::int32_t* expert = nullptr;     // [n, k] each token's experts (global ids), by falling probability
  float* weight = nullptr;            // [n, k] their weights
  std::int32_t* offsets = nullptr;    // [L + 1] local expert e's slots are [offsets[e], offsets[e + 1])
  std::int32_t* slot_pair = nullptr;  // [n k] slot -> pair (token * k + j), grouped by expert: [0, offsets[L]) used
  std::int32_t* pair_slot = nullptr;  // [n k] pair -> slot; -1 for a pair of an expert not the rank's
  std::int32_t* active = nullptr;     // [L + 1] active[0] local experts with a token, then those ascending
};

// Whether the expert kernels take these widths (rows of 16-byte vectors).
bool moe_experts_supported(int hidden, int moe_ff) noexcept;
// The most tokens moe_group takes (its pairs sit in shared memory).
constexpr int kMoeMaxPairs = 4096;

// logits: [n, E] f32.
void moe_route(const float* logits, int n, int experts, int k, bool norm_topk, const MoeRoute& r,
               cudaStream_t stream);
// Groups the pairs of `mine`'s experts. Needs n k <= kMoeMaxPairs.
void moe_group(int n, MoeExperts mine, int k, const MoeRoute& r, cudaStream_t stream);
// moe_route over all mine.total experts then moe_group of mine, in one launch where the shared memory allows
// (E up to ~300 experts); one warp for a pass of one token.
void moe_route_group(const float* logits, int n, MoeExperts mine, int k, bool norm_topk, const MoeRoute& r,
                     cudaStream_t stream);
// `experts`: L, the rank's (MoeExperts::count). gate_up: [L] device pointers, each to a local expert's
// [2 ff, hidden] bf16 (gate rows, then up rows). h: [n, hidden] bf16; act: [n k, ff] bf16 by slot.
void moe_gate_up(const bf16_t* const* gate_up, const bf16_t* h, int n, int k, int experts, int hidden, int ff,
                 const MoeRoute& r, bf16_t* act, cudaStream_t stream);
// down: [L] device pointers, each to a local expert's [hidden, ff] bf16. out: [n k, hidden] f32 by slot.
void moe_down(const bf16_t* const* down, const bf16_t* act, int n, int k, int experts, int hidden, int ff,
              const MoeRoute& r, float* out, cudaStream_t stream);
// delta: [n, hidden] f32, overwritten; the pairs without a slot (not mine's) add nothing.
void moe_combine(const float* out, int n, int k, int hidden, MoeExperts mine, const MoeRoute& r, float* delta,
                 cudaStream_t stream);

// moe_down then moe_combine in one launch, for a pass of one token (a batch-1 decode step): the token's k
// rows of each output row are read together and no out buffer is written. The same sums in the same order
// as the two. The kernel takes up to kMoeDownCombineMaxTokens tokens (each token's experts read for it
// alone), but at four tokens of Qwen3-30B-A3B it took the step from 8.8 to 9.7 ms (four waves of
// 102-register blocks), so moe_down_combine_supported admits one token.
constexpr int kMoeDownCombineMaxTokens = 4;
constexpr int kMoeDownCombineMaxK = 16;
bool moe_down_combine_supported(int n, int k) noexcept;  // one token, k <= kMoeDownCombineMaxK
// down: [mine.count] as moe_down's; pairs without a slot skipped, as moe_combine skips them.
void moe_down_combine(const bf16_t* const* down, const bf16_t* act, int n, int k, int hidden, int ff, MoeExperts mine,
                      const MoeRoute& r, float* delta, cudaStream_t stream);

}  // namespace neuron::backend::cuda::kernels
