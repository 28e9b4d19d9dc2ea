#include "backend/cpu/recurrent_state.hpp"

#include <algorithm>

#include "util/error.hpp"

namespace neuron::backend::cpu {

RecurrentStates::RecurrentStates(const model::ModelConfig& cfg, const model::ShardPlan& plan, std::int32_t slots,
                                 std::int32_t snapshots) {
  const model::LinearAttentionConfig& c = cfg.linear;
  for (std::int64_t l = 0; l < cfg.num_hidden_layers; ++l)
    linear_index_.push_back(c.linear_layer(l) ? linear_layers_++ : -1);
  if (linear_layers_ == 0) return;
  NEURON_ASSERT(slots > 0 && snapshots >= 0);
  slots_ = slots;
  snapshots_ = snapshots;
  conv_floats_ = model::linear_conv_channels(cfg, plan) * (c.conv_kernel - 1);
  delta_floats_ = plan.linear_value_heads * c.key_head_dim * c.value_head_dim;
  const std::int64_t total = static_cast<std::int64_t>(slots_ + snapshots_) * linear_layers_ * (conv_floats_ + delta_floats_);
  data_.reset(new float[static_cast<std::size_t>(total)]);  // uninitialised: committed on first write
}

std::uint64_t RecurrentStates::bytes_per_slot() const noexcept {
  return static_cast<std::uint64_t>(linear_layers_ * (conv_floats_ + delta_floats_)) * sizeof(float);
}

std::int64_t RecurrentStates::linear_index(std::int64_t layer) const noexcept {
  if (layer < 0 || layer >= static_cast<std::int64_t>(linear_index_.size())) return -1;
  return linear_index_[static_cast<std::size_t>(layer)];
}

float* RecurrentStates::at(std::int32_t slot, std::int64_t linear_layer) {
  NEURON_ASSERT(slot >= 0 && slot < slots_ && linear_layer >= 0 && linear_layer < linear_layers_);
  return data_.get() + (static_cast<std::int64_t>(slot) * linear_layers_ + linear_layer) * (conv_floats_ + delta_floats_);
}

float* RecurrentStates::conv(std::int32_t slot, std::int64_t linear_layer) { return at(slot, linear_layer); }

float* RecurrentStates::delta(std::int32_t slot, std::int64_t linear_layer) {
  return at(slot, linear_layer) + conv_floats_;
}

void RecurrentStates::reset(std::int32_t slot, std::int64_t linear_layer) {
  float* p = at(slot, linear_layer);
  std::fill(p, p + conv_floats_ + delta_floats_, 0.0f);
}

}  // namespace neuron::backend::cpu

namespace neuron::backend::cpu {

float* RecurrentStates::whole(std::int32_t index) {
  return data_.get() + static_cast<std::int64_t>(index) * linear_layers_ * (conv_floats_ + delta_floats_);
}

void RecurrentStates::save(std::int32_t slot, std::int32_t snapshot) {
  NEURON_ASSERT(slot >= 0 && slot < slots_ && snapshot >= 0 && snapshot < snapshots_);
  const float* from = whole(slot);
  std::copy(from, from + linear_layers_ * (conv_floats_ + delta_floats_), whole(slots_ + snapshot));
}

void RecurrentStates::restore(std::int32_t snapshot, std::int32_t slot) {
  NEURON_ASSERT(slot >= 0 && slot < slots_ && snapshot >= 0 && snapshot < snapshots_);
  const float* from = whole(slots_ + snapshot);
  std::copy(from, from + linear_layers_ * (conv_floats_ + delta_floats_), whole(slot));
}

}  // namespace neuron::backend::cpu
