// Each CUDA kernel against a CPU reference in double on random inputs of
// awkward sizes (odd lengths, prompt lengths crossing the 64-row tiles, long
// KV). Skips without a GPU; compiles to a single skipped test without CUDA.
#include <gtest/gtest.h>

#ifdef NEURON_HAVE_CUDA
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "backend/cuda/blas.hpp"
#include "backend/cuda/cuda_runner.hpp"
#include "backend/cuda/device_buffer.hpp"
#include "backend/cuda/kernels.hpp"
#include "tensor/dtype.hpp"
#include "util/error.hpp"

namespace neuron::backend::cuda {
namespace {

using kernels::bf16_t;

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
    NEURON_CUDA_CHECK(cudaSetDevice(0));
    stream_ = std::make_unique<Stream>();
  }
  cudaStream_t s() const { return stream_->get(); }
  void sync() const { stream_->synchronize(); }

  std::vector<bf16_t> random_bf16(std::size_t n, float scale = 1.f) {
    std::uniform_real_distribution<float> d(-scale, scale);
    std::vector<bf16_t> v(n);
    for (auto& e : v) e = f32_to_bf16(d(rng_));
    return v;
  }
  std::vector<float> random_f32(std::size_t n, float scale = 1.f) {
    std::uniform_real_distribution<float> d(-scale, scale);
    std::vector<float> v(n);
    for (auto& e : v) e = d(rng_);
    return v;
  }
  template <class T>
  DeviceBuffer upload(const std::vector<T>& v) {
    DeviceBuffer b(sizeof(T) * v.size());
    NEURON_CUDA_CHECK(cudaMemcpy(b.data(), v.data(), b.bytes(), cudaMemcpyHostToDevice));
    return b;
  }
  // Output buffers start poisoned (0xff bytes: NaN in f32 and bf16), so an element the kernel skipped fails.
  DeviceBuffer poisoned(std::size_t bytes) {
    DeviceBuffer b(bytes);
    NEURON_CUDA_CHECK(cudaMemset(b.data(), 0xff, bytes));
    return b;
  }
  template <class T>
  std::vector<T> download(const DeviceBuffer& b, std::size_t n) {
    sync();
    std::vector<T> v(n);
    NEURON_CUDA_CHECK(cudaMemcpy(v.data(), b.data(), sizeof(T) * n, cudaMemcpyDeviceToHost));
    return v;
  }

  std::mt19937 rng_{1234};
  std::unique_ptr<Stream> stream_;
};

double val(float v) { return v; }
double val(bf16_t v) { return bf16_to_f32(v); }

// ||out - ref|| / ||ref||; NaN anywhere fails.
template <class T>
double rel_err(const std::vector<T>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double o = val(out[i]);
    if (!std::isfinite(o)) return std::numeric_limits<double>::infinity();
    num += (o - ref[i]) * (o - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

TEST_F(CudaKernels, EmbedGathersRowsAsFloat) {
  const int vocab = 1001, hidden = 72, n = 7;
  auto table = random_bf16(static_cast<std::size_t>(vocab) * hidden);
  std::vector<std::int32_t> tokens = {0, 1000, 5, 5, 999, 17, 3};
  auto dt = upload(table);
  auto dtok = upload(tokens);
  auto dx = poisoned(4 * n * hidden);
  kernels::embed(dtok.data<std::int32_t>(), n, dt.data<bf16_t>(), hidden, vocab, dx.data<float>(), s());
  auto x = download<float>(dx, n * hidden);
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < hidden; ++c)
      ASSERT_EQ(x[i * hidden + c], bf16_to_f32(table[static_cast<std::size_t>(tokens[i]) * hidden + c]));
}

TEST_F(CudaKernels, AddRmsNormMatchesReference) {
  for (int hidden : {40, 1000, 4096, 5120}) {
    const int n = 3;
    auto x = random_f32(static_cast<std::size_t>(n) * hidden, 2.f);
    auto delta = random_f32(x.size());
    auto w = random_bf16(hidden);
    auto dx = upload(x), dd = upload(delta), dw = upload(w);
    auto dout = poisoned(2 * x.size());
    kernels::add_rmsnorm(dx.data<float>(), dd.data<float>(), dw.data<bf16_t>(), dout.data<bf16_t>(), n, hidden, 1e-6f,
                         s());
    auto out = download<bf16_t>(dout, x.size());
    auto xs = download<float>(dx, x.size());
    std::vector<double> ref(x.size()), ref_x(x.size());
    for (int i = 0; i < n; ++i) {
      double ss = 0;
      for (int c = 0; c < hidden; ++c) {
        ref_x[i * hidden + c] = double(x[i * hidden + c]) + delta[i * hidden + c];
        ss += ref_x[i * hidden + c] * ref_x[i * hidden + c];
      }
      const double inv = 1.0 / std::sqrt(ss / hidden + 1e-6);
      for (int c = 0; c < hidden; ++c) ref[i * hidden + c] = ref_x[i * hidden + c] * inv * bf16_to_f32(w[c]);
    }
    EXPECT_LT(rel_err(xs, ref_x), 1e-6) << "residual, hidden " << hidden;
    EXPECT_LT(rel_err(out, ref), 8e-3) << "hidden " << hidden;
  }
}

TEST_F(CudaKernels, QkNormRopeWritesQueriesAndCache) {
  for (int d : {16, 128}) {
    const int n = 5, hq = 4, hkv = 2, max_ctx = 32, offset = 7;
    const double theta = 1e6;
    const int width = (hq + 2 * hkv) * d;
    auto qkv = random_bf16(static_cast<std::size_t>(n) * width, 3.f);
    auto qn = random_bf16(d), kn = random_bf16(d);
    std::vector<float> inv(d / 2);
    for (int j = 0; j < d / 2; ++j) inv[j] = static_cast<float>(1.0 / std::pow(theta, 2.0 * j / d));
    const std::vector<std::int32_t> off = {offset};
    auto dqkv = upload(qkv), dqn = upload(qn), dkn = upload(kn), dinv = upload(inv), doff = upload(off);
    auto dq = poisoned(2 * n * hq * d);
    const std::size_t cache = static_cast<std::size_t>(hkv) * max_ctx * d;
    auto dk = poisoned(2 * cache), dv = poisoned(2 * cache);
    kernels::qk_norm_rope(dqkv.data<bf16_t>(), n, hq, hkv, d, dqn.data<bf16_t>(), dkn.data<bf16_t>(),
                          dinv.data<float>(), doff.data<std::int32_t>(), 1e-6f, dq.data<bf16_t>(), dk.data<bf16_t>(),
                          dv.data<bf16_t>(), max_ctx, s());
    auto q = download<bf16_t>(dq, n * hq * d);
    auto k = download<bf16_t>(dk, cache);
    auto v = download<bf16_t>(dv, cache);
    auto norm_rope = [&](const bf16_t* src, const std::vector<bf16_t>& w, int pos) {
      std::vector<double> y(d), out(d);
      double ss = 0;
      for (int c = 0; c < d; ++c) ss += double(bf16_to_f32(src[c])) * bf16_to_f32(src[c]);
      const double r = 1.0 / std::sqrt(ss / d + 1e-6);
      for (int c = 0; c < d; ++c) y[c] = bf16_to_f32(src[c]) * r * bf16_to_f32(w[c]);
      for (int j = 0; j < d / 2; ++j) {
        const double a = pos * double(inv[j]);
        out[j] = y[j] * std::cos(a) - y[j + d / 2] * std::sin(a);
        out[j + d / 2] = y[j + d / 2] * std::cos(a) + y[j] * std::sin(a);
      }
      return out;
    };
    std::vector<bf16_t> got_q, got_k;
    std::vector<double> ref_q, ref_k;
    for (int i = 0; i < n; ++i) {
      const bf16_t* row = qkv.data() + static_cast<std::size_t>(i) * width;
      for (int h = 0; h < hq; ++h) {
        auto r = norm_rope(row + h * d, qn, offset + i);
        ref_q.insert(ref_q.end(), r.begin(), r.end());
        got_q.insert(got_q.end(), q.begin() + (i * hq + h) * d, q.begin() + (i * hq + h + 1) * d);
      }
      for (int h = 0; h < hkv; ++h) {
        auto r = norm_rope(row + (hq + h) * d, kn, offset + i);
        ref_k.insert(ref_k.end(), r.begin(), r.end());
        const std::size_t at = (static_cast<std::size_t>(h) * max_ctx + offset + i) * d;
        got_k.insert(got_k.end(), k.begin() + at, k.begin() + at + d);
        for (int c = 0; c < d; ++c) ASSERT_EQ(v[at + c], row[(hq + hkv + h) * d + c]) << "v head " << h;
      }
    }
    EXPECT_LT(rel_err(got_q, ref_q), 1e-2) << "d " << d;
    EXPECT_LT(rel_err(got_k, ref_k), 1e-2) << "d " << d;
    // Positions outside [offset, offset + n) are untouched (still poison).
    EXPECT_EQ(k[(offset - 1) * d], 0xffff);
    EXPECT_EQ(v[(offset + n) * d], 0xffff);
  }
}

TEST_F(CudaKernels, SwigluMatchesReference) {
  const int n = 3, f = 1001;
  auto gu = random_bf16(static_cast<std::size_t>(n) * 2 * f, 4.f);
  auto dgu = upload(gu);
  auto dout = poisoned(2 * n * f);
  kernels::swiglu(dgu.data<bf16_t>(), n, f, dout.data<bf16_t>(), s());
  auto out = download<bf16_t>(dout, n * f);
  std::vector<double> ref(static_cast<std::size_t>(n) * f);
  for (int i = 0; i < n; ++i)
    for (int c = 0; c < f; ++c) {
      const double g = bf16_to_f32(gu[i * 2 * f + c]), u = bf16_to_f32(gu[i * 2 * f + f + c]);
      ref[i * f + c] = g / (1 + std::exp(-g)) * u;
    }
  EXPECT_LT(rel_err(out, ref), 8e-3);
}

std::vector<double> matvec_ref(const std::vector<bf16_t>& w, const std::vector<bf16_t>& x, int n, int rows, int cols) {
  std::vector<double> y(static_cast<std::size_t>(n) * rows);
  for (int i = 0; i < n; ++i)
    for (int r = 0; r < rows; ++r) {
      double acc = 0;
      for (int c = 0; c < cols; ++c)
        acc += double(bf16_to_f32(w[static_cast<std::size_t>(r) * cols + c])) * bf16_to_f32(x[i * cols + c]);
      y[i * rows + r] = acc;
    }
  return y;
}

TEST_F(CudaKernels, GemvMatchesReferenceOnAwkwardShapes) {
  struct Shape { int rows, cols; };
  for (Shape sh : {Shape{1000, 4104}, Shape{17, 96}, Shape{33, 100}, Shape{4099, 1024}}) {
    auto w = random_bf16(static_cast<std::size_t>(sh.rows) * sh.cols);
    auto x = random_bf16(sh.cols);
    auto dw = upload(w), dx = upload(x);
    auto ref = matvec_ref(w, x, 1, sh.rows, sh.cols);
    auto dy = poisoned(4 * sh.rows);
    kernels::gemv(dw.data<bf16_t>(), dx.data<bf16_t>(), sh.rows, sh.cols, dy.data<float>(), s());
    EXPECT_LT(rel_err(download<float>(dy, sh.rows), ref), 1e-5) << sh.rows << "x" << sh.cols;
    auto dyb = poisoned(2 * sh.rows);
    kernels::gemv(dw.data<bf16_t>(), dx.data<bf16_t>(), sh.rows, sh.cols, dyb.data<bf16_t>(), s());
    EXPECT_LT(rel_err(download<bf16_t>(dyb, sh.rows), ref), 8e-3) << sh.rows << "x" << sh.cols << " bf16 out";
  }
}

TEST_F(CudaKernels, GemvWithSwigluInputMatchesSwigluThenGemv) {
  for (int f : {96, 3072, 12296}) {
    const int rows = 37;
    auto gu = random_bf16(2 * static_cast<std::size_t>(f), 3.f);
    auto w = random_bf16(static_cast<std::size_t>(rows) * f);
    std::vector<bf16_t> act(f);
    for (int c = 0; c < f; ++c) {
      const float g = bf16_to_f32(gu[c]);
      act[c] = f32_to_bf16(bf16_to_f32(f32_to_bf16(g / (1 + std::exp(-g)))) * bf16_to_f32(gu[f + c]));
    }
    auto ref = matvec_ref(w, act, 1, rows, f);
    auto dw = upload(w), dgu = upload(gu);
    auto dy = poisoned(4 * rows);
    ASSERT_TRUE(kernels::gemv_swiglu_supported(f));
    kernels::gemv_swiglu(dw.data<bf16_t>(), dgu.data<bf16_t>(), rows, f, dy.data<float>(), false, s());
    EXPECT_LT(rel_err(download<float>(dy, rows), ref), 2e-3) << "f " << f;
  }
}

TEST_F(CudaKernels, GemvWithRmsNormInputAndResidualOutput) {
  for (int cols : {1024, 4096, 96}) {
    const int rows = 37;
    auto x = random_f32(cols, 2.f);
    auto nw = random_bf16(cols);
    auto w = random_bf16(static_cast<std::size_t>(rows) * cols);
    // Reference input: what add_rmsnorm makes of x (checked against double above).
    auto dx = upload(x), dnw = upload(nw), dw = upload(w);
    auto dh = poisoned(2 * cols);
    kernels::add_rmsnorm(dx.data<float>(), nullptr, dnw.data<bf16_t>(), dh.data<bf16_t>(), 1, cols, 1e-6f, s());
    auto h = download<bf16_t>(dh, cols);
    auto ref = matvec_ref(w, h, 1, rows, cols);
    auto dy = poisoned(2 * rows);
    kernels::gemv_rmsnorm(dw.data<bf16_t>(), dx.data<float>(), dnw.data<bf16_t>(), 1e-6f, rows, cols, dy.data<bf16_t>(),
                          s());
    EXPECT_LT(rel_err(download<bf16_t>(dy, rows), ref), 8e-3) << "cols " << cols;
    // Accumulating projection: y += W h on top of what y held.
    auto base = random_f32(rows);
    auto dacc = upload(base);
    kernels::gemv_accumulate(dw.data<bf16_t>(), dh.data<bf16_t>(), rows, cols, dacc.data<float>(), s());
    std::vector<double> ref_acc(rows);
    for (int r = 0; r < rows; ++r) ref_acc[r] = base[r] + ref[r];
    EXPECT_LT(rel_err(download<float>(dacc, rows), ref_acc), 1e-5) << "cols " << cols;
  }
}

TEST_F(CudaKernels, BlasLinearMatchesReference) {
  const int n = 37, rows = 300, cols = 264;
  auto w = random_bf16(static_cast<std::size_t>(rows) * cols);
  auto x = random_bf16(static_cast<std::size_t>(n) * cols);
  auto dw = upload(w), dx = upload(x);
  auto ref = matvec_ref(w, x, n, rows, cols);
  Blas blas(s());
  auto dy = poisoned(4 * n * rows);
  blas.linear(dx.data<bf16_t>(), n, dw.data<bf16_t>(), rows, cols, dy.data<float>());
  EXPECT_LT(rel_err(download<float>(dy, n * rows), ref), 1e-5);
  auto dyb = poisoned(2 * n * rows);
  blas.linear(dx.data<bf16_t>(), n, dw.data<bf16_t>(), rows, cols, dyb.data<bf16_t>());
  EXPECT_LT(rel_err(download<bf16_t>(dyb, n * rows), ref), 8e-3);
}

// Causal GQA attention in double over the bf16 cache [hkv, max_ctx, d].
std::vector<double> attention_ref(const std::vector<bf16_t>& q, const std::vector<bf16_t>& k,
                                  const std::vector<bf16_t>& v, int n, int hq, int hkv, int d, int max_ctx,
                                  int offset) {
  std::vector<double> out(static_cast<std::size_t>(n) * hq * d);
  const double scale = 1.0 / std::sqrt(double(d));
  for (int i = 0; i < n; ++i)
    for (int h = 0; h < hq; ++h) {
      const int kvh = h / (hq / hkv), len = offset + i + 1;
      std::vector<double> sc(len);
      double mx = -1e300;
      for (int t = 0; t < len; ++t) {
        double acc = 0;
        for (int c = 0; c < d; ++c)
          acc += double(bf16_to_f32(q[(static_cast<std::size_t>(i) * hq + h) * d + c])) *
                 bf16_to_f32(k[(static_cast<std::size_t>(kvh) * max_ctx + t) * d + c]);
        sc[t] = acc * scale;
        mx = std::max(mx, sc[t]);
      }
      double sum = 0;
      for (auto& e : sc) sum += (e = std::exp(e - mx));
      for (int c = 0; c < d; ++c) {
        double acc = 0;
        for (int t = 0; t < len; ++t) acc += sc[t] * bf16_to_f32(v[(static_cast<std::size_t>(kvh) * max_ctx + t) * d + c]);
        out[(static_cast<std::size_t>(i) * hq + h) * d + c] = acc / sum;
      }
    }
  return out;
}

// Fills cache positions [0, len) with random values and the rest with NaN, so
// a kernel that reads past the causal window fails loudly.
std::vector<bf16_t> cache_with_nan_tail(std::vector<bf16_t> values, int hkv, int max_ctx, int d, int len) {
  for (int h = 0; h < hkv; ++h)
    for (int t = len; t < max_ctx; ++t)
      for (int c = 0; c < d; ++c) values[(static_cast<std::size_t>(h) * max_ctx + t) * d + c] = 0x7fc0;
  return values;
}

TEST_F(CudaKernels, PrefillAttentionMatchesReference) {
  struct Case { int n, offset, hq, hkv, d; };
  for (Case c : {Case{63, 0, 8, 2, 128}, Case{65, 0, 4, 4, 128}, Case{130, 77, 8, 2, 128}, Case{2, 0, 4, 2, 16},
                 Case{97, 5, 6, 3, 64}, Case{1, 40, 2, 1, 128}}) {
    const int max_ctx = c.offset + c.n + 70;
    const int len = c.offset + c.n;
    const std::size_t cache = static_cast<std::size_t>(c.hkv) * max_ctx * c.d;
    auto q = random_bf16(static_cast<std::size_t>(c.n) * c.hq * c.d, 2.f);
    auto k = cache_with_nan_tail(random_bf16(cache, 2.f), c.hkv, max_ctx, c.d, len);
    auto v = cache_with_nan_tail(random_bf16(cache), c.hkv, max_ctx, c.d, len);
    const std::vector<std::int32_t> off = {c.offset};
    auto dq = upload(q), dk = upload(k), dv = upload(v), doff = upload(off);
    auto dout = poisoned(2 * q.size());
    kernels::attention_prefill(dq.data<bf16_t>(), dk.data<bf16_t>(), dv.data<bf16_t>(), c.n, c.hq, c.hkv, c.d, max_ctx,
                               doff.data<std::int32_t>(), 1.f / std::sqrt(float(c.d)), dout.data<bf16_t>(), s());
    auto out = download<bf16_t>(dout, q.size());
    auto ref = attention_ref(q, k, v, c.n, c.hq, c.hkv, c.d, max_ctx, c.offset);
    EXPECT_LT(rel_err(out, ref), 1.5e-2) << "n " << c.n << " offset " << c.offset << " d " << c.d;
  }
}

TEST_F(CudaKernels, DecodeAttentionMatchesReferenceOnLongKv) {
  struct Case { int offset, hq, hkv, d, splits; };
  for (Case c : {Case{0, 16, 8, 128, 8}, Case{1000, 32, 8, 128, 16}, Case{4999, 8, 2, 128, 32}, Case{37, 4, 2, 16, 3},
                 Case{300, 4, 1, 64, 64}}) {
    const int max_ctx = c.offset + 50;
    const int len = c.offset + 1;
    const std::size_t cache = static_cast<std::size_t>(c.hkv) * max_ctx * c.d;
    auto q = random_bf16(static_cast<std::size_t>(c.hq) * c.d, 2.f);
    auto k = cache_with_nan_tail(random_bf16(cache, 2.f), c.hkv, max_ctx, c.d, len);
    auto v = cache_with_nan_tail(random_bf16(cache), c.hkv, max_ctx, c.d, len);
    const std::vector<std::int32_t> off = {c.offset};
    auto dq = upload(q), dk = upload(k), dv = upload(v), doff = upload(off);
    DeviceBuffer scratch(4 * kernels::decode_scratch_floats(c.hq, c.d, c.splits));
    NEURON_CUDA_CHECK(cudaMemset(scratch.data(), 0, scratch.bytes()));
    auto dout = poisoned(2 * q.size());
    kernels::attention_decode(dq.data<bf16_t>(), dk.data<bf16_t>(), dv.data<bf16_t>(), c.hq, c.hkv, c.d, max_ctx,
                              doff.data<std::int32_t>(), 1.f / std::sqrt(float(c.d)), c.splits, scratch.data<float>(),
                              dout.data<bf16_t>(), s());
    auto out = download<bf16_t>(dout, q.size());
    auto ref = attention_ref(q, k, v, 1, c.hq, c.hkv, c.d, max_ctx, c.offset);
    EXPECT_LT(rel_err(out, ref), 1e-2) << "offset " << c.offset << " splits " << c.splits;
    // A second call on the same scratch (as every decode step does) merges again.
    NEURON_CUDA_CHECK(cudaMemset(dout.data(), 0xff, dout.bytes()));
    kernels::attention_decode(dq.data<bf16_t>(), dk.data<bf16_t>(), dv.data<bf16_t>(), c.hq, c.hkv, c.d, max_ctx,
                              doff.data<std::int32_t>(), 1.f / std::sqrt(float(c.d)), c.splits, scratch.data<float>(),
                              dout.data<bf16_t>(), s());
    EXPECT_EQ(download<bf16_t>(dout, q.size()), out) << "second call, offset " << c.offset;
  }
}

TEST_F(CudaKernels, FusedDecodeAttentionEqualsNormRopeThenAttention) {
  struct Case { int offset, hq, hkv, d, splits; };
  for (Case c : {Case{700, 8, 2, 128, 16}, Case{0, 4, 2, 16, 3}, Case{129, 16, 8, 64, 40}}) {
    const int max_ctx = c.offset + 9;
    const int width = (c.hq + 2 * c.hkv) * c.d;
    const std::size_t cache = static_cast<std::size_t>(c.hkv) * max_ctx * c.d;
    auto qkv = random_bf16(width, 3.f);
    auto qn = random_bf16(c.d), kn = random_bf16(c.d);
    std::vector<float> inv(c.d / 2);
    for (int j = 0; j < c.d / 2; ++j) inv[j] = static_cast<float>(1.0 / std::pow(1e6, 2.0 * j / c.d));
    auto kc = random_bf16(cache, 2.f), vc = random_bf16(cache);
    const std::vector<std::int32_t> off = {c.offset};
    auto dqkv = upload(qkv), dqn = upload(qn), dkn = upload(kn), dinv = upload(inv), doff = upload(off);
    auto dk1 = upload(kc), dv1 = upload(vc), dk2 = upload(kc), dv2 = upload(vc);
    DeviceBuffer scratch(4 * kernels::decode_scratch_floats(c.hq, c.d, c.splits));
    NEURON_CUDA_CHECK(cudaMemset(scratch.data(), 0, scratch.bytes()));
    auto dq = poisoned(2 * c.hq * c.d), out1 = poisoned(2 * c.hq * c.d), out2 = poisoned(2 * c.hq * c.d);
    const float scale = 1.f / std::sqrt(float(c.d));
    kernels::qk_norm_rope(dqkv.data<bf16_t>(), 1, c.hq, c.hkv, c.d, dqn.data<bf16_t>(), dkn.data<bf16_t>(),
                          dinv.data<float>(), doff.data<std::int32_t>(), 1e-6f, dq.data<bf16_t>(), dk1.data<bf16_t>(),
                          dv1.data<bf16_t>(), max_ctx, s());
    kernels::attention_decode(dq.data<bf16_t>(), dk1.data<bf16_t>(), dv1.data<bf16_t>(), c.hq, c.hkv, c.d, max_ctx,
                              doff.data<std::int32_t>(), scale, c.splits, scratch.data<float>(), out1.data<bf16_t>(), s());
    kernels::attention_decode_fused(dqkv.data<bf16_t>(), dqn.data<bf16_t>(), dkn.data<bf16_t>(), dinv.data<float>(),
                                    1e-6f, dk2.data<bf16_t>(), dv2.data<bf16_t>(), c.hq, c.hkv, c.d, max_ctx,
                                    doff.data<std::int32_t>(), scale, c.splits, scratch.data<float>(),
                                    out2.data<bf16_t>(), s());
    auto o1 = download<bf16_t>(out1, c.hq * c.d), o2 = download<bf16_t>(out2, c.hq * c.d);
    std::vector<double> ref(o1.begin(), o1.end());
    for (std::size_t i = 0; i < o1.size(); ++i) ref[i] = bf16_to_f32(o1[i]);
    EXPECT_LT(rel_err(o2, ref), 4e-3) << "offset " << c.offset << " d " << c.d;
    // The fused kernel stored the new key and value where qk_norm_rope does, and nothing else.
    auto k1 = download<bf16_t>(dk1, cache), k2 = download<bf16_t>(dk2, cache);
    auto v1 = download<bf16_t>(dv1, cache), v2 = download<bf16_t>(dv2, cache);
    EXPECT_EQ(v1, v2);
    std::vector<double> k_ref(k1.size());
    for (std::size_t i = 0; i < k1.size(); ++i) k_ref[i] = bf16_to_f32(k1[i]);
    EXPECT_LT(rel_err(k2, k_ref), 1e-3);
    for (int h = 0; h < c.hkv; ++h)
      for (int t = 0; t < max_ctx; ++t)
        if (t != c.offset)
          for (int e = 0; e < c.d; ++e) {
            const std::size_t i = (static_cast<std::size_t>(h) * max_ctx + t) * c.d + e;
            ASSERT_EQ(k2[i], kc[i]) << "fused decode wrote key position " << t;
          }
  }
}

TEST_F(CudaKernels, RandomFillIsDeterministicAndSliceConsistent) {
  const int rows = 300, cols = 77;
  DeviceBuffer full(2 * rows * cols), part(2 * 100 * 20), again(2 * rows * cols);
  kernels::fill_random_bf16(full.data<bf16_t>(), rows, cols, 0, 0, cols, 42, 0.5f, s());
  kernels::fill_random_bf16(again.data<bf16_t>(), rows, cols, 0, 0, cols, 42, 0.5f, s());
  kernels::fill_random_bf16(part.data<bf16_t>(), 100, 20, 150, 30, cols, 42, 0.5f, s());
  auto f = download<bf16_t>(full, rows * cols);
  auto a = download<bf16_t>(again, rows * cols);
  auto p = download<bf16_t>(part, 100 * 20);
  EXPECT_EQ(f, a);
  for (int r = 0; r < 100; ++r)
    for (int c = 0; c < 20; ++c) ASSERT_EQ(p[r * 20 + c], f[(150 + r) * cols + 30 + c]);
  double sum = 0, sq = 0;
  for (auto e : f) {
    const double x = bf16_to_f32(e);
    ASSERT_LE(std::abs(x), 0.5);
    sum += x;
    sq += x * x;
  }
  EXPECT_NEAR(sum / f.size(), 0.0, 0.01);
  EXPECT_NEAR(std::sqrt(sq / f.size()), 0.5 / std::sqrt(3.0), 0.01);  // uniform std
}

TEST_F(CudaKernels, CopyBandwidthIsMeasured) {
  const double gbs = measure_copy_bandwidth_gbs(0);
  EXPECT_GT(gbs, 100.0);  // any real GPU; the H200 gives about 4300
  EXPECT_THROW(measure_copy_bandwidth_gbs(device_count()), Error);
}

}  // namespace
}  // namespace neuron::backend::cuda

#else
TEST(CudaKernels, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif
