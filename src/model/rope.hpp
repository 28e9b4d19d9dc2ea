#pragma once
// RoPE's inverse frequencies, the one definition every backend uses: rotary
// dimension pair j of head_dim turns by position * inv_freq[j]. Computed in
// f32 as transformers computes them (_compute_default_rope_parameters and,
// for rope_type llama3, _compute_llama3_parameters), so a float32 forward
// meets its reference's angles.
#include <vector>

#include "model/config.hpp"

namespace neuron::model {

// [rotary_dim / 2] f32: head_dim / 2, or with a partial_rotary_factor the
// rotary lanes' (rotate-half then pairs lane j with j + rotary_dim / 2 and
// leaves lanes from rotary_dim on as they are).
std::vector<float> rope_inv_freq(const ModelConfig& cfg);

}  // namespace neuron::model
