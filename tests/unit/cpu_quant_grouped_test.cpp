// Q4_K rows four to a group (gemm_quant_grouped.hpp): the layout gives the
// blocks back exactly, its kernel equals the dequantized W times the rounded
// x, gives the same bits for every token count and row split, and products
// that do not take it still see the rows as stored.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/activations.hpp"
#include "backend/cpu/gemm_quant_few.hpp"
#include "backend/cpu/gemm_quant_grouped.hpp"
#include "backend/cpu/gemm_quant_int8_avx2.hpp"
#include "backend/cpu/isa.hpp"
#include "backend/cpu/matmul_quant.hpp"
#include "quant/dequantize.hpp"

namespace neuron::backend::cpu {
namespace {

using quant::GgmlType;

// rows x cols of Q4_K blocks of any bytes but sane f16 d and dmin: every 6-bit scale and minimum, every nibble.
QuantMatrix random_q4_k(std::int64_t rows, std::int64_t cols, std::mt19937& rng) {
  QuantMatrix m;
  m.type = GgmlType::q4_k;
  m.rows = rows;
  m.cols = cols;
  m.row_bytes = quant::row_bytes(m.type, cols);
  m.data.resize(static_cast<std::size_t>(rows) * m.row_bytes);
  for (auto& b : m.data) b = static_cast<std::byte>(rng() & 0xFF);
  for (std::size_t at = 0; at < m.data.size(); at += quant::kQ4_KBytes)
    for (std::size_t half : {0, 2}) {
      const auto d = static_cast<std::uint16_t>(0x2000 + (rng() & 0x0FFF));  // f16 in about [0.008, 0.06)
      std::memcpy(m.data.data() + at + half, &d, 2);
    }
  return m;
}

QuantMatrix copy_of(const QuantMatrix& m) {
  QuantMatrix c;
  c.type = m.type;
  c.rows = m.rows;
  c.cols = m.cols;
  c.row_bytes = m.row_bytes;
  c.data.assign(m.data.begin(), m.data.end());
  c.grouped_rows = m.grouped_rows;
  return c;
}

// The AVX2 int8 families this CPU runs (both run on any AVX-512 CPU too).
std::vector<bool> vnni_choices() {
  std::vector<bool> out;
  if (int8_kernels_supported(Int8Kernels::avx2)) out.push_back(false);
  if (int8_kernels_supported(Int8Kernels::avx_vnni)) out.push_back(true);
  return out;
}

// Grouping permutes each group's bytes (the matrix changes) and ungroup_rows
// and StoredRows give every row back as stored, the rows past the last group
// untouched.
TEST(QuantGrouped, UngroupGivesTheRowsBackExactly) {
  std::mt19937 rng(40);
  const QuantMatrix original = random_q4_k(11, 768, rng);
  QuantMatrix m = copy_of(original);
  group_rows(m);
  EXPECT_EQ(m.grouped_rows, 8);
  EXPECT_NE(std::memcmp(m.data.data(), original.data.data(), 8 * m.row_bytes), 0);
  EXPECT_EQ(std::memcmp(m.data.data() + 8 * m.row_bytes, original.data.data() + 8 * m.row_bytes, 3 * m.row_bytes), 0);
  std::vector<std::byte> rows(original.data.size());
  ungroup_rows(m, 0, m.rows, rows.data());
  EXPECT_EQ(std::memcmp(rows.data(), original.data.data(), rows.size()), 0);
  ungroup_rows(m, 5, 6, rows.data());  // one row inside a group
  EXPECT_EQ(std::memcmp(rows.data(), original.data.data() + 5 * m.row_bytes, m.row_bytes), 0);
  if (!isa_supported(Isa::avx2)) return;  // grouping happens only with AVX2 (q4_k_grouping_pays)
  StoredRows reader;  // whole groups at a time: every row, in order, back and forth, and past the groups
  for (const std::int64_t r : {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 6, 2, 9, 5})
    EXPECT_EQ(std::memcmp(reader.row(m, r), original.data.data() + r * m.row_bytes, m.row_bytes), 0) << "row " << r;
}

// The grouped kernel against the dequantized W times the operand's rounded x
// (double sums): within 1e-5 of sum |w x^| for every row, both families,
// with row strides; a product of n tokens gives each token's one-token bits,
// and row splits on group boundaries give the whole product's bits.
TEST(QuantGrouped, KernelEqualsTheProductWithRoundedActivations) {
  if (vnni_choices().empty()) GTEST_SKIP() << "no AVX2 here";
  std::mt19937 rng(41);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::int64_t cols = 768, rows = 72;  // more than one 64-row chunk of a several-token product
  QuantMatrix m = random_q4_k(rows, cols, rng);
  const QuantMatrix plain = copy_of(m);
  group_rows(m);
  ASSERT_EQ(m.grouped_rows, rows);
  for (const std::int64_t n : {1, 3, 5}) {
    const std::int64_t ldx = cols + 3, ldy = rows + 2;
    std::vector<float> x(static_cast<std::size_t>(n * ldx));
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = normal(rng) * (i % 97 == 0 ? 40.0f : 1.0f);
    const QuantOperand operand(Activations::int8, m.type, x.data(), n, ldx, cols, true);
    ASSERT_TRUE(operand.grouped());
    for (const bool vnni : vnni_choices()) {
      const std::string what = std::string(vnni ? "avx_vnni" : "avx2") + " n " + std::to_string(n);
      std::vector<float> y(static_cast<std::size_t>(n * ldy), -7.0f), split(y.size(), -7.0f);
      gemm_q4_k_grouped_rows(vnni, operand, m, 0, rows, y.data(), ldy);
      gemm_q4_k_grouped_rows(vnni, operand, m, 0, 20, split.data(), ldy);
      gemm_q4_k_grouped_rows(vnni, operand, m, 20, rows, split.data(), ldy);
      ASSERT_EQ(std::memcmp(y.data(), split.data(), 4 * y.size()), 0) << what;
      std::vector<float> w(static_cast<std::size_t>(cols));
      for (std::int64_t t = 0; t < n; ++t) {
        std::vector<float> one(static_cast<std::size_t>(rows));
        const QuantOperand single(Activations::int8, m.type, x.data() + t * ldx, 1, ldx, cols, true);
        gemm_q4_k_grouped_rows(vnni, single, m, 0, rows, one.data(), rows);
        ASSERT_EQ(std::memcmp(one.data(), y.data() + t * ldy, 4 * rows), 0) << what << " token " << t;
        for (std::int64_t r = 0; r < rows; ++r) {
          quant::dequantize_row(plain.type, plain.data.data() + r * plain.row_bytes, w.data(), cols);
          double want = 0, scale = 0;
          for (std::int64_t c = 0; c < cols; ++c) {
            const double xr = double(operand.q8_scales(t)[c / 256]) * operand.q8(t)[c];
            want += double(w[c]) * xr;
            scale += std::abs(double(w[c]) * xr);
          }
          ASSERT_NEAR(y[t * ldy + r], want, 1e-5 * scale) << what << " token " << t << " row " << r;
        }
        for (std::int64_t r = rows; r < ldy; ++r) ASSERT_EQ(y[t * ldy + r], -7.0f) << "wrote past the rows";
      }
    }
  }
}

// Through matmul_quant, one token, a few and a prefill's 70 (rows past the
// last group included): at the int8 level a grouped matrix gives the plain
// matrix's int8 product within 2e-5 of sum |w x| (the grouped kernel for
// few tokens, the prefill paths reading rows as stored: bit for bit where
// they are not the int8 kernels); at the f32 level (the level changed since
// grouping) the product is the plain one's bit for bit (the few-token
// kernels on slabs ungrouped, the prefill paths reading rows as stored).
TEST(QuantGrouped, MatmulReadsGroupedRowsAtEveryLevel) {
  if (vnni_choices().empty()) GTEST_SKIP() << "no AVX2 here";
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const std::int64_t cols = 512, rows = 143;
  const QuantMatrix plain = random_q4_k(rows, cols, rng);
  QuantMatrix m = copy_of(plain);
  group_rows(m);
  std::vector<float> w(static_cast<std::size_t>(rows * cols));  // [rows, cols] dequantized
  for (std::int64_t r = 0; r < rows; ++r)
    quant::dequantize_row(plain.type, plain.data.data() + r * plain.row_bytes, w.data() + r * cols, cols);
  for (const std::int64_t n : {1, 6, 70}) {
    std::vector<float> x(static_cast<std::size_t>(n * cols));
    for (auto& v : x) v = normal(rng);
    std::vector<float> y(static_cast<std::size_t>(n * rows)), want(y.size());
    {
      const ActivationsScope level(Activations::f32);
      matmul_quant(x.data(), n, cols, m, y.data(), rows);
      matmul_quant(x.data(), n, cols, plain, want.data(), rows);
      EXPECT_EQ(std::memcmp(y.data(), want.data(), 4 * y.size()), 0) << "f32 n " << n;
    }
    const ActivationsScope level(Activations::int8);
    matmul_quant(x.data(), n, cols, m, y.data(), rows);
    matmul_quant(x.data(), n, cols, plain, want.data(), rows);
    bool differ = false;  // the grouped kernel ran (its sums are in another order than the one-row kernels')
    for (std::int64_t t = 0; t < n; ++t)
      for (std::int64_t r = 0; r < rows; ++r) {
        double scale = 0;
        for (std::int64_t c = 0; c < cols; ++c) scale += std::abs(double(w[r * cols + c]) * x[t * cols + c]);
        ASSERT_NEAR(y[t * rows + r], want[t * rows + r], 2e-5 * scale) << "int8 n " << n << " token " << t << " row " << r;
        differ = differ || y[t * rows + r] != want[t * rows + r];
      }
    if (n == 1) {
      EXPECT_TRUE(differ) << "one token did not take the grouped kernel";
    }
  }
}

}  // namespace
}  // namespace neuron::backend::cpu
