// GGUF dequantizers and quantizers against llama.cpp: tests/data/quant/ holds
// golden vectors made by tests/tools/gen_quant_golden.py (gguf-py's numpy
// dequantizers; ggml-quants.c's quantize_row_*_ref). Equality is bitwise.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "quant/dequantize.hpp"
#include "quant/ggml_type.hpp"
#include "quant/quantize.hpp"
#include "util/error.hpp"

namespace neuron::quant {
namespace {

std::vector<std::byte> read_bytes(const std::string& name) {
  std::ifstream in(std::string(NEURON_TEST_DATA) + "/quant/" + name, std::ios::binary);
  EXPECT_TRUE(in) << name;
  std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(raw.size());
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

class DequantGolden : public ::testing::TestWithParam<GgmlType> {};

TEST_P(DequantGolden, BitEqualToLlamaCpp) {
  const GgmlType t = GetParam();
  const auto file = read_bytes("dequant_" + std::string(ggml_type_name(t)) + ".bin");
  ASSERT_GE(file.size(), 4u);
  std::uint32_t n;
  std::memcpy(&n, file.data(), 4);
  const std::size_t enc = row_bytes(t, n);
  ASSERT_EQ(file.size(), 4 + enc + 4ull * n);
  std::vector<float> want(n), got(n);
  std::memcpy(want.data(), file.data() + 4 + enc, 4ull * n);
  dequantize_row(t, file.data() + 4, got.data(), n);
  int mismatches = 0;
  for (std::uint32_t i = 0; i < n && mismatches < 5; ++i)
    if (bits(got[i]) != bits(want[i])) {
      ++mismatches;
      ADD_FAILURE() << ggml_type_name(t) << " element " << i << ": got " << got[i] << " want " << want[i];
    }
  // Any byte offset works (blocks come from mapped files at any alignment).
  std::vector<std::byte> shifted(enc + 1);
  std::memcpy(shifted.data() + 1, file.data() + 4, enc);
  dequantize_row(t, shifted.data() + 1, got.data(), n);
  EXPECT_EQ(std::memcmp(got.data(), want.data(), 4ull * n), 0);
}

INSTANTIATE_TEST_SUITE_P(Types, DequantGolden,
                         ::testing::Values(GgmlType::f32, GgmlType::f16, GgmlType::bf16, GgmlType::q8_0, GgmlType::q4_0,
                                           GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k),
                         [](const auto& info) { return std::string(ggml_type_name(info.param)); });

class QuantGolden : public ::testing::TestWithParam<GgmlType> {};

TEST_P(QuantGolden, BlocksEqualQuantizeRowRef) {
  const GgmlType t = GetParam();
  const auto file = read_bytes("quant_" + std::string(ggml_type_name(t)) + ".bin");
  ASSERT_GE(file.size(), 4u);
  std::uint32_t n;
  std::memcpy(&n, file.data(), 4);
  const std::size_t enc = row_bytes(t, n);
  ASSERT_EQ(file.size(), 4 + 4ull * n + enc);
  std::vector<float> x(n);
  std::memcpy(x.data(), file.data() + 4, 4ull * n);
  std::vector<std::byte> got(enc);
  quantize_row(t, x.data(), got.data(), n);
  const std::byte* want = file.data() + 4 + 4ull * n;
  const std::size_t block = traits(t).type_size;
  for (std::size_t b = 0; b < enc / block; ++b)
    EXPECT_EQ(std::memcmp(got.data() + b * block, want + b * block, block), 0) << ggml_type_name(t) << " block " << b;
}

INSTANTIATE_TEST_SUITE_P(Types, QuantGolden, ::testing::Values(GgmlType::q8_0, GgmlType::q4_k, GgmlType::q6_k),
                         [](const auto& info) { return std::string(ggml_type_name(info.param)); });

// Round trip on Gaussian rows: the error of each element stays within what the format's step allows.
TEST(Quantize, RoundTripErrorIsBounded) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const std::int64_t n = 4096;
  std::vector<float> x(n), y(n);
  for (auto& v : x) v = normal(rng);
  // Relative RMS error bounds: llama.cpp's own test-quantize-fns uses similar ones.
  for (auto [t, bound] : {std::pair{GgmlType::q8_0, 0.01}, std::pair{GgmlType::q6_k, 0.04}, std::pair{GgmlType::q4_k, 0.15}}) {
    std::vector<std::byte> q(row_bytes(t, n));
    quantize_row(t, x.data(), q.data(), n);
    dequantize_row(t, q.data(), y.data(), n);
    double err = 0, ref = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      err += (x[i] - y[i]) * double(x[i] - y[i]);
      ref += double(x[i]) * x[i];
    }
    EXPECT_LT(std::sqrt(err / ref), bound) << ggml_type_name(t);
  }
}

// The k-quants' scale searches eight sub-blocks at a time (AVX2) give the
// scalar reference port's bytes, on rows built to reach every branch: flat
// sub-blocks (all equal, all zero, negative constants), sub-blocks below
// Q6_K's 1e-15 floor, positive-only and negative-only ones, spikes, scales
// from 1e-30 to 1e4, subnormals.
TEST(Quantize, VectorizedScaleSearchesGiveTheReferenceBytes) {
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "no AVX2: quantize_row runs the scalar searches only";
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::int64_t n = 256 * 64;
  std::vector<float> x(n);
  for (int rep = 0; rep < 12; ++rep) {
    const float mag = std::pow(10.f, static_cast<float>(rep % 6) * 6.f - 30.f + static_cast<float>(rep / 6) * 3.f);
    for (std::int64_t i = 0; i < n; ++i) x[i] = normal(rng) * mag;
    for (std::int64_t b = 0; b < n / 16; ++b) {  // reshape some 16-value runs (a Q6_K sub-block, half a Q4_K one)
      float* r = x.data() + 16 * b;
      switch (rng() % 12) {
        case 0: std::fill(r, r + 16, 0.f); break;
        case 1: std::fill(r, r + 16, -0.75f * mag); break;
        case 2: std::fill(r, r + 16, 0.5f * mag); break;
        case 3: for (int i = 0; i < 16; ++i) r[i] = std::fabs(r[i]); break;
        case 4: for (int i = 0; i < 16; ++i) r[i] = -std::fabs(r[i]); break;
        case 5: r[rng() % 16] *= 1000.f; break;
        case 6: for (int i = 0; i < 16; ++i) r[i] *= 1e-16f; break;
        case 7: for (int i = 0; i < 16; ++i) r[i] = static_cast<float>(static_cast<int>(rng() % 7) - 3) * mag; break;
        case 8: for (int i = 0; i < 16; ++i) r[i] = 1e-39f * static_cast<float>(rng() % 5); break;
        default: break;
      }
    }
    for (GgmlType t : {GgmlType::q4_k, GgmlType::q6_k}) {
      std::vector<std::byte> simd(row_bytes(t, n)), scalar(row_bytes(t, n));
      quantize_row(t, x.data(), simd.data(), n);
      quantize_row(t, x.data(), scalar.data(), n, QuantizePath::scalar);
      const std::size_t block = traits(t).type_size;
      for (std::size_t b = 0; b < simd.size() / block; ++b)
        ASSERT_EQ(std::memcmp(simd.data() + b * block, scalar.data() + b * block, block), 0)
            << ggml_type_name(t) << " rep " << rep << " block " << b;
    }
  }
}

TEST(Quantize, RefusesNonFiniteInputs) {
  std::vector<float> x(256, 1.0f);
  x[17] = std::nanf("");
  std::vector<std::byte> q(row_bytes(GgmlType::q4_k, 256));
  EXPECT_THROW(quantize_row(GgmlType::q4_k, x.data(), q.data(), 256), Error);
  x[17] = INFINITY;
  EXPECT_THROW(quantize_row(GgmlType::q8_0, x.data(), q.data(), 256), Error);
}

TEST(Quantize, SubnormalScalesDoNotOverflow) {
  // amax so small that 1/d is infinite: the reference's store would be undefined; ours clamps.
  std::vector<float> x(32, 0.0f);
  x[3] = 1e-40f;
  std::vector<std::byte> q(row_bytes(GgmlType::q8_0, 32));
  quantize_row(GgmlType::q8_0, x.data(), q.data(), 32);
  std::vector<float> y(32);
  dequantize_row(GgmlType::q8_0, q.data(), y.data(), 32);
  for (float v : y) EXPECT_TRUE(std::isfinite(v));
}

TEST(GgmlTypes, TraitsAndNames) {
  EXPECT_EQ(row_bytes(GgmlType::q4_k, 512), 288u);
  EXPECT_EQ(row_bytes(GgmlType::q8_0, 64), 68u);
  EXPECT_EQ(row_bytes(GgmlType::q6_k, 256), 210u);
  EXPECT_EQ(parse_ggml_type("q4_k"), GgmlType::q4_k);
  EXPECT_EQ(parse_ggml_type("Q8_0"), GgmlType::q8_0);
  EXPECT_EQ(parse_ggml_type("q4_k_m"), std::nullopt);
  EXPECT_FALSE(ggml_type_traits(16).has_value());  // IQ2_XXS: not known to neuron
  EXPECT_THROW(
      {
        std::vector<std::byte> b(84);
        std::vector<float> f(256);
        dequantize_row(GgmlType::q2_k, b.data(), f.data(), 256);
      },
      Error);
}

// FP8 is neuron's own load-time format: parsed from a spec, never accepted from a file.
TEST(GgmlTypes, Fp8IsALoadTimeFormatNotAGgufType) {
  EXPECT_EQ(parse_ggml_type("fp8"), GgmlType::fp8_e4m3);
  EXPECT_EQ(ggml_type_name(GgmlType::fp8_e4m3), "FP8");
  EXPECT_FALSE(ggml_type_traits(static_cast<std::uint32_t>(GgmlType::fp8_e4m3)).has_value());
  EXPECT_TRUE(quantizable_at_load(GgmlType::fp8_e4m3));
  EXPECT_TRUE(quantizable_at_load(GgmlType::q4_k));
  EXPECT_FALSE(quantizable_at_load(GgmlType::q5_k));
  EXPECT_FALSE(quantizable_at_load(GgmlType::bf16));
  std::vector<float> f(32, 1.f);
  std::vector<std::byte> b(32);
  EXPECT_THROW(quantize_row(GgmlType::fp8_e4m3, f.data(), b.data(), 32), Error);  // made on the device
}

}  // namespace
}  // namespace neuron::quant
