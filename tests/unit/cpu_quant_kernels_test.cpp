// The quantized GEMV / GEMM kernels against a dequantize-then-f32 reference
// (double accumulation) on random weights of awkward sizes, every ISA this
// CPU has: within 1e-5 of the sum of |w x| terms.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "backend/cpu/gemm_bf16_avx2.hpp"
#include "backend/cpu/gemm_bf16_few.hpp"
#include "backend/cpu/gemm_bf16_pairs.hpp"
#include "backend/cpu/gemm_quant_few.hpp"
#include "backend/cpu/gemm_quant_grouped.hpp"
#include "backend/cpu/gemm_quant_int8_avx2.hpp"
#include "backend/cpu/gemm_quant_pairs.hpp"
#include "backend/cpu/isa.hpp"
#include "backend/cpu/matmul_quant.hpp"
#include "quant/dequantize.hpp"
#include "quant/quantize.hpp"
#include "tensor/dtype.hpp"

namespace neuron::backend::cpu {
namespace {

// rows x cols of `type`, its bytes uninitialised.
QuantMatrix sized(quant::GgmlType type, std::int64_t rows, std::int64_t cols) {
  QuantMatrix m;
  m.type = type;
  m.rows = rows;
  m.cols = cols;
  m.row_bytes = quant::row_bytes(type, cols);
  m.data.resize(static_cast<std::size_t>(rows) * m.row_bytes);
  return m;
}

QuantMatrix make(quant::GgmlType type, std::int64_t rows, std::int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 0.05f);
  QuantMatrix m = sized(type, rows, cols);
  std::vector<float> row(static_cast<std::size_t>(cols));
  for (std::int64_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = normal(rng);
    quant::quantize_row(type, row.data(), m.data.data() + static_cast<std::size_t>(r) * m.row_bytes, cols);
  }
  return m;
}

// y_ref and the scale |w| . |x| per output, from the dequantized weights.
void reference(const QuantMatrix& m, const float* x, std::vector<double>& y, std::vector<double>& scale) {
  std::vector<float> w(static_cast<std::size_t>(m.cols));
  y.assign(static_cast<std::size_t>(m.rows), 0);
  scale.assign(static_cast<std::size_t>(m.rows), 0);
  for (std::int64_t r = 0; r < m.rows; ++r) {
    quant::dequantize_row(m.type, m.data.data() + static_cast<std::size_t>(r) * m.row_bytes, w.data(), m.cols);
    for (std::int64_t c = 0; c < m.cols; ++c) {
      y[r] += double(w[c]) * x[c];
      scale[r] += std::abs(double(w[c]) * x[c]);
    }
  }
}

TEST(QuantKernels, GemvMatchesDequantizedReferenceOnEveryIsa) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto type : {quant::GgmlType::q8_0, quant::GgmlType::q4_k, quant::GgmlType::q6_k}) {
    const std::int64_t cols = type == quant::GgmlType::q8_0 ? 96 : 768, rows = 37;
    const QuantMatrix m = make(type, rows, cols, rng);
    std::vector<float> x(static_cast<std::size_t>(cols));
    for (auto& v : x) v = normal(rng);
    std::vector<double> want, scale;
    reference(m, x.data(), want, scale);
    for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512}) {
      if (!isa_supported(isa)) continue;
      std::vector<float> y(static_cast<std::size_t>(rows));
      gemv_quant_rows(isa, m, x.data(), 0, rows, y.data());
      for (std::int64_t r = 0; r < rows; ++r)
        EXPECT_NEAR(y[r], want[r], 1e-5 * scale[r]) << quant::ggml_type_name(type) << " " << isa_name(isa) << " row " << r;
    }
    std::vector<float> y(static_cast<std::size_t>(rows));
    gemv_quant(m, x.data(), y.data());
    for (std::int64_t r = 0; r < rows; ++r) EXPECT_NEAR(y[r], want[r], 1e-5 * scale[r]);
  }
}

// Every token of y [n, ldy] (from x [n, ldx]) within 1e-5 of the
// dequantize-then-f64 product, and the stride's padding (-7) untouched.
void expect_reference(const QuantMatrix& m, const std::vector<float>& x, std::int64_t n, std::int64_t ldx,
                      const std::vector<float>& y, std::int64_t ldy, std::string_view what) {
  for (std::int64_t t = 0; t < n; ++t) {
    std::vector<double> want, scale;
    reference(m, x.data() + t * ldx, want, scale);
    for (std::int64_t r = 0; r < m.rows; ++r)
      ASSERT_NEAR(y[t * ldy + r], want[r], 1e-5 * scale[r]) << what << " n " << n << " token " << t << " row " << r;
    for (std::int64_t r = m.rows; r < ldy; ++r) ASSERT_EQ(y[t * ldy + r], -7.0f) << "wrote past the row";
  }
}

TEST(QuantKernels, MatmulMatchesGemvRowByRow) {
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto type : {quant::GgmlType::q8_0, quant::GgmlType::q4_k, quant::GgmlType::q6_k}) {
    const std::int64_t cols = 512, rows = 300, n = 5, ldx = cols + 3, ldy = rows + 2;
    const QuantMatrix m = make(type, rows, cols, rng);
    std::vector<float> x(static_cast<std::size_t>(n * ldx));
    for (auto& v : x) v = normal(rng);
    std::vector<float> y(static_cast<std::size_t>(n * ldy), -7.0f);
    matmul_quant(x.data(), n, ldx, m, y.data(), ldy);
    expect_reference(m, x, n, ldx, y, ldy, quant::ggml_type_name(type));
  }
}

// `isa`'s few-token kernel on n random tokens, with row strides in x and y:
// both walks (decode_kernel.hpp) give the same bits, within 1e-5 of the
// dequantized reference, and nothing is written past the rows.
void expect_walks_match_reference(Isa isa, const QuantMatrix& m, std::int64_t n, std::normal_distribution<float>& normal,
                                  std::mt19937& rng) {
  const std::int64_t rows = m.rows, ldx = m.cols + 5, ldy = rows + 3;
  std::vector<float> x(static_cast<std::size_t>(n * ldx));  // [n, ldx]
  for (auto& v : x) v = normal(rng);
  std::vector<float> y(static_cast<std::size_t>(n * ldy), -7.0f), seq(y.size(), -7.0f);  // [n, ldy] each
  gemm_quant_few_rows(isa, RowWalk::interleaved, x.data(), n, ldx, m, 0, rows, y.data(), ldy);
  gemm_quant_few_rows(isa, RowWalk::sequential, x.data(), n, ldx, m, 0, rows, seq.data(), ldy);
  ASSERT_EQ(std::memcmp(y.data(), seq.data(), 4 * y.size()), 0) << quant::ggml_type_name(m.type) << " n " << n;
  for (std::int64_t t = 0; t < n; ++t) {
    std::vector<double> want, scale;
    reference(m, x.data() + t * ldx, want, scale);
    for (std::int64_t r = 0; r < rows; ++r)
      ASSERT_NEAR(y[t * ldy + r], want[r], 1e-5 * scale[r])
          << quant::ggml_type_name(m.type) << " " << isa_name(isa) << " n " << n << " token " << t << " row " << r;
    for (std::int64_t r = rows; r < ldy; ++r) ASSERT_EQ(y[t * ldy + r], -7.0f) << "wrote past the row";
  }
}

// The few-token kernel: every row block (4 and the remainders 1-3) against
// every token tile (4 and the remainders), with row strides in both operands.
TEST(QuantKernels, FewTokenGemmMatchesDequantizedReference) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  bool ran = false;
  for (auto type : {quant::GgmlType::q8_0, quant::GgmlType::q4_k, quant::GgmlType::q6_k}) {
    for (Isa isa : {Isa::avx2, Isa::avx512, Isa::avx512_bf16}) {
      if (!gemm_quant_few_supported(isa, type)) continue;
      ran = true;
      const std::int64_t cols = type == quant::GgmlType::q8_0 ? 160 : 512, rows = 39;
      const QuantMatrix m = make(type, rows, cols, rng);
      for (std::int64_t n : {1, 2, 3, 4, 5, 7, 9}) expect_walks_match_reference(isa, m, n, normal, rng);
    }
  }
  if (!ran) GTEST_SKIP() << "no AVX2 here";
}

// The bf16-pair kernels (avx512_bf16, Q4_K and Q6_K) where their error
// would show: activations over twelve orders of magnitude with outliers,
// and weights all of one sign (a Q4_K sub-block's constant term then
// carries most of each weight, and q - 8 little of it). Within 1e-5 of
// sum |w x| like the f32 kernels, on both walks alike.
TEST(QuantKernels, Bf16PairKernelsHoldTheBoundOnWideActivations) {
  if (!isa_supported(Isa::avx512_bf16)) GTEST_SKIP() << "no AVX-512 BF16 here";
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> exponent(-6.0f, 6.0f), unit(0.0f, 1.0f);
  for (auto type : {quant::GgmlType::q4_k, quant::GgmlType::q6_k}) {
    ASSERT_TRUE(gemm_quant_few_bf16_pairs(Isa::avx512_bf16, type));
    const std::int64_t cols = 1024, rows = 21;
    QuantMatrix m = make(type, rows, cols, rng);
    std::vector<float> row(static_cast<std::size_t>(cols));
    for (std::int64_t r = 0; r < rows; r += 2) {  // every other row: positive weights in [0.5, 1.5)
      for (auto& v : row) v = 0.5f + unit(rng);
      quant::quantize_row(type, row.data(), m.data.data() + static_cast<std::size_t>(r) * m.row_bytes, cols);
    }
    std::vector<float> x(static_cast<std::size_t>(cols));
    for (std::size_t c = 0; c < x.size(); ++c)
      x[c] = (unit(rng) < 0.5f ? -1.0f : 1.0f) * std::pow(10.0f, exponent(rng)) * (c % 97 == 0 ? 1e3f : 1.0f);
    std::vector<float> y(static_cast<std::size_t>(rows), NAN), seq(y.size(), NAN);
    gemm_quant_few_rows(Isa::avx512_bf16, RowWalk::interleaved, x.data(), 1, cols, m, 0, rows, y.data(), rows);
    gemm_quant_few_rows(Isa::avx512_bf16, RowWalk::sequential, x.data(), 1, cols, m, 0, rows, seq.data(), rows);
    ASSERT_EQ(std::memcmp(y.data(), seq.data(), 4 * y.size()), 0);
    std::vector<double> want, scale;
    reference(m, x.data(), want, scale);
    for (std::int64_t r = 0; r < rows; ++r)
      EXPECT_NEAR(y[r], want[r], 1e-5 * scale[r]) << quant::ggml_type_name(type) << " row " << r;
  }
}

// Blocks of any bytes but sane f16 scales (d, and the K-quants' dmin):
// Q4_0 and Q5_K, which quantize_row does not write (GGUF files bring them),
// and any quants and 6- or 8-bit scales of the others, for the kernels' tests.
QuantMatrix random_blocks(quant::GgmlType type, std::int64_t rows, std::int64_t cols, std::mt19937& rng) {
  QuantMatrix m = sized(type, rows, cols);
  for (auto& b : m.data) b = static_cast<std::byte>(rng() & 0xFF);
  const bool k_quant = type == quant::GgmlType::q4_k || type == quant::GgmlType::q5_k || type == quant::GgmlType::q6_k;
  const std::size_t block = quant::row_bytes(type, k_quant ? 256 : 32);
  const std::size_t d_at = type == quant::GgmlType::q6_k ? 208 : 0;
  const bool has_min = type == quant::GgmlType::q4_k || type == quant::GgmlType::q5_k;
  for (std::size_t at = 0; at < m.data.size(); at += block) {
    const std::uint16_t d = static_cast<std::uint16_t>(0x2000 + (rng() & 0x0FFF));  // f16 in about [0.008, 0.06)
    std::memcpy(m.data.data() + at + d_at, &d, 2);
    if (has_min) {
      const std::uint16_t dmin = static_cast<std::uint16_t>(0x2000 + (rng() & 0x0FFF));
      std::memcpy(m.data.data() + at + 2, &dmin, 2);
    }
  }
  return m;
}

// Every int8 kernel family this CPU runs (the AVX2 ones run on any AVX2 or
// AVX-512 CPU, so CI always tests them).
std::vector<Int8Kernels> int8_families() {
  std::vector<Int8Kernels> out;
  for (Int8Kernels k : {Int8Kernels::avx2, Int8Kernels::avx_vnni, Int8Kernels::avx512_vnni})
    if (int8_kernels_supported(k)) out.push_back(k);
  return out;
}

// The int8 kernels (NEURON_CPU_ACTIVATIONS=int8; Q4_K, Q6_K, Q8_0, Q5_K, Q4_0),
// each family: the operand rounds each 256 columns to int8 within half a step
// (d = max|x| / 127) and its sums of 16 are the rounded values' sums; the
// products equal the dequantized W times that rounded x within 1e-5 of
// sum |w x^|, on both walks alike, with row strides, one token (rows four
// at a time and the remainders) and several (token tiles of four and the
// remainders, past a block of 16 tokens). Blocks of any bytes: Q8_0's -128,
// Q6_K's scales of either sign, every 6-bit scale and minimum.
TEST(QuantKernels, Int8KernelsEqualTheProductWithRoundedActivations) {
  if (int8_families().empty()) GTEST_SKIP() << "no AVX2 here";
  std::mt19937 rng(10);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto type : {quant::GgmlType::q4_k, quant::GgmlType::q6_k, quant::GgmlType::q8_0, quant::GgmlType::q5_k,
                    quant::GgmlType::q4_0}) {
    ASSERT_TRUE(gemm_quant_few_int8(Isa::avx2, type));
    const std::int64_t cols = 768, rows = 23;
    const QuantMatrix m = random_blocks(type, rows, cols, rng);
    for (const std::int64_t n : {1, 2, 5, 18}) {
      const std::int64_t ldx = cols + 5, ldy = rows + 2;
      std::vector<float> x(static_cast<std::size_t>(n * ldx));
      for (std::size_t i = 0; i < x.size(); ++i) x[i] = normal(rng) * (i % 131 == 0 ? 50.0f : 1.0f);
      x[5] = 0.0f;
      if (n > 1) std::fill(x.begin() + ldx + 256, x.begin() + ldx + 512, 0.0f);  // an all-zero block
      const QuantOperand operand(Activations::int8, type, x.data(), n, ldx, cols);
      ASSERT_TRUE(operand.int8());
      std::vector<std::vector<double>> want(n), scale(n), exact(n), exact_scale(n);
      for (std::int64_t t = 0; t < n; ++t) {
        std::vector<float> rounded(static_cast<std::size_t>(cols));
        for (std::int64_t c = 0; c < cols; ++c) {
          const float d = operand.q8_scales(t)[c / 256];
          rounded[c] = d * operand.q8(t)[c];
          ASSERT_LE(std::abs(rounded[c] - x[t * ldx + c]), 0.5f * d * (1 + 1e-6f) + 1e-30f) << "column " << c;
        }
        for (std::int64_t k = 0; k < cols / 16; ++k) {
          int sum = 0;
          for (std::int64_t i = 0; i < 16; ++i) sum += operand.q8(t)[16 * k + i];
          ASSERT_EQ(operand.q8_sums(t)[k], sum);
        }
        ASSERT_EQ(operand.q8_corrections(t) != nullptr, type == quant::GgmlType::q8_0 || type == quant::GgmlType::q4_0);
        reference(m, rounded.data(), want[t], scale[t]);
        reference(m, x.data() + t * ldx, exact[t], exact_scale[t]);
      }
      for (const Int8Kernels k : int8_families()) {
        const std::string what = std::string(quant::ggml_type_name(type)) + " " + std::string(int8_kernels_name(k)) +
                                 " n " + std::to_string(n);
        std::vector<float> y(static_cast<std::size_t>(n * ldy), -7.0f), seq(y.size(), -7.0f);
        gemm_quant_few_rows(k, RowWalk::interleaved, operand, m, 0, rows, y.data(), ldy);
        gemm_quant_few_rows(k, RowWalk::sequential, operand, m, 0, rows, seq.data(), ldy);
        ASSERT_EQ(std::memcmp(y.data(), seq.data(), 4 * y.size()), 0) << what;
        for (std::int64_t t = 0; t < n; ++t) {
          double worst = 0;  // against the f32 product: the rounding's cost, bounded loosely
          for (std::int64_t r = 0; r < rows; ++r) {
            ASSERT_NEAR(y[t * ldy + r], want[t][r], 1e-5 * scale[t][r]) << what << " token " << t << " row " << r;
            worst = std::max(worst, std::abs(y[t * ldy + r] - exact[t][r]) / exact_scale[t][r]);
          }
          for (std::int64_t rr = rows; rr < ldy; ++rr) ASSERT_EQ(y[t * ldy + rr], -7.0f) << "wrote past the row";
          EXPECT_LT(worst, 5e-2) << what;
          EXPECT_GT(worst, 1e-5) << what << ": x was not rounded";
        }
      }
    }
  }
}

// The AVX2 rounding gives the operand's bits (the AVX-512 one's where the
// selected ISA's int8 kernels are AVX-512 VNNI): every value, scale and sum,
// and NaN for a block with a NaN or infinity.
TEST(QuantKernels, Avx2RoundingEqualsTheOperands) {
  if (!isa_supported(Isa::avx2)) GTEST_SKIP() << "no AVX2 here";
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(4 * 256);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = normal(rng) * (i % 61 == 0 ? 1e3f : 1.0f);
  std::fill(x.begin() + 256, x.begin() + 512, 0.0f);
  x[600] = NAN;
  const QuantOperand operand(Activations::int8, quant::GgmlType::q4_k, x.data(), 1, 1024, 1024);
  for (int b = 0; b < 4; ++b) {
    std::int8_t q[256];
    std::int16_t sums[16];
    const float d = round_to_int8_avx2(x.data() + 256 * b, q, sums);
    if (b == 2) {
      EXPECT_TRUE(std::isnan(d) && std::isnan(operand.q8_scales(0)[b]));
    } else {
      EXPECT_EQ(d, operand.q8_scales(0)[b]) << "block " << b;
    }
    EXPECT_EQ(std::memcmp(q, operand.q8(0) + 256 * b, 256), 0) << "block " << b;
    EXPECT_EQ(std::memcmp(sums, operand.q8_sums(0) + 16 * b, sizeof sums), 0) << "block " << b;
  }
}

// A NaN or infinity in x makes the int8 products NaN, as the f32 ones are, not a value.
TEST(QuantKernels, Int8KernelsPropagateNonFiniteActivations) {
  if (int8_families().empty()) GTEST_SKIP() << "no AVX2 here";
  std::mt19937 rng(11);
  const QuantMatrix m = make(quant::GgmlType::q4_k, 5, 512, rng);
  for (const Int8Kernels k : int8_families())
    for (float bad : {INFINITY, -INFINITY, NAN}) {
      std::vector<float> x(512, 0.25f);
      x[300] = bad;
      std::vector<float> y(5, 0.0f);
      gemm_quant_few_rows(k, RowWalk::interleaved, QuantOperand(Activations::int8, m.type, x.data(), 1, 512, 512), m, 0,
                          5, y.data(), 5);
      for (float v : y) EXPECT_TRUE(std::isnan(v)) << bad << " " << int8_kernels_name(k);
    }
}

// Through matmul_quant at the int8 level, batched decode's 4 tokens to a prefill's 70: where
// the CPU's int8 kernels are the AVX2 ones and it has neither AVX-512 BF16
// nor AMX (NEURON_CPU_ISA=avx2 on any CPU) every count of a K-quant takes
// them (Q8_0 and Q4_0 below kFewTokensMax), elsewhere the counts below the
// pairs kernel's; the result is the int8 product
// (within 1e-5 of the kernels' own), split over the pool's threads.
TEST(QuantKernels, MatmulTakesTheInt8Kernels) {
  if (int8_families().empty()) GTEST_SKIP() << "no AVX2 here";
  std::mt19937 rng(14);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const Activations before = cpu_activations();
  set_cpu_activations(Activations::int8);
  const Isa isa = selected_isa();
  const bool every_count = int8_kernels(isa) != Int8Kernels::avx512_vnni &&
                           !gemm_quant_pairs_fits(quant::GgmlType::q4_k, 512) && !amx_bf16_usable();
  for (auto type : {quant::GgmlType::q4_k, quant::GgmlType::q6_k, quant::GgmlType::q8_0, quant::GgmlType::q5_k,
                    quant::GgmlType::q4_0}) {
    const std::int64_t cols = 512, rows = 1030;
    const QuantMatrix m = random_blocks(type, rows, cols, rng);
    // From 4 tokens: the interleaved walk, not measured (decode_kernel.hpp), which keeps this test fast.
    for (const std::int64_t n : {std::int64_t{4}, std::int64_t{9}, kFewTokensMax - 1, std::int64_t{70}}) {
      const bool k_quant = type == quant::GgmlType::q4_k || type == quant::GgmlType::q5_k || type == quant::GgmlType::q6_k;
      if (n >= (every_count ? (k_quant ? n + 1 : kFewTokensMax) : kPairsTokensMin)) continue;
      std::vector<float> x(static_cast<std::size_t>(n * cols));
      for (auto& v : x) v = normal(rng);
      std::vector<float> y(static_cast<std::size_t>(n * rows)), want(y.size());
      matmul_quant(x.data(), n, cols, m, y.data(), rows);
      gemm_quant_few_rows(int8_kernels(isa), RowWalk::sequential,
                          QuantOperand(Activations::int8, type, x.data(), n, cols, cols), m, 0, rows, want.data(), rows);
      for (std::size_t i = 0; i < y.size(); ++i)
        ASSERT_NEAR(y[i], want[i], 1e-5f * (std::abs(want[i]) + 1.0f)) << quant::ggml_type_name(type) << " n " << n;
    }
  }
  set_cpu_activations(before);
}

// Q4_0 and Q5_K (AVX-512 kernels only): every row block and token tile,
// with row strides, against the dequantized reference, both walks alike.
TEST(QuantKernels, Q4_0AndQ5_KFewTokenKernelsMatchDequantizedReference) {
  if (!gemm_quant_few_supported(Isa::avx512, quant::GgmlType::q4_0)) GTEST_SKIP() << "no AVX-512 here";
  EXPECT_FALSE(gemm_quant_few_supported(Isa::avx2, quant::GgmlType::q5_k));
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto type : {quant::GgmlType::q4_0, quant::GgmlType::q5_k}) {
    const std::int64_t cols = 512, rows = 39;
    const QuantMatrix m = random_blocks(type, rows, cols, rng);
    for (std::int64_t n : {1, 3, 4, 5}) expect_walks_match_reference(Isa::avx512, m, n, normal, rng);
  }
}

// Both sides of the few-token threshold through the public entry point, on
// enough rows that the work is split over the pool's threads.
TEST(QuantKernels, MatmulAroundTheFewTokenThreshold) {
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto type : {quant::GgmlType::q8_0, quant::GgmlType::q4_k, quant::GgmlType::q6_k}) {
    const std::int64_t cols = 256, rows = 1030;
    const QuantMatrix m = make(type, rows, cols, rng);
    for (std::int64_t n : {std::int64_t{1}, std::int64_t{6}, kFewTokensMax - 1, kFewTokensMax}) {
      std::vector<float> x(static_cast<std::size_t>(n * cols));
      for (auto& v : x) v = normal(rng);
      std::vector<float> y(static_cast<std::size_t>(n * rows), NAN);
      matmul_quant(x.data(), n, cols, m, y.data(), rows);
      for (std::int64_t t : {std::int64_t{0}, n - 1}) {
        std::vector<double> want, scale;
        reference(m, x.data() + t * cols, want, scale);
        for (std::int64_t r = 0; r < rows; ++r)
          ASSERT_NEAR(y[t * rows + r], want[r], 1e-5 * scale[r]) << quant::ggml_type_name(type) << " n " << n << " row " << r;
      }
    }
  }
}

// Prefill products (40 tokens and more): on a CPU with AMX-BF16 the rows in
// whole blocks of 32 go to the tiles as two bf16 terms of the dequantized
// weights and the rest to sgemm; elsewhere all to sgemm. Every token, with
// row strides in both operands, stays within 1e-5 of the f32 product.
TEST(QuantKernels, PrefillMatchesDequantizedReference) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto type : {quant::GgmlType::q8_0, quant::GgmlType::q4_k, quant::GgmlType::q6_k}) {
    const std::int64_t cols = 512, rows = 1030;  // 32 blocks of 32 rows, then 6
    const QuantMatrix m = make(type, rows, cols, rng);
    for (std::int64_t n : {std::int64_t{40}, std::int64_t{77}}) {
      const std::int64_t ldx = cols + 7, ldy = rows + 5;
      std::vector<float> x(static_cast<std::size_t>(n * ldx));
      for (auto& v : x) v = normal(rng) * (rng() % 13 == 0 ? 100.f : 1.f);
      std::vector<float> y(static_cast<std::size_t>(n * ldy), -7.0f);
      matmul_quant(x.data(), n, ldx, m, y.data(), ldy);
      expect_reference(m, x, n, ldx, y, ldy, quant::ggml_type_name(type));
    }
  }
}

// The AVX2 level's prefill (matmul_quant_avx2) on any AVX2 CPU, AVX-512 ones
// too: every type, rows past the last panel of 6, tokens around the kernel's
// vectors of 8 and groups of 16, row strides in both operands, activations of
// mixed magnitudes, and Q4_K's rows grouped four to a group as well as stored.
TEST(QuantKernels, Avx2PrefillMatchesDequantizedReference) {
  if (!gemm_bf16_avx2_fits(256)) GTEST_SKIP() << "no AVX2 here";
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (auto type : {quant::GgmlType::q8_0, quant::GgmlType::q4_0, quant::GgmlType::q4_k, quant::GgmlType::q5_k,
                    quant::GgmlType::q6_k}) {
    const std::int64_t cols = 512, rows = 103;  // 17 panels of 6, then 1
    std::mt19937 same = rng;
    const QuantMatrix m = random_blocks(type, rows, cols, rng);
    QuantMatrix stored = random_blocks(type, rows, cols, same);  // m's blocks, grouped below for Q4_K
    for (const bool grouped : {false, true}) {
      if (grouped && type != quant::GgmlType::q4_k) continue;
      if (grouped) {
        group_rows(stored);
        ASSERT_EQ(stored.grouped_rows, 100);
      }
      for (const std::int64_t n : {12, 17, 40}) {
        const std::int64_t ldx = cols + 7, ldy = rows + 5;
        std::vector<float> x(static_cast<std::size_t>(n * ldx));  // [n, ldx]
        for (auto& v : x) v = normal(rng) * (rng() % 13 == 0 ? 100.f : 1.f);
        std::vector<float> y(static_cast<std::size_t>(n * ldy), -7.0f);  // [n, ldy]
        matmul_quant_avx2(x.data(), n, ldx, stored, y.data(), ldy);
        expect_reference(m, x, n, ldx, y, ldy, std::string(quant::ggml_type_name(type)) + (grouped ? " grouped" : ""));
      }
    }
  }
}

// The AVX-512 BF16 prefill (gemm_quant_pairs), every type it takes: row
// blocks of 6 and a remainder, tokens around its groups of 16 and 32, row
// strides, rows of positive weights (large K-quant mins, so the sub-block
// constants cancel most of the q sums; Q4_0 and Q5_K: random blocks) and
// activations of mixed magnitudes.
// Two terms: within 1e-5 of the dequantize-then-f32 product. One term: the
// product with x rounded to bf16, within 1e-5, and within 2^-8 of the exact one.
TEST(QuantKernels, PairsPrefillMatchesDequantizedReferenceForEachTermCount) {
  if (!gemm_quant_pairs_fits(quant::GgmlType::q4_k, 256)) GTEST_SKIP() << "no AVX-512 BF16 here";
  std::mt19937 rng(6);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (auto type : {quant::GgmlType::q8_0, quant::GgmlType::q4_0, quant::GgmlType::q4_k, quant::GgmlType::q5_k,
                    quant::GgmlType::q6_k}) {
    ASSERT_TRUE(gemm_quant_pairs_fits(type, 512));
    const std::int64_t cols = 512, rows = 37;
    const bool ours = type != quant::GgmlType::q4_0 && type != quant::GgmlType::q5_k;  // quant::quantize_row's types
    QuantMatrix m = ours ? make(type, rows, cols, rng) : random_blocks(type, rows, cols, rng);
    std::vector<float> row(static_cast<std::size_t>(cols));
    for (std::int64_t r = 0; ours && r < rows; r += 3) {
      for (auto& v : row) v = 0.5f + unit(rng);
      quant::quantize_row(type, row.data(), m.data.data() + static_cast<std::size_t>(r) * m.row_bytes, cols);
    }
    for (std::int64_t n : {std::int64_t{1}, std::int64_t{17}, std::int64_t{40}, std::int64_t{77}}) {
      const std::int64_t ldx = cols + 7, ldy = rows + 5;
      std::vector<float> x(static_cast<std::size_t>(n * ldx)), rounded(x.size());
      for (auto& v : x) v = normal(rng) * (rng() % 13 == 0 ? 100.f : 1.f);
      for (std::size_t i = 0; i < x.size(); ++i) rounded[i] = bf16_to_f32(f32_to_bf16(x[i]));
      std::vector<float> y(static_cast<std::size_t>(n * ldy), -7.0f);
      const std::string what = std::string(quant::ggml_type_name(type));
      gemm_quant_pairs(x.data(), n, ldx, m, y.data(), ldy, 2);
      expect_reference(m, x, n, ldx, y, ldy, what + " two terms");
      std::fill(y.begin(), y.end(), -7.0f);
      gemm_quant_pairs(x.data(), n, ldx, m, y.data(), ldy, 1);
      expect_reference(m, rounded, n, ldx, y, ldy, what + " one term");
      for (std::int64_t t = 0; t < n; ++t) {
        std::vector<double> want, scale;
        reference(m, x.data() + t * ldx, want, scale);
        for (std::int64_t r = 0; r < rows; ++r)
          ASSERT_NEAR(y[t * ldy + r], want[r], std::exp2(-8.0) * scale[r]) << what << " token " << t << " row " << r;
      }
    }
  }
}

// Batched decode's routing: at a reduced activation level (x in one bf16
// term) matmul_quant takes the pairs kernel from kPairsTokensMin tokens, and
// the few-token kernels below; exact, the few-token kernels up to kFewTokensMax.
TEST(QuantKernels, ReducedLevelsTakeThePairsKernelFromKPairsTokensMin) {
  if (!gemm_quant_pairs_fits(quant::GgmlType::q4_k, 512) || amx_bf16_usable())
    GTEST_SKIP() << "matmul_quant does not take gemm_quant_pairs here";
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::int64_t cols = 512, rows = 40;
  const QuantMatrix m = make(quant::GgmlType::q4_k, rows, cols, rng);
  const Activations before = cpu_activations();
  for (const std::int64_t n : {kPairsTokensMin - 1, kPairsTokensMin}) {
    std::vector<float> x(static_cast<std::size_t>(n * cols));
    for (auto& v : x) v = normal(rng);
    std::vector<float> got(static_cast<std::size_t>(n * rows)), pairs(got.size()), few(got.size());  // [n, rows] each
    gemm_quant_pairs(x.data(), n, cols, m, pairs.data(), rows, 1);
    set_cpu_activations(Activations::f32);
    gemm_quant_few(selected_isa(), x.data(), n, cols, m, few.data(), rows);
    matmul_quant(x.data(), n, cols, m, got.data(), rows);
    EXPECT_EQ(got, few) << "exact, n " << n;
    set_cpu_activations(Activations::bf16);
    matmul_quant(x.data(), n, cols, m, got.data(), rows);
    if (n >= kPairsTokensMin) {
      EXPECT_EQ(got, pairs) << "bf16, n " << n;
    } else {
      gemm_quant_few(selected_isa(), x.data(), n, cols, m, few.data(), rows);
      EXPECT_EQ(got, few) << "bf16, n " << n;
    }
  }
  set_cpu_activations(before);
}

}  // namespace
}  // namespace neuron::backend::cpu
