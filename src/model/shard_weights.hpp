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
// of the tensor `name`, whose full shape the config implies.
struct SliceSpec {
  std::string name;
  std::vector<std::int64_t> shape;  // full tensor: [rows] or [rows, cols]
  std::int64_t row_begin = 0, row_end = 0;
  std::int64_t col_begin = 0, col_end = 0;  // 0, 0 for 1-D tensors

  std::int64_t rows() const noexcept { return row_end - row_begin; }
  std::int64_t cols() const noexcept { return shape.size() == 2 ? col_end - col_begin : 1; }
  std::int64_t numel() const noexcept { return rows() * cols(); }
};

// A layer's slices for a rank (hd = head_dim, H/KV = the rank's query/KV
// heads, F = its ff_size, Fm = its moe_ff_size, E = num_experts).
struct AttentionSpecs {
  SliceSpec norm;        // [hidden]            input_layernorm
  SliceSpec q_proj;      // [H * hd, hidden]   column-parallel: rows of the rank's query heads
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
  SliceSpec router;              // [E, hidden] replicated (mlp.gate)
  std::vector<MlpSpecs> experts;  // E experts, each split Fm ways like a dense MLP
};

struct LayerSpecs {
  AttentionSpecs attention;
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

// Throws Error{unsupported_arch} for tensors neuron would silently ignore (biases).
void reject_unsupported_tensors(const io::Checkpoint& ckpt);

// The slices of a standard pre-norm decoder layer under Hugging Face's names
// ("model.layers.{i}.self_attn.q_proj.weight", "mlp.gate_proj", MoE
// "mlp.gate" and "mlp.experts.{e}.gate_proj"), for the families built on it.
AttentionSpecs attention_specs(const std::string& prefix, const ModelConfig& cfg, const ShardPlan& plan, bool qk_norm);
MlpSpecs mlp_specs(const std::string& prefix, const ModelConfig& cfg, std::int64_t ff, std::int64_t ff_begin,
                   std::int64_t ff_size);
MoeSpecs moe_specs(const std::string& prefix, const ModelConfig& cfg, const ShardPlan& plan);
// A standard pre-norm decoder layer: attention (q/k norm when asked),
// post_attention_layernorm, then a dense MLP, or a MoE on cfg.moe's sparse layers.
LayerSpecs decoder_layer_specs(const ModelConfig& cfg, const ShardPlan& plan, std::int64_t layer, bool qk_norm);

// Deterministic stand-in weights for benchmarks, as bf16 into out ([numel()]
// row-major). An element depends only on (name, global row, global column), so
// the ranks of a sharded dummy model hold the slices of one and the same model.
// Norm weights are close to 1, projections small (std ~0.02) as in real checkpoints.
void fill_dummy(const SliceSpec& spec, std::span<std::uint16_t> out);

}  // namespace neuron::model
