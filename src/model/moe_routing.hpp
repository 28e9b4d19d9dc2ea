#pragma once
// A mixture-of-experts layer's routing, the one definition every backend
// uses, as transformers' Qwen3MoE routes in f32: p = softmax(router logits),
// the top k experts of each token (ties to the lower expert), their weights
// renormalized to sum 1 when norm_topk_prob.
#include <cstdint>
#include <vector>

#include "model/config.hpp"

namespace neuron::model {

struct RoutedToken {
  std::int64_t token;  // row of the layer's input
  float weight;        // its weight in the token's sum of expert outputs
};

class MoeRouter {
 public:
  // logits [n, E] f32 (E = moe.num_experts), overwritten with the
  // probabilities. Afterwards tokens_of(e) lists the tokens that chose expert
  // e, in token order.
  void route(float* logits, std::int64_t n, const MoeConfig& moe);
  const std::vector<RoutedToken>& tokens_of(std::int64_t expert) const {
    return routed_[static_cast<std::size_t>(expert)];
  }
  std::int64_t experts() const noexcept { return static_cast<std::int64_t>(routed_.size()); }

 private:
  std::vector<std::vector<RoutedToken>> routed_;  // [E] each expert's tokens
  std::vector<std::int64_t> order_;               // [E] one token's experts by probability
};

}  // namespace neuron::model
