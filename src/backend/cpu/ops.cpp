#include "backend/cpu/ops.hpp"

#include <cmath>

#include "util/error.hpp"

namespace neuron::backend::cpu {

void rms_norm(const float* x, std::int64_t n, std::int64_t dim, std::int64_t ld_x, const float* weight, float eps,
              float* out, std::int64_t ld_out) {
  for (std::int64_t r = 0; r < n; ++r) {
    const float* xr = x + r * ld_x;
    float* o = out + r * ld_out;
    double sum = 0.0;
    for (std::int64_t i = 0; i < dim; ++i) sum += static_cast<double>(xr[i]) * xr[i];
    const float mean = static_cast<float>(sum / static_cast<double>(dim));
    const float inv = 1.0f / std::sqrt(mean + eps);
    for (std::int64_t i = 0; i < dim; ++i) o[i] = weight[i] * (xr[i] * inv);
  }
}

void silu_mul(const float* gate, const float* up, float* out, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

RopeTable::RopeTable(const std::vector<float>& inv_freq, std::int64_t positions)
    : half_(static_cast<std::int64_t>(inv_freq.size())), positions_(positions) {
  NEURON_ASSERT(positions >= 0);
  cos_.resize(static_cast<std::size_t>(positions * half_));
  sin_.resize(cos_.size());
  for (std::int64_t p = 0; p < positions; ++p)
    for (std::int64_t i = 0; i < half_; ++i) {
      const float angle = static_cast<float>(p) * inv_freq[i];
      cos_[p * half_ + i] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin_[p * half_ + i] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
}

void RopeTable::apply(float* v, std::int64_t pos) const {
  NEURON_ASSERT(pos >= 0 && pos < positions_);
  const float* c = cos_.data() + pos * half_;
  const float* s = sin_.data() + pos * half_;
  for (std::int64_t i = 0; i < half_; ++i) {
    const float x1 = v[i], x2 = v[i + half_];
    v[i] = x1 * c[i] - x2 * s[i];
    v[i + half_] = x2 * c[i] + x1 * s[i];
  }
}

}  // namespace neuron::backend::cpu
