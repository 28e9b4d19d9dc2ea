#include "backend/cpu/gated_delta.hpp"

#include <cmath>
#include <vector>

namespace neuron::backend::cpu {

void causal_conv1d_silu(const float* x, std::int64_t n, std::int64_t channels, std::int64_t ldx, const float* w,
                        std::int64_t kernel, float* state, float* out, std::int64_t ld_out) {
  const std::int64_t keep = kernel - 1;
#pragma omp parallel for schedule(static) if (channels * n > 4096)
  for (std::int64_t c = 0; c < channels; ++c) {
    const float* wc = w + c * kernel;
    float* sc = state + c * keep;  // [K - 1] oldest first
    for (std::int64_t t = 0; t < n; ++t) {
      const float xt = x[t * ldx + c];
      float acc = 0.0f;
      for (std::int64_t j = 0; j < keep; ++j) acc += wc[j] * sc[j];
      acc += wc[keep] * xt;
      out[t * ld_out + c] = acc / (1.0f + std::exp(-acc));
      for (std::int64_t j = 0; j + 1 < keep; ++j) sc[j] = sc[j + 1];
      if (keep > 0) sc[keep - 1] = xt;
    }
  }
}

void l2_normalize(float* x, std::int64_t dim, float eps) {
  float sum = 0.0f;
  for (std::int64_t i = 0; i < dim; ++i) sum += x[i] * x[i];
  const float inv = 1.0f / std::sqrt(sum + eps);
  for (std::int64_t i = 0; i < dim; ++i) x[i] *= inv;
}

void gated_delta_rule(const float* q, const float* k, std::int64_t ld_qk, const float* v, std::int64_t ld_v,
                      const float* g, const float* beta, std::int64_t ld_gb, std::int64_t n, const DeltaRuleShape& shape,
                      float* state, float* out, std::int64_t ld_out) {
  const std::int64_t dk = shape.key_dim, dv = shape.value_dim, group = shape.value_heads / shape.key_heads;
#pragma omp parallel for schedule(static) if (shape.value_heads > 1 && n * dk * dv > 16384)
  for (std::int64_t h = 0; h < shape.value_heads; ++h) {
    float* S = state + h * dk * dv;  // [dk, dv]
    const std::int64_t kh = h / group;
    std::vector<float> delta(static_cast<std::size_t>(dv));  // [dv]
    for (std::int64_t t = 0; t < n; ++t) {
      const float* qt = q + t * ld_qk + kh * dk;
      const float* kt = k + t * ld_qk + kh * dk;
      const float* vt = v + t * ld_v + h * dv;
      const float decay = std::exp(g[t * ld_gb + h]), b = beta[t * ld_gb + h];
      // S = exp(g) S, and kv_mem = S^T k of the decayed state.
      for (std::int64_t j = 0; j < dv; ++j) delta[static_cast<std::size_t>(j)] = 0.0f;
      for (std::int64_t i = 0; i < dk; ++i) {
        float* row = S + i * dv;
        const float ki = kt[i];
        for (std::int64_t j = 0; j < dv; ++j) {
          row[j] *= decay;
          delta[static_cast<std::size_t>(j)] += row[j] * ki;
        }
      }
      for (std::int64_t j = 0; j < dv; ++j) delta[static_cast<std::size_t>(j)] = (vt[j] - delta[static_cast<std::size_t>(j)]) * b;
      // S += k delta^T, and out = S^T q of the updated state.
      float* o = out + t * ld_out + h * dv;
      for (std::int64_t j = 0; j < dv; ++j) o[j] = 0.0f;
      for (std::int64_t i = 0; i < dk; ++i) {
        float* row = S + i * dv;
        const float ki = kt[i], qi = qt[i];
        for (std::int64_t j = 0; j < dv; ++j) {
          row[j] += ki * delta[static_cast<std::size_t>(j)];
          o[j] += row[j] * qi;
        }
      }
    }
  }
}

}  // namespace neuron::backend::cpu
