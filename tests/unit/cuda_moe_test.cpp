// The device MoE path (backend/cuda/moe_kernels.hpp) against model::MoeRouter
// and a double-precision reference of the experts: routing (the same experts
// and weights), grouping (each expert's pairs in pair order, the two maps
// inverse), and the layer's output over bf16 experts for 1, 3, 4, 37 and 256
// tokens of Qwen3-30B-A3B's routing (128 experts, 8 a token), Qwen3-Next's
// (512, 10) and small ones; moe_down_combine equal to moe_down then
// moe_combine wherever it applies. A token whose logits are NaN still gets k distinct experts.
// Expert parallelism: the grouping of one rank's range of experts (local ids,
// pairs of other experts without a slot) and the ranks' deltas adding up to
// the whole layer's, through moe_combine and moe_down_combine, on every routing
// kernel (one warp, one block, route then group).
// Block-quantized experts (quant_moe_rows, quant_moe_swiglu: Q8_0, Q6_K, Q4_K)
// against their dequantized weights, rows taken by token and by slot, over
// all the experts and over each half of them.
// Skips without a GPU; compiles to a single skipped test without CUDA.
#include <gtest/gtest.h>

#ifdef NEURON_HAVE_CUDA
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
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

  // Routing buffers for n tokens grouped over `experts` (a rank's L), laid out as the runner lays them out.
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

  // A layer's random inputs, on the host and the device: logits [n, E] f32, h [n, hidden] bf16, each expert's
  // gate_up [2 ff, hidden] and down [hidden, ff] bf16, and the [2, E] table of their device pointers.
  struct Layer {
    std::vector<float> logits;
    std::vector<bf16_t> h;
    std::vector<std::vector<bf16_t>> gate_up, down;
    std::vector<DeviceBuffer> weights;
    DeviceBuffer table, dlogits, dh;
  };
  Layer layer(const Case& c) {
    const auto E = static_cast<std::size_t>(c.experts);
    Layer l;
    l.logits = random_f32(static_cast<std::size_t>(c.n) * E, 3.f);
    l.h = random_bf16(static_cast<std::size_t>(c.n) * c.hidden);
    l.gate_up.resize(E);
    l.down.resize(E);
    for (std::size_t e = 0; e < E; ++e) {
      l.gate_up[e] = random_bf16(2 * static_cast<std::size_t>(c.ff) * c.hidden, 0.1f);
      l.down[e] = random_bf16(static_cast<std::size_t>(c.hidden) * c.ff, 0.1f);
    }
    std::vector<const bf16_t*> ptrs(2 * E);
    for (std::size_t e = 0; e < E; ++e) {
      l.weights.push_back(upload(l.gate_up[e]));
      ptrs[e] = l.weights.back().data<bf16_t>();
    }
    for (std::size_t e = 0; e < E; ++e) {
      l.weights.push_back(upload(l.down[e]));
      ptrs[E + e] = l.weights.back().data<bf16_t>();
    }
    l.table = upload(ptrs);
    l.dlogits = upload(l.logits);
    l.dh = upload(l.h);
    return l;
  }

  // The device path over `mine`'s experts of the layer: routed and grouped as c says, then the products; delta
  // through moe_combine and, where the pass allows, moe_down_combine (else empty), and the route's words
  // (expert, weight, slot_pair, pair_slot [n k] each, offsets and active [mine.count + 1] each).
  struct Pass {
    std::vector<float> delta, fused;
    std::vector<std::int32_t> words;
  };
  Pass pass(const Case& c, const Layer& l, kernels::MoeExperts mine) {
    const auto pairs = static_cast<std::size_t>(c.n) * c.k;
    Routing rt = routing(c.n, c.k, mine.count);
    auto act = poisoned(2 * pairs * c.ff);
    auto out = poisoned(4 * pairs * c.hidden);
    auto delta = poisoned(4 * static_cast<std::size_t>(c.n) * c.hidden);
    const auto* gate_up = l.table.data<const bf16_t*>() + mine.begin;  // [L] of the [2, E] table
    const auto* down = gate_up + c.experts;
    if (c.fused) {
      kernels::moe_route_group(l.dlogits.data<float>(), c.n, mine, c.k, c.norm_topk, rt.r, s());
    } else {
      kernels::moe_route(l.dlogits.data<float>(), c.n, c.experts, c.k, c.norm_topk, rt.r, s());
      kernels::moe_group(c.n, mine, c.k, rt.r, s());
    }
    kernels::moe_gate_up(gate_up, l.dh.data<bf16_t>(), c.n, c.k, mine.count, c.hidden, c.ff, rt.r, act.data<bf16_t>(),
                         s());
    kernels::moe_down(down, act.data<bf16_t>(), c.n, c.k, mine.count, c.hidden, c.ff, rt.r, out.data<float>(), s());
    kernels::moe_combine(out.data<float>(), c.n, c.k, c.hidden, mine, rt.r, delta.data<float>(), s());
    Pass p;
    // The two in one launch where the pass allows: the same sums in the same order.
    if (c.n <= kernels::kMoeDownCombineMaxTokens && c.k <= kernels::kMoeDownCombineMaxK) {
      auto delta2 = poisoned(4 * static_cast<std::size_t>(c.n) * c.hidden);
      kernels::moe_down_combine(down, act.data<bf16_t>(), c.n, c.k, c.hidden, c.ff, mine, rt.r, delta2.data<float>(),
                                s());
      p.fused = download<float>(delta2, static_cast<std::size_t>(c.n) * c.hidden);
    }
    p.delta = download<float>(delta, static_cast<std::size_t>(c.n) * c.hidden);
    p.words = download<std::int32_t>(rt.buf, 4 * pairs + 2 * (static_cast<std::size_t>(mine.count) + 1));
    return p;
  }

  // Grouping over mine's experts (local ids e - begin): offsets count each one's pairs, slots hold them in
  // pair order, the maps are inverse, active lists those with a pair; a pair of another expert has no slot.
  static void expect_grouped(const Case& c, const std::vector<std::int32_t>& words, kernels::MoeExperts mine) {
    const auto pairs = static_cast<std::size_t>(c.n) * c.k;
    const std::int32_t* expert = words.data();
    const std::int32_t* slot_pair = words.data() + 2 * pairs;
    const std::int32_t* pair_slot = words.data() + 3 * pairs;
    const std::int32_t* offsets = words.data() + 4 * pairs;
    const std::int32_t* active = offsets + mine.count + 1;
    int used = 0;
    ASSERT_EQ(offsets[0], 0);
    for (int le = 0; le < mine.count; ++le) {
      const int e = mine.begin + le;
      const int count = static_cast<int>(std::count(expert, expert + pairs, e));
      ASSERT_EQ(offsets[le + 1] - offsets[le], count) << "expert " << e;
      if (count > 0) {
        ASSERT_EQ(active[1 + used++], le);
      }
      for (int slot = offsets[le]; slot < offsets[le + 1]; ++slot) {
        ASSERT_EQ(expert[slot_pair[slot]], e);
        if (slot > offsets[le]) {
          ASSERT_LT(slot_pair[slot - 1], slot_pair[slot]);
        }
        ASSERT_EQ(pair_slot[slot_pair[slot]], slot);
      }
    }
    ASSERT_EQ(active[0], used);
    for (std::size_t p = 0; p < pairs; ++p)
      if (expert[p] < mine.begin || expert[p] >= mine.begin + mine.count) {
        ASSERT_EQ(pair_slot[p], -1) << "pair " << p << " of expert " << expert[p];
      }
  }

  // The layer split over `ranks` ranks of E / ranks experts each: every rank routes alike (the whole pass's
  // experts and weights), groups its own, and the ranks' deltas add up to the whole pass's; moe_down_combine
  // gives each rank's delta as moe_combine does. A rank none of a token's experts fell on gives it zeros.
  void run_split(const Case& c, int ranks) {
    const Layer l = layer(c);
    const Pass whole = pass(c, l, kernels::MoeExperts::all(c.experts));
    const auto pairs = static_cast<std::size_t>(c.n) * c.k;
    std::vector<double> sum(whole.delta.size(), 0.0);
    const int per = c.experts / ranks;
    for (int r = 0; r < ranks; ++r) {
      const kernels::MoeExperts mine{c.experts, r * per, per};
      const Pass part = pass(c, l, mine);
      const std::string what = "rank " + std::to_string(r) + " of " + std::to_string(ranks);
      ASSERT_TRUE(std::equal(part.words.begin(), part.words.begin() + 2 * pairs, whole.words.begin())) << what;
      ASSERT_NO_FATAL_FAILURE(expect_grouped(c, part.words, mine)) << what;
      for (int t = 0; t < c.n; ++t) {
        bool any = false;  // a pair of this token on this rank
        for (int j = 0; j < c.k; ++j) {
          const int e = part.words[static_cast<std::size_t>(t * c.k + j)];
          any = any || (e >= mine.begin && e < mine.begin + per);
        }
        if (any) continue;
        for (int o = 0; o < c.hidden; ++o) {
          ASSERT_EQ(part.delta[static_cast<std::size_t>(t) * c.hidden + o], 0.f) << what << ": token " << t;
        }
      }
      for (std::size_t i = 0; i < sum.size(); ++i) {
        ASSERT_TRUE(std::isfinite(part.delta[i])) << what << ", value " << i;
        sum[i] += part.delta[i];
      }
      ASSERT_EQ(part.fused.empty(), whole.fused.empty());
      for (std::size_t i = 0; i < part.fused.size(); ++i)
        ASSERT_NEAR(part.fused[i], part.delta[i], 1e-6 * (1 + std::fabs(part.delta[i])))
            << what << ": moe_down_combine, value " << i;
    }
    // The same products, each rank's share summed in routing order, then the ranks: f32 rounding apart.
    for (std::size_t i = 0; i < sum.size(); ++i)
      ASSERT_NEAR(sum[i], whole.delta[i], 1e-5 * (1 + std::fabs(whole.delta[i]))) << "value " << i;
  }

  void run(const Case& c) {
    const auto pairs = static_cast<std::size_t>(c.n) * c.k;
    const Layer l = layer(c);
    const std::vector<float>& logits = l.logits;
    const std::vector<bf16_t>& h = l.h;
    const auto& gate_up = l.gate_up;
    const auto& down = l.down;
    // The kernel at every size it takes, though the runner sends moe_down_combine one token.
    const Pass all = pass(c, l, kernels::MoeExperts::all(c.experts));
    const std::vector<float>& fused = all.fused;
    const auto& words = all.words;
    const std::int32_t* expert = words.data();
    const auto* weight = reinterpret_cast<const float*>(words.data() + pairs);

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
    ASSERT_NO_FATAL_FAILURE(expect_grouped(c, words, kernels::MoeExperts::all(c.experts)));

    // The layer: sum over a token's experts of weight * down(silu(gate . h) * (up . h)), in double.
    const std::vector<float>& got = all.delta;
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

// Expert parallelism: each rank of two or four groups its range of the experts and the ranks' deltas add up
// to the whole layer's, on each routing kernel: one warp (a pass of one token), one block (route and group
// fused), route then group (unfused, and where the fused block's shared memory is too small: 512 experts).
TEST_F(CudaMoe, ExpertRangesOfTheRanksAddUpToTheWholeLayer) {
  run_split({1, 128, 8, 64, 48, true, true}, 2);  // one warp, moe_down_combine
  run_split({1, 128, 8, 64, 768, true, true}, 4);
  run_split({1, 8, 2, 64, 48, true, true}, 4);    // two of the four ranks hold none of the token's experts
  run_split({1, 16, 4, 64, 48, false}, 2);        // one token through moe_route then moe_group
  run_split({3, 128, 8, 256, 32, true, true}, 2); // one block
  run_split({4, 16, 4, 64, 96, false, true}, 4);
  run_split({37, 8, 2, 64, 40, true}, 2);         // experts with more than eight tokens
  run_split({37, 8, 2, 64, 40, true, true}, 4);
  run_split({2, 512, 10, 64, 512, true, true}, 2);
}

TEST_F(CudaMoe, NanLogitsStillPickDistinctExperts) {
  const int n = 2, experts = 16, k = 4;
  std::vector<float> logits(static_cast<std::size_t>(n) * experts, std::numeric_limits<float>::quiet_NaN());
  for (int e = 0; e < experts; ++e) logits[experts + e] = (e == 5 || e == 9) ? std::numeric_limits<float>::quiet_NaN() : float(e % 7);
  auto d = upload(logits);
  Routing rt = routing(n, k, experts);
  kernels::moe_route_group(d.data<float>(), n, kernels::MoeExperts::all(experts), k, true, rt.r, s());
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

// Over all 16 experts, and over each half of them as a rank of two holds them under expert parallelism (its
// [8] pointer table, local ids): every slot of the grouping gets its expert's rows. One token (Q8_0 and Q6_K
// on the FMA kernel, Q4_K on the tensor cores), 20 (all on the tensor cores, in passes of 8 slots over all 16
// experts, of 16 over a half), 150 (~37 slots an expert: passes of 32). Rows 40 and ff 20: the last 16-row
// tile is partial.
TEST_F(CudaMoe, QuantizedExpertRowsMatchTheirDequantizedWeights) {
  // cols 256, 512, 768: Q4_K / Q5_K rows of one, two and three 256-column units, so the mma kernel's four warps
  // take four row tiles, two, or one with a warp idle (moe_tiles_per_block); Q6_K rows of 630 bytes start half a
  // word off.
  const std::initializer_list<std::pair<int, int>> cases{{1, 512}, {20, 512}, {150, 512}, {20, 256}, {150, 768}, {3, 768}};
  for (const auto& [n, cols] : cases) {  // tokens, cols
    const int experts = 16, k = 4, rows = 40;
    const auto pairs = static_cast<std::size_t>(n) * k;
    auto logits = upload(random_f32(static_cast<std::size_t>(n) * experts, 3.f));
    for (const kernels::MoeExperts mine : {kernels::MoeExperts::all(experts), kernels::MoeExperts{experts, 0, experts / 2},
                                           kernels::MoeExperts{experts, experts / 2, experts / 2}}) {
      const std::string range = " experts [" + std::to_string(mine.begin) + ", " + std::to_string(mine.begin + mine.count) +
                                "), " + std::to_string(n) + " tokens, cols " + std::to_string(cols);
      Routing rt = routing(n, k, mine.count);
      kernels::moe_route(logits.data<float>(), n, experts, k, true, rt.r, s());
      kernels::moe_group(n, mine, k, rt.r, s());
      const auto words = download<std::int32_t>(rt.buf, 4 * pairs + 2 * (static_cast<std::size_t>(mine.count) + 1));
      const std::int32_t* slot_pair = words.data() + 2 * pairs;
      const std::int32_t* offsets = words.data() + 4 * pairs;
      if (offsets[mine.count] == 0) continue;  // one token's 4 experts may all be the other half's
      for (const quant::GgmlType type :
           {quant::GgmlType::q8_0, quant::GgmlType::q6_k, quant::GgmlType::q4_k, quant::GgmlType::q5_k}) {
        for (const bool by_token : {true, false}) {
          const std::string what = std::string(quant::ggml_type_name(type)) + range;
          const std::size_t row_bytes = quant::row_bytes(type, cols);
          std::vector<std::vector<float>> dense(experts);  // [E][rows, cols] the dequantized weights
          std::vector<DeviceBuffer> packed;
          std::vector<const void*> ptrs;  // [E]
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
          const void* const* table = dptrs.data<const void*>() + mine.begin;  // [L] the rank's
          const std::size_t x_rows = by_token ? static_cast<std::size_t>(n) : pairs;
          const auto x = random_bf16(x_rows * cols);
          auto dx = upload(x);
          auto y = poisoned(4 * pairs * rows);
          kernels::quant_moe_rows(type, table, rows, cols, dx.data<bf16_t>(), by_token, n, k, mine.count, rt.r,
                                  y.data<float>(), s());
          const auto got = download<float>(y, pairs * rows);
          double num = 0, den = 0;
          for (int le = 0; le < mine.count; ++le) {
            const auto& w = dense[static_cast<std::size_t>(mine.begin + le)];
            for (int slot = offsets[le]; slot < offsets[le + 1]; ++slot) {
              const std::size_t row = by_token ? static_cast<std::size_t>(slot_pair[slot] / k) : static_cast<std::size_t>(slot);
              for (int r = 0; r < rows; ++r) {
                double ref = 0;
                for (int c = 0; c < cols; ++c)
                  ref += double(w[static_cast<std::size_t>(r) * cols + c]) * bf16_to_f32(x[row * cols + c]);
                const double v = got[static_cast<std::size_t>(slot) * rows + r];
                ASSERT_TRUE(std::isfinite(v)) << what << ": slot " << slot << " row " << r;
                num += (v - ref) * (v - ref);
                den += ref * ref;
              }
            }
          }
          EXPECT_LT(std::sqrt(num / den), 1e-5) << what << (by_token ? " by token" : " by slot");
          if (!by_token) continue;
          // The same blocks as gate_up of ff = rows / 2: act = silu(gate . x) * (up . x), bf16.
          const int ff = rows / 2;
          auto act = poisoned(2 * pairs * ff);
          kernels::quant_moe_swiglu(type, table, ff, cols, dx.data<bf16_t>(), n, k, mine.count, rt.r, act.data<bf16_t>(),
                                    s());
          const auto a = download<bf16_t>(act, pairs * ff);
          num = den = 0;
          for (int le = 0; le < mine.count; ++le) {
            const auto& w = dense[static_cast<std::size_t>(mine.begin + le)];
            for (int slot = offsets[le]; slot < offsets[le + 1]; ++slot) {
              const auto row = static_cast<std::size_t>(slot_pair[slot] / k);
              for (int j = 0; j < ff; ++j) {
                double g = 0, u = 0;
                for (int c = 0; c < cols; ++c) {
                  const double xv = bf16_to_f32(x[row * cols + c]);
                  g += double(w[static_cast<std::size_t>(j) * cols + c]) * xv;
                  u += double(w[static_cast<std::size_t>(ff + j) * cols + c]) * xv;
                }
                const double ref = g / (1 + std::exp(-g)) * u, v = bf16_to_f32(a[static_cast<std::size_t>(slot) * ff + j]);
                ASSERT_TRUE(std::isfinite(v)) << what << ": slot " << slot << " column " << j;
                num += (v - ref) * (v - ref);
                den += ref * ref;
              }
            }
          }
          EXPECT_LT(std::sqrt(num / den), 1e-2) << what << " swiglu";
        }
      }
    }
  }
}

}  // namespace
}  // namespace neuron::backend::cuda
#else
TEST(CudaMoe, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif
