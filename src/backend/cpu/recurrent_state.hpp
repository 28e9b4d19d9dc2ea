#pragma once
// The recurrent state of a hybrid model's sequences on the CPU (backend/batch.hpp:
// state slots beside the paged KV). Slot s holds, for every linear-attention
// layer, the conv's last K - 1 inputs ([C, K - 1] f32) and one delta-rule
// matrix per value head ([Hv, dk, dv] f32), of this rank's heads (a
// tensor-parallel rank keeps the state of its own key and value heads:
// model::ShardPlan, C = model::linear_conv_channels). Snapshot slots (prefix reuse:
// ModelRunner::save_state / restore_state) have the same layout and follow the
// state slots in the same allocation. Allocated once at load, uninitialised
// (pages are committed when first written, like the KV pool); a sequence's
// step at position 0 zeroes its slot's state layer by layer.
#include <cstdint>
#include <memory>
#include <vector>

#include "model/config.hpp"
#include "model/shard.hpp"

namespace neuron::backend::cpu {

class RecurrentStates {
 public:
  // `slots` and `snapshots` are ignored (0 of each) for a model without linear attention.
  RecurrentStates(const model::ModelConfig& cfg, const model::ShardPlan& plan, std::int32_t slots,
                  std::int32_t snapshots = 0);

  std::int32_t slots() const noexcept { return slots_; }
  std::int32_t snapshots() const noexcept { return snapshots_; }
  std::uint64_t bytes_per_slot() const noexcept;  // backend::state_bytes_per_slot(cfg, plan)
  // State and snapshot slots together.
  std::uint64_t bytes() const noexcept { return bytes_per_slot() * static_cast<std::uint64_t>(slots_ + snapshots_); }
  // Layer `layer`'s index among the linear-attention layers; -1 for a full-attention one.
  std::int64_t linear_index(std::int64_t layer) const noexcept;

  float* conv(std::int32_t slot, std::int64_t linear_layer);   // [C, K - 1]
  float* delta(std::int32_t slot, std::int64_t linear_layer);  // [Hv, dk, dv]
  void reset(std::int32_t slot, std::int64_t linear_layer);    // zeroes both

  // Every linear layer's state: slot -> snapshot, snapshot -> slot.
  void save(std::int32_t slot, std::int32_t snapshot);
  void restore(std::int32_t snapshot, std::int32_t slot);

 private:
  float* at(std::int32_t slot, std::int64_t linear_layer);
  float* whole(std::int32_t index);  // [linear layers, conv + delta] of slot `index` (snapshots after the slots)

  std::int32_t slots_ = 0, snapshots_ = 0;
  std::int64_t linear_layers_ = 0;
  std::int64_t conv_floats_ = 0, delta_floats_ = 0;  // per layer
  std::vector<std::int64_t> linear_index_;            // [layers] -1 for full attention
  std::unique_ptr<float[]> data_;                     // [slots + snapshots, linear layers, conv + delta] f32
};

}  // namespace neuron::backend::cpu
