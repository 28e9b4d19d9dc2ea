// The device MoE path (backend/cuda/moe_kernels.hpp) against model::MoeRouter
// and a double-precision reference of the experts: routing (the same experts
// and weights), grouping (each expert's pairs in pair order, the two maps
// inverse), and the layer's output over bf16 experts for 1, 3, 4, 37 and 256
// tokens of Qwen3-30B-A3B's routing (128 experts, 8 a token), Qwen3-Next's
// (512, 10) and small ones; moe_down_combine equal to moe_down then
// moe_combine wherever it applies. A token whose logits are NaN still gets k distinct experts.
// Block-quantized experts (quant_moe_rows, quant_moe_swiglu: Q8_0, Q6_K, Q4_K)
// against their dequantized weights, rows taken by token and by slot.
// Skips without a GPU; compiles to a single skipped test without CUDA.
#include <gtest/gtest.h>

#ifdef NEURON_HAVE_CUDA
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <vector>

#include "backend/cuda/moe_kernels.hpp"
#include "backend/cuda/quant_kernels.hpp"
#include "model/moe_routing.hpp"
#include "quant/dequantize.hpp"
#include "quant/quantize.hpp"
#include "support/cuda_fixture.hpp"
#include "tensor/dtype.hpp"

namespace neuron::backend::cuda {
namespace {

using kernels::bf16_t;

class CudaMoe : public test_support::CudaFixture {
 protected:
  struct Case {
    int n, experts, k, hidden, ff;
    bool norm_topk;
    bool fused = false;  // moe_route_group rather than moe_route then moe_group
  };

  // Routing buffers for n tokens, laid out as the runner lays them out.
  struct Routing {
    DeviceBuffer buf;
    kernels::MoeRoute r;
  };
  Routing routing(int n, int k, int experts) {
    const auto pairs = static_cast<std::size_t>(n) * k;
    Routing out{poisoned(4 * (4 * pairs + 2 * (static_cast<std::size_t>(experts) + 1))), {}};
    auto* w = out.buf.data<std::int32_t>();
    out.r = {w, reinterpret_cast<float*>(w + pairs), w + 4 * pairs, w + 2 * pairs, w + 3 * pairs,
             w + 4 * pairs + experts + 1};
    return out;
  }

  void run(const Case& c) {
    const auto pairs = static_cast<std::size_t>(c.n) * c.k;
    const auto E = static_cast<std::size_t>(c.experts);
    auto logits = random_f32(static_cast<std::size_t>(c.n) * E, 3.f);
    auto h = random_bf16(static_cast<std::size_t>(c.n) * c.hidden);
    std::vector<std::vector<bf16_t>> gate_up(E), down(E);
    for (std::size_t e = 0; e < E; ++e) {
      gate_up[e] = random_bf16(2 * static_cast<std::size_t>(c.ff) * c.hidden, 0.1f);
      down[e] = random_bf16(static_cast<std::size_t>(c.hidden) * c.ff, 0.1f);
    }
    std::vector<DeviceBuffer> weights;
    std::vector<const bf16_t*> ptrs(2 * E);
    for (std::size_t e = 0; e < E; ++e) {
      weights.push_back(upload(gate_up[e]));
      ptrs[e] = weights.back().data<bf16_t>();
    }
    for (std::size_t e = 0; e < E; ++e) {
      weights.push_back(upload(down[e]));
      ptrs[E + e] = weights.back().data<bf16_t>();
    }
    auto dptrs = upload(ptrs);
    auto dlogits = upload(logits);
    auto dh = upload(h);
    Routing rt = routing(c.n, c.k, c.experts);
    auto act = poisoned(2 * pairs * c.ff);
    auto out = poisoned(4 * pairs * c.hidden);
    auto delta = poisoned(4 * static_cast<std::size_t>(c.n) * c.hidden);
    const auto* table = dptrs.data<const bf16_t*>();
    if (c.fused) {
      kernels::moe_route_group(dlogits.data<float>(), c.n, c.experts, c.k, c.norm_topk, rt.r, s());
    } else {
      kernels::moe_route(dlogits.data<float>(), c.n, c.experts, c.k, c.norm_topk, rt.r, s());
      kernels::moe_group(c.n, c.experts, c.k, rt.r, s());
    }
    kernels::moe_gate_up(table, dh.data<bf16_t>(), c.n, c.k, c.experts, c.hidden, c.ff, rt.r, act.data<bf16_t>(), s());
    kernels::moe_down(table + E, act.data<bf16_t>(), c.n, c.k, c.experts, c.hidden, c.ff, rt.r, out.data<float>(), s());
    kernels::moe_combine(out.data<float>(), c.n, c.k, c.hidden, rt.r, delta.data<float>(), s());
    // The two in one launch where the pass allows: the same sums in the same order.
    std::vector<float> fused;  // the kernel at every size it takes, though the runner sends it one token
    if (c.n <= kernels::kMoeDownCombineMaxTokens && c.k <= kernels::kMoeDownCombineMaxK) {
      auto delta2 = poisoned(4 * static_cast<std::size_t>(c.n) * c.hidden);
      kernels::moe_down_combine(table + E, act.data<bf16_t>(), c.n, c.k, c.hidden, c.ff, rt.r, delta2.data<float>(), s());
      fused = download<float>(delta2, static_cast<std::size_t>(c.n) * c.hidden);
    }
    const auto words = download<std::int32_t>(rt.buf, 4 * pairs + 2 * (E + 1));
    const std::int32_t* expert = words.data();
    const auto* weight = reinterpret_cast<const float*>(words.data() + pairs);
    const std::int32_t* slot_pair = words.data() + 2 * pairs;
    const std::int32_t* pair_slot = words.data() + 3 * pairs;
    const std::int32_t* offsets = words.data() + 4 * pairs;
    const std::int32_t* active = offsets + E + 1;

    // Routing: the host router's experts (as a set: the order among equal weights is free) and weights.
    model::MoeRouter host;
    auto probs = logits;
    host.route(probs.data(), c.n, {.num_experts = c.experts, .experts_per_token = c.k, .norm_topk_prob = c.norm_topk});
    std::vector<std::vector<std::pair<int, float>>> want(static_cast<std::size_t>(c.n));
    for (int e = 0; e < c.experts; ++e)
      for (const auto& t : host.tokens_of(e)) want[static_cast<std::size_t>(t.token)].push_back({e, t.weight});
    for (int t = 0; t < c.n; ++t) {
      std::vector<std::pair<int, float>> got;
      for (int j = 0; j < c.k; ++j) got.push_back({expert[t * c.k + j], weight[t * c.k + j]});
      for (int j = 1; j < c.k; ++j) EXPECT_GE(got[j - 1].second, got[j].second) << "token " << t << ": by falling weight";
      std::sort(got.begin(), got.end());
      auto& w = want[static_cast<std::size_t>(t)];
      std::sort(w.begin(), w.end());
      ASSERT_EQ(got.size(), w.size());
      for (std::size_t j = 0; j < w.size(); ++j) {
        ASSERT_EQ(got[j].first, w[j].first) << "token " << t;
        EXPECT_NEAR(got[j].second, w[j].second, 1e-6) << "token " << t;
      }
    }
    // Grouping: offsets count each expert's pairs, slots hold them in pair order, the maps are inverse.
    int used = 0;
    ASSERT_EQ(offsets[0], 0);
    for (int e = 0; e < c.experts; ++e) {
      const int count = static_cast<int>(std::count(expert, expert + pairs, e));
      ASSERT_EQ(offsets[e + 1] - offsets[e], count) << "expert " << e;
      if (count > 0) {
        ASSERT_EQ(active[1 + used++], e);
      }
      for (int slot = offsets[e]; slot < offsets[e + 1]; ++slot) {
        ASSERT_EQ(expert[slot_pair[slot]], e);
        if (slot > offsets[e]) {
          ASSERT_LT(slot_pair[slot - 1], slot_pair[slot]);
        }
        ASSERT_EQ(pair_slot[slot_pair[slot]], slot);
      }
    }
    ASSERT_EQ(active[0], used);

    // The layer: sum over a token's experts of weight * down(silu(gate . h) * (up . h)), in double.
    const auto got = download<float>(delta, static_cast<std::size_t>(c.n) * c.hidden);
    double num = 0, den = 0;
    for (int t = 0; t < c.n; ++t) {
      std::vector<double> ref(static_cast<std::size_t>(c.hidden), 0.0);
      for (int j = 0; j < c.k; ++j) {
        const auto e = static_cast<std::size_t>(expert[t * c.k + j]);
        std::vector<double> a(static_cast<std::size_t>(c.ff));
        for (int f = 0; f < c.ff; ++f) {
          double g = 0, u = 0;
          for (int i = 0; i < c.hidden; ++i) {
            const double x = bf16_to_f32(h[static_cast<std::size_t>(t) * c.hidden + i]);
            g += x * bf16_to_f32(gate_up[e][static_cast<std::size_t>(f) * c.hidden + i]);
            u += x * bf16_to_f32(gate_up[e][static_cast<std::size_t>(c.ff + f) * c.hidden + i]);
          }
          a[static_cast<std::size_t>(f)] = g / (1 + std::exp(-g)) * u;
        }
        for (int o = 0; o < c.hidden; ++o) {
          double y = 0;
          for (int f = 0; f < c.ff; ++f) y += a[static_cast<std::size_t>(f)] * bf16_to_f32(down[e][static_cast<std::size_t>(o) * c.ff + f]);
          ref[static_cast<std::size_t>(o)] += weight[t * c.k + j] * y;
        }
      }
      for (int o = 0; o < c.hidden; ++o) {
        const double v = got[static_cast<std::size_t>(t) * c.hidden + o];
        ASSERT_TRUE(std::isfinite(v)) << "token " << t << " row " << o;
        num += (v - ref[static_cast<std::size_t>(o)]) * (v - ref[static_cast<std::size_t>(o)]);
        den += ref[static_cast<std::size_t>(o)] * ref[static_cast<std::size_t>(o)];
      }
    }
    if (!fused.empty()) {
      for (std::size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(fused[i], got[i], 1e-6 * (1 + std::fabs(got[i]))) << "moe_down_combine, value " << i;
    }
    // bf16 rounding of the gate and up sums, the SwiGLU and the activations: ~3 bf16 ulps at most.
    EXPECT_LT(std::sqrt(num / den), 1e-2) << "n=" << c.n << " E=" << c.experts;
  }
};

TEST_F(CudaMoe, OneToken) {
  run({1, 128, 8, 64, 48, true});
  run({1, 128, 8, 64, 48, true, true});
}
TEST_F(CudaMoe, AFewTokens) { run({3, 128, 8, 256, 32, true, true}); }
// 30B-A3B's expert width (768: three 16-byte chunks a lane in the down rows), one token (routed by one warp)
// and four (the most moe_down_combine takes), and Qwen3-Next's 512 experts, 10 a token.
TEST_F(CudaMoe, DecodeShapes) {
  run({1, 128, 8, 64, 768, true, true});
  run({4, 128, 8, 64, 768, true, true});
  run({2, 512, 10, 64, 512, true, true});
  run({5, 16, 4, 64, 96, false, true});  // five tokens: moe_down then moe_combine only
}
TEST_F(CudaMoe, ExpertsWithMoreThanEightTokensTakeSeveralPasses) {
  run({37, 8, 2, 64, 40, true});
  run({37, 8, 2, 64, 40, true, true});
}
TEST_F(CudaMoe, AFullGraphBatchWithoutRenormalisation) {
  run({256, 128, 8, 32, 16, false});
  run({256, 128, 8, 32, 16, false, true});
}

TEST_F(CudaMoe, NanLogitsStillPickDistinctExperts) {
  const int n = 2, experts = 16, k = 4;
  std::vector<float> logits(static_cast<std::size_t>(n) * experts, std::numeric_limits<float>::quiet_NaN());
  for (int e = 0; e < experts; ++e) logits[experts + e] = (e == 5 || e == 9) ? std::numeric_limits<float>::quiet_NaN() : float(e % 7);
  auto d = upload(logits);
  Routing rt = routing(n, k, experts);
  kernels::moe_route_group(d.data<float>(), n, experts, k, true, rt.r, s());
  const auto words = download<std::int32_t>(rt.buf, 2 * n * k);
  for (int t = 0; t < n; ++t) {
    std::set<int> seen;
    for (int j = 0; j < k; ++j) {
      const int e = words[static_cast<std::size_t>(t * k + j)];
      ASSERT_GE(e, 0);
      ASSERT_LT(e, experts);
      seen.insert(e);
    }
    EXPECT_EQ(seen.size(), static_cast<std::size_t>(k)) << "token " << t;
  }
  // Token 0 (all NaN): any k distinct experts. Token 1: a NaN logit counts as -inf, so the largest
  // finite logits win: 6 at experts 6 and 13, then 5 at 12, then 4 at 4 and 11 (the lower).
  EXPECT_EQ(words[k + 0], 6);
  EXPECT_EQ(words[k + 1], 13);
  EXPECT_EQ(words[k + 2], 12);
  EXPECT_EQ(words[k + 3], 4);
}

TEST_F(CudaMoe, QuantizedExpertRowsMatchTheirDequantizedWeights) {
  const int n = 20, experts = 16, k = 4, rows = 40, cols = 512;
  const auto pairs = static_cast<std::size_t>(n) * k;
  Routing rt = routing(n, k, experts);
  auto logits = upload(random_f32(static_cast<std::size_t>(n) * experts, 3.f));
  kernels::moe_route(logits.data<float>(), n, experts, k, true, rt.r, s());
  kernels::moe_group(n, experts, k, rt.r, s());
  const auto words = download<std::int32_t>(rt.buf, 4 * pairs + 2 * (experts + 1));
  const std::int32_t* slot_pair = words.data() + 2 * pairs;
  const std::int32_t* offsets = words.data() + 4 * pairs;
  for (const quant::GgmlType type : {quant::GgmlType::q8_0, quant::GgmlType::q6_k, quant::GgmlType::q4_k}) {
    for (const bool by_token : {true, false}) {
      const std::size_t row_bytes = quant::row_bytes(type, cols);
      std::vector<std::vector<float>> dense(experts);  // [E][rows, cols] the dequantized weights
      std::vector<DeviceBuffer> packed;
      std::vector<const void*> ptrs;
      for (int e = 0; e < experts; ++e) {
        const auto w = random_f32(static_cast<std::size_t>(rows) * cols, 0.1f);
        std::vector<std::byte> blocks(row_bytes * rows);
        dense[e].resize(w.size());
        for (int r = 0; r < rows; ++r) {
          quant::quantize_row(type, w.data() + static_cast<std::size_t>(r) * cols, blocks.data() + r * row_bytes, cols);
          quant::dequantize_row(type, blocks.data() + r * row_bytes, dense[e].data() + static_cast<std::size_t>(r) * cols, cols);
        }
        packed.push_back(upload(blocks));
        ptrs.push_back(packed.back().data());
      }
      auto dptrs = upload(ptrs);
      const std::size_t x_rows = by_token ? static_cast<std::size_t>(n) : pairs;
      const auto x = random_bf16(x_rows * cols);
      auto dx = upload(x);
      auto y = poisoned(4 * pairs * rows);
      kernels::quant_moe_rows(type, dptrs.data<const void*>(), rows, cols, dx.data<bf16_t>(), by_token, n, k, experts, rt.r,
                              y.data<float>(), s());
      const auto got = download<float>(y, pairs * rows);
      double num = 0, den = 0;
      for (int e = 0; e < experts; ++e)
        for (int slot = offsets[e]; slot < offsets[e + 1]; ++slot) {
          const std::size_t row = by_token ? static_cast<std::size_t>(slot_pair[slot] / k) : static_cast<std::size_t>(slot);
          for (int r = 0; r < rows; ++r) {
            double ref = 0;
            for (int c = 0; c < cols; ++c)
              ref += double(dense[e][static_cast<std::size_t>(r) * cols + c]) * bf16_to_f32(x[row * cols + c]);
            const double v = got[static_cast<std::size_t>(slot) * rows + r];
            ASSERT_TRUE(std::isfinite(v)) << "slot " << slot << " row " << r;
            num += (v - ref) * (v - ref);
            den += ref * ref;
          }
        }
      EXPECT_LT(std::sqrt(num / den), 1e-5) << quant::ggml_type_name(type) << (by_token ? " by token" : " by slot");
      if (!by_token) continue;
      // The same blocks as gate_up of ff = rows / 2: act = silu(gate . x) * (up . x), bf16.
      const int ff = rows / 2;
      auto act = poisoned(2 * pairs * ff);
      kernels::quant_moe_swiglu(type, dptrs.data<const void*>(), ff, cols, dx.data<bf16_t>(), n, k, experts, rt.r,
                                act.data<bf16_t>(), s());
      const auto a = download<bf16_t>(act, pairs * ff);
      num = den = 0;
      for (int e = 0; e < experts; ++e)
        for (int slot = offsets[e]; slot < offsets[e + 1]; ++slot) {
          const auto row = static_cast<std::size_t>(slot_pair[slot] / k);
          for (int j = 0; j < ff; ++j) {
            double g = 0, u = 0;
            for (int c = 0; c < cols; ++c) {
              const double xv = bf16_to_f32(x[row * cols + c]);
              g += double(dense[e][static_cast<std::size_t>(j) * cols + c]) * xv;
              u += double(dense[e][static_cast<std::size_t>(ff + j) * cols + c]) * xv;
            }
            const double ref = g / (1 + std::exp(-g)) * u, v = bf16_to_f32(a[static_cast<std::size_t>(slot) * ff + j]);
            ASSERT_TRUE(std::isfinite(v)) << "slot " << slot << " column " << j;
            num += (v - ref) * (v - ref);
            den += ref * ref;
          }
        }
      EXPECT_LT(std::sqrt(num / den), 1e-2) << quant::ggml_type_name(type) << " swiglu";
    }
  }
}

}  // namespace
}  // namespace neuron::backend::cuda
#else
TEST(CudaMoe, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif
