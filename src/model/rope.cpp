#include "model/rope.hpp"

#include <cmath>
#include <numbers>

namespace neuron::model {

std::vector<float> rope_inv_freq(const ModelConfig& cfg) {
  // Partial rotary: the frequencies of the first rotary_dim lanes, over that dimension (transformers'
  // dim = int(head_dim * partial_rotary_factor)).
  const std::int64_t dim = cfg.rope.rotary_dim(cfg.head_dim), half = dim / 2;
  std::vector<float> inv(static_cast<std::size_t>(half));
  // 1 / base ** (arange(0, dim, 2).float() / dim), in f32.
  const auto base = static_cast<double>(static_cast<float>(cfg.rope.theta));
  for (std::int64_t j = 0; j < half; ++j) {
    const float exponent = static_cast<float>(2 * j) / static_cast<float>(dim);
    inv[static_cast<std::size_t>(j)] = 1.0f / static_cast<float>(std::pow(base, exponent));
  }
  if (cfg.rope.type == RopeType::freq_factors)  // llama.cpp: theta / freq_factors[j]
    for (std::int64_t j = 0; j < half; ++j) inv[static_cast<std::size_t>(j)] /= cfg.rope.freq_factors.at(static_cast<std::size_t>(j));
  if (cfg.rope.type == RopeType::llama3) {
    const auto factor = static_cast<float>(cfg.rope.factor);
    const auto low = static_cast<float>(cfg.rope.low_freq_factor), high = static_cast<float>(cfg.rope.high_freq_factor);
    const auto old_len = static_cast<float>(cfg.rope.original_max_position_embeddings);
    const float low_wavelen = old_len / low, high_wavelen = old_len / high;
    for (float& f : inv) {
      const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
      float scaled = wavelen > low_wavelen ? f / factor : f;
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        const float smooth = (old_len / wavelen - low) / (high - low);
        scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
      }
      f = scaled;
    }
  }
  return inv;
}

}  // namespace neuron::model
