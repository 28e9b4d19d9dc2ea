#pragma once
// Which slice of which checkpoint tensor one rank of a tensor-parallel model
// holds, independent of the backend (DESIGN.md section 4). A backend walks
// shard_specs(), and for each SliceSpec either reads the slice out of the
// mmap'd checkpoint (slice_view) or fills stand-in weights (fill_dummy), then
// stores it in its own layout. N = 1 is the whole model.
#include <cstdint>
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

// One decoder layer's slices for a rank (hd = head_dim, H/KV = the rank's query/KV heads, F = ff_size).
struct LayerSpecs {
  SliceSpec input_norm;  // [hidden]
  SliceSpec q_proj;      // [H * hd, hidden]   column-parallel: rows of the rank's query heads
  SliceSpec k_proj;      // [KV * hd, hidden]  rows of the rank's KV heads (replicated when KV < world)
  SliceSpec v_proj;      // [KV * hd, hidden]
  SliceSpec o_proj;      // [hidden, H * hd]   row-parallel: input columns of the rank's query heads
  SliceSpec q_norm;      // [hd]
  SliceSpec k_norm;      // [hd]
  SliceSpec post_norm;   // [hidden]
  SliceSpec gate_proj;   // [F, hidden]        column-parallel
  SliceSpec up_proj;     // [F, hidden]        column-parallel
  SliceSpec down_proj;   // [hidden, F]        row-parallel
};

struct ShardSpecs {
  SliceSpec embed;       // [vocab, hidden] replicated
  SliceSpec final_norm;  // [hidden]
  SliceSpec lm_head;     // [vocab, hidden] replicated; names the embedding when tie_word_embeddings
  std::vector<LayerSpecs> layers;
};

ShardSpecs shard_specs(const Qwen3Config& cfg, const ShardPlan& plan);
// Weight elements a rank holds (its slices plus the replicated tensors; a tied
// LM head counted once), for memory estimates before loading.
std::int64_t weight_elements(const Qwen3Config& cfg, const ShardPlan& plan);
// Of those, the projections' (q/k/v/o, gate/up/down): what quantize-at-load stores in a block format.
std::int64_t projection_elements(const Qwen3Config& cfg, const ShardPlan& plan);

// The slice in `ckpt`. Throws Error{not_found} for a missing tensor and
// Error{bad_model} when its shape differs from what the config implies, naming both.
io::TensorView slice_view(const io::Checkpoint& ckpt, const SliceSpec& spec);

// Throws Error{unsupported_arch} for tensors neuron would silently ignore (biases).
void reject_unsupported_tensors(const io::Checkpoint& ckpt);

// Deterministic stand-in weights for benchmarks, as bf16 into out ([numel()]
// row-major). An element depends only on (name, global row, global column), so
// the ranks of a sharded dummy model hold the slices of one and the same model.
// Norm weights are close to 1, projections small (std ~0.02) as in real checkpoints.
void fill_dummy(const SliceSpec& spec, std::span<std::uint16_t> out);

}  // namespace neuron::model
