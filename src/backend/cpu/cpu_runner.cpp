#include "backend/cpu/cpu_runner.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <spdlog/spdlog.h>

#include "backend/cpu/activations.hpp"
#include "backend/cpu/attention.hpp"
#include "backend/cpu/chunk_pool.hpp"
#include "backend/cpu/gated_delta.hpp"
#include "backend/cpu/gemm_quant_grouped.hpp"
#include "backend/cpu/matmul.hpp"
#include "backend/cpu/matmul_quant.hpp"
#include "backend/cpu/ops.hpp"
#include "backend/cpu/recurrent_state.hpp"
#include "backend/cpu/decode_kernel.hpp"
#include "backend/cpu/weight_buffer.hpp"
#include "backend/packed_weights.hpp"
#include "dist/communicator.hpp"
#include "io/safetensors.hpp"
#include "model/arch/block_ops.hpp"
#include "model/arch/family.hpp"
#include "model/moe_routing.hpp"
#include "model/rope.hpp"
#include "model/shard_weights.hpp"
#include "quant/dequantize.hpp"
#include "util/error.hpp"

namespace neuron::backend::cpu {

namespace {

using model::SliceSpec;

// A weight matrix [rows, cols] as the runner holds it: bf16 (2 bytes per
// parameter), or packed GGUF blocks (a GGUF file's quantized tensors, or
// quantize-at-load).
struct Matrix {
  std::int64_t rows = 0, cols = 0;
  bool quantized = false;
  WeightVector<std::uint16_t> bf16;  // [rows, cols] bf16 when !quantized
  QuantMatrix q;                     // when quantized

  std::uint64_t bytes() const noexcept { return quantized ? q.data.size() : bf16.size() * 2; }
  // Row r as f32 into out[cols] (embedding lookup).
  void row_f32(std::int64_t r, float* out) const {
    if (quantized) {
      StoredRows stored;  // a grouped row as stored
      quant::dequantize_row(q.type, stored.row(q, r), out, cols);
    } else {
      widen_bf16(bf16.data() + r * cols, out, cols);
    }
  }
};

// Several matrices with the same column count whose rows are stacked (q/k/v,
// gate/up): outputs side by side. Consecutive parts stored alike are merged,
// so a bf16 or uniformly quantized model runs one product per stack; a GGUF
// mixing types (Q4_K_M: Q6_K for some v/down) runs one per run of a type.
using Stack = std::vector<Matrix>;

// y[:, 0 .. rows of the stack) = x W^T for x: [n, in] (row stride ldx), y row stride ldy.
void multiply(const Stack& w, const float* x, std::int64_t n, std::int64_t in, std::int64_t ldx, float* y, std::int64_t ldy) {
  std::int64_t offset = 0;
  for (const Matrix& m : w) {
    if (m.quantized)
      matmul_quant(x, n, ldx, m.q, y + offset, ldy);
    else
      matmul_bf16(x, n, in, ldx, m.bf16.data(), m.rows, y + offset, ldy);
    offset += m.rows;
  }
}

std::uint64_t bytes_of(const Stack& s) {
  std::uint64_t b = 0;
  for (const Matrix& m : s) b += m.bytes();
  return b;
}

// One SwiGLU MLP of this rank: a dense layer's (F = its ff slice) or one expert's (F = its moe ff slice).
struct Mlp {
  Stack gate_up;                  // [2 F, hidden]: gate_proj rows, then up_proj rows
  Stack down;                     // [hidden, F]: down_proj's input columns of this rank
};

// A Gated DeltaNet layer's weights of this rank (Hk / Hv: its key heads and the value heads that read them,
// ShardPlan; heads of dk / dv, C = 2 Hk dk + Hv dv conv channels, K the conv kernel).
struct LinearWeights {
  Stack in_proj;                  // [C + Hv dv + 2 Hv, hidden]: q, k, v, z (quantizable), then b, a rows (as stored)
  std::vector<float> conv;        // [C, K] f32 depthwise conv1d taps, oldest input first
  std::vector<float> neg_a;       // [Hv] f32 -exp(A_log)
  std::vector<float> dt_bias;     // [Hv] f32
  std::vector<float> gated_norm;  // [dv] f32
  Stack out;                      // [hidden, Hv dv] out_proj
};

// One decoder layer of this rank (hd = head_dim; H, KV = the rank's query and KV heads; E = experts).
struct Layer {
  std::vector<float> input_norm;  // [hidden] f32 (the token mixer's, attention or linear)
  std::vector<float> q_norm;      // [hd] f32; empty without q/k norm
  std::vector<float> k_norm;      // [hd] f32; empty without q/k norm
  std::vector<float> post_norm;   // [hidden] f32
  Stack qkv;                      // [(H (x2 with an output gate) + 2 KV) * hd, hidden]: q_proj, k_proj, v_proj rows
  Stack o;                        // [hidden, H * hd]: o_proj's input columns of this rank
  std::optional<LinearWeights> linear;  // a linear-attention layer (then qkv and o are empty)
  std::optional<Mlp> mlp;         // a dense layer
  Stack router;                   // [E, hidden]: a MoE layer's router (mlp.gate); empty when dense
  std::vector<Mlp> experts;       // [ShardPlan::experts] a MoE layer's experts of this rank, from expert_begin
  std::optional<Mlp> shared_expert;  // a MoE layer's shared expert
  Stack shared_gate;              // [1, hidden] its sigmoid gate; empty without one
};

// Reads a slice from the checkpoint, or makes stand-in weights when there is none.
class WeightSource {
 public:
  WeightSource(const io::Checkpoint* ckpt, std::optional<quant::GgmlType> quantize) : ckpt_(ckpt), quantize_(quantize) {}

  void bf16(const SliceSpec& spec, std::span<std::uint16_t> dst) const {
    if (ckpt_)
      model::slice_view(*ckpt_, spec).to_bf16(dst);
    else
      model::fill_dummy(spec, dst);
  }
  // Norm weights stay f32: they are tiny (and a bf16 checkpoint's convert exactly).
  std::vector<float> f32(const SliceSpec& spec) const {
    std::vector<float> f(static_cast<std::size_t>(spec.numel()));
    if (ckpt_) {
      model::slice_view(*ckpt_, spec).to_f32(f);
      return f;
    }
    std::vector<std::uint16_t> h(f.size());
    model::fill_dummy(spec, h);
    for (std::size_t i = 0; i < h.size(); ++i) f[i] = bf16_to_f32(h[i]);
    return f;
  }
  // Slices stacked by rows (a conv weight's q, k and v channels), f32.
  std::vector<float> f32(const std::vector<SliceSpec>& specs) const {
    std::vector<float> out;
    for (const SliceSpec& s : specs) {
      const std::vector<float> part = f32(s);
      out.insert(out.end(), part.begin(), part.end());
    }
    return out;
  }

  // One 2-D slice as the runner holds it. `quantizable`: quantize-at-load applies.
  Matrix matrix(const SliceSpec& spec, bool quantizable) const {
    if (ckpt_) {
      const io::TensorView v = model::slice_view(*ckpt_, spec);
      if (v.quantized()) return packed(spec, v);  // a GGUF tensor: its blocks as they are
    }
    if (quantizable && quantize_) return quantized(spec, *quantize_);
    Matrix m;
    m.rows = spec.rows();
    m.cols = spec.cols();
    m.bf16.resize(static_cast<std::size_t>(spec.numel()));
    bf16(spec, m.bf16);
    return m;
  }

  Stack stacked(std::initializer_list<const SliceSpec*> specs, bool quantizable) const {
    return stacked(std::vector<const SliceSpec*>(specs), quantizable);
  }
  Stack stacked(const std::vector<const SliceSpec*>& specs, bool quantizable) const {
    Stack out;
    for (const SliceSpec* s : specs) {
      Matrix m = matrix(*s, quantizable);
      if (!out.empty() && out.back().quantized == m.quantized && (!m.quantized || out.back().q.type == m.q.type))
        append_rows(out.back(), std::move(m));
      else
        out.push_back(std::move(m));
    }
    return out;
  }

 private:
  static Matrix packed(const SliceSpec& spec, const io::TensorView& v) {
    if (!quant::traits(v.ggml_type()).dequantizable)
      fail(errc::unsupported_arch, "tensor " + spec.name + " is " + std::string(quant::ggml_type_name(v.ggml_type())) +
                                       ", which neuron cannot compute with (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_K, Q5_K, Q6_K)");
    Matrix m = empty_quantized(spec, v.ggml_type());
    copy_packed(spec, v, std::span<std::byte>(m.q.data.data(), m.q.data.size()));
    return m;
  }

  Matrix quantized(const SliceSpec& spec, quant::GgmlType type) const {
    check_quantizable(spec, type);
    Matrix m = empty_quantized(spec, type);
    quantize_slice(ckpt_, spec, type, std::span<std::byte>(m.q.data.data(), m.q.data.size()));
    return m;
  }

  static Matrix empty_quantized(const SliceSpec& spec, quant::GgmlType type) {
    Matrix m;
    m.rows = spec.rows();
    m.cols = spec.cols();
    m.quantized = true;
    m.q.type = type;
    m.q.rows = m.rows;
    m.q.cols = m.cols;
    m.q.row_bytes = quant::row_bytes(type, m.cols);  // whole blocks: a GGUF's rows are, check_quantizable checked
    m.q.data.resize(static_cast<std::size_t>(m.rows) * m.q.row_bytes);
    return m;
  }

  static void append_rows(Matrix& to, Matrix&& from) {
    to.rows += from.rows;
    if (to.quantized) {
      to.q.rows += from.q.rows;
      to.q.data.insert(to.q.data.end(), from.q.data.begin(), from.q.data.end());
    } else {
      to.bf16.insert(to.bf16.end(), from.bf16.begin(), from.bf16.end());
    }
  }

  const io::Checkpoint* ckpt_;
  std::optional<quant::GgmlType> quantize_;
};

template <typename T, typename A>
std::uint64_t bytes_of(const std::vector<T, A>& v) {
  return v.size() * sizeof(T);
}

class CpuRunner final : public ModelRunner, private model::BlockOps {
 public:
  CpuRunner(const model::ModelConfig& cfg, const io::Checkpoint* ckpt, const model::ShardPlan& plan,
            std::shared_ptr<dist::Communicator> comm, std::int32_t max_context, std::int32_t block_size,
            std::int32_t num_blocks, std::int32_t state_slots, std::int32_t state_snapshots,
            std::optional<quant::GgmlType> quantize, KvPool::Element kv, Activations activations)
      : cfg_(cfg),
        family_(model::family_of(cfg)),
        plan_(plan),
        comm_(std::move(comm)),
        max_context_(max_context),
        q_dim_(plan.q_heads * cfg.head_dim),
        q_rows_(cfg.attention_output_gate ? 2 * q_dim_ : q_dim_),
        kv_dim_(plan.kv_heads * cfg.head_dim),
        pool_shape_{.block_size = block_size,
                    .num_blocks = num_blocks,
                    .bytes_per_block = kv_bytes_per_block(cfg, plan, KvPool::element_bytes(kv), block_size)},
        pool_(cfg.kv_layers(), plan.kv_heads, cfg.head_dim, block_size, num_blocks, kv),
        rope_(model::rope_inv_freq(cfg), max_context),
        states_(cfg, plan, state_slots, state_snapshots),
        activations_(activations) {
    NEURON_ASSERT(pool_.bytes() == pool_shape_.bytes_per_block * static_cast<std::uint64_t>(num_blocks));
    pool_shape_.state_slots = states_.slots();
    pool_shape_.bytes_per_state_slot = states_.bytes_per_slot();
    pool_shape_.state_snapshots = states_.snapshots();
    if (ckpt) model::reject_unsupported_tensors(*ckpt, cfg);
    const WeightSource src(ckpt, quantize);
    const model::ShardSpecs specs = model::shard_specs(cfg, plan);
    // The embedding and LM head stay as the checkpoint has them (quantize-at-load leaves them bf16).
    embed_.push_back(src.matrix(specs.embed, false));
    final_norm_ = norm(src, specs.final_norm);
    if (!cfg.tie_word_embeddings) lm_head_.push_back(src.matrix(specs.lm_head, false));
    auto make_mlp = [&](const model::MlpSpecs& ms) {
      return Mlp{src.stacked({&ms.gate_proj, &ms.up_proj}, true), src.stacked({&ms.down_proj}, true)};
    };
    for (const model::LayerSpecs& ls : specs.layers) {
      Layer l;
      if (const auto& as = ls.attention) {
        l.input_norm = norm(src, as->norm);
        if (as->q_norm) l.q_norm = norm(src, *as->q_norm);
        if (as->k_norm) l.k_norm = norm(src, *as->k_norm);
        l.qkv = src.stacked({&as->q_proj, &as->k_proj, &as->v_proj}, true);
        l.o = src.stacked({&as->o_proj}, true);
      }
      if (const auto& la = ls.linear) {
        l.input_norm = norm(src, la->norm);
        l.linear = load_linear(src, *la);
      }
      l.post_norm = norm(src, ls.ffn_norm);
      if (ls.mlp) l.mlp = make_mlp(*ls.mlp);
      if (ls.moe) {
        // The router stays as the checkpoint has it (quantize-at-load leaves it, as llama.cpp does).
        l.router.push_back(src.matrix(ls.moe->router, false));
        for (const model::MlpSpecs& e : ls.moe->experts) l.experts.push_back(make_mlp(e));
        if (ls.moe->shared_expert) {
          l.shared_expert = make_mlp(*ls.moe->shared_expert);
          l.shared_gate.push_back(src.matrix(*ls.moe->shared_expert_gate, false));
        }
      }
      layers_.push_back(std::move(l));
    }
    for (std::int64_t h = 0; h < plan.q_heads; ++h) kv_of_q_.push_back(plan.kv_of_q(h, cfg));
    // How the decode kernels walk each weight type's rows is measured on first
    // use (decode_kernel.hpp, ~70 ms a type): at load, not in the first request.
    auto measure_walks = [](const Stack& stack) {
      for (const Matrix& m : stack) row_walk(m.quantized ? m.q.type : quant::GgmlType::bf16);
    };
    measure_walks(embed_);
    measure_walks(lm_head_);
    for (const Layer& l : layers_)
      for_each_stack(l, measure_walks);
    // Q4_K rows four to a group where the one-token products take the int8
    // kernels (gemm_quant_grouped.hpp): the decode's layout, in place.
    std::uint64_t grouped_bytes = 0;
    auto group = [&](Stack& stack) {
      for (Matrix& m : stack)
        if (m.quantized && m.q.type == quant::GgmlType::q4_k && q4_k_grouping_pays(m.cols)) {
          group_rows(m.q);
          grouped_bytes += m.bytes();
        }
    };
    if (cfg.tie_word_embeddings) group(embed_);  // else only looked up, a row at a time
    group(lm_head_);
    for (Layer& l : layers_) for_each_stack(l, group);
    if (grouped_bytes > 0) spdlog::info("cpu: Q4_K rows four to a group for the int8 kernels ({} MiB)", grouped_bytes >> 20);
  }

  // An RMSNorm weight as the scale the blocks multiply by (a zero-centred one gets its 1 here: model::to_norm_scale).
  std::vector<float> norm(const WeightSource& src, const SliceSpec& spec) const {
    std::vector<float> w = src.f32(spec);
    model::to_norm_scale(cfg_, w);
    return w;
  }

  static LinearWeights load_linear(const WeightSource& src, const model::LinearAttentionSpecs& la) {
    LinearWeights w;
    // q, k, v, z are projections (quantize-at-load applies); the b and a rows (2 Hv of them) stay as stored.
    std::vector<const SliceSpec*> proj_rows, gate_rows;
    for (const auto* part : {&la.qkv, &la.z})
      for (const SliceSpec& s : *part) proj_rows.push_back(&s);
    for (const auto* part : {&la.b, &la.a})
      for (const SliceSpec& s : *part) gate_rows.push_back(&s);
    w.in_proj = src.stacked(proj_rows, true);
    for (Matrix& m : src.stacked(gate_rows, false)) w.in_proj.push_back(std::move(m));
    w.conv = src.f32(la.conv);  // q, k, v channels of this rank's heads
    w.neg_a = src.f32(la.a_log);
    for (float& a : w.neg_a) a = -std::exp(a);
    w.dt_bias = src.f32(la.dt_bias);
    w.gated_norm = src.f32(la.gated_norm);  // a plain scale, not zero-centred
    w.out = src.stacked({&la.out_proj}, true);
    return w;
  }

  void run_step(const Batch& batch, std::span<float> logits, std::span<std::int32_t> picks,
                std::span<float> hidden_out) override {
    NEURON_ASSERT(picks.empty());  // picks_on_device() is false: the base class picks
    check_batch(batch, cfg_, pool_shape_, max_context_, logits, {}, hidden_out);
    const ActivationsScope level(activations_);  // this model's products, whatever the process's level
    const std::int64_t n = batch.num_tokens(), hidden = cfg_.hidden_size;
    place_tokens(batch);
    x_.resize(static_cast<std::size_t>(n * hidden));
    for (std::int64_t i = 0; i < n; ++i)
      embed_.front().row_f32(batch.tokens[static_cast<std::size_t>(i)], x_.data() + i * hidden);
    batch_ = &batch;
    for (std::int64_t l = 0; l < cfg_.num_hidden_layers; ++l) family_.layer(*this, cfg_, l);
    batch_ = nullptr;
    if (!logits.empty()) lm_head(batch, logits);
    if (!hidden_out.empty()) hidden_rows(batch, hidden_out);
  }

  const model::ModelConfig& config() const noexcept override { return cfg_; }
  std::int32_t max_context() const noexcept override { return max_context_; }
  KvPoolShape kv_pool() const noexcept override { return pool_shape_; }

 protected:
  void run_save_state(std::int32_t slot, std::int32_t snapshot) override { states_.save(slot, snapshot); }
  void run_restore_state(std::int32_t snapshot, std::int32_t slot) override { states_.restore(snapshot, slot); }

 public:

  MemoryStats memory() const override {
    MemoryStats m;
    m.device = "cpu";
    m.weight_bytes = bytes_of(embed_) + bytes_of(lm_head_) + bytes_of(final_norm_);
    for (const Layer& l : layers_) {
      m.weight_bytes += bytes_of(l.input_norm) + bytes_of(l.q_norm) + bytes_of(l.k_norm) + bytes_of(l.post_norm);
      if (const auto& la = l.linear)
        m.weight_bytes += bytes_of(la->conv) + bytes_of(la->neg_a) + bytes_of(la->dt_bias) + bytes_of(la->gated_norm);
      for_each_stack(l, [&](const Stack& s) { m.weight_bytes += bytes_of(s); });
    }
    m.kv_cache_bytes = pool_.bytes() + states_.bytes();
    return m;
  }

 private:
  float eps() const noexcept { return static_cast<float>(cfg_.rms_norm_eps); }

  // Each batch token's position and the pool row (block * block_size + slot) its K and V go to.
  void place_tokens(const Batch& batch) {
    const std::int64_t bs = pool_shape_.block_size;
    pos_.resize(batch.tokens.size());
    kv_row_.resize(batch.tokens.size());
    for (const SequenceStep& s : batch.seqs) {
      for (std::int32_t j = 0; j < s.num_tokens; ++j) {
        const std::int64_t pos = static_cast<std::int64_t>(s.position) + j;
        const auto i = static_cast<std::size_t>(s.token_begin + j);
        pos_[i] = pos;
        kv_row_[i] = static_cast<std::int64_t>(batch.block_ids[static_cast<std::size_t>(s.block_begin + pos / bs)]) * bs +
                     pos % bs;
      }
    }
  }

  template <class L, class F>  // L: Layer or const Layer
  static void for_each_stack(L& l, F&& f) {
    for (auto* s : {&l.qkv, &l.o, &l.router, &l.shared_gate}) f(*s);
    if (l.linear) {
      f(l.linear->in_proj);
      f(l.linear->out);
    }
    for (auto* m : {&l.mlp, &l.shared_expert}) {
      if (!*m) continue;
      f((*m)->gate_up);
      f((*m)->down);
    }
    for (auto& e : l.experts) {
      f(e.gate_up);
      f(e.down);
    }
  }

  const Layer& layer_at(std::int64_t li) const {
    NEURON_ASSERT(li >= 0 && li < static_cast<std::int64_t>(layers_.size()));
    return layers_[static_cast<std::size_t>(li)];
  }

  // proj_ ([n, hidden] partial sums of this rank) summed over the ranks and added to the residual stream.
  void add_to_residual() {
    comm_->all_reduce_sum(proj_.data(), proj_.size(), DType::f32);
    for (std::size_t i = 0; i < proj_.size(); ++i) x_[i] += proj_[i];
  }

  void attention(std::int64_t li) override {
    const Layer& L = layer_at(li);
    const Batch& batch = *batch_;
    const std::int64_t n = batch.num_tokens();
    const std::int64_t hidden = cfg_.hidden_size, hd = cfg_.head_dim;
    const std::int64_t qkv_w = q_rows_ + 2 * kv_dim_;
    const std::int64_t kv_layer = cfg_.kv_layer_index(li);
    const bool gated = q_rows_ != q_dim_;
    NEURON_ASSERT(kv_layer >= 0);
    xn_.resize(static_cast<std::size_t>(n * hidden));
    qkv_.resize(static_cast<std::size_t>(n * qkv_w));
    attn_.resize(static_cast<std::size_t>(n * q_dim_));
    proj_.resize(static_cast<std::size_t>(n * hidden));
    if (gated) {
      q_.resize(static_cast<std::size_t>(n * q_dim_));
      gate_.resize(static_cast<std::size_t>(n * q_dim_));
    }

    // Projections over every token of every sequence at once.
    rms_norm(x_.data(), n, hidden, hidden, L.input_norm.data(), eps(), xn_.data(), hidden);
    multiply(L.qkv, xn_.data(), n, hidden, hidden, qkv_.data(), qkv_w);
    const bool qk_norm = !L.q_norm.empty();
    for (std::int64_t i = 0; i < n; ++i) {
      float* row = qkv_.data() + i * qkv_w;
      const std::int64_t pos = pos_[static_cast<std::size_t>(i)], kv_row = kv_row_[static_cast<std::size_t>(i)];
      for (std::int64_t h = 0; h < plan_.q_heads; ++h) {
        // With an output gate q_proj's rows are [H, 2, hd]: the head's query, then its gate.
        float* q = gated ? q_.data() + i * q_dim_ + h * hd : row + h * hd;
        if (gated) {
          std::memcpy(q, row + h * 2 * hd, static_cast<std::size_t>(hd) * sizeof(float));
          std::memcpy(gate_.data() + i * q_dim_ + h * hd, row + h * 2 * hd + hd,
                      static_cast<std::size_t>(hd) * sizeof(float));
        }
        if (qk_norm) rms_norm(q, 1, hd, hd, L.q_norm.data(), eps(), q, hd);
        rope_.apply(q, pos);
      }
      for (std::int64_t h = 0; h < plan_.kv_heads; ++h) {
        float* k = row + q_rows_ + h * hd;
        if (qk_norm) rms_norm(k, 1, hd, hd, L.k_norm.data(), eps(), k, hd);
        rope_.apply(k, pos);
        pool_.store(kv_layer, h, kv_row, k, row + q_rows_ + kv_dim_ + h * hd);
      }
    }
    if (gated) {
      cpu::attention(q_.data(), q_dim_, batch, pool_, kv_layer, kv_of_q_, attn_.data(), q_dim_);
      for (std::size_t i = 0; i < attn_.size(); ++i) attn_[i] *= 1.0f / (1.0f + std::exp(-gate_[i]));
    } else {
      cpu::attention(qkv_.data(), qkv_w, batch, pool_, kv_layer, kv_of_q_, attn_.data(), q_dim_);
    }
    multiply(L.o, attn_.data(), n, q_dim_, q_dim_, proj_.data(), hidden);
    add_to_residual();
  }

  // Gated DeltaNet (block_ops.hpp): the in-projections over every token at once, then each sequence's
  // conv and delta rule from its state slot (zeroed at position 0), the gated norm, out_proj.
  void linear_attention(std::int64_t li) override {
    const Layer& L = layer_at(li);
    NEURON_ASSERT(L.linear);
    const LinearWeights& W = *L.linear;
    const model::LinearAttentionConfig& c = cfg_.linear;
    const Batch& batch = *batch_;
    const std::int64_t n = batch.num_tokens(), hidden = cfg_.hidden_size;
    // This rank's heads (ShardPlan: its key heads and the value heads that read them).
    const std::int64_t hk = plan_.linear_key_heads, hv = plan_.linear_value_heads;
    const std::int64_t dk = c.key_head_dim, dv = c.value_head_dim;
    const std::int64_t key_dim = hk * dk, value_dim = hv * dv, conv_dim = model::linear_conv_channels(cfg_, plan_);
    const std::int64_t width = conv_dim + value_dim + 2 * hv;  // q, k, v | z | b | a
    const std::int64_t lin = states_.linear_index(li);
    NEURON_ASSERT(lin >= 0);
    xn_.resize(static_cast<std::size_t>(n * hidden));
    lin_in_.resize(static_cast<std::size_t>(n * width));
    lin_conv_.resize(static_cast<std::size_t>(n * conv_dim));
    lin_gb_.resize(static_cast<std::size_t>(n * 2 * hv));
    lin_out_.resize(static_cast<std::size_t>(n * value_dim));
    proj_.resize(static_cast<std::size_t>(n * hidden));

    rms_norm(x_.data(), n, hidden, hidden, L.input_norm.data(), eps(), xn_.data(), hidden);
    multiply(W.in_proj, xn_.data(), n, hidden, hidden, lin_in_.data(), width);
    for (std::int64_t i = 0; i < n; ++i) {
      const float* b = lin_in_.data() + i * width + conv_dim + value_dim;
      const float* a = b + hv;
      float* g = lin_gb_.data() + i * 2 * hv;
      for (std::int64_t h = 0; h < hv; ++h) {
        const float x = a[h] + W.dt_bias[static_cast<std::size_t>(h)];
        const float softplus = x > 20.0f ? x : std::log1p(std::exp(x));  // torch's threshold
        g[h] = W.neg_a[static_cast<std::size_t>(h)] * softplus;
        g[hv + h] = 1.0f / (1.0f + std::exp(-b[h]));
      }
    }
    const float q_scale = 1.0f / std::sqrt(static_cast<float>(dk));
    const DeltaRuleShape shape{.key_heads = hk, .value_heads = hv, .key_dim = dk, .value_dim = dv};
    auto run_sequence = [&](const SequenceStep& s) {
      if (s.position == 0) states_.reset(s.state_slot, lin);
      const std::int64_t t0 = s.token_begin, m = s.num_tokens;
      causal_conv1d_silu(lin_in_.data() + t0 * width, m, conv_dim, width, W.conv.data(), c.conv_kernel,
                         states_.conv(s.state_slot, lin), lin_conv_.data() + t0 * conv_dim, conv_dim);
      for (std::int64_t i = t0; i < t0 + m; ++i) {
        float* row = lin_conv_.data() + i * conv_dim;
        for (std::int64_t h = 0; h < hk; ++h) {
          float* q = row + h * dk;
          l2_normalize(q, dk, 1e-6f);
          for (std::int64_t j = 0; j < dk; ++j) q[j] *= q_scale;
          l2_normalize(row + key_dim + h * dk, dk, 1e-6f);
        }
      }
      const float* base = lin_conv_.data() + t0 * conv_dim;
      const float* gb = lin_gb_.data() + t0 * 2 * hv;
      // Prefill chunks by the chunked (WY) form, a decode's one token by the recurrent rule.
      const auto rule = m > 1 ? gated_delta_rule_chunked : gated_delta_rule;
      rule(base, base + key_dim, conv_dim, base + 2 * key_dim, conv_dim, gb, gb + hv, 2 * hv, m, shape,
           states_.delta(s.state_slot, lin), lin_out_.data() + t0 * value_dim, value_dim);
    };
    // Prefill chunks one after another (their kernels split the value heads over the threads); the decoding
    // sequences, each a little serial work on its own state slot, side by side.
    decoding_.clear();
    for (const SequenceStep& s : batch.seqs) {
      if (s.num_tokens > 1)
        run_sequence(s);
      else
        decoding_.push_back(&s);
    }
    const auto decodes = static_cast<std::int64_t>(decoding_.size());
#pragma omp parallel for schedule(dynamic, 1) if (decodes > 1)
    for (std::int64_t i = 0; i < decodes; ++i) run_sequence(*decoding_[static_cast<std::size_t>(i)]);
    // o = rmsnorm(o) * gated_norm * silu(z), per value head.
    for (std::int64_t i = 0; i < n; ++i) {
      const float* z = lin_in_.data() + i * width + conv_dim;
      for (std::int64_t h = 0; h < hv; ++h) {
        float* o = lin_out_.data() + i * value_dim + h * dv;
        rms_norm(o, 1, dv, dv, W.gated_norm.data(), eps(), o, dv);
        for (std::int64_t j = 0; j < dv; ++j) {
          const float zj = z[h * dv + j];
          o[j] *= zj / (1.0f + std::exp(-zj));
        }
      }
    }
    multiply(W.out, lin_out_.data(), n, value_dim, value_dim, proj_.data(), hidden);
    add_to_residual();
  }

  // y[m, hidden] = down(silu(gate(x)) * up(x)) of one MLP over x [m, hidden] (row stride hidden).
  void swiglu(const Mlp& mlp, const float* x, std::int64_t m, float* y) {
    const std::int64_t hidden = cfg_.hidden_size, ff = mlp.down.front().cols;
    gate_up_.resize(static_cast<std::size_t>(m * 2 * ff));
    act_.resize(static_cast<std::size_t>(m * ff));
    multiply(mlp.gate_up, x, m, hidden, hidden, gate_up_.data(), 2 * ff);
    for (std::int64_t i = 0; i < m; ++i) {
      const float* g = gate_up_.data() + i * 2 * ff;
      silu_mul(g, g + ff, act_.data() + i * ff, ff);
    }
    multiply(mlp.down, act_.data(), m, ff, ff, y, hidden);
  }

  void mlp(std::int64_t li) override {
    const Layer& L = layer_at(li);
    NEURON_ASSERT(L.mlp);
    const std::int64_t n = batch_->num_tokens(), hidden = cfg_.hidden_size;
    xn_.resize(static_cast<std::size_t>(n * hidden));
    proj_.resize(static_cast<std::size_t>(n * hidden));
    rms_norm(x_.data(), n, hidden, hidden, L.post_norm.data(), eps(), xn_.data(), hidden);
    swiglu(*L.mlp, xn_.data(), n, proj_.data());
    add_to_residual();
  }

  // As transformers' Qwen3MoeSparseMoeBlock in f32: routed by model::MoeRouter over all E experts, the
  // weighted outputs of this rank's experts summed in expert order (with expert parallelism the experts
  // other ranks hold add nothing here; the all-reduce sums the ranks).
  void moe(std::int64_t li) override {
    const Layer& L = layer_at(li);
    NEURON_ASSERT(static_cast<std::int64_t>(L.experts.size()) == plan_.experts && plan_.experts > 0);
    const std::int64_t n = batch_->num_tokens(), hidden = cfg_.hidden_size, experts = cfg_.moe.num_experts;
    xn_.resize(static_cast<std::size_t>(n * hidden));
    proj_.assign(static_cast<std::size_t>(n * hidden), 0.0f);
    router_.resize(static_cast<std::size_t>(n * experts));
    rms_norm(x_.data(), n, hidden, hidden, L.post_norm.data(), eps(), xn_.data(), hidden);
    multiply(L.router, xn_.data(), n, hidden, hidden, router_.data(), experts);

    router_state_.route(router_.data(), n, cfg_.moe);
    // Only the experts some token chose are read.
    for (std::int64_t e = plan_.expert_begin; e < plan_.expert_begin + plan_.experts; ++e) {
      const auto& tokens = router_state_.tokens_of(e);
      if (tokens.empty()) continue;
      const auto m = static_cast<std::int64_t>(tokens.size());
      expert_in_.resize(static_cast<std::size_t>(m * hidden));
      expert_out_.resize(static_cast<std::size_t>(m * hidden));
      for (std::int64_t j = 0; j < m; ++j)
        std::memcpy(expert_in_.data() + j * hidden, xn_.data() + tokens[static_cast<std::size_t>(j)].token * hidden,
                    static_cast<std::size_t>(hidden) * sizeof(float));
      swiglu(L.experts[static_cast<std::size_t>(e - plan_.expert_begin)], expert_in_.data(), m, expert_out_.data());
      for (std::int64_t j = 0; j < m; ++j) {
        const auto [token, w] = tokens[static_cast<std::size_t>(j)];
        float* dst = proj_.data() + token * hidden;
        const float* src = expert_out_.data() + j * hidden;
        for (std::int64_t c = 0; c < hidden; ++c) dst[c] += src[c] * w;
      }
    }
    if (L.shared_expert) {  // + sigmoid(n . shared_expert_gate) * shared_expert(n), after the routed experts
      shared_gate_.resize(static_cast<std::size_t>(n));
      expert_out_.resize(static_cast<std::size_t>(n * hidden));
      multiply(L.shared_gate, xn_.data(), n, hidden, hidden, shared_gate_.data(), 1);
      swiglu(*L.shared_expert, xn_.data(), n, expert_out_.data());
      for (std::int64_t i = 0; i < n; ++i) {
        const float w = 1.0f / (1.0f + std::exp(-shared_gate_[static_cast<std::size_t>(i)]));
        float* dst = proj_.data() + i * hidden;
        const float* src = expert_out_.data() + i * hidden;
        for (std::int64_t c = 0; c < hidden; ++c) dst[c] += src[c] * w;
      }
    }
    add_to_residual();
  }

  // Final norm and LM head over only the rows the batch asks for, in sequence order.
  void lm_head(const Batch& batch, std::span<float> logits) {
    const std::int64_t vocab = cfg_.vocab_size, hidden = cfg_.hidden_size;
    std::int64_t rows = 0;
    xn_.resize(static_cast<std::size_t>(batch.logit_rows() * hidden));
    for (const SequenceStep& s : batch.seqs) {
      const std::int64_t take = logit_rows_of(s);
      if (take == 0) continue;
      const std::int64_t first = s.token_begin + s.num_tokens - take;
      rms_norm(x_.data() + first * hidden, take, hidden, hidden, final_norm_.data(), eps(), xn_.data() + rows * hidden,
               hidden);
      rows += take;
    }
    NEURON_ASSERT(static_cast<std::uint64_t>(rows * vocab) == logits.size());
    multiply(cfg_.tie_word_embeddings ? embed_ : lm_head_, xn_.data(), rows, hidden, hidden, logits.data(), vocab);
  }

  // The final norm alone over the rows the batch asks hidden states of, in sequence order ([rows, hidden] f32).
  void hidden_rows(const Batch& batch, std::span<float> out) {
    const std::int64_t hidden = cfg_.hidden_size;
    std::int64_t rows = 0;
    for (const SequenceStep& s : batch.seqs) {
      const std::int64_t take = hidden_rows_of(s);
      if (take == 0) continue;
      const std::int64_t first = s.token_begin + s.num_tokens - take;
      rms_norm(x_.data() + first * hidden, take, hidden, hidden, final_norm_.data(), eps(), out.data() + rows * hidden,
               hidden);
      rows += take;
    }
    NEURON_ASSERT(static_cast<std::uint64_t>(rows * hidden) == out.size());
  }

  model::ModelConfig cfg_;
  const model::Family& family_;
  model::ShardPlan plan_;
  std::shared_ptr<dist::Communicator> comm_;
  std::int32_t max_context_;
  std::int64_t q_dim_;   // this rank's H * hd
  std::int64_t q_rows_;  // q_proj's output width: H * hd, or 2 H * hd with an output gate
  std::int64_t kv_dim_;  // this rank's KV * hd
  KvPoolShape pool_shape_;

  Stack embed_;    // one [vocab, hidden] matrix (also the LM head when tied)
  Stack lm_head_;  // one [vocab, hidden] matrix; empty when tied
  std::vector<float> final_norm_;       // [hidden] f32
  std::vector<Layer> layers_;
  std::vector<std::int64_t> kv_of_q_;   // [H] local KV head each local query head reads
  KvPool pool_;
  RopeTable rope_;
  RecurrentStates states_;  // hybrids: each sequence's conv and delta-rule state (by SequenceStep::state_slot)
  Activations activations_;  // the level this model's products take (model_activations), in every step

  // Activations of the current step (n = its token count over all sequences), reused between steps.
  std::vector<std::int64_t> pos_;     // [n] each token's position in its sequence
  std::vector<std::int64_t> kv_row_;  // [n] each token's pool row: block * block_size + slot
  std::vector<float> x_;        // [n, hidden] residual stream
  std::vector<float> xn_;       // [n, hidden] normed input of a block (the LM head's: [logit rows, hidden])
  std::vector<float> qkv_;      // [n, q_rows + 2 KV * hd]
  std::vector<float> q_;        // [n, H * hd] queries apart from their gates (output-gated attention)
  std::vector<float> gate_;     // [n, H * hd] the output gates' pre-activations
  std::vector<float> attn_;     // [n, H * hd]
  std::vector<float> proj_;     // [n, hidden] o_proj / down_proj output (partial sums before the all-reduce)
  std::vector<float> gate_up_;  // [m, 2 F] of the MLP running (m: the layer's tokens, or an expert's)
  std::vector<float> act_;      // [m, F]
  const Batch* batch_ = nullptr;  // the step running (the blocks read its sequences)
  // MoE layers.
  std::vector<float> router_;                // [n, E] router logits, then probabilities
  model::MoeRouter router_state_;            // each expert's tokens of the layer running
  std::vector<float> expert_in_;             // [m, hidden] an expert's tokens' normed inputs
  std::vector<float> expert_out_;             // [m, hidden] its outputs
  std::vector<float> shared_gate_;            // [n] the shared expert's gate logits
  // Linear-attention layers (this rank's C conv channels, Hv value heads of dv; W = C + Hv dv + 2 Hv).
  std::vector<float> lin_in_;    // [n, W] in-projection: q, k, v, z, b, a
  std::vector<float> lin_conv_;  // [n, C] conv1d + SiLU output: q, k, v
  std::vector<float> lin_gb_;    // [n, 2 Hv] g (log decay), then beta
  std::vector<float> lin_out_;   // [n, Hv dv] delta-rule output, then gated-normed
  std::vector<const SequenceStep*> decoding_;  // the step's one-token sequences
};

void check_config(const model::ModelConfig& cfg) {
  auto positive = [](std::int64_t v, const char* field) {
    if (v <= 0) fail(errc::bad_model, std::string("config ") + field + " must be positive (got " + std::to_string(v) + ")");
  };
  positive(cfg.vocab_size, "vocab_size");
  positive(cfg.hidden_size, "hidden_size");
  bool dense_layer = false;
  for (std::int64_t l = 0; l < cfg.num_hidden_layers; ++l) dense_layer = dense_layer || !cfg.moe.sparse_layer(l);
  if (dense_layer) positive(cfg.intermediate_size, "intermediate_size");
  positive(cfg.num_hidden_layers, "num_hidden_layers");
  positive(cfg.num_attention_heads, "num_attention_heads");
  positive(cfg.num_key_value_heads, "num_key_value_heads");
  positive(cfg.head_dim, "head_dim");
  if (cfg.head_dim % 2 != 0) fail(errc::bad_model, "config head_dim must be even for RoPE (got " + std::to_string(cfg.head_dim) + ")");
  if (cfg.num_attention_heads % cfg.num_key_value_heads != 0)
    fail(errc::bad_model, "config num_attention_heads must be a multiple of num_key_value_heads");
}

}  // namespace

std::unique_ptr<ModelRunner> make_cpu_runner(const model::ModelConfig& cfg, const io::Checkpoint* checkpoint,
                                             const model::ShardPlan& plan, std::shared_ptr<dist::Communicator> comm,
                                             const RunnerOptions& options) {
  check_config(cfg);
  if (plan != model::ShardPlan::make(cfg, plan.rank, plan.world, plan.expert_parallel))
    fail(errc::bad_tensor_parallel, "shard plan for rank " + std::to_string(plan.rank) + " of " +
                                        std::to_string(plan.world) + " does not match the model config");
  if (!comm) {
    if (plan.world != 1)
      fail(errc::bad_tensor_parallel, "a tensor-parallel rank (world " + std::to_string(plan.world) + ") needs a communicator");
    comm = std::make_shared<dist::LocalCommunicator>();
  }
  if (comm->size() != plan.world || comm->rank() != plan.rank)
    fail(errc::bad_tensor_parallel, "communicator is rank " + std::to_string(comm->rank()) + " of " +
                                        std::to_string(comm->size()) + " but the shard plan is rank " +
                                        std::to_string(plan.rank) + " of " + std::to_string(plan.world));
  if (comm->location() != dist::MemoryLocation::host)
    fail(errc::bad_tensor_parallel, "the CPU backend needs a host communicator, not " + comm->backend_name());
  const std::int32_t max_context = model::resolve_max_context(cfg, options.max_context, default_max_context(Device{}));
  if (options.kv_block_size < 0)
    fail(errc::invalid_argument, "kv_block_size " + std::to_string(options.kv_block_size) + " is negative");
  if (options.kv_blocks < 0) fail(errc::invalid_argument, "kv_blocks " + std::to_string(options.kv_blocks) + " is negative");
  const std::int32_t block_size = options.kv_block_size > 0 ? options.kv_block_size : kDefaultKvBlockSize;
  const std::int32_t num_blocks = options.kv_blocks > 0 ? options.kv_blocks : (max_context + block_size - 1) / block_size;
  const Activations activations =
      model_activations(cpu_activations(), options.encode_only, quantized_weights(checkpoint, options.quantize.has_value()));
  if (activations != cpu_activations())
    spdlog::info("cpu: {} under --cpu-activations auto: its products round the activations as {} does (bf16 for "
                 "bf16 weights, a bf16 KV cache); --cpu-activations f32 keeps them exact",
                 options.encode_only ? "an embedder or reranker" : "quantized weights", activations_name(activations));
  const ActivationsScope level(activations);
  const KvPool::Element kv = kv_element();  // read once, at the model's level: the pool and its shape agree
  const std::uint64_t per_block = kv_bytes_per_block(cfg, plan, KvPool::element_bytes(kv), block_size);
  if (per_block > (std::uint64_t{1} << 62) / static_cast<std::uint64_t>(num_blocks))
    fail(errc::out_of_memory, "a KV pool of " + std::to_string(num_blocks) + " blocks of " + std::to_string(block_size) +
                                  " positions does not fit in memory");
  if (options.state_slots < 0)
    fail(errc::invalid_argument, "state_slots " + std::to_string(options.state_slots) + " is negative");
  const std::int32_t state_slots = options.state_slots > 0 ? options.state_slots : kDefaultStateSlots;
  const std::int32_t state_snapshots = resolve_state_snapshots(options.state_snapshots, state_slots);
  return std::make_unique<CpuRunner>(cfg, checkpoint, plan, std::move(comm), max_context, block_size, num_blocks,
                                     state_slots, state_snapshots, options.quantize, kv, activations);
}

}  // namespace neuron::backend::cpu
