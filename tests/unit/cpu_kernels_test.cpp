// The CPU kernels against double-precision references on awkward sizes
// (rows and columns that are not multiples of the SIMD widths or tiles).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <numeric>
#include <cmath>
#include <cstring>
#include <thread>
#include <random>
#include <vector>

#include "backend/cpu/activations.hpp"
#include "backend/cpu/attention.hpp"
#include "backend/cpu/chunk_pool.hpp"
#include "backend/cpu/gemm_bf16_amx.hpp"
#include "backend/cpu/gemm_bf16_avx2.hpp"
#include "backend/cpu/gemm_bf16_few.hpp"
#include "backend/cpu/gemm_bf16_pairs.hpp"
#include "backend/cpu/gemv_bf16.hpp"
#include "backend/cpu/isa.hpp"
#include "backend/cpu/matmul.hpp"
#include "backend/cpu/ops.hpp"
#include "model/rope.hpp"
#include "backend/cpu/simd.hpp"
#include "backend/cpu/decode_kernel.hpp"
#include "tensor/dtype.hpp"

namespace neuron::backend::cpu {
namespace {

std::vector<float> random_floats(std::size_t n, std::uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<std::uint16_t> random_bf16(std::size_t n, std::uint32_t seed) {
  const auto f = random_floats(n, seed);
  std::vector<std::uint16_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = f32_to_bf16(f[i]);
  return v;
}

struct Shape {
  std::int64_t rows, cols, ld;
};

// Sizes around the row group (4), the vector widths (8, 16, 32) and padding (ld > cols).
const Shape kShapes[] = {{1, 1, 1},    {3, 7, 7},     {5, 17, 20},  {13, 33, 33},  {17, 100, 101},
                         {7, 1000, 1000}, {33, 31, 64}, {4, 32, 32}, {64, 4097, 4100}, {9, 15, 15}};

// Returns |error| bounds relative to sum |w x| per row.
void check_gemv(Isa isa, double tolerance) {
  if (!isa_supported(isa)) GTEST_SKIP() << isa_name(isa) << " not supported here";
  std::uint32_t seed = 1;
  for (const Shape& s : kShapes) {
    const auto w = random_bf16(static_cast<std::size_t>(s.rows * s.ld), seed++);
    const auto x = random_floats(static_cast<std::size_t>(s.cols), seed++);
    std::vector<float> y(static_cast<std::size_t>(s.rows), NAN), seq(y.size(), NAN);
    const GemvOperand op(isa, x.data(), s.cols);
    gemv_bf16_rows(isa, w.data(), s.ld, s.rows, op, y.data(), RowWalk::interleaved);
    // The sequential walk (decode_kernel.hpp) gives the same bits: each row's sum in the same order.
    gemv_bf16_rows(isa, w.data(), s.ld, s.rows, op, seq.data(), RowWalk::sequential);
    EXPECT_EQ(std::memcmp(y.data(), seq.data(), 4 * y.size()), 0) << isa_name(isa) << " rows " << s.rows;
    for (std::int64_t r = 0; r < s.rows; ++r) {
      double exact = 0, magnitude = 0;
      for (std::int64_t c = 0; c < s.cols; ++c) {
        const double p = double(bf16_to_f32(w[r * s.ld + c])) * x[c];
        exact += p;
        magnitude += std::abs(p);
      }
      EXPECT_LE(std::abs(y[r] - exact), tolerance * magnitude + 1e-30)
          << isa_name(isa) << " rows " << s.rows << " cols " << s.cols << " row " << r;
    }
  }
}

TEST(CpuGemv, ScalarMatchesReference) { check_gemv(Isa::scalar, 1e-6 * 8); }
TEST(CpuGemv, Avx2MatchesReference) { check_gemv(Isa::avx2, 1e-6 * 8); }
TEST(CpuGemv, Avx512MatchesReference) { check_gemv(Isa::avx512, 1e-6 * 8); }
// The bf16 split leaves up to 2^-17 relative error per product.
TEST(CpuGemv, Avx512Bf16MatchesReference) { check_gemv(Isa::avx512_bf16, 2e-5); }

TEST(CpuGemv, VariantsAgreeWithScalar) {
  const Shape s{23, 517, 520};
  const auto w = random_bf16(static_cast<std::size_t>(s.rows * s.ld), 99);
  const auto x = random_floats(static_cast<std::size_t>(s.cols), 100);
  std::vector<float> ref(static_cast<std::size_t>(s.rows));
  gemv_bf16_rows(Isa::scalar, w.data(), s.ld, s.rows, GemvOperand(Isa::scalar, x.data(), s.cols), ref.data(),
                 RowWalk::interleaved);
  for (Isa isa : {Isa::avx2, Isa::avx512, Isa::avx512_bf16}) {
    if (!isa_supported(isa)) continue;
    std::vector<float> y(ref.size());
    gemv_bf16_rows(isa, w.data(), s.ld, s.rows, GemvOperand(isa, x.data(), s.cols), y.data(), RowWalk::interleaved);
    for (std::size_t r = 0; r < y.size(); ++r) EXPECT_NEAR(y[r], ref[r], 1e-3) << isa_name(isa) << " row " << r;
  }
}

// The kernel (decode_kernel.hpp) is measured once per type and kept; from a
// full token tile the kernels walk interleaved whatever one token measured;
// types without a walk-aware kernel are interleaved. Only bf16, Q4_K and
// Q6_K may pick the vdpbf16ps kernels, and only where the CPU has them.
TEST(CpuRowWalk, MeasuredOncePerTypeAndInterleavedFromFourTokens) {
  for (auto type : {quant::GgmlType::bf16, quant::GgmlType::q8_0, quant::GgmlType::q4_k, quant::GgmlType::q4_0,
                    quant::GgmlType::q5_k}) {
    const DecodeKernel kernel = decode_kernel(type);
    EXPECT_EQ(decode_kernel(type).isa, kernel.isa);
    EXPECT_EQ(decode_kernel(type).walk, kernel.walk);
    if (kernel.isa != selected_isa()) {
      EXPECT_TRUE(type == quant::GgmlType::bf16 || type == quant::GgmlType::q4_k || type == quant::GgmlType::q6_k);
      EXPECT_EQ(kernel.isa, Isa::avx512_bf16);
      EXPECT_TRUE(isa_supported(Isa::avx512_bf16));
    }
    const RowWalk first = row_walk(type);
    EXPECT_EQ(first, kernel.walk);
    EXPECT_EQ(row_walk(type), first);
    EXPECT_EQ(row_walk(type, 1), first);
    EXPECT_EQ(row_walk(type, 3), first);
    EXPECT_EQ(row_walk(type, 4), RowWalk::interleaved);
    EXPECT_EQ(row_walk(type, 39), RowWalk::interleaved);
  }
  EXPECT_EQ(row_walk(quant::GgmlType::q5_0), RowWalk::interleaved);  // no few-token kernel: not measured
  EXPECT_EQ(row_walk_name(RowWalk::sequential), "sequential");
}

TEST(CpuGemv, ThreadedProductCoversEveryRow) {
  // Large enough to run on every OpenMP thread, with a row count that splits unevenly.
  const std::int64_t rows = 1027, cols = 1031;
  const auto w = random_bf16(static_cast<std::size_t>(rows * cols), 5);
  const auto x = random_floats(static_cast<std::size_t>(cols), 6);
  std::vector<float> y(static_cast<std::size_t>(rows), NAN), ref(y.size());
  gemv_bf16(w.data(), rows, cols, x.data(), y.data());
  gemv_bf16_rows(Isa::scalar, w.data(), cols, rows, GemvOperand(Isa::scalar, x.data(), cols), ref.data(),
                 RowWalk::interleaved);
  for (std::int64_t r = 0; r < rows; ++r) EXPECT_NEAR(y[r], ref[r], 2e-3) << r;
}

// Every row block (4 or 2 rows and the remainders) against every token tile
// (4 tokens and the remainders), with column tails of every length mod 32.
void check_gemm_few(Isa isa, double tolerance) {
  if (!isa_supported(isa)) GTEST_SKIP() << isa_name(isa) << " not supported here";
  std::uint32_t seed = 11;
  for (const Shape& s : kShapes) {
    for (std::int64_t n : {1, 2, 3, 4, 5, 7, 8, 9, 13}) {
      const std::int64_t ldx = s.cols + 3, ldy = s.rows + 2;
      const auto w = random_bf16(static_cast<std::size_t>(s.rows * s.ld), seed++);
      const auto x = random_floats(static_cast<std::size_t>(n * ldx), seed++);
      std::vector<float> y(static_cast<std::size_t>(n * ldy), -7.0f), seq(y.size(), -7.0f);
      gemm_bf16_few_rows(isa, RowWalk::interleaved, x.data(), n, s.cols, ldx, w.data(), s.ld, s.rows, y.data(), ldy);
      // The sequential walk (decode_kernel.hpp) gives the same bits.
      gemm_bf16_few_rows(isa, RowWalk::sequential, x.data(), n, s.cols, ldx, w.data(), s.ld, s.rows, seq.data(), ldy);
      ASSERT_EQ(std::memcmp(y.data(), seq.data(), 4 * y.size()), 0)
          << isa_name(isa) << " rows " << s.rows << " n " << n;
      for (std::int64_t t = 0; t < n; ++t) {
        for (std::int64_t r = 0; r < s.rows; ++r) {
          double exact = 0, magnitude = 0;
          for (std::int64_t c = 0; c < s.cols; ++c) {
            const double p = double(bf16_to_f32(w[r * s.ld + c])) * x[t * ldx + c];
            exact += p;
            magnitude += std::abs(p);
          }
          ASSERT_LE(std::abs(y[t * ldy + r] - exact), tolerance * magnitude + 1e-30)
              << isa_name(isa) << " rows " << s.rows << " cols " << s.cols << " n " << n << " token " << t << " row " << r;
        }
        for (std::int64_t r = s.rows; r < ldy; ++r) ASSERT_EQ(y[t * ldy + r], -7.0f) << "wrote past the row";
      }
    }
  }
}

TEST(CpuGemmFew, ScalarMatchesReference) { check_gemm_few(Isa::scalar, 1e-6 * 8); }
TEST(CpuGemmFew, Avx2MatchesReference) { check_gemm_few(Isa::avx2, 1e-6 * 8); }
TEST(CpuGemmFew, Avx512MatchesReference) { check_gemm_few(Isa::avx512, 1e-6 * 8); }
TEST(CpuGemmFew, Avx512Bf16MatchesReference) { check_gemm_few(Isa::avx512_bf16, 1e-6 * 8); }

TEST(CpuGemmFew, ThreadedProductCoversEveryRowAndToken) {
  const std::int64_t rows = 1027, cols = 1031, n = 6;
  const auto w = random_bf16(static_cast<std::size_t>(rows * cols), 15);
  const auto x = random_floats(static_cast<std::size_t>(n * cols), 16);
  std::vector<float> y(static_cast<std::size_t>(n * rows), NAN), ref(y.size());
  gemm_bf16_few(x.data(), n, cols, cols, w.data(), rows, y.data(), rows);
  gemm_bf16_few_rows(Isa::scalar, RowWalk::interleaved, x.data(), n, cols, cols, w.data(), cols, rows, ref.data(),
                     rows);
  for (std::size_t i = 0; i < y.size(); ++i) ASSERT_NEAR(y[i], ref[i], 2e-3) << i;
}

// The AMX product: token counts around its 32-token passes and 16-token
// tiles, row counts with a partial block (left to the caller), f32 accuracy
// from the three-term split of x (values over a wide range of magnitudes).
TEST(CpuGemmAmx, MatchesReferenceAtF32Accuracy) {
  if (!gemm_bf16_amx_fits(32, 32)) GTEST_SKIP() << "no usable AMX-BF16 here";
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> exponent(-8.0f, 8.0f);
  for (const auto& [in, out] : {std::pair<std::int64_t, std::int64_t>{32, 32}, {96, 70}, {1024, 64}}) {
    const auto w = random_bf16(static_cast<std::size_t>(out * in), static_cast<std::uint32_t>(in + out));
    for (std::int64_t n : {1, 15, 16, 17, 33, 64, 100}) {
      const std::int64_t ldx = in + 3, ldy = out + 5;
      auto x = random_floats(static_cast<std::size_t>(n * ldx), static_cast<std::uint32_t>(n));
      for (auto& v : x) v *= std::exp2(exponent(rng));
      std::vector<float> y(static_cast<std::size_t>(n * ldy), -7.0f);
      gemm_bf16_amx(x.data(), n, in, ldx, w.data(), out, y.data(), ldy);
      const std::int64_t covered = out / kAmxRows * kAmxRows;
      for (std::int64_t t = 0; t < n; ++t) {
        for (std::int64_t o = 0; o < covered; ++o) {
          double exact = 0, magnitude = 0;
          for (std::int64_t c = 0; c < in; ++c) {
            const double p = double(bf16_to_f32(w[o * in + c])) * x[t * ldx + c];
            exact += p;
            magnitude += std::abs(p);
          }
          ASSERT_LE(std::abs(y[t * ldy + o] - exact), 1e-6 * 8 * magnitude + 1e-30)
              << "in " << in << " out " << out << " n " << n << " token " << t << " row " << o;
        }
        for (std::int64_t o = covered; o < ldy; ++o) ASSERT_EQ(y[t * ldy + o], -7.0f) << "wrote outside its rows";
      }
    }
  }
}

// The AVX-512 BF16 product: row counts around its blocks of 12 (and chunks),
// token counts around its 16-token groups and 32-token blocks, padded
// strides (nothing written outside y's rows), x over a wide range of
// magnitudes. Two terms: within 1e-5 of sum |w x| of the f32 product. One
// term: the product with x rounded to bf16 (to f32 accuracy), which is
// within 2^-8 of sum |w x| of the f32 one.
TEST(CpuGemmPairs, MatchesReferenceForEachTermCount) {
  if (!gemm_bf16_pairs_fits(32)) GTEST_SKIP() << "no AVX-512 BF16 here";
  EXPECT_FALSE(gemm_bf16_pairs_fits(48));
  std::mt19937 rng(22);
  std::uniform_real_distribution<float> exponent(-8.0f, 8.0f);
  for (const auto& [in, out] : {std::pair<std::int64_t, std::int64_t>{32, 1}, {96, 13}, {64, 25}, {1024, 70}, {160, 300}}) {
    const auto w = random_bf16(static_cast<std::size_t>(out * in), static_cast<std::uint32_t>(in + out));
    for (std::int64_t n : {1, 15, 16, 17, 33, 64, 100}) {
      const std::int64_t ldx = in + 3, ldy = out + 5;
      auto x = random_floats(static_cast<std::size_t>(n * ldx), static_cast<std::uint32_t>(n));
      for (auto& v : x) v *= std::exp2(exponent(rng));
      for (const int terms : {1, 2}) {
        std::vector<float> y(static_cast<std::size_t>(n * ldy), -7.0f);
        gemm_bf16_pairs(x.data(), n, in, ldx, w.data(), out, y.data(), ldy, terms);
        for (std::int64_t t = 0; t < n; ++t) {
          for (std::int64_t o = 0; o < out; ++o) {
            double exact = 0, rounded = 0, magnitude = 0;
            for (std::int64_t c = 0; c < in; ++c) {
              const double wv = bf16_to_f32(w[o * in + c]), xv = x[t * ldx + c];
              exact += wv * xv;
              rounded += wv * bf16_to_f32(f32_to_bf16(static_cast<float>(xv)));
              magnitude += std::abs(wv * xv);
            }
            const double got = y[t * ldy + o];
            // Bounds: two terms 1e-5 of sum |w x| from the f32 product; one term f32 accuracy from the
            // product with x rounded to bf16, and 2^-8 from the f32 product.
            const double bound = terms == 2 ? 1e-5 * magnitude : 2e-6 * magnitude;
            const double loose = terms == 2 ? 1e-5 * magnitude : std::exp2(-8.0) * magnitude;
            ASSERT_LE(std::abs(got - (terms == 2 ? exact : rounded)), bound + 1e-30)
                << "terms " << terms << " in " << in << " out " << out << " n " << n << " token " << t << " row " << o;
            ASSERT_LE(std::abs(got - exact), loose + 1e-30)
                << "terms " << terms << " in " << in << " out " << out << " n " << n << " token " << t << " row " << o;
          }
          for (std::int64_t o = out; o < ldy; ++o) ASSERT_EQ(y[t * ldy + o], -7.0f) << "wrote outside its rows";
        }
      }
    }
  }
}

// gemm_bf16_avx2 on any AVX2 CPU (AVX-512 ones too): sizes around its tiles
// (6-row panels, 48-row tasks, groups of 16 tokens as one or two vectors of
// 8, rows of 8 columns at a time) and long rows (in = 2064), against the
// f32 product.
TEST(CpuGemmAvx2, MatchesTheF32Product) {
  if (!gemm_bf16_avx2_fits(16)) GTEST_SKIP() << "no AVX2 here";
  EXPECT_FALSE(gemm_bf16_avx2_fits(20));
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> exponent(-8.0f, 8.0f);
  for (const auto& [in, out] : {std::pair<std::int64_t, std::int64_t>{8, 1}, {24, 13}, {1040, 70}, {2064, 5}, {160, 101}}) {
    const auto w = random_bf16(static_cast<std::size_t>(out * in), static_cast<std::uint32_t>(in + out));
    for (std::int64_t n : {1, 7, 8, 9, 16, 17, 40}) {
      const std::int64_t ldx = in + 3, ldy = out + 5;
      auto x = random_floats(static_cast<std::size_t>(n * ldx), static_cast<std::uint32_t>(n));
      for (auto& v : x) v *= std::exp2(exponent(rng));
      std::vector<float> y(static_cast<std::size_t>(n * ldy), -7.0f);
      gemm_bf16_avx2(x.data(), n, in, ldx, w.data(), out, y.data(), ldy);
      for (std::int64_t t = 0; t < n; ++t) {
        for (std::int64_t o = 0; o < out; ++o) {
          double exact = 0, magnitude = 0;
          for (std::int64_t c = 0; c < in; ++c) {
            const double wv = bf16_to_f32(w[o * in + c]), xv = x[t * ldx + c];
            exact += wv * xv;
            magnitude += std::abs(wv * xv);
          }
          ASSERT_LE(std::abs(y[t * ldy + o] - exact), 2e-6 * magnitude + 1e-30)
              << "in " << in << " out " << out << " n " << n << " token " << t << " row " << o;
        }
        for (std::int64_t o = out; o < ldy; ++o) ASSERT_EQ(y[t * ldy + o], -7.0f) << "wrote outside its rows";
      }
    }
  }
}

// The activation levels by name, and matmul_bf16's prefill taking x in two
// bf16 terms when exact and one when bf16 (or int8, which allows bf16) is chosen.
TEST(CpuActivations, NamesRoundTripAndThePrefillFollowsTheChoice) {
  for (Activations a : {Activations::f32, Activations::bf16, Activations::int8})
    EXPECT_EQ(parse_activations(activations_name(a)), a);
  for (const char* bad : {"", "F32", "int4", "bf16 ", "fp8"}) EXPECT_FALSE(parse_activations(bad)) << bad;
  if (!gemm_bf16_pairs_fits(256) || amx_bf16_usable()) GTEST_SKIP() << "the prefill does not take gemm_bf16_pairs here";
  const std::int64_t n = 70, in = 256, out = 40;
  const auto w = random_bf16(static_cast<std::size_t>(out * in), 31);
  const auto x = random_floats(static_cast<std::size_t>(n * in), 32);
  std::vector<float> one(static_cast<std::size_t>(n * out)), two(one.size()), got(one.size());  // [n, out] each
  gemm_bf16_pairs(x.data(), n, in, in, w.data(), out, one.data(), out, 1);
  gemm_bf16_pairs(x.data(), n, in, in, w.data(), out, two.data(), out, 2);
  ASSERT_NE(one, two);
  const Activations before = cpu_activations();
  for (Activations a : {Activations::f32, Activations::bf16, Activations::int8}) {
    set_cpu_activations(a);
    matmul_bf16(x.data(), n, in, in, w.data(), out, got.data(), out);
    EXPECT_EQ(got, a == Activations::f32 ? two : one) << activations_name(a);
  }
  set_cpu_activations(before);
}

TEST(CpuMatmul, MatchesReferenceAcrossTilesAndTokenCounts) {
  // in = 1000 makes 128-row tiles; out = 300 ends in a partial one. in = 1024
  // also takes the AMX path where there is one, with 12 rows left to the
  // pairs kernel, or the pairs kernel from kPairsTokensMin tokens elsewhere
  // with AVX-512 BF16.
  for (const std::int64_t in : {1000, 1024}) {
    const std::int64_t out = 300, ldx = in + 3, ldy = 305;
    const auto w = random_bf16(static_cast<std::size_t>(out * in), 7);
    for (std::int64_t n : {std::int64_t{1}, std::int64_t{2}, std::int64_t{5}, kPairsTokensMin - 1, kPairsTokensMin,
                           kFewTokensMax - 1, kFewTokensMax, std::int64_t{70}}) {
      const auto x = random_floats(static_cast<std::size_t>(n * ldx), 8 + static_cast<std::uint32_t>(n));
      std::vector<float> y(static_cast<std::size_t>(n * ldy), -7.0f);
      matmul_bf16(x.data(), n, in, ldx, w.data(), out, y.data(), ldy);
      for (std::int64_t i = 0; i < n; ++i) {
        for (std::int64_t o = 0; o < out; ++o) {
          double exact = 0;
          for (std::int64_t c = 0; c < in; ++c) exact += double(bf16_to_f32(w[o * in + c])) * x[i * ldx + c];
          ASSERT_NEAR(y[i * ldy + o], exact, 1e-3) << "n " << n << " token " << i << " out " << o;
        }
        for (std::int64_t o = out; o < ldy; ++o) ASSERT_EQ(y[i * ldy + o], -7.0f) << "wrote past the row";
      }
    }
  }
}

TEST(CpuOps, Bf16WideningIsExact) {
  const auto h = random_bf16(37, 11);
  std::vector<float> f(h.size());
  widen_bf16(h.data(), f.data(), static_cast<std::int64_t>(h.size()));
  for (std::size_t i = 0; i < h.size(); ++i) EXPECT_EQ(f[i], bf16_to_f32(h[i]));
}

// exp16 of in[0, 16) into out[0, 16); exp8 likewise, 8 at a time.
__attribute__((target("avx512f"))) void exp16_of(const float* in, float* out) {
  _mm512_storeu_ps(out, exp16(_mm512_loadu_ps(in)));
}
__attribute__((target("avx2,fma"))) void exp8_of(const float* in, float* out) {
  for (int i = 0; i < 16; i += 8) _mm256_storeu_ps(out + i, exp8(_mm256_loadu_ps(in + i)));
}

// The softmax's vector exp (simd.hpp): within 2e-7 relative of exp over the
// range a softmax meets (x - max <= 0) and beyond, 0 far below, NaN kept.
void check_exp(Isa isa, void (*run)(const float*, float*)) {
  if (!isa_supported(isa)) GTEST_SKIP() << isa_name(isa) << " not supported here";
  std::vector<float> x;
  for (float v = -103.0f; v <= 88.0f; v += 0.0137f) x.push_back(v);
  for (float v : {0.0f, -0.0f, 1e-8f, -1e-8f, 0.5f, -0.34657359f, 0.34657359f, -103.9f, 88.6f}) x.push_back(v);
  while (x.size() % 16) x.push_back(0.0f);
  std::vector<float> y(x.size());
  for (std::size_t i = 0; i < x.size(); i += 16) run(x.data() + i, y.data() + i);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double want = std::exp(double(x[i]));
    if (want < 1e-37) continue;  // denormal results: absolute error only
    ASSERT_LE(std::abs(y[i] - want), 2e-7 * want) << "x " << x[i];
  }
  float edge[16] = {-200.0f, -105.0f, NAN, -INFINITY, -103.5f, 89.0f};
  float out[16];
  run(edge, out);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_LT(out[1], 1e-44f);
  EXPECT_TRUE(std::isnan(out[2]));
  EXPECT_EQ(out[3], 0.0f);
  EXPECT_GT(out[4], 0.0f);  // a denormal, not flushed
  EXPECT_LT(out[4], 1e-44f);
  EXPECT_TRUE(std::isfinite(out[5]));
  EXPECT_GT(out[5], 3e38f);
}

TEST(CpuOps, Exp16MatchesExpWithinTwoUlps) { check_exp(Isa::avx512, exp16_of); }
TEST(CpuOps, Exp8MatchesExpWithinTwoUlps) { check_exp(Isa::avx2, exp8_of); }

// exp8 applies 2^n in two exact steps where exp16 scales once: the same bits.
TEST(CpuOps, Exp8EqualsExp16) {
  if (!isa_supported(Isa::avx512)) GTEST_SKIP() << "no AVX-512 here";
  std::vector<float> x;
  for (float v = -110.0f; v <= 90.0f; v += 0.00731f) x.push_back(v);
  while (x.size() % 16) x.push_back(0.0f);
  std::vector<float> a(x.size()), b(x.size());
  for (std::size_t i = 0; i < x.size(); i += 16) {
    exp16_of(x.data() + i, a.data() + i);
    exp8_of(x.data() + i, b.data() + i);
  }
  for (std::size_t i = 0; i < x.size(); ++i) ASSERT_EQ(a[i], b[i]) << "x " << x[i];
}

TEST(CpuOps, RmsNormMatchesDefinition) {
  const std::int64_t n = 3, dim = 19, ld = 21;
  const auto x = random_floats(static_cast<std::size_t>(n * ld), 12, 3.0f);
  const auto w = random_floats(static_cast<std::size_t>(dim), 13);
  std::vector<float> out(static_cast<std::size_t>(n * dim));
  rms_norm(x.data(), n, dim, ld, w.data(), 1e-6f, out.data(), dim);
  for (std::int64_t r = 0; r < n; ++r) {
    double ss = 0;
    for (std::int64_t i = 0; i < dim; ++i) ss += double(x[r * ld + i]) * x[r * ld + i];
    const double inv = 1.0 / std::sqrt(ss / dim + 1e-6);
    for (std::int64_t i = 0; i < dim; ++i) EXPECT_NEAR(out[r * dim + i], w[i] * x[r * ld + i] * inv, 1e-5);
  }
}

TEST(CpuOps, SiluMul) {
  const float g[] = {-3.0f, 0.0f, 0.5f, 4.0f}, u[] = {2.0f, 5.0f, -1.0f, 0.25f};
  float out[4];
  silu_mul(g, u, out, 4);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], g[i] / (1 + std::exp(-g[i])) * u[i], 1e-6);
}

TEST(CpuOps, RopeRotatesHalvesByPositionTimesFrequency) {
  const std::int64_t hd = 8;
  const double theta = 10000.0;
  model::ModelConfig cfg;
  cfg.head_dim = hd;
  cfg.rope.theta = theta;
  RopeTable rope(model::rope_inv_freq(cfg), 50);
  const auto v = random_floats(hd, 14);
  auto at0 = v;
  rope.apply(at0.data(), 0);
  EXPECT_EQ(at0, v);  // position 0 is the identity
  auto at37 = v;
  rope.apply(at37.data(), 37);
  for (std::int64_t i = 0; i < hd / 2; ++i) {
    const double a = 37.0 * std::pow(theta, -2.0 * i / hd);
    EXPECT_NEAR(at37[i], v[i] * std::cos(a) - v[i + hd / 2] * std::sin(a), 1e-5);
    EXPECT_NEAR(at37[i + hd / 2], v[i + hd / 2] * std::cos(a) + v[i] * std::sin(a), 1e-5);
  }
}

// Llama 3's scaling (transformers' _compute_llama3_parameters): wavelengths under original / high_freq_factor
// keep their frequency, those over original / low_freq_factor are divided by factor, the band between is
// interpolated (strictly between the two).
TEST(CpuOps, Llama3RopeScalesTheLowFrequencies) {
  model::ModelConfig plain;
  plain.head_dim = 128;
  plain.rope.theta = 500000.0;
  model::ModelConfig scaled = plain;
  scaled.rope = model::RopeConfig{model::RopeType::llama3, 500000.0, 8.0, 1.0, 4.0, 8192};
  const std::vector<float> a = model::rope_inv_freq(plain), b = model::rope_inv_freq(scaled);
  ASSERT_EQ(a.size(), 64u);
  int kept = 0, divided = 0, between = 0;
  for (std::size_t j = 0; j < a.size(); ++j) {
    const double wavelen = 2 * M_PI / a[j];
    if (wavelen < 8192.0 / 4) {
      EXPECT_EQ(b[j], a[j]) << j;
      ++kept;
    } else if (wavelen > 8192.0) {
      EXPECT_FLOAT_EQ(b[j], a[j] / 8.0f) << j;
      ++divided;
    } else {
      EXPECT_LT(b[j], a[j]) << j;
      EXPECT_GT(b[j], a[j] / 8.0f) << j;
      ++between;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(between, 0);
}

// Naive causal GQA of one sequence whose keys and values are read position by position.
using KvAt = std::function<const float*(std::int64_t head, std::int64_t pos)>;
std::vector<float> reference_attention(const float* q, std::int64_t n, std::int64_t offset, std::int64_t hd,
                                       const KvAt& k, const KvAt& v, const std::vector<std::int64_t>& kv_of_q) {
  const auto heads = static_cast<std::int64_t>(kv_of_q.size());
  std::vector<float> out(static_cast<std::size_t>(n * heads * hd));
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t h = 0; h < heads; ++h) {
      const std::int64_t visible = offset + i + 1;
      std::vector<double> s(static_cast<std::size_t>(visible));
      double mx = -1e300, sum = 0;
      for (std::int64_t j = 0; j < visible; ++j) {
        double d = 0;
        for (std::int64_t c = 0; c < hd; ++c) d += double(q[(i * heads + h) * hd + c]) * k(kv_of_q[h], j)[c];
        s[j] = d / std::sqrt(double(hd));
        mx = std::max(mx, s[j]);
      }
      for (auto& e : s) sum += (e = std::exp(e - mx));
      for (std::int64_t c = 0; c < hd; ++c) {
        double o = 0;
        for (std::int64_t j = 0; j < visible; ++j) o += s[j] / sum * v(kv_of_q[h], j)[c];
        out[(i * heads + h) * hd + c] = static_cast<float>(o);
      }
    }
  return out;
}

// Any mapping of query heads to KV heads; consecutive groups (head h reads
// KV head h / group) take the grouped decode path (one job a KV head).
class CpuAttention : public ::testing::TestWithParam<std::vector<std::int64_t>> {};

// The reference reads what the pool holds: for a bf16 pool, the values rounded to bf16.
void check_attention(const std::vector<std::int64_t>& kv_of_q, std::int64_t hd, KvPool::Element element) {
  const std::int64_t kv_heads = 2;
  const std::int32_t block_size = 7, num_blocks = 112;
  const auto heads = static_cast<std::int64_t>(kv_of_q.size());
  KvPool pool(1, kv_heads, hd, block_size, num_blocks, element);
  // Every slot of the pool gets a value; which sequence owns it is the block tables' business.
  const auto kv = random_floats(static_cast<std::size_t>(num_blocks * block_size * hd * 2), 15, 2.0f);
  const std::int64_t slots = std::int64_t{num_blocks} * block_size;
  std::vector<float> held_k(static_cast<std::size_t>(kv_heads * slots * hd)), held_v(held_k.size());  // [kv_heads, slots, hd]
  const auto held = [&](float x) { return element == KvPool::Element::bf16 ? bf16_to_f32(f32_to_bf16(x)) : x; };
  for (std::int64_t h = 0; h < kv_heads; ++h)
    for (std::int64_t r = 0; r < slots; ++r) {
      std::vector<float> k(static_cast<std::size_t>(hd)), v(k.size());  // [hd] each
      for (std::int64_t c = 0; c < hd; ++c) {
        k[c] = kv[static_cast<std::size_t>((r * hd + c) * 2 + h) % kv.size()];
        v[c] = kv[static_cast<std::size_t>((r * hd + c) * 2 + 1 - h) % kv.size()] * 0.5f;
        held_k[static_cast<std::size_t>((h * slots + r) * hd + c)] = held(k[c]);
        held_v[static_cast<std::size_t>((h * slots + r) * hd + c)] = held(v[c]);
      }
      pool.store(0, h, r, k.data(), v.data());
    }
  // n = 262 crosses the 256-query block; offsets exercise decode (short and over many blocks), prefill and
  // resumed prefill.
  const std::vector<std::pair<std::int32_t, std::int32_t>> seqs{{1, 0}, {1, 40}, {5, 3}, {70, 0}, {70, 11}, {1, 200},
                                                                {262, 5}};
  for (std::uint32_t shuffle : {0u, 3u}) {  // tables of consecutive ids (one BLAS call per run), then scattered
    std::vector<std::int32_t> ids(static_cast<std::size_t>(num_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    if (shuffle) std::shuffle(ids.begin(), ids.end(), std::mt19937(shuffle));
    Batch batch;
    std::size_t next = 0;
    for (auto [n, offset] : seqs) {
      const std::int32_t blocks = (offset + n + block_size - 1) / block_size;
      batch.add(std::vector<std::int32_t>(static_cast<std::size_t>(n), 0), offset,
                std::span(ids).subspan(next, static_cast<std::size_t>(blocks)), LogitsWanted::last);
      next += static_cast<std::size_t>(blocks);
    }
    const auto q = random_floats(static_cast<std::size_t>(batch.num_tokens() * heads * hd), 16 + shuffle);
    std::vector<float> out(q.size());
    attention(q.data(), heads * hd, batch, pool, 0, kv_of_q, out.data(), heads * hd);
    for (const SequenceStep& s : batch.seqs) {
      const auto row = [&](std::int64_t pos) {
        return std::int64_t{batch.block_ids[static_cast<std::size_t>(s.block_begin + pos / block_size)]} * block_size +
               pos % block_size;
      };
      const KvAt k = [&](std::int64_t h, std::int64_t pos) { return held_k.data() + (h * slots + row(pos)) * hd; };
      const KvAt v = [&](std::int64_t h, std::int64_t pos) { return held_v.data() + (h * slots + row(pos)) * hd; };
      const std::int64_t at = std::int64_t{s.token_begin} * heads * hd;
      const auto ref = reference_attention(q.data() + at, s.num_tokens, s.position, hd, k, v, kv_of_q);
      for (std::size_t i = 0; i < ref.size(); ++i)
        ASSERT_NEAR(out[static_cast<std::size_t>(at) + i], ref[i], 1e-5)
            << "hd " << hd << " bf16 " << (element == KvPool::Element::bf16) << " n " << s.num_tokens << " offset "
            << s.position << " shuffle " << shuffle;
    }
  }
}

TEST_P(CpuAttention, CausalGqaOverBlockTablesMatchesReference) {
  // 12: BLAS everywhere; 128 (Qwen3's): decode takes attention_decode's kernels where the CPU has AVX-512.
  // Each with an f32 pool and a bf16 one (widened for BLAS, read as bf16 by the decode kernels).
  for (const std::int64_t hd : {12, 128})
    for (const KvPool::Element element : {KvPool::Element::f32, KvPool::Element::bf16})
      check_attention(GetParam(), hd, element);
}

INSTANTIATE_TEST_SUITE_P(Mappings, CpuAttention,
                         ::testing::Values(std::vector<std::int64_t>{0, 0, 1, 1, 1, 0},  // not consecutive groups
                                           std::vector<std::int64_t>{0, 0, 0, 1, 1, 1},  // groups of 3
                                           std::vector<std::int64_t>{0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1,
                                                                     1, 1},          // groups of 9 (8, then 1)
                                           std::vector<std::int64_t>{0, 1}));            // one head a KV head


TEST(CpuChunkPool, RunsEveryChunkExactlyOnceAcrossManyRuns) {
  ChunkPool pool(3);
  for (std::int64_t chunks : {0, 1, 2, 7, 64, 1000}) {
    for (int rep = 0; rep < 50; ++rep) {
      std::vector<std::atomic<int>> hits(static_cast<std::size_t>(chunks));
      pool.run(chunks, [&](std::int64_t i) { hits[static_cast<std::size_t>(i)].fetch_add(1); });
      for (std::int64_t i = 0; i < chunks; ++i) ASSERT_EQ(hits[i].load(), 1) << chunks << " chunks, chunk " << i;
    }
  }
}

TEST(CpuChunkPool, ConcurrentCallersBothComplete) {
  // Two runners in one process (two CPU models in the daemon) share the pool.
  ChunkPool pool(1);
  std::atomic<std::int64_t> sum_a{0}, sum_b{0};
  std::thread other([&] {
    for (int rep = 0; rep < 200; ++rep) pool.run(10, [&](std::int64_t i) { sum_b += i; });
  });
  for (int rep = 0; rep < 200; ++rep) pool.run(10, [&](std::int64_t i) { sum_a += i; });
  other.join();
  EXPECT_EQ(sum_a.load(), 200 * 45);
  EXPECT_EQ(sum_b.load(), 200 * 45);
}

TEST(CpuChunkPool, ChunksAreAnEighthOfAThreadsShareWithinTheirBounds) {
  ChunkPool pool(1);  // two threads: a thread's eighth is a sixteenth of the matrix
  // 4096 rows of 576 bytes (the 0.6B's qkv at Q4_K, 2.25 MiB): 147456 bytes, 256 rows, a multiple of 4.
  EXPECT_EQ(pool.chunk_rows(4096, 576, 4), 256);
  // Small matrices keep 64 KiB chunks, huge ones 1 MiB.
  EXPECT_EQ(pool.chunk_rows(256, 576, 4), (64 << 10) / 576 / 4 * 4);
  EXPECT_EQ(pool.chunk_rows(151936, 2048, 4), (1 << 20) / 2048);
  // Never below the row multiple, even for rows wider than the cap.
  EXPECT_EQ(pool.chunk_rows(10, std::int64_t{4} << 20, 4), 4);
  for (std::int64_t rows : {1, 7, 1000, 200000})
    for (std::int64_t row_bytes : {34, 576, 8192})
      EXPECT_EQ(pool.chunk_rows(rows, row_bytes, 4) % 4, 0) << rows << " x " << row_bytes;
}

}  // namespace
}  // namespace neuron::backend::cpu
