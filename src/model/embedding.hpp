#pragma once
// Embedding vectors on the host, one owner for what follows pooling: L2
// normalization and Matryoshka truncation (keep the first `dimensions`
// entries, then renormalize, as Qwen3-Embedding's training allows).
#include <cstdint>
#include <span>
#include <vector>

namespace neuron::model {

// Scales v to unit L2 norm (in double); a zero vector stays zero.
void l2_normalize(std::span<float> v) noexcept;

// The vector a client gets from a pooled hidden state: its first `dimensions`
// entries (0: all; at most pooled.size()), L2-normalized when `normalize`.
std::vector<float> finish_embedding(std::span<const float> pooled, std::int32_t dimensions, bool normalize);

}  // namespace neuron::model
