// Each CUDA kernel against a CPU reference in double on random inputs of
// awkward sizes (odd lengths, prompt lengths crossing the 64-row tiles, long
// KV, contexts that end mid-block, shuffled block tables, several sequences
// per call). Skips without a GPU; compiles to a single skipped test without CUDA.
#include <gtest/gtest.h>

#ifdef NEURON_HAVE_CUDA
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cuda/blas.hpp"
#include "backend/cuda/cuda_runner.hpp"
#include "backend/cuda/device_buffer.hpp"
#include "backend/cuda/kernels.hpp"
#include "support/cuda_fixture.hpp"
#include "tensor/dtype.hpp"
#include "util/error.hpp"

namespace neuron::backend::cuda {
namespace {

using kernels::bf16_t;

class CudaKernels : public test_support::CudaFixture {};

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

TEST_F(CudaKernels, QkNormRopeWritesQueriesAndPoolSlots) {
  for (int d : {16, 128}) {
    const int n = 5, hq = 4, hkv = 2, bs = 4, blocks = 6;
    const double theta = 1e6;
    const int width = (hq + 2 * hkv) * d;
    auto qkv = random_bf16(static_cast<std::size_t>(n) * width, 3.f);
    auto qn = random_bf16(d), kn = random_bf16(d);
    std::vector<float> inv(d / 2);
    for (int j = 0; j < d / 2; ++j) inv[j] = static_cast<float>(1.0 / std::pow(theta, 2.0 * j / d));
    // Tokens of two sequences at their own positions, in scattered slots.
    const std::vector<std::int32_t> positions = {7, 8, 0, 9, 3};
    const std::vector<std::int32_t> slots = {5 * bs + 3, 2 * bs + 0, 0 * bs + 0, 2 * bs + 1, 4 * bs + 3};
    auto dqkv = upload(qkv), dqn = upload(qn), dkn = upload(kn), dinv = upload(inv);
    auto dpos = upload(positions), dslots = upload(slots);
    auto dq = poisoned(2 * n * hq * d);
    const std::size_t pool = static_cast<std::size_t>(blocks) * hkv * bs * d;
    auto dk = poisoned(2 * pool), dv = poisoned(2 * pool);
    const kernels::PagedKv kv{dk.data<bf16_t>(), dv.data<bf16_t>(), hkv, bs};
    kernels::qk_norm_rope(dqkv.data<bf16_t>(), n, hq, d, dqn.data<bf16_t>(), dkn.data<bf16_t>(), dinv.data<float>(),
                          dpos.data<std::int32_t>(), dslots.data<std::int32_t>(), 1e-6f, dq.data<bf16_t>(), kv, s());
    auto q = download<bf16_t>(dq, n * hq * d);
    auto k = download<bf16_t>(dk, pool);
    auto v = download<bf16_t>(dv, pool);
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
    std::vector<bool> written(pool, false);
    for (int i = 0; i < n; ++i) {
      const bf16_t* row = qkv.data() + static_cast<std::size_t>(i) * width;
      for (int h = 0; h < hq; ++h) {
        auto r = norm_rope(row + h * d, qn, positions[i]);
        ref_q.insert(ref_q.end(), r.begin(), r.end());
        got_q.insert(got_q.end(), q.begin() + (i * hq + h) * d, q.begin() + (i * hq + h + 1) * d);
      }
      for (int h = 0; h < hkv; ++h) {
        auto r = norm_rope(row + (hq + h) * d, kn, positions[i]);
        ref_k.insert(ref_k.end(), r.begin(), r.end());
        const std::size_t at = ((static_cast<std::size_t>(slots[i] / bs) * hkv + h) * bs + slots[i] % bs) * d;
        got_k.insert(got_k.end(), k.begin() + at, k.begin() + at + d);
        for (int c = 0; c < d; ++c) {
          ASSERT_EQ(v[at + c], row[(hq + hkv + h) * d + c]) << "v head " << h;
          written[at + c] = true;
        }
      }
    }
    EXPECT_LT(rel_err(got_q, ref_q), 1e-2) << "d " << d;
    EXPECT_LT(rel_err(got_k, ref_k), 1e-2) << "d " << d;
    // Every other slot of the pool is untouched (still poison).
    for (std::size_t i = 0; i < pool; ++i)
      if (!written[i]) {
        ASSERT_EQ(k[i], 0xffff) << "k element " << i;
        ASSERT_EQ(v[i], 0xffff) << "v element " << i;
      }
  }
}

TEST_F(CudaKernels, GatherRowsCopiesTheListedRows) {
  const int rows = 9, cols = 1000;
  auto src = random_bf16(static_cast<std::size_t>(rows) * cols);
  const std::vector<std::int32_t> pick = {8, 0, 3, 3};
  auto dsrc = upload(src), dpick = upload(pick);
  auto dout = poisoned(2 * pick.size() * cols);
  kernels::gather_rows(dsrc.data<bf16_t>(), dpick.data<std::int32_t>(), static_cast<int>(pick.size()), cols,
                       dout.data<bf16_t>(), s());
  auto out = download<bf16_t>(dout, pick.size() * cols);
  for (std::size_t i = 0; i < pick.size(); ++i)
    for (int c = 0; c < cols; ++c) ASSERT_EQ(out[i * cols + c], src[static_cast<std::size_t>(pick[i]) * cols + c]);
}

TEST_F(CudaKernels, SwigluMatchesReference) {
  // 1001: one value a thread; 17408 (Qwen3.5-27B's intermediate size): 16-byte accesses.
  for (int f : {1001, 17408}) {
    const int n = 3;
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
    EXPECT_LT(rel_err(out, ref), 8e-3) << "f " << f;
  }
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

// A step's sequences over a paged pool, as the attention kernels see them:
// block tables are random, disjoint draws from a pool larger than needed;
// the positions [0, ctx) of every sequence hold random K/V, every other slot
// of the pool NaN, so a kernel that reads past a context (or another
// sequence's blocks) fails loudly.
struct PagedCase {
  struct Seq { int n, position; };
  int hq = 0, hkv = 0, d = 0, bs = 0;
  std::vector<Seq> seqs;
  int tokens = 0, blocks = 0;
  std::vector<std::int32_t> q_start, num_tokens, position, block_offset, ctx_len, tables;
  std::vector<bf16_t> k, v;  // [blocks, hkv, bs, d]
  std::vector<bf16_t> q;     // [tokens, hq, d]

  std::size_t at(int seq, int pos, int kv_head) const {
    const int block = tables[static_cast<std::size_t>(block_offset[seq] + pos / bs)];
    return ((static_cast<std::size_t>(block) * hkv + kv_head) * bs + pos % bs) * d;
  }
};

PagedCase make_paged(std::mt19937& rng, int hq, int hkv, int d, int bs, std::vector<PagedCase::Seq> seqs) {
  PagedCase c;
  c.hq = hq;
  c.hkv = hkv;
  c.d = d;
  c.bs = bs;
  c.seqs = std::move(seqs);
  int needed = 0;
  for (const auto& s : c.seqs) needed += (s.position + s.n + bs - 1) / bs;
  c.blocks = needed + 5;
  std::vector<std::int32_t> ids(static_cast<std::size_t>(c.blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::uniform_real_distribution<float> dist(-2.f, 2.f);
  const std::size_t pool = static_cast<std::size_t>(c.blocks) * hkv * bs * d;
  c.k.assign(pool, 0x7fc0);
  c.v.assign(pool, 0x7fc0);
  int next = 0;
  for (std::size_t i = 0; i < c.seqs.size(); ++i) {
    const auto& s = c.seqs[i];
    const int ctx = s.position + s.n;
    c.q_start.push_back(c.tokens);
    c.num_tokens.push_back(s.n);
    c.position.push_back(s.position);
    c.block_offset.push_back(static_cast<std::int32_t>(c.tables.size()));
    c.ctx_len.push_back(ctx);
    for (int b = 0; b < (ctx + bs - 1) / bs; ++b) c.tables.push_back(ids[static_cast<std::size_t>(next++)]);
    c.tokens += s.n;
    for (int p = 0; p < ctx; ++p)
      for (int h = 0; h < hkv; ++h)
        for (int e = 0; e < d; ++e) {
          c.k[c.at(static_cast<int>(i), p, h) + e] = f32_to_bf16(dist(rng));
          c.v[c.at(static_cast<int>(i), p, h) + e] = f32_to_bf16(dist(rng) / 2);
        }
  }
  c.q.resize(static_cast<std::size_t>(c.tokens) * hq * d);
  for (auto& e : c.q) e = f32_to_bf16(dist(rng));
  return c;
}

// Causal GQA attention in double: row r of sequence i attends to its positions [0, position + r].
std::vector<double> paged_attention_ref(const PagedCase& c, const std::vector<bf16_t>& q) {
  std::vector<double> out(q.size());
  const double scale = 1.0 / std::sqrt(double(c.d));
  for (std::size_t i = 0; i < c.seqs.size(); ++i)
    for (int r = 0; r < c.seqs[i].n; ++r)
      for (int h = 0; h < c.hq; ++h) {
        const int kvh = h / (c.hq / c.hkv), len = c.seqs[i].position + r + 1;
        const std::size_t qrow = (static_cast<std::size_t>(c.q_start[i] + r) * c.hq + h) * c.d;
        std::vector<double> sc(len);
        double mx = -1e300;
        for (int t = 0; t < len; ++t) {
          const std::size_t kat = c.at(static_cast<int>(i), t, kvh);
          double acc = 0;
          for (int e = 0; e < c.d; ++e) acc += double(bf16_to_f32(q[qrow + e])) * bf16_to_f32(c.k[kat + e]);
          sc[t] = acc * scale;
          mx = std::max(mx, sc[t]);
        }
        double sum = 0;
        for (auto& e : sc) sum += (e = std::exp(e - mx));
        for (int e = 0; e < c.d; ++e) {
          double acc = 0;
          for (int t = 0; t < len; ++t) acc += sc[t] * bf16_to_f32(c.v[c.at(static_cast<int>(i), t, kvh) + e]);
          out[qrow + e] = acc / sum;
        }
      }
  return out;
}

// Device copies of a PagedCase's inputs.
struct PagedDevice {
  DeviceBuffer k, v, q, q_start, num_tokens, position, block_offset, ctx_len, tables;
  kernels::PagedKv kv(const PagedCase& c) const { return {k.data<bf16_t>(), v.data<bf16_t>(), c.hkv, c.bs}; }
  kernels::StepSeqs seqs() const {
    return {q_start.data<std::int32_t>(), num_tokens.data<std::int32_t>(), position.data<std::int32_t>(),
            block_offset.data<std::int32_t>(), ctx_len.data<std::int32_t>(), tables.data<std::int32_t>()};
  }
};

// The decode items (one-token sequences) and the prefill tiles (64 rows of the others) of a case.
void work_lists(const PagedCase& c, std::vector<std::int32_t>& items, std::vector<std::int32_t>& tiles) {
  for (std::size_t i = 0; i < c.seqs.size(); ++i) {
    if (c.seqs[i].n == 1) items.push_back(static_cast<std::int32_t>(i));
    else
      for (int r0 = 0; r0 < c.seqs[i].n; r0 += 64) {
        tiles.push_back(static_cast<std::int32_t>(i));
        tiles.push_back(r0);
      }
  }
}

class CudaPagedAttention : public CudaKernels {
 protected:
  PagedDevice to_device(const PagedCase& c) {
    return PagedDevice{upload(c.k), upload(c.v), upload(c.q), upload(c.q_start), upload(c.num_tokens),
                       upload(c.position), upload(c.block_offset), upload(c.ctx_len), upload(c.tables)};
  }
};

TEST_F(CudaPagedAttention, MixedPrefillAndDecodeMatchReference) {
  using S = PagedCase::Seq;
  struct Shape { int hq, hkv, d, bs; };
  // GQA 1, 2, 4, 5 (a partial head group), 8 and 16 (two head groups a KV head);
  // block sizes that are and are not powers of two.
  for (Shape sh : {Shape{8, 2, 128, 16}, Shape{4, 4, 64, 16}, Shape{16, 2, 128, 16}, Shape{4, 2, 16, 7},
                   Shape{4, 2, 256, 32}, Shape{10, 2, 128, 16}, Shape{32, 2, 64, 8}, Shape{2, 1, 128, 1}}) {
    // S{300, 0}: five KV tiles behind its last query tile (the single K and V buffers refilled four times).
    const std::vector<S> seqs = {S{1, 0}, S{70, 0}, S{1, 37}, S{5, 130}, S{1, 1000}, S{130, 77}, S{64, 16}, S{1, 15},
                                 S{300, 0}};
    const PagedCase c = make_paged(rng_, sh.hq, sh.hkv, sh.d, sh.bs, seqs);
    const PagedDevice dev = to_device(c);
    std::vector<std::int32_t> items, tiles;
    work_lists(c, items, tiles);
    auto ditems = upload(items), dtiles = upload(tiles);
    const float scale = 1.f / std::sqrt(float(sh.d));
    const auto ref = paged_attention_ref(c, c.q);
    for (int splits : {1, 3, 64}) {
      DeviceBuffer scratch(4 * std::max<std::size_t>(1, kernels::decode_scratch_floats(
                                                             static_cast<int>(items.size()), sh.hq, sh.d, splits)));
      DeviceBuffer counters(4 * kernels::decode_counters(static_cast<int>(items.size()), sh.hq, sh.hkv));
      NEURON_CUDA_CHECK(cudaMemset(counters.data(), 0, counters.bytes()));
      auto dout = poisoned(2 * c.q.size());
      kernels::attention_decode(dev.q.data<bf16_t>(), {}, dev.kv(c), dev.seqs(), ditems.data<std::int32_t>(),
                                static_cast<int>(items.size()), sh.hq, sh.d, scale, splits, scratch.data<float>(),
                                counters.data<unsigned>(), dout.data<bf16_t>(), s());
      kernels::attention_prefill(dev.q.data<bf16_t>(), dev.kv(c), dev.seqs(), dtiles.data<std::int32_t>(),
                                 static_cast<int>(tiles.size() / 2), sh.hq, sh.d, scale, dout.data<bf16_t>(), s());
      auto out = download<bf16_t>(dout, c.q.size());
      EXPECT_LT(rel_err(out, ref), 1.5e-2) << "hq " << sh.hq << " hkv " << sh.hkv << " d " << sh.d << " bs " << sh.bs
                                           << " splits " << splits;
      // rel_err over `count` query rows from token `first`.
      const auto rows_err = [&](std::int32_t first, std::int32_t count) {
        const std::size_t row = static_cast<std::size_t>(first) * sh.hq * sh.d;
        const std::size_t len = static_cast<std::size_t>(count) * sh.hq * sh.d;
        return rel_err(std::vector<bf16_t>(out.begin() + row, out.begin() + row + len),
                       std::vector<double>(ref.begin() + row, ref.begin() + row + len));
      };
      // Every prefill tile alone (64 query rows of a sequence), so one tile's error (a K or V tile read before it
      // landed, say) cannot hide in the whole output's norm.
      for (std::size_t t = 0; t < tiles.size(); t += 2) {
        const std::int32_t i = tiles[t], r0 = tiles[t + 1];
        EXPECT_LT(rows_err(c.q_start[i] + r0, std::min(64, c.num_tokens[i] - r0)), 1.5e-2)
            << "prefill sequence " << i << " rows from " << r0 << " d " << sh.d;
      }
      // Every decode row alone, so a prefill-dominated error cannot hide a decode one.
      for (std::int32_t i : items)
        EXPECT_LT(rows_err(c.q_start[i], 1), 1e-2) << "decode sequence " << i << " d " << sh.d << " splits " << splits;
      // The counters were re-armed: a second call with other items on the same buffers merges right again.
      const std::vector<std::int32_t> fewer(items.begin() + 1, items.end());
      auto dfewer = upload(fewer);
      auto dout2 = poisoned(2 * c.q.size());
      kernels::attention_decode(dev.q.data<bf16_t>(), {}, dev.kv(c), dev.seqs(), dfewer.data<std::int32_t>(),
                                static_cast<int>(fewer.size()), sh.hq, sh.d, scale, splits, scratch.data<float>(),
                                counters.data<unsigned>(), dout2.data<bf16_t>(), s());
      auto out2 = download<bf16_t>(dout2, c.q.size());
      for (std::int32_t i : fewer) {
        const std::size_t row = static_cast<std::size_t>(c.q_start[i]) * sh.hq * sh.d;
        for (int e = 0; e < sh.hq * sh.d; ++e) ASSERT_EQ(out2[row + e], out[row + e]) << "second call, sequence " << i;
      }
      EXPECT_EQ(download<unsigned>(counters, counters.bytes() / 4), std::vector<unsigned>(counters.bytes() / 4, 0u));
    }
  }
}

TEST_F(CudaPagedAttention, LongDecodeContextsMatchReference) {
  using S = PagedCase::Seq;
  for (int d : {64, 128}) {
    const PagedCase c = make_paged(rng_, 32, 8, d, 16, {S{1, 4999}, S{1, 2047}, S{1, 0}, S{1, 3000}});
    const PagedDevice dev = to_device(c);
    std::vector<std::int32_t> items, tiles;
    work_lists(c, items, tiles);
    auto ditems = upload(items);
    const int splits = 40;
    DeviceBuffer scratch(4 * kernels::decode_scratch_floats(4, 32, d, splits));
    DeviceBuffer counters(4 * kernels::decode_counters(4, 32, 8));
    NEURON_CUDA_CHECK(cudaMemset(counters.data(), 0, counters.bytes()));
    auto dout = poisoned(2 * c.q.size());
    kernels::attention_decode(dev.q.data<bf16_t>(), {}, dev.kv(c), dev.seqs(), ditems.data<std::int32_t>(), 4, 32, d,
                              1.f / std::sqrt(float(d)), splits, scratch.data<float>(), counters.data<unsigned>(),
                              dout.data<bf16_t>(), s());
    EXPECT_LT(rel_err(download<bf16_t>(dout, c.q.size()), paged_attention_ref(c, c.q)), 1e-2) << "d " << d;
  }
}

TEST_F(CudaPagedAttention, FusedDecodeEqualsNormRopeThenAttention) {
  using S = PagedCase::Seq;
  struct Shape { int hq, hkv, d, bs; };
  for (Shape sh : {Shape{8, 2, 128, 16}, Shape{4, 2, 16, 5}, Shape{16, 8, 64, 16}, Shape{32, 2, 128, 16}}) {
    // Decode tokens only: the position of each new token is ctx_len - 1.
    const PagedCase c = make_paged(rng_, sh.hq, sh.hkv, sh.d, sh.bs, {S{1, 700}, S{1, 0}, S{1, 129}, S{1, 31}});
    const int n = static_cast<int>(c.seqs.size());
    const int width = (sh.hq + 2 * sh.hkv) * sh.d;
    auto qkv = random_bf16(static_cast<std::size_t>(n) * width, 3.f);
    auto qn = random_bf16(sh.d), kn = random_bf16(sh.d);
    std::vector<float> inv(sh.d / 2);
    for (int j = 0; j < sh.d / 2; ++j) inv[j] = static_cast<float>(1.0 / std::pow(1e6, 2.0 * j / sh.d));
    std::vector<std::int32_t> positions, slots, items;
    for (int i = 0; i < n; ++i) {
      const int pos = c.seqs[i].position;
      positions.push_back(pos);
      slots.push_back(c.tables[c.block_offset[i] + pos / sh.bs] * sh.bs + pos % sh.bs);
      items.push_back(i);
    }
    auto dqkv = upload(qkv), dqn = upload(qn), dkn = upload(kn), dinv = upload(inv);
    auto dpos = upload(positions), dslots = upload(slots), ditems = upload(items);
    const PagedDevice one = to_device(c), two = to_device(c);
    const int splits = 7;
    DeviceBuffer scratch(4 * kernels::decode_scratch_floats(n, sh.hq, sh.d, splits));
    DeviceBuffer counters(4 * kernels::decode_counters(n, sh.hq, sh.hkv));
    NEURON_CUDA_CHECK(cudaMemset(counters.data(), 0, counters.bytes()));
    auto dq = poisoned(2 * c.q.size()), out1 = poisoned(2 * c.q.size()), out2 = poisoned(2 * c.q.size());
    const float scale = 1.f / std::sqrt(float(sh.d));
    kernels::qk_norm_rope(dqkv.data<bf16_t>(), n, sh.hq, sh.d, dqn.data<bf16_t>(), dkn.data<bf16_t>(),
                          dinv.data<float>(), dpos.data<std::int32_t>(), dslots.data<std::int32_t>(), 1e-6f,
                          dq.data<bf16_t>(), one.kv(c), s());
    kernels::attention_decode(dq.data<bf16_t>(), {}, one.kv(c), one.seqs(), ditems.data<std::int32_t>(), n, sh.hq,
                              sh.d, scale, splits, scratch.data<float>(), counters.data<unsigned>(),
                              out1.data<bf16_t>(), s());
    const kernels::DecodeRope rope{dqkv.data<bf16_t>(), dqn.data<bf16_t>(), dkn.data<bf16_t>(), dinv.data<float>(),
                                   1e-6f};
    kernels::attention_decode(nullptr, rope, two.kv(c), two.seqs(), ditems.data<std::int32_t>(), n, sh.hq, sh.d,
                              scale, splits, scratch.data<float>(), counters.data<unsigned>(), out2.data<bf16_t>(),
                              s());
    auto o1 = download<bf16_t>(out1, c.q.size()), o2 = download<bf16_t>(out2, c.q.size());
    std::vector<double> ref(o1.size());
    for (std::size_t i = 0; i < o1.size(); ++i) ref[i] = bf16_to_f32(o1[i]);
    EXPECT_LT(rel_err(o2, ref), 4e-3) << "hq " << sh.hq << " d " << sh.d;
    // The fused kernel stored the new keys and values where qk_norm_rope does, and nothing else.
    auto k1 = download<bf16_t>(one.k, c.k.size()), k2 = download<bf16_t>(two.k, c.k.size());
    auto v1 = download<bf16_t>(one.v, c.v.size()), v2 = download<bf16_t>(two.v, c.v.size());
    EXPECT_EQ(v1, v2);
    for (std::size_t i = 0; i < k1.size(); ++i) {
      if (k1[i] == c.k[i]) {
        ASSERT_EQ(k2[i], c.k[i]) << "fused decode wrote pool element " << i;
      } else {
        ASSERT_NEAR(bf16_to_f32(k2[i]), bf16_to_f32(k1[i]), 2e-2 * std::max(1.f, std::abs(bf16_to_f32(k1[i]))))
            << "key element " << i;
      }
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
