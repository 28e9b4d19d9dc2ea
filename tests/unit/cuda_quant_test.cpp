// The CUDA kernels over GGUF block formats (backend/cuda/quant_kernels.hpp,
// backend/cuda/linear.hpp) against the host reference: dequantization
// bit-equal to quant::dequantize_row on random blocks with f16 scales from
// the whole finite range (extremes included); GEMV and the dequantized
// prefill path within 1e-5 (of sum |w x|) of a dequantize-then-f64 product;
// and whole models with quantized weights on the GPU against the CPU runner.
// Skips without a GPU; compiles to a single skipped test without CUDA.
#include <gtest/gtest.h>

#ifdef NEURON_HAVE_CUDA
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <future>
#include <random>
#include <vector>

#include "backend/cuda/cuda_runner.hpp"
#include "backend/cuda/device_buffer.hpp"
#include "backend/cuda/fp8_kernels.hpp"
#include "backend/cuda/linear.hpp"
#include "backend/cuda/quant_kernels.hpp"
#include "backend/model_runner.hpp"
#include "backend/single_sequence.hpp"
#include "dist/factory.hpp"
#include "dist/communicator.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "model/random_checkpoint.hpp"
#include "quant/dequantize.hpp"
#include "support/cosine.hpp"
#include "support/cuda_fixture.hpp"
#include "support/quant_model.hpp"
#include "support/temp_dir.hpp"
#include "tensor/dtype.hpp"
#include "util/error.hpp"
#include "support/batch_driver.hpp"

namespace neuron::backend::cuda {
namespace {

using kernels::bf16_t;
using quant::GgmlType;

constexpr GgmlType kTypes[] = {GgmlType::q8_0, GgmlType::q4_0, GgmlType::q4_k, GgmlType::q5_k, GgmlType::q6_k};

// Byte offsets of a block's f16 scales.
std::vector<std::size_t> f16_fields(GgmlType t) {
  switch (t) {
    case GgmlType::q8_0:
    case GgmlType::q4_0: return {0};
    case GgmlType::q4_k:
    case GgmlType::q5_k: return {0, 2};
    case GgmlType::q6_k: return {208};
    default: return {};
  }
}

// Random blocks of `type`: random quants and 6/8-bit scales, f16 scales drawn
// from every finite f16 (a few blocks get the extremes: 65504, the smallest
// normal and subnormal, zero and negative zero).
std::vector<std::byte> random_blocks(GgmlType type, int rows, int cols, std::mt19937& rng) {
  std::vector<std::byte> out(static_cast<std::size_t>(rows) * quant::row_bytes(type, cols));
  for (auto& b : out) b = static_cast<std::byte>(rng() & 0xff);
  const std::size_t block = quant::traits(type).type_size;
  const std::uint16_t extremes[] = {0x7bff, 0xfbff, 0x0400, 0x0001, 0x0000, 0x8000, 0x3c00};
  std::size_t i = 0;
  for (std::size_t at = 0; at < out.size(); at += block, ++i)
    for (std::size_t f : f16_fields(type)) {
      std::uint16_t h;
      if (i < std::size(extremes)) {
        h = extremes[(i + f) % std::size(extremes)];
      } else {
        do h = static_cast<std::uint16_t>(rng()); while ((h & 0x7c00) == 0x7c00);
        // Mostly ordinary magnitudes (exponent near 0.01), so products stay comparable across blocks.
        if (rng() % 8 != 0) h = static_cast<std::uint16_t>((h & 0x83ff) | (0x2000 + (rng() % 4) * 0x0400));
      }
      std::memcpy(out.data() + at + f, &h, 2);
    }
  return out;
}

std::vector<float> dequantize_host(GgmlType type, const std::vector<std::byte>& w, int rows, int cols) {
  std::vector<float> out(static_cast<std::size_t>(rows) * cols);
  const std::size_t rb = quant::row_bytes(type, cols);
  for (int r = 0; r < rows; ++r)
    quant::dequantize_row(type, w.data() + r * rb, out.data() + static_cast<std::size_t>(r) * cols, cols);
  return out;
}

class CudaQuant : public test_support::CudaFixture {
 protected:
  std::vector<bf16_t> random_x(std::size_t n) {
    std::uniform_real_distribution<float> d(-1.f, 1.f);
    std::vector<bf16_t> v(n);
    for (auto& e : v) e = f32_to_bf16(d(rng_));
    return v;
  }
  // Activations as a model has them: mostly small, a few channels 100x larger, some exact zeros.
  std::vector<bf16_t> spiky_x(std::size_t n) {
    auto v = random_x(n);
    for (std::size_t i = 0; i < n; ++i) {
      if (i % 97 == 5) v[i] = f32_to_bf16(bf16_to_f32(v[i]) * 100.f);
      if (i % 31 == 7) v[i] = f32_to_bf16(bf16_to_f32(v[i]) * 1e-3f);
      if (i % 53 == 11) v[i] = 0;
    }
    return v;
  }

};

// Reference y[t, r] = sum_c w[r, c] x[t, c] in double, and sum |w x| (the scale errors are judged against).
struct Reference {
  std::vector<double> y, mag;
};
Reference reference(const std::vector<float>& w, const std::vector<bf16_t>& x, int rows, int cols, int n) {
  Reference ref{std::vector<double>(static_cast<std::size_t>(n) * rows), std::vector<double>(static_cast<std::size_t>(n) * rows)};
  for (int t = 0; t < n; ++t)
    for (int r = 0; r < rows; ++r) {
      double acc = 0, mag = 0;
      for (int c = 0; c < cols; ++c) {
        const double p = double(w[static_cast<std::size_t>(r) * cols + c]) * bf16_to_f32(x[static_cast<std::size_t>(t) * cols + c]);
        acc += p;
        mag += std::abs(p);
      }
      ref.y[static_cast<std::size_t>(t) * rows + r] = acc;
      ref.mag[static_cast<std::size_t>(t) * rows + r] = mag;
    }
  return ref;
}

TEST_F(CudaQuant, DequantizationIsBitEqualToTheReference) {
  for (GgmlType type : kTypes) {
    const int rows = 7, cols = 3 * 256;
    const auto w = random_blocks(type, rows, cols, rng_);
    const auto want = dequantize_host(type, w, rows, cols);
    auto dw = upload(w);
    auto dout = poisoned(4 * want.size());
    kernels::dequantize_f32(type, dw.data(), rows, cols, dout.data<float>(), s());
    const auto got = download<float>(dout, want.size());
    ASSERT_EQ(std::memcmp(got.data(), want.data(), 4 * want.size()), 0) << quant::ggml_type_name(type);

    // The two bf16 terms of the prefill path sum back to each weight within 2^-17 of it.
    auto dhi = poisoned(2 * want.size()), dlo = poisoned(2 * want.size());
    kernels::dequantize_bf16_split(type, dw.data(), rows, cols, dhi.data<bf16_t>(), dlo.data<bf16_t>(), s());
    const auto hi = download<bf16_t>(dhi, want.size()), lo = download<bf16_t>(dlo, want.size());
    for (std::size_t i = 0; i < want.size(); ++i)
      ASSERT_LE(std::abs(double(bf16_to_f32(hi[i])) + bf16_to_f32(lo[i]) - want[i]), std::abs(double(want[i])) * 0x1p-17)
          << quant::ggml_type_name(type) << " element " << i;
  }
}

// Four shapes: a short row (no warp of the tensor-core GEMV past its first
// unit), a long one where each warp walks several units (its prefetch of the
// next unit while one is multiplied), rows past the last whole 16-row tile;
// a Q8_0 / Q4_0 row of 25 blocks, which the tensor-core GEMV's 4-block
// Q8_0 unit does not divide; and a tall matrix (282 16-row tiles, more than
// an H200 runs blocks at once) of rows one or two units long, where most of
// a block's warps have no unit and add nothing.
TEST_F(CudaQuant, GemvMatchesTheDequantizedProduct) {
  struct Shape {
    int rows, cols;
  };
  for (const Shape shape : {Shape{37, 5 * 256}, Shape{40, 24 * 256}, Shape{21, 25 * 32}, Shape{4500, 256}}) {
    for (GgmlType type : kTypes) {
      const int rows = shape.rows, cols = shape.cols;
      if (cols % quant::traits(type).block_size != 0) continue;
      const auto w = random_blocks(type, rows, cols, rng_);
      const auto wf = dequantize_host(type, w, rows, cols);
      auto dw = upload(w);
      for (int n : {1, 2, 3, 5, 8, 13, 32}) {  // the tensor-core GEMV's 1, 2 and 4 token tiles
        const auto x = n % 2 ? spiky_x(static_cast<std::size_t>(n) * cols) : random_x(static_cast<std::size_t>(n) * cols);
        const Reference ref = reference(wf, x, rows, cols, n);
        auto dx = upload(x);
        const int ldy = rows + 3;  // outputs land in a wider matrix, as a stack's parts do
        auto dy = poisoned(4 * static_cast<std::size_t>(n) * ldy);
        kernels::quant_gemv(type, dw.data(), rows, cols, dx.data<bf16_t>(), n, dy.data<float>(), ldy, false, s());
        auto y = download<float>(dy, static_cast<std::size_t>(n) * ldy);
        // Accumulating adds the same product onto what is there.
        kernels::quant_gemv(type, dw.data(), rows, cols, dx.data<bf16_t>(), n, dy.data<float>(), ldy, true, s());
        const auto y2 = download<float>(dy, static_cast<std::size_t>(n) * ldy);
        auto dyb = poisoned(2 * static_cast<std::size_t>(n) * ldy);
        kernels::quant_gemv(type, dw.data(), rows, cols, dx.data<bf16_t>(), n, dyb.data<bf16_t>(), ldy, s());
        const auto yb = download<bf16_t>(dyb, static_cast<std::size_t>(n) * ldy);
        for (int t = 0; t < n; ++t)
          for (int r = 0; r < rows; ++r) {
            const std::size_t i = static_cast<std::size_t>(t) * rows + r, o = static_cast<std::size_t>(t) * ldy + r;
            const double tol = 1e-5 * ref.mag[i] + 1e-30;
            ASSERT_LE(std::abs(y[o] - ref.y[i]), tol) << quant::ggml_type_name(type) << " n " << n << " t " << t << " r " << r;
            ASSERT_LE(std::abs(y2[o] - 2 * ref.y[i]), 2 * tol + std::abs(ref.y[i]) * 1e-7) << "accumulate";
            ASSERT_LE(std::abs(bf16_to_f32(yb[o]) - ref.y[i]), tol + std::abs(ref.y[i]) * 0x1p-8) << "bf16 out";
          }
        for (int t = 0; t < n; ++t)
          for (int r = rows; r < ldy; ++r) ASSERT_TRUE(std::isnan(y[static_cast<std::size_t>(t) * ldy + r])) << "wrote past rows";
      }
    }
  }
}

// A stack of parts as a GGUF Q4_K_M layer has them (Q4_K rows, Q6_K rows) and a bf16 part,
// at every token count: the GEMV in passes of 8 and the dequantize + cuBLAS path.
TEST_F(CudaQuant, LinearOverMixedPartsMatchesAtEveryTokenCount) {
  const int cols = 512;
  const std::vector<std::pair<GgmlType, int>> layout = {{GgmlType::q4_k, 40}, {GgmlType::q6_k, 24}, {GgmlType::bf16, 8},
                                                        {GgmlType::q8_0, 16}};
  DeviceMatrix m;
  m.cols = cols;
  std::vector<float> wf;  // [rows, cols] the exact weights
  std::vector<std::vector<std::byte>> bytes;
  std::size_t offset = 0;
  for (auto [type, rows] : layout) {
    std::vector<std::byte> b;
    if (type == GgmlType::bf16) {
      const auto h = random_x(static_cast<std::size_t>(rows) * cols);
      b.resize(2 * h.size());
      std::memcpy(b.data(), h.data(), b.size());
      for (bf16_t v : h) wf.push_back(bf16_to_f32(v));
    } else {
      b = random_blocks(type, rows, cols, rng_);
      const auto f = dequantize_host(type, b, rows, cols);
      wf.insert(wf.end(), f.begin(), f.end());
    }
    m.parts.push_back({type, rows, offset});
    m.rows += rows;
    offset = (offset + b.size() + 255) / 256 * 256;
    bytes.push_back(std::move(b));
  }
  m.own(DeviceBuffer(offset));
  for (std::size_t i = 0; i < bytes.size(); ++i)
    NEURON_CUDA_CHECK(cudaMemcpy(m.data + m.parts[i].offset, bytes[i].data(), bytes[i].size(),
                                 cudaMemcpyHostToDevice));
  const int max_tokens = 200;
  Linear linear(s(), true, LinearScratch{true, false}, max_tokens, cols);
  for (int n : {1, 7, 9, 64, 65, 200}) {
    const auto x = random_x(static_cast<std::size_t>(n) * cols);
    const Reference ref = reference(wf, x, m.rows, cols, n);
    auto dx = upload(x);
    auto dy = poisoned(4 * static_cast<std::size_t>(n) * m.rows);
    auto dyb = poisoned(2 * static_cast<std::size_t>(n) * m.rows);
    linear(dx.data<bf16_t>(), n, m, dy.data<float>());
    linear(dx.data<bf16_t>(), n, m, dyb.data<bf16_t>());
    const auto y = download<float>(dy, ref.y.size());
    const auto yb = download<bf16_t>(dyb, ref.y.size());
    for (std::size_t i = 0; i < ref.y.size(); ++i) {
      // cuBLAS on the bf16 rows and on the two terms accumulates in f32, in its own order.
      const double tol = 1e-5 * ref.mag[i] + 1e-30;
      ASSERT_LE(std::abs(y[i] - ref.y[i]), tol) << "n " << n << " element " << i;
      ASSERT_LE(std::abs(bf16_to_f32(yb[i]) - ref.y[i]), tol + std::abs(ref.y[i]) * 0x1p-8) << "bf16, n " << n;
    }
  }
}

TEST_F(CudaQuant, UnsupportedTypesAreRefusedByName) {
  EXPECT_FALSE(kernels::quant_supported(GgmlType::q2_k));
  DeviceBuffer w(1024), x(1024), y(1024);
  try {
    kernels::quant_gemv(GgmlType::q3_k, w.data(), 1, 256, x.data<bf16_t>(), 1, y.data<float>(), 1, false, s());
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::unsupported_arch);
    EXPECT_NE(std::string(e.what()).find("Q3_K"), std::string::npos) << e.what();
  }
}

// e4m3's value of a byte (sign, 4 exponent bits of bias 7, 3 mantissa bits; no infinities).
double e4m3(std::uint8_t b) {
  const int sign = b >> 7, e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return std::nan("");
  const double v = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1 + m / 8.0, e - 7);
  return sign ? -v : v;
}

TEST_F(CudaQuant, Fp8RowsKeepEachWeightWithinTheFormatsPrecisionAndTheGemvIsExact) {
  const int rows = 37, cols = 1024;
  auto w = random_x(static_cast<std::size_t>(rows) * cols);
  for (int c = 0; c < cols; ++c) {
    w[static_cast<std::size_t>(3) * cols + c] = 0;                                         // an all-zero row
    w[static_cast<std::size_t>(5) * cols + c] = f32_to_bf16(bf16_to_f32(w[5 * cols + c]) * 3e4f);  // a huge one
    w[static_cast<std::size_t>(6) * cols + c] = f32_to_bf16(bf16_to_f32(w[6 * cols + c]) * 1e-4f);  // a tiny one
  }
  auto dw = upload(w);
  auto dq = poisoned(static_cast<std::size_t>(rows) * cols), ds = poisoned(4 * static_cast<std::size_t>(rows));
  kernels::fp8_quantize_rows(dw.data<bf16_t>(), rows, cols, 0, cols, dq.data<std::uint8_t>(), ds.data<float>(), s());
  const auto q = download<std::uint8_t>(dq, static_cast<std::size_t>(rows) * cols);
  const auto scale = download<float>(ds, rows);
  std::vector<float> wf(q.size());  // the weights the FP8 matrix stands for
  for (int r = 0; r < rows; ++r) {
    double amax = 0;
    for (int c = 0; c < cols; ++c) amax = std::max(amax, double(std::abs(bf16_to_f32(w[static_cast<std::size_t>(r) * cols + c]))));
    EXPECT_FLOAT_EQ(scale[r], amax > 0 ? static_cast<float>(amax / 448) : 1.f) << "row " << r;
    for (int c = 0; c < cols; ++c) {
      const std::size_t i = static_cast<std::size_t>(r) * cols + c;
      const double v = e4m3(q[i]) * scale[r], want = bf16_to_f32(w[i]);
      ASSERT_TRUE(std::isfinite(v)) << "row " << r;
      // 3 mantissa bits: half an ulp is 2^-4 of the value; below e4m3's normals the step is 2^-9 of the scale.
      ASSERT_LE(std::abs(v - want), std::abs(want) * 0x1p-4 + scale[r] * 0x1p-10) << "row " << r << " col " << c;
      wf[i] = static_cast<float>(e4m3(q[i])) * scale[r];
    }
  }
  // A tensor-parallel rank's columns [256, 768), scaled by the whole row: TP=1's bytes and scales.
  auto dq2 = poisoned(static_cast<std::size_t>(rows) * 512), ds2 = poisoned(4 * static_cast<std::size_t>(rows));
  kernels::fp8_quantize_rows(dw.data<bf16_t>(), rows, cols, 256, 512, dq2.data<std::uint8_t>(), ds2.data<float>(), s());
  const auto q2 = download<std::uint8_t>(dq2, static_cast<std::size_t>(rows) * 512);
  EXPECT_EQ(download<float>(ds2, rows), scale);
  for (int r = 0; r < rows; ++r)
    ASSERT_EQ(std::memcmp(q2.data() + static_cast<std::size_t>(r) * 512, q.data() + static_cast<std::size_t>(r) * cols + 256, 512), 0)
        << "row " << r;
  for (int n : {1, 2, 3, 8}) {
    const auto x = random_x(static_cast<std::size_t>(n) * cols);
    const Reference ref = reference(wf, x, rows, cols, n);
    auto dx = upload(x);
    auto dy = poisoned(4 * static_cast<std::size_t>(n) * rows);
    kernels::fp8_gemv(dq.data<std::uint8_t>(), ds.data<float>(), rows, cols, dx.data<bf16_t>(), n, dy.data<float>(), rows,
                      false, s());
    const auto y = download<float>(dy, ref.y.size());
    for (std::size_t i = 0; i < y.size(); ++i) ASSERT_LE(std::abs(y[i] - ref.y[i]), 1e-5 * ref.mag[i] + 1e-30) << "n " << n;
  }
}

// FP8 weights as Linear holds them: rows of e4m3 and their scales after them.
DeviceMatrix fp8_matrix(const std::vector<bf16_t>& w, int rows, int cols, cudaStream_t stream) {
  DeviceMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.own(DeviceBuffer(static_cast<std::size_t>(rows) * cols + 4 * rows + 256));
  m.parts.push_back({GgmlType::fp8_e4m3, rows, 0, (static_cast<std::size_t>(rows) * cols + 255) / 256 * 256});
  DeviceBuffer dw(2 * w.size());
  NEURON_CUDA_CHECK(cudaMemcpyAsync(dw.data(), w.data(), 2 * w.size(), cudaMemcpyHostToDevice, stream));
  kernels::fp8_quantize_rows(dw.data<bf16_t>(), rows, cols, 0, cols, reinterpret_cast<std::uint8_t*>(m.data),
                             reinterpret_cast<float*>(m.data + m.parts[0].scales), stream);
  NEURON_CUDA_CHECK(cudaStreamSynchronize(stream));
  return m;
}

// The FP8 GEMV at every block shape it takes (64, 128 and 256 threads, one
// and several chunks a thread, a partial last block) against the exact
// product of the weights it holds; and the MLP's gate/up product with its
// SwiGLU in the same kernel, bit-equal to the product followed by the SwiGLU kernel.
TEST_F(CudaQuant, Fp8GemvAtEveryBlockShapeAndItsSwigluEpilogueIsTheUnfusedPair) {
  const int f = 37;  // gate rows (and up rows): odd, so blocks end partial
  for (int cols : {1024, 2080, 9600}) {
    const auto w = spiky_x(static_cast<std::size_t>(2 * f) * cols);
    DeviceMatrix m = fp8_matrix(w, 2 * f, cols, s());
    const auto q = download<std::uint8_t>(m.owned, static_cast<std::size_t>(2 * f) * cols);
    std::vector<float> scale(2 * f);
    NEURON_CUDA_CHECK(cudaMemcpy(scale.data(), m.part_scales(m.parts[0]), 4 * scale.size(), cudaMemcpyDeviceToHost));
    std::vector<float> wf(q.size());
    for (std::size_t i = 0; i < q.size(); ++i) wf[i] = static_cast<float>(e4m3(q[i])) * scale[i / cols];
    Linear linear(s(), true, LinearScratch{false, true}, 64, cols);
    for (int n : {1, 2, 4, 5, 8, 11}) {
      const auto x = spiky_x(static_cast<std::size_t>(n) * cols);
      const Reference ref = reference(wf, x, 2 * f, cols, n);
      auto dx = upload(x);
      auto dy = poisoned(4 * static_cast<std::size_t>(n) * 2 * f);
      linear(dx.data<bf16_t>(), n, m, dy.data<float>());
      const auto y = download<float>(dy, ref.y.size());
      for (std::size_t i = 0; i < y.size(); ++i)
        ASSERT_LE(std::abs(y[i] - ref.y[i]), 1e-5 * ref.mag[i] + 1e-30) << "cols " << cols << " n " << n << " at " << i;
      // Unfused: the bf16 product, then the SwiGLU kernel.
      auto dgu = poisoned(2 * static_cast<std::size_t>(n) * 2 * f), dact = poisoned(2 * static_cast<std::size_t>(n) * f);
      linear(dx.data<bf16_t>(), n, m, dgu.data<bf16_t>());
      kernels::swiglu(dgu.data<bf16_t>(), n, f, dact.data<bf16_t>(), s());
      const auto want = download<bf16_t>(dact, static_cast<std::size_t>(n) * f);
      auto dfused = poisoned(2 * static_cast<std::size_t>(n) * f), dscratch = poisoned(2 * static_cast<std::size_t>(n) * 2 * f);
      linear.swiglu(dx.data<bf16_t>(), n, m, dscratch.data<bf16_t>(), dfused.data<bf16_t>());
      const auto got = download<bf16_t>(dfused, want.size());
      ASSERT_EQ(std::memcmp(got.data(), want.data(), 2 * want.size()), 0) << "cols " << cols << " n " << n;
    }
  }
}

// FP8 prefill on the tensor cores (activations quantized per token too), with
// cuBLASLt applying the scales and with the plain product scaled after: both
// agree to f32 rounding, and stay within e4m3's precision of the exact product.
TEST_F(CudaQuant, Fp8PrefillOnTheTensorCoresMatchesWithBothScalingPaths) {
  const int rows = 96, cols = 512, n = 40;
  DeviceMatrix m;
  m.rows = rows;
  m.cols = cols;
  const auto w = random_x(static_cast<std::size_t>(rows) * cols);
  auto dw = upload(w);
  m.own(DeviceBuffer(static_cast<std::size_t>(rows) * cols + 4 * rows + 256));
  m.parts.push_back({GgmlType::fp8_e4m3, rows, 0, static_cast<std::size_t>(rows) * cols});
  kernels::fp8_quantize_rows(dw.data<bf16_t>(), rows, cols, 0, cols, reinterpret_cast<std::uint8_t*>(m.data),
                             reinterpret_cast<float*>(m.data + m.parts[0].scales), s());
  std::vector<float> wf(static_cast<std::size_t>(rows) * cols);
  for (std::size_t i = 0; i < wf.size(); ++i) wf[i] = bf16_to_f32(w[i]);
  const auto x = random_x(static_cast<std::size_t>(n) * cols);
  const Reference ref = reference(wf, x, rows, cols, n);
  auto dx = upload(x);
  std::vector<std::vector<float>> outs;
  for (const char* outer : {"1", "0"}) {
    ::setenv("NEURON_CUDA_FP8_OUTER_SCALES", outer, 1);
    Linear linear(s(), true, LinearScratch{false, true}, 64, cols);
    auto dy = poisoned(4 * static_cast<std::size_t>(n) * rows);
    linear(dx.data<bf16_t>(), n, m, dy.data<float>());
    outs.push_back(download<float>(dy, ref.y.size()));
    auto dyb = poisoned(2 * static_cast<std::size_t>(n) * rows);
    linear(dx.data<bf16_t>(), n, m, dyb.data<bf16_t>());
    const auto yb = download<bf16_t>(dyb, ref.y.size());
    for (std::size_t i = 0; i < yb.size(); ++i)
      ASSERT_LE(std::abs(bf16_to_f32(yb[i]) - outs.back()[i]), std::abs(outs.back()[i]) * 0x1p-8 + 1e-6) << "bf16 out";
  }
  ::unsetenv("NEURON_CUDA_FP8_OUTER_SCALES");
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.y.size(); ++i) {
    ASSERT_LE(std::abs(outs[0][i] - outs[1][i]), 1e-5 * ref.mag[i] + 1e-30) << "the two scaling paths, element " << i;
    // Each product carries at most 2^-4 + 2^-4 relative error (weight and activation rounding).
    ASSERT_LE(std::abs(outs[0][i] - ref.y[i]), 0.13 * ref.mag[i]) << "element " << i;
    num += (outs[0][i] - ref.y[i]) * (outs[0][i] - ref.y[i]);
    den += ref.y[i] * ref.y[i];
  }
  EXPECT_LT(std::sqrt(num / den), 0.05) << "relative error of the FP8 product";
}

std::vector<float> prompt_logits(ModelRunner& r, const std::vector<std::int32_t>& prompt) {
  std::vector<float> logits(static_cast<std::size_t>(r.config().vocab_size));
  SingleSequence seq(r);
  seq.forward(prompt, 0, logits);
  return logits;
}

using test_support::greedy;

using test_support::cosine;

// Quantize-at-load on the GPU holds fewer bytes and computes what the CPU
// runner computes with the same blocks (bf16 activations on the GPU: cosine,
// not equality); TP=2 on one GPU gives TP=1's tokens.
TEST(CudaQuantRunner, QuantizeAtLoadFollowsTheCpuAndSplitsAcrossRanks) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  test_support::TempDir tmp("neuron-cuda-quant");
  const model::ModelConfig c = test_support::quant_test_config();
  model::write_random_checkpoint(tmp.path(), c, {.seed = 11});
  const io::Checkpoint ckpt = io::Checkpoint::open_dir(tmp.path());
  std::vector<std::int32_t> prompt;
  std::mt19937 rng(5);
  for (int i = 0; i < 70; ++i) prompt.push_back(static_cast<std::int32_t>(rng() % 384));  // > 64 rows: the prefill path
  const Device gpu{Device::Kind::cuda, 0};
  RunnerOptions bf16_opts;
  auto bf16 = make_runner(c, &ckpt, model::ShardPlan::make(c, 0, 1), gpu, std::make_shared<dist::LocalCommunicator>(), bf16_opts);
  const std::uint64_t bf16_bytes = bf16->memory().weight_bytes;
  bf16.reset();
  for (GgmlType type : {GgmlType::q8_0, GgmlType::q4_k, GgmlType::q6_k}) {
    RunnerOptions o;
    o.quantize = type;
    auto cpu = make_runner(c, &ckpt, model::ShardPlan::make(c, 0, 1), Device{}, std::make_shared<dist::LocalCommunicator>(), o);
    auto cuda = make_runner(c, &ckpt, model::ShardPlan::make(c, 0, 1), gpu, std::make_shared<dist::LocalCommunicator>(), o);
    EXPECT_LT(cuda->memory().weight_bytes, bf16_bytes) << quant::ggml_type_name(type);
    for (std::size_t len : {std::size_t{5}, prompt.size()}) {  // the GEMV path, then the dequantized prefill
      const std::vector<std::int32_t> p(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(len));
      const auto want = prompt_logits(*cpu, p), got = prompt_logits(*cuda, p);
      EXPECT_GT(cosine(want, got), 0.9999) << quant::ggml_type_name(type) << " prompt " << len;
    }
    const auto one = greedy(*cuda, prompt, 12);
    cuda.reset();
    const std::string id = dist::new_comm_id(dist::CommKind::gloo);
    std::vector<std::future<std::vector<std::int32_t>>> ranks;
    for (int r = 0; r < 2; ++r)
      ranks.push_back(std::async(std::launch::async, [&, r] {
        auto comm = dist::make_communicator(id, r, 2);
        auto runner = make_runner(c, &ckpt, model::ShardPlan::make(c, r, 2), gpu, comm, o);
        return greedy(*runner, prompt, 12);
      }));
    EXPECT_EQ(ranks[0].get(), one) << quant::ggml_type_name(type);
    EXPECT_EQ(ranks[1].get(), one) << quant::ggml_type_name(type);
  }
}

// FP8 weight-only at load: half of bf16's bytes for the projections, close to
// the bf16 model's logits. TP=2 on one GPU holds TP=1's bytes (rows scaled
// whole) and gives TP=1's tokens when every step runs the GEMV (bf16
// activations, up to 16 tokens); a longer prefill quantizes each rank's
// slice of o_proj's and down_proj's inputs per token by that slice's own
// maximum, so there TP=2 is close to TP=1 rather than equal.
TEST(CudaQuantRunner, Fp8AtLoadStaysCloseToBf16AndSplitsAcrossRanks) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  cudaDeviceProp prop{};
  NEURON_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  if (prop.major < 9) GTEST_SKIP() << "FP8 needs compute capability 9.0";
  test_support::TempDir tmp("neuron-cuda-fp8");
  const model::ModelConfig c = test_support::quant_test_config();
  model::write_random_checkpoint(tmp.path(), c, {.seed = 13});
  const io::Checkpoint ckpt = io::Checkpoint::open_dir(tmp.path());
  std::vector<std::int32_t> prompt;
  std::mt19937 rng(9);
  for (int i = 0; i < 40; ++i) prompt.push_back(static_cast<std::int32_t>(rng() % 384));  // > 16: the tensor cores
  const Device gpu{Device::Kind::cuda, 0};
  auto bf16 = make_runner(c, &ckpt, model::ShardPlan::make(c, 0, 1), gpu, std::make_shared<dist::LocalCommunicator>(), {});
  RunnerOptions o;
  o.quantize = GgmlType::fp8_e4m3;
  auto fp8 = make_runner(c, &ckpt, model::ShardPlan::make(c, 0, 1), gpu, std::make_shared<dist::LocalCommunicator>(), o);
  EXPECT_LT(fp8->memory().weight_bytes, bf16->memory().weight_bytes);
  for (std::size_t len : {std::size_t{6}, prompt.size()}) {
    const std::vector<std::int32_t> p(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(len));
    EXPECT_GT(cosine(prompt_logits(*bf16, p), prompt_logits(*fp8, p)), 0.99) << "prompt " << len;
  }
  const std::vector<std::int32_t> short_prompt(prompt.begin(), prompt.begin() + 12);
  const auto one = greedy(*fp8, short_prompt, 12);
  const auto one_long = prompt_logits(*fp8, prompt);
  fp8.reset();
  const std::string id = dist::new_comm_id(dist::CommKind::gloo);
  struct Out {
    std::vector<std::int32_t> tokens;
    std::vector<float> long_logits;
  };
  std::vector<std::future<Out>> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back(std::async(std::launch::async, [&, r] {
      auto comm = dist::make_communicator(id, r, 2);
      auto runner = make_runner(c, &ckpt, model::ShardPlan::make(c, r, 2), gpu, comm, o);
      Out out{greedy(*runner, short_prompt, 12), {}};
      out.long_logits = prompt_logits(*runner, prompt);
      return out;
    }));
  for (auto& f : ranks) {
    const Out out = f.get();
    EXPECT_EQ(out.tokens, one);
    EXPECT_GT(cosine(out.long_logits, one_long), 0.995);  // measured on the H200: 0.99884
  }
  // The CPU has no FP8 path: refused by name.
  try {
    (void)make_runner(c, &ckpt, model::ShardPlan::make(c, 0, 1), Device{}, std::make_shared<dist::LocalCommunicator>(), o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::unsupported_arch);
  }
}

}  // namespace
}  // namespace neuron::backend::cuda

#else
TEST(CudaQuant, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif
