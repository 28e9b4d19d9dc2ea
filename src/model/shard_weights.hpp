#pragma once
// Which slice of which checkpoint tensor one rank of a tensor-parallel model
// holds, independent of the backend (DESIGN.md section 4). A backend walks
// shard_specs(), and for each SliceSpec either reads the slice out of the
// mmap'd checkpoint (slice_view) or fills stand-in weights (fill_dummy), then
// stores it in its own layout. N = 1 is the whole model.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "io/tensor_view.hpp"
#include "model/config.hpp"
#include "model/shard.hpp"

namespace neuron::io { class Checkpoint; }

namespace neuron::model {

// Rows [row_begin, row_end) and, for 2-D tensors, columns [col_begin, col_end)
// of the tensor `name`, whose full shape the config implies. A 3-D tensor
// (a conv1d weight) is sliced by rows only: rows of shape[1] * shape[2] elements.
struct SliceSpec {
  std::string name;
  std::vector<std::int64_t> shape;  // full tensor: [rows] or [rows, cols]
  std::int64_t row_begin = 0, row_end = 0;
  std::int64_t col_begin = 0, col_end = 0;  // 0, 0 for 1-D tensors

  std::int64_t rows() const noexcept { return row_end - row_begin; }
  std::int64_t cols() const noexcept {
    if (shape.size() == 2) return col_end - col_begin;
    return shape.size() == 3 ? shape[1] * shape[2] : 1;
  }
  std::int64_t numel() const noexcept { return rows() * cols(); }
};

// A layer's slices for a rank (hd = head_dim, H/KV = the rank's query/KV
// heads, F = its ff_size, Fm = its moe_ff_size, E = num_experts).
struct AttentionSpecs {
  SliceSpec norm;        // [hidden]            input_layernorm
  SliceSpec q_proj;      // [H * hd, hidden]   column-parallel: rows of the rank's query heads;
                         // with output_gate [H * 2 * hd, hidden]: each head's query rows, then its gate's
  bool output_gate = false;  // ModelConfig::attention_output_gate
  SliceSpec k_proj;      // [KV * hd, hidden]  rows of the rank's KV heads (replicated when KV < world)
  SliceSpec v_proj;      // [KV * hd, hidden]
  SliceSpec o_proj;      // [hidden, H * hd]   row-parallel: input columns of the rank's query heads
  std::optional<SliceSpec> q_norm, k_norm;  // [hd] each, when the config has qk_norm
};

struct MlpSpecs {        // SwiGLU: a dense MLP (F) or one expert (Fm)
  SliceSpec gate_proj;   // [F, hidden]        column-parallel
  SliceSpec up_proj;     // [F, hidden]        column-parallel
  SliceSpec down_proj;   // [hidden, F]        row-parallel
};

struct MoeSpecs {
  SliceSpec router;              // [E, hidden] replicated (mlp.gate): every rank routes over all E experts
  // The rank's experts (ShardPlan::experts of them): expert expert_begin + i is experts[i]. All E, each
  // split Fm ways like a dense MLP; with expert parallelism E / N of them whole (Fm = moe_intermediate_size).
  std::int64_t expert_begin = 0;
  std::vector<MlpSpecs> experts;
  // MoeConfig::shared_expert_intermediate_size > 0: mlp.shared_expert, split
  // like a dense MLP (Fs = the rank's shared_ff_size, with or without expert
  // parallelism), and mlp.shared_expert_gate [1, hidden], replicated, whose
  // sigmoid scales each rank's partial output.
  std::optional<MlpSpecs> shared_expert;   // [Fs, hidden] gate/up, [hidden, Fs] down
  std::optional<SliceSpec> shared_expert_gate;
};

// Gated DeltaNet linear attention (LinearAttentionConfig: dk / dv the key /
// value head sizes, K the conv kernel). Split by key heads (ShardPlan): Hk / Hv
// here are the rank's key heads and the value heads that read them, and
// C = 2 Hk dk + Hv dv its conv channels (model::linear_conv_channels).
// The in-projections and the conv weight are lists of row slices stacked in
// order, so a family whose checkpoint fuses them (Qwen3-Next's in_proj_qkvz,
// grouped by key head) names the pieces and every runner sees one layout: q of
// the rank's heads, then k, then v (the conv's channel order), z, b and a each head-major.
struct LinearAttentionSpecs {
  SliceSpec norm;                 // [hidden] input_layernorm
  std::vector<SliceSpec> qkv;     // stacked [C, hidden]: q [Hk dk], k [Hk dk], v [Hv dv]
  std::vector<SliceSpec> z;       // stacked [Hv dv, hidden]: the output gate
  std::vector<SliceSpec> b;       // stacked [Hv, hidden]: beta = sigmoid(n b^T)
  std::vector<SliceSpec> a;       // stacked [Hv, hidden]: g = -exp(A_log) softplus(n a^T + dt_bias)
  std::vector<SliceSpec> conv;    // stacked [C, 1, K] depthwise causal conv1d weight (no bias): q, k, v channels
  SliceSpec a_log;                // [Hv]
  SliceSpec dt_bias;              // [Hv]
  SliceSpec gated_norm;           // [dv] RMSNorm per head, times silu(z); a plain scale (not zero-centred), whole
  SliceSpec out_proj;             // [hidden, Hv dv] row-parallel: input columns of the rank's value heads
};

struct LayerSpecs {
  std::optional<AttentionSpecs> attention;      // exactly one of attention (full, with a KV cache)
  std::optional<LinearAttentionSpecs> linear;   // and linear (a recurrent state)
  SliceSpec ffn_norm;            // [hidden] post_attention_layernorm
  std::optional<MlpSpecs> mlp;   // exactly one of mlp and moe
  std::optional<MoeSpecs> moe;
};

struct ShardSpecs {
  SliceSpec embed;       // [vocab, hidden] replicated
  SliceSpec final_norm;  // [hidden]
  SliceSpec lm_head;     // [vocab, hidden] replicated; names the embedding when tie_word_embeddings
  std::vector<LayerSpecs> layers;
};

// Slice builders for the families' layer_specs: the whole tensor, rows
// [begin, begin + count), columns [begin, begin + count).
SliceSpec whole(std::string name, std::vector<std::int64_t> shape);
SliceSpec row_slice(std::string name, std::vector<std::int64_t> shape, std::int64_t begin, std::int64_t count);
SliceSpec col_slice(std::string name, std::vector<std::int64_t> shape, std::int64_t begin, std::int64_t count);

// Every tensor of rank plan.rank, the layers' as the config's family names them (model/arch/family.hpp).
ShardSpecs shard_specs(const ModelConfig& cfg, const ShardPlan& plan);
// Weight elements a rank holds (its slices plus the replicated tensors; a tied
// LM head counted once), for memory estimates before loading.
std::int64_t weight_elements(const ModelConfig& cfg, const ShardPlan& plan);
// Of those, the projections' (q/k/v/o, gate/up/down): what quantize-at-load stores in a block format.
std::int64_t projection_elements(const ModelConfig& cfg, const ShardPlan& plan);

// The slice in `ckpt`. Throws Error{not_found} for a missing tensor and
// Error{bad_model} when its shape differs from what the config implies, naming both.
io::TensorView slice_view(const io::Checkpoint& ckpt, const SliceSpec& spec);

// Throws Error{unsupported_arch} for tensors neuron would silently ignore
// (biases), except those outside the text model the family skips (Qwen3.5's
// vision tower, the MTP head: Family::ignores_tensor).
void reject_unsupported_tensors(const io::Checkpoint& ckpt, const ModelConfig& cfg);

// A loaded RMSNorm weight turned into the scale the blocks multiply by, in
// place: 1 + w when cfg.zero_centred_norms, else w. The one place the offset
// is added; runners call it for every zero-centred norm they load.
void to_norm_scale(const ModelConfig& cfg, std::span<float> weight);

// The slices of a standard pre-norm decoder layer under Hugging Face's names
// ("model.layers.{i}.self_attn.q_proj.weight", "mlp.gate_proj", MoE
// "mlp.gate", "mlp.experts.{e}.gate_proj", "mlp.shared_expert.gate_proj"),
// for the families built on it. `prefix` is the layer's ("model.layers.3.").
AttentionSpecs attention_specs(const std::string& prefix, const ModelConfig& cfg, const ShardPlan& plan, bool qk_norm);
MlpSpecs mlp_specs(const std::string& prefix, const ModelConfig& cfg, std::int64_t ff, std::int64_t ff_begin,
                   std::int64_t ff_size);
MoeSpecs moe_specs(const std::string& prefix, const ModelConfig& cfg, const ShardPlan& plan);
// A standard pre-norm decoder layer: attention (q/k norm when asked),
// post_attention_layernorm, then a dense MLP, or a MoE on cfg.moe's sparse layers.
LayerSpecs decoder_layer_specs(const ModelConfig& cfg, const ShardPlan& plan, std::int64_t layer, bool qk_norm);
// The post-attention norm and the dense MLP or MoE of `prefix`'s layer (into l).
void ffn_specs(const std::string& prefix, const ModelConfig& cfg, const ShardPlan& plan, std::int64_t layer,
               LayerSpecs& l);

// Deterministic stand-in weights for benchmarks, as bf16 into out ([numel()]
// row-major). An element depends only on (name, global row, global column), so
// the ranks of a sharded dummy model hold the slices of one and the same model.
// Norm weights are close to 1, projections small (std ~0.02) as in real checkpoints.
void fill_dummy(const SliceSpec& spec, std::span<std::uint16_t> out);

}  // namespace neuron::model
