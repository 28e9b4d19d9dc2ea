// The Gated DeltaNet kernels (backend/cpu/gated_delta.hpp): the chunked (WY) form of the gated delta rule equals
// the recurrent one, outputs and final state, over prompts that end inside, at and past chunk boundaries, from a
// zero state and from a carried one; the causal conv1d continues across calls as over one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backend/cpu/gated_delta.hpp"

namespace neuron::backend::cpu {
namespace {

struct Inputs {
  std::vector<float> qk, v, gb;  // [n, 2 Hk dk] q then k; [n, Hv dv]; [n, 2 Hv] g then beta
};

Inputs make_inputs(std::int64_t n, const DeltaRuleShape& s, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const std::int64_t kd = s.key_heads * s.key_dim;
  Inputs in;
  in.qk.resize(static_cast<std::size_t>(n * 2 * kd));
  in.v.resize(static_cast<std::size_t>(n * s.value_heads * s.value_dim));
  in.gb.resize(static_cast<std::size_t>(n * 2 * s.value_heads));
  for (float& x : in.qk) x = normal(rng);
  for (float& x : in.v) x = normal(rng);
  for (std::int64_t t = 0; t < n; ++t) {
    for (std::int64_t h = 0; h < 2 * s.key_heads; ++h) {
      float* x = in.qk.data() + t * 2 * kd + h * s.key_dim;
      l2_normalize(x, s.key_dim, 1e-6f);
      if (h < s.key_heads)
        for (std::int64_t j = 0; j < s.key_dim; ++j) x[j] /= std::sqrt(static_cast<float>(s.key_dim));
    }
    for (std::int64_t h = 0; h < s.value_heads; ++h) {
      in.gb[static_cast<std::size_t>(t * 2 * s.value_heads + h)] = -0.5f * unit(rng) * unit(rng);  // log decay <= 0
      in.gb[static_cast<std::size_t>(t * 2 * s.value_heads + s.value_heads + h)] = unit(rng);   // beta in (0, 1)
    }
  }
  return in;
}

double worst_rel(const std::vector<float>& a, const std::vector<float>& b) {
  double w = 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    w = std::max(w, std::abs(double(a[i]) - b[i]) / std::max(1.0, std::abs(double(b[i]))));
  return w;
}

TEST(CpuGatedDelta, ChunkedFormEqualsTheRecurrentRule) {
  const DeltaRuleShape s{.key_heads = 2, .value_heads = 4, .key_dim = 32, .value_dim = 16};
  const std::int64_t kd = s.key_heads * s.key_dim, vd = s.value_heads * s.value_dim;
  const std::size_t state_size = static_cast<std::size_t>(s.value_heads * s.key_dim * s.value_dim);
  for (std::int64_t n : {2, 63, 64, 65, 200}) {
    SCOPED_TRACE(n);
    const Inputs in = make_inputs(n, s, static_cast<std::uint32_t>(n));
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 0.3f);
    std::vector<float> start(state_size);
    for (float& x : start) x = normal(rng);
    for (bool from_zero : {true, false}) {
      std::vector<float> s_rec = from_zero ? std::vector<float>(state_size) : start, s_chk = s_rec;
      std::vector<float> o_rec(static_cast<std::size_t>(n * vd)), o_chk(o_rec.size());
      gated_delta_rule(in.qk.data(), in.qk.data() + kd, 2 * kd, in.v.data(), vd, in.gb.data(),
                       in.gb.data() + s.value_heads, 2 * s.value_heads, n, s, s_rec.data(), o_rec.data(), vd);
      gated_delta_rule_chunked(in.qk.data(), in.qk.data() + kd, 2 * kd, in.v.data(), vd, in.gb.data(),
                               in.gb.data() + s.value_heads, 2 * s.value_heads, n, s, s_chk.data(), o_chk.data(), vd);
      EXPECT_LE(worst_rel(o_chk, o_rec), 1e-5) << "outputs, from_zero " << from_zero;
      EXPECT_LE(worst_rel(s_chk, s_rec), 1e-5) << "final state, from_zero " << from_zero;
      EXPECT_GT(worst_rel(o_rec, std::vector<float>(o_rec.size())), 1e-2) << "outputs are not all zero";
    }
  }
}

TEST(CpuGatedDelta, CausalConvContinuesAcrossCalls) {
  const std::int64_t n = 9, channels = 5, kernel = 4;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<std::size_t>(n * channels)), w(static_cast<std::size_t>(channels * kernel));
  for (float& v : x) v = normal(rng);
  for (float& v : w) v = normal(rng);
  std::vector<float> state_one(static_cast<std::size_t>(channels * (kernel - 1))), state_split = state_one;
  std::vector<float> one(x.size()), split(x.size());
  causal_conv1d_silu(x.data(), n, channels, channels, w.data(), kernel, state_one.data(), one.data(), channels);
  causal_conv1d_silu(x.data(), 2, channels, channels, w.data(), kernel, state_split.data(), split.data(), channels);
  causal_conv1d_silu(x.data() + 2 * channels, n - 2, channels, channels, w.data(), kernel, state_split.data(),
                     split.data() + 2 * channels, channels);
  EXPECT_EQ(one, split);
  EXPECT_EQ(state_one, state_split);
  // Token 5 of channel 2 by definition: silu(sum_j w[2, j] x[5 - 3 + j, 2]).
  float acc = 0;
  for (std::int64_t j = 0; j < kernel; ++j) acc += w[static_cast<std::size_t>(2 * kernel + j)] * x[static_cast<std::size_t>((2 + j) * channels + 2)];
  EXPECT_NEAR(one[static_cast<std::size_t>(5 * channels + 2)], acc / (1 + std::exp(-acc)), 1e-6);
}

}  // namespace
}  // namespace neuron::backend::cpu
