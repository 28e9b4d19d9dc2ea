#include "model/moe_routing.hpp"

#include <algorithm>
#include <cmath>

namespace neuron::model {

void MoeRouter::route(float* logits, std::int64_t n, const MoeConfig& moe) {
  const std::int64_t experts = moe.num_experts, k = moe.experts_per_token;
  routed_.resize(static_cast<std::size_t>(experts));
  for (auto& r : routed_) r.clear();
  order_.resize(static_cast<std::size_t>(experts));
  for (std::int64_t i = 0; i < n; ++i) {
    float* p = logits + i * experts;
    const float top = *std::max_element(p, p + experts);
    float sum = 0;
    for (std::int64_t e = 0; e < experts; ++e) sum += (p[e] = std::exp(p[e] - top));
    for (std::int64_t e = 0; e < experts; ++e) p[e] /= sum;
    for (std::int64_t e = 0; e < experts; ++e) order_[static_cast<std::size_t>(e)] = e;
    std::partial_sort(order_.begin(), order_.begin() + k, order_.end(),
                      [&](std::int64_t a, std::int64_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float chosen = 0;
    for (std::int64_t j = 0; j < k; ++j) chosen += p[order_[static_cast<std::size_t>(j)]];
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int64_t e = order_[static_cast<std::size_t>(j)];
      routed_[static_cast<std::size_t>(e)].push_back({i, moe.norm_topk_prob ? p[e] / chosen : p[e]});
    }
  }
}

}  // namespace neuron::model
