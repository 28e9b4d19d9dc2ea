#pragma once
// The element-wise parts of the Qwen3 forward, in f32 and in the order of
// operations Hugging Face's float32 reference uses, so logits agree to ~1e-5.
#include <cstdint>
#include <vector>

namespace neuron::backend::cpu {

// out[i] = x[i] * rsqrt(mean(x^2) + eps) * weight[i] for each of n rows of
// `dim` (row strides ld_x / ld_out; out may be x).
void rms_norm(const float* x, std::int64_t n, std::int64_t dim, std::int64_t ld_x, const float* weight, float eps,
              float* out, std::int64_t ld_out);

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)).
void silu_mul(const float* gate, const float* up, float* out, std::int64_t count);

// Rotate-half RoPE over one head vector of head_dim: element i pairs with
// i + head_dim / 2, and both turn by pos * inv_freq[i].
class RopeTable {
 public:
  // inv_freq: [rotary_dim / 2] (model::rope_inv_freq): apply() rotates a
  // head's first rotary_dim lanes (rotate-half over them) and leaves the rest. Angles are formed as
  // transformers does (pos * inv_freq rounded to f32), then cos / sin
  // evaluated in double: at position ~1000 an angle computed more exactly than
  // the reference's would differ from it by ~1e-4 rad, more than the logits
  // tolerance allows.
  RopeTable(const std::vector<float>& inv_freq, std::int64_t positions);
  void apply(float* v, std::int64_t pos) const;  // one head, in place; pos < positions
  std::int64_t positions() const noexcept { return positions_; }

 private:
  std::int64_t half_ = 0, positions_ = 0;
  std::vector<float> cos_, sin_;  // [positions, head_dim / 2] f32
};

}  // namespace neuron::backend::cpu
