#include "model/embedding.hpp"

#include <algorithm>
#include <cmath>

namespace neuron::model {

void l2_normalize(std::span<float> v) noexcept {
  double sum = 0;
  for (const float x : v) sum += static_cast<double>(x) * x;
  if (sum <= 0) return;
  const double inv = 1.0 / std::sqrt(sum);
  for (float& x : v) x = static_cast<float>(x * inv);
}

std::vector<float> finish_embedding(std::span<const float> pooled, std::int32_t dimensions, bool normalize) {
  const std::size_t n = dimensions > 0 ? std::min<std::size_t>(static_cast<std::size_t>(dimensions), pooled.size())
                                       : pooled.size();
  std::vector<float> out(pooled.begin(), pooled.begin() + static_cast<std::ptrdiff_t>(n));
  if (normalize) l2_normalize(out);
  return out;
}

}  // namespace neuron::model
