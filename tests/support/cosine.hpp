#pragma once
// The cosine of two logit vectors, in double: how the GPU tests compare a
// bf16-activation forward with an f32 reference (values are not equal, their
// direction is).
#include <cmath>
#include <cstddef>
#include <span>

namespace neuron::test_support {

inline double cosine(std::span<const float> a, std::span<const float> b) {
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

}  // namespace neuron::test_support
