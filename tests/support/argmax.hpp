#pragma once
// The greedy pick of a logits row: the first index of its largest value.
#include <algorithm>
#include <cstdint>
#include <span>

namespace neuron::test_support {

inline std::int32_t argmax(std::span<const float> v) {
  return static_cast<std::int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace neuron::test_support
