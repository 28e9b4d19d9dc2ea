// The grouped decode-attention kernels (backend/cpu/attention_decode.hpp),
// AVX2 and AVX-512, against a double-precision reference: scores within
// 1e-5 of sum |q k| and weighted sums within 1e-5 of sum |a v|, K and V in
// f32 and in bf16, every query-group size the passes split (8, 4, 2, 1 and
// their sums), head sizes of one chunk to the most, with row strides.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/attention_decode.hpp"
#include "backend/cpu/isa.hpp"
#include "tensor/dtype.hpp"

namespace neuron::backend::cpu {
namespace {

template <class T>
void expect_kernels_match(Isa isa, std::int64_t hd, std::int64_t g, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::int64_t count = 37, lds = count + 3, ldo = hd + 5;
  std::vector<float> q(static_cast<std::size_t>(g * hd));  // [g, hd]
  for (auto& v : q) v = normal(rng);
  std::vector<T> k(static_cast<std::size_t>(count * hd)), v(k.size());  // [count, hd] each
  std::vector<float> kf(k.size()), vf(v.size());                        // the same as f32
  for (std::size_t i = 0; i < k.size(); ++i) {
    if constexpr (sizeof(T) == 2) {
      k[i] = f32_to_bf16(normal(rng));
      v[i] = f32_to_bf16(normal(rng));
      kf[i] = bf16_to_f32(k[i]);
      vf[i] = bf16_to_f32(v[i]);
    } else {
      kf[i] = k[i] = normal(rng);
      vf[i] = v[i] = normal(rng);
    }
  }
  const std::string what = std::string(isa_name(isa)) + (sizeof(T) == 2 ? " bf16" : " f32") + " hd " +
                           std::to_string(hd) + " g " + std::to_string(g);
  const float scale = 0.125f;
  std::vector<float> s(static_cast<std::size_t>(g * lds), -7.0f);  // [g, lds]
  decode_scores(isa, q.data(), g, hd, k.data(), count, scale, s.data(), lds);
  for (std::int64_t r = 0; r < g; ++r) {
    for (std::int64_t p = 0; p < count; ++p) {
      double want = 0, bound = 0;
      for (std::int64_t c = 0; c < hd; ++c) {
        want += double(q[r * hd + c]) * kf[p * hd + c];
        bound += std::abs(double(q[r * hd + c]) * kf[p * hd + c]);
      }
      ASSERT_NEAR(s[r * lds + p], scale * want, 1e-5 * scale * bound) << what << " query " << r << " row " << p;
    }
    for (std::int64_t p = count; p < lds; ++p) ASSERT_EQ(s[r * lds + p], -7.0f) << what;
  }
  for (const bool accumulate : {false, true}) {
    std::vector<float> o(static_cast<std::size_t>(g * ldo), 0.5f);  // [g, ldo]
    decode_weighted_sum(isa, s.data(), lds, g, v.data(), count, hd, o.data(), ldo, accumulate);
    for (std::int64_t r = 0; r < g; ++r) {
      for (std::int64_t c = 0; c < hd; ++c) {
        double want = accumulate ? 0.5 : 0.0, bound = 0.5;
        for (std::int64_t p = 0; p < count; ++p) {
          want += double(s[r * lds + p]) * vf[p * hd + c];
          bound += std::abs(double(s[r * lds + p]) * vf[p * hd + c]);
        }
        ASSERT_NEAR(o[r * ldo + c], want, 1e-5 * bound) << what << " accumulate " << accumulate << " column " << c;
      }
      for (std::int64_t c = hd; c < ldo; ++c) ASSERT_EQ(o[r * ldo + c], 0.5f) << what << ": wrote past the row";
    }
  }
}

TEST(CpuAttentionDecode, AvxKernelsMatchTheReference) {
  std::mt19937 rng(21);
  bool ran = false;
  for (Isa isa : {Isa::avx2, Isa::avx512}) {
    for (std::int64_t hd : {8, 16, 40, 64, 128, 136}) {
      if (!decode_fits(isa, hd)) continue;
      ran = true;
      for (std::int64_t g : {1, 2, 3, 5, 8, 15}) {
        expect_kernels_match<float>(isa, hd, g, rng);
        expect_kernels_match<std::uint16_t>(isa, hd, g, rng);
      }
    }
  }
  if (!ran) GTEST_SKIP() << "no AVX2 here";
  if (isa_supported(Isa::avx2)) {
    EXPECT_TRUE(decode_fits(Isa::avx2, 128));
    EXPECT_FALSE(decode_fits(Isa::avx2, 136));  // past 16 chunks
    EXPECT_FALSE(decode_fits(Isa::avx2, 12));   // not whole chunks
  }
}

}  // namespace
}  // namespace neuron::backend::cpu
