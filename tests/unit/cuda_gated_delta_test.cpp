// Gated DeltaNet on the device (backend/cuda/gated_delta.hpp) against the CPU
// runner's f32 kernels (backend/cpu/gated_delta.hpp, exact against
// transformers), on random inputs of Qwen3.5's head sizes (dk = dv = 128,
// value heads twice the key heads) and of the tiny fixtures' (16): one pass of
// three sequences in their own state slots, one decoding from a carried
// state, one fresh prompt longer than a conv block (its state written by the
// second kernel), one short continuation, and a fresh sequence whose slot holds
// garbage (position 0 must not read it). The outputs (gated-normed, bf16) and
// both states after the pass are compared, for the recurrent kernel and for
// the chunked form (CudaGatedDeltaChunked: prompts across chunks of 64, from
// zero and carried states, beside one-token sequences). Skips without a GPU;
// compiles to a single skipped test without CUDA.
#include <gtest/gtest.h>

#ifdef NEURON_HAVE_CUDA
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cpu/gated_delta.hpp"
#include "backend/cuda/gated_delta.hpp"
#include "support/cuda_fixture.hpp"
#include "tensor/dtype.hpp"

namespace neuron::backend::cuda {
namespace {

using kernels::bf16_t;

class CudaGatedDelta : public test_support::CudaFixture {
 public:
  struct Seq {
    int tokens, position, slot;
  };
  enum class Form { recurrent, chunked };

 protected:

  void run(const kernels::LinearShape& sh, const std::vector<Seq>& seqs, Form form = Form::recurrent) {
    const int C = sh.channels(), hv = sh.value_heads, hk = sh.key_heads, dk = sh.key_dim, dv = sh.value_dim;
    const int K = sh.kernel, value = hv * dv, width = C + value + 2 * hv;
    const int z_col = C, b_col = C + value, a_col = b_col + hv;
    int T = 0, max_tokens = 0, slots = 0;
    for (const Seq& q : seqs) {
      T += q.tokens;
      max_tokens = std::max(max_tokens, q.tokens);
      slots = std::max(slots, q.slot + 1);
    }
    const std::size_t conv_floats = static_cast<std::size_t>(C) * (K - 1);
    const std::size_t delta_floats = static_cast<std::size_t>(hv) * dk * dv;
    const std::size_t slot_floats = conv_floats + delta_floats + 16;  // room after, as beside other layers

    auto in = random_f32(static_cast<std::size_t>(T) * width, 1.f);  // [T, width]
    auto w = random_f32(static_cast<std::size_t>(C) * K, 0.5f);      // [C, K]
    auto a_log = random_f32(static_cast<std::size_t>(hv), 1.f);
    std::vector<float> neg_a(a_log.size());
    std::transform(a_log.begin(), a_log.end(), neg_a.begin(), [](float a) { return -std::exp(a); });
    auto dt_bias = random_f32(static_cast<std::size_t>(hv), 1.f);
    std::vector<bf16_t> norm_w = random_bf16(static_cast<std::size_t>(dv), 0.5f);
    for (auto& v : norm_w) v = f32_to_bf16(1.f + bf16_to_f32(v));
    auto states = random_f32(slot_floats * slots, 0.3f);  // every slot: garbage for fresh sequences

    // The CPU reference, sequence by sequence, on its own copy of the states.
    std::vector<float> ref_states = states;
    std::vector<float> want(static_cast<std::size_t>(T) * value);  // [T, Hv dv]
    std::vector<float> conv(static_cast<std::size_t>(T) * C);
    const cpu::DeltaRuleShape shape{.key_heads = hk, .value_heads = hv, .key_dim = dk, .value_dim = dv};
    int q0 = 0;
    for (const Seq& q : seqs) {
      float* st = ref_states.data() + slot_floats * q.slot;
      if (q.position == 0) std::fill(st, st + conv_floats + delta_floats, 0.f);
      cpu::causal_conv1d_silu(in.data() + static_cast<std::size_t>(q0) * width, q.tokens, C, width, w.data(), K, st,
                              conv.data() + static_cast<std::size_t>(q0) * C, C);
      std::vector<float> gb(static_cast<std::size_t>(q.tokens) * 2 * hv);
      for (int t = 0; t < q.tokens; ++t) {
        float* row = conv.data() + static_cast<std::size_t>(q0 + t) * C;
        for (int h = 0; h < hk; ++h) {
          cpu::l2_normalize(row + h * dk, dk, 1e-6f);
          for (int j = 0; j < dk; ++j) row[h * dk + j] /= std::sqrt(static_cast<float>(dk));
          cpu::l2_normalize(row + hk * dk + h * dk, dk, 1e-6f);
        }
        const float* x = in.data() + static_cast<std::size_t>(q0 + t) * width;
        for (int h = 0; h < hv; ++h) {
          const float a = x[a_col + h] + dt_bias[h];
          gb[t * 2 * hv + h] = neg_a[h] * (a > 20.f ? a : std::log1p(std::exp(a)));
          gb[t * 2 * hv + hv + h] = 1.f / (1.f + std::exp(-x[b_col + h]));
        }
      }
      const float* base = conv.data() + static_cast<std::size_t>(q0) * C;
      cpu::gated_delta_rule(base, base + hk * dk, C, base + 2 * hk * dk, C, gb.data(), gb.data() + hv, 2 * hv, q.tokens, shape,
           st + conv_floats, want.data() + static_cast<std::size_t>(q0) * value, value);
      for (int t = 0; t < q.tokens; ++t)
        for (int h = 0; h < hv; ++h) {
          float* o = want.data() + static_cast<std::size_t>(q0 + t) * value + h * dv;
          const float* z = in.data() + static_cast<std::size_t>(q0 + t) * width + z_col + h * dv;
          double ss = 0;
          for (int j = 0; j < dv; ++j) ss += double(o[j]) * o[j];
          const float inv = 1.f / std::sqrt(static_cast<float>(ss / dv) + 1e-6f);
          for (int j = 0; j < dv; ++j) o[j] = o[j] * inv * bf16_to_f32(norm_w[j]) * (z[j] / (1.f + std::exp(-z[j])));
        }
      q0 += q.tokens;
    }

    // The device pass.
    std::vector<std::int32_t> seq_in;  // q_start, num_tokens, position, state_slot: [S] each
    const auto S = static_cast<int>(seqs.size());
    q0 = 0;
    for (const Seq& q : seqs) { seq_in.push_back(q0); q0 += q.tokens; }
    for (const Seq& q : seqs) seq_in.push_back(q.tokens);
    for (const Seq& q : seqs) seq_in.push_back(q.position);
    for (const Seq& q : seqs) seq_in.push_back(q.slot);
    DeviceBuffer d_seq = upload(seq_in), d_in = upload(in), d_w = upload(w), d_neg_a = upload(neg_a),
                 d_dt = upload(dt_bias), d_norm = upload(norm_w), d_states = upload(states);
    DeviceBuffer d_conv = poisoned(4 * static_cast<std::size_t>(T) * C);
    DeviceBuffer d_out = poisoned(2 * static_cast<std::size_t>(T) * value);
    const auto* si = d_seq.data<std::int32_t>();
    const kernels::LinearSeqs ls{si, si + S, si + 2 * S, si + 3 * S};
    const kernels::LinearState state{d_states.data<float>(), slot_floats, 0, conv_floats};
    kernels::delta_conv(d_in.data<float>(), width, d_w.data<float>(), sh, ls, S, max_tokens, state,
                        d_conv.data<float>(), s());
    if (form == Form::recurrent) {
      kernels::delta_rule(d_conv.data<float>(), d_in.data<float>(), width, z_col, b_col, a_col, d_neg_a.data<float>(),
                          d_dt.data<float>(), d_norm.data<bf16_t>(), 1e-6f, sh, ls, S, state, d_out.data<bf16_t>(), s());
    } else {
      ASSERT_TRUE(kernels::delta_chunked_supported(sh));
      DeviceBuffer scratch = poisoned(4 * kernels::delta_chunk_scratch_floats(sh, T));
      kernels::delta_rule_chunked(d_conv.data<float>(), d_in.data<float>(), width, z_col, b_col, a_col,
                                  d_neg_a.data<float>(), d_dt.data<float>(), d_norm.data<bf16_t>(), 1e-6f, sh, ls, S,
                                  max_tokens, state, scratch.data<float>(), d_out.data<bf16_t>(), s());
    }
    const auto got = download<bf16_t>(d_out, static_cast<std::size_t>(T) * value);
    const auto got_conv = download<float>(d_conv, static_cast<std::size_t>(T) * C);
    const auto got_states = download<float>(d_states, slot_floats * slots);

    double worst_conv = 0;
    for (std::size_t i = 0; i < got_conv.size(); ++i)
      worst_conv = std::max(worst_conv, double(std::abs(got_conv[i] - conv[i])));
    EXPECT_LE(worst_conv, 1e-5) << "conv + silu + l2 norm";
    double worst = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      const double g = bf16_to_f32(got[i]), r = want[i];
      ASSERT_TRUE(std::isfinite(g)) << "output " << i;
      worst = std::max(worst, std::abs(g - r) / std::max(1.0, std::abs(r)));
    }
    EXPECT_LE(worst, 1e-2) << "gated delta rule output (bf16)";
    double worst_state = 0, scale = 0;
    for (const Seq& q : seqs)
      for (std::size_t i = 0; i < conv_floats + delta_floats; ++i) {
        const std::size_t at = slot_floats * q.slot + i;
        worst_state = std::max(worst_state, double(std::abs(got_states[at] - ref_states[at])));
        scale = std::max(scale, double(std::abs(ref_states[at])));
      }
    EXPECT_LE(worst_state, 1e-4 * std::max(scale, 1.0)) << "conv and delta-rule states after the pass";
    // The slots' tails (another layer's state) are untouched.
    for (int slot = 0; slot < slots; ++slot)
      for (std::size_t i = conv_floats + delta_floats; i < slot_floats; ++i)
        EXPECT_EQ(got_states[slot_floats * slot + i], states[slot_floats * slot + i]);
    std::printf("[gated delta %s dk=%d dv=%d] worst: conv %.2e, output %.2e, state %.2e (scale %.2f)\n", form == Form::chunked ? "chunked" : "recurrent", dk, dv,
                worst_conv, worst, worst_state, scale);
  }
};

// decode from a carried state (slot 2), a 37-token prompt (3 conv blocks, fresh, slot 0 holds garbage), a
// 5-token continuation (slot 1).
const std::vector<CudaGatedDelta::Seq> kMixed = {{1, 10, 2}, {37, 0, 0}, {5, 3, 1}};

TEST_F(CudaGatedDelta, Qwen35HeadsMatchTheCpuKernels) { run({2, 4, 128, 128, 4}, kMixed); }

TEST_F(CudaGatedDelta, TinyHeadsMatchTheCpuKernels) { run({2, 4, 16, 16, 4}, kMixed); }

TEST_F(CudaGatedDelta, LongPromptAndDecodes) { run({1, 2, 64, 128, 4}, {{300, 0, 0}, {1, 7, 1}, {1, 0, 2}}); }

using Form = CudaGatedDelta::Form;

TEST_F(CudaGatedDelta, ChunkedQwen35HeadsMatchTheCpuKernels) { run({2, 4, 128, 128, 4}, kMixed, Form::chunked); }

TEST_F(CudaGatedDelta, ChunkedTinyHeadsMatchTheCpuKernels) { run({2, 4, 16, 16, 4}, kMixed, Form::chunked); }

// Chunks of 64: a fresh 300-token prompt (4 full chunks and a partial one), a 130-token continuation of a
// carried state (two full chunks and one token), a chunk's exact length, and one-token sequences.
TEST_F(CudaGatedDelta, ChunkedLongPromptsAcrossChunks) {
  run({1, 2, 64, 128, 4}, {{300, 0, 0}, {1, 7, 1}, {130, 5, 2}, {64, 9, 3}, {1, 0, 4}}, Form::chunked);
}

TEST_F(CudaGatedDelta, ChunkedWideKeysAndNarrowValues) { run({1, 1, 256, 40, 4}, {{129, 3, 0}, {70, 0, 1}}, Form::chunked); }

// Value heads of 36 (a multiple of 4, not of the tensor cores' 8 columns: the last n8 tile is half past dv) and
// 100, wider than the keys (the preparation's value rows span more than its key rows).
TEST_F(CudaGatedDelta, ChunkedValueWidthsOffTheTensorCoreTiles) {
  run({2, 2, 32, 36, 4}, {{150, 0, 0}, {9, 4, 1}}, Form::chunked);
  run({1, 2, 64, 100, 4}, {{70, 2, 0}, {64, 0, 1}}, Form::chunked);
}

TEST(CudaGatedDeltaShapes, Supported) {
  EXPECT_TRUE(kernels::linear_shape_supported({16, 48, 128, 128, 4}));   // Qwen3.5-27B
  EXPECT_TRUE(kernels::linear_shape_supported({16, 32, 128, 128, 4}));   // Qwen3-Next, Qwen3.5-35B-A3B
  EXPECT_FALSE(kernels::linear_shape_supported({16, 48, 96, 128, 4}));   // dk
  EXPECT_FALSE(kernels::linear_shape_supported({16, 40, 128, 128, 4}));  // Hv not a multiple of Hk
  EXPECT_FALSE(kernels::linear_shape_supported({16, 48, 128, 128, 9}));  // K
  EXPECT_FALSE(kernels::linear_shape_supported({16, 48, 256, 256, 4}));  // dv * 8 > 512 threads
  EXPECT_TRUE(kernels::delta_chunked_supported({16, 48, 128, 128, 4}));
  EXPECT_TRUE(kernels::delta_chunked_supported({1, 1, 256, 64, 4}));
  EXPECT_FALSE(kernels::delta_chunked_supported({16, 48, 96, 128, 4}));  // what the recurrent kernel refuses
}

}  // namespace
}  // namespace neuron::backend::cuda
#else
TEST(CudaGatedDelta, SkippedWithoutCuda) { GTEST_SKIP() << "built without CUDA"; }
#endif
