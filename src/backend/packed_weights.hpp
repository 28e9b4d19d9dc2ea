#pragma once
// A weight slice in a GGUF block format (quant/ggml_type.hpp), prepared on
// the host for either runner: a GGUF tensor's blocks as stored, or a float
// slice quantized at load. Rows of quant::row_bytes(type, cols) bytes, back
// to back. One owner of the rule for which slices a type can hold.
#include <cstddef>
#include <span>

#include "model/shard_weights.hpp"
#include "quant/ggml_type.hpp"

namespace neuron::io {
class Checkpoint;
class TensorView;
}  // namespace neuron::io

namespace neuron::backend {

// Bytes of the slice in `type`'s blocks.
std::size_t packed_bytes(const model::SliceSpec& spec, quant::GgmlType type);

// Throws unless `type`'s blocks can hold the slice: its rows must be whole
// blocks (Error{unsupported_arch}), and a tensor-parallel column split
// (o_proj, down_proj) must fall on block boundaries (Error{bad_tensor_parallel},
// naming the rank's columns).
void check_quantizable(const model::SliceSpec& spec, quant::GgmlType type);

// The slice quantized to `type` (q8_0, q4_k, q6_k) into dst [packed_bytes]:
// from the checkpoint, or from model::fill_dummy's stand-in weights when
// `ckpt` is null. Row by row through f32 (no whole-matrix f32 copy), rows
// spread over the host's CPU pool. Throws as check_quantizable, and
// Error{bad_model} for a weight that is not finite.
void quantize_slice(const io::Checkpoint* ckpt, const model::SliceSpec& spec, quant::GgmlType type,
                    std::span<std::byte> dst);

// A quantized view's rows as stored (a GGUF tensor's slice) into dst
// [packed_bytes(spec, view.ggml_type())]. The caller has checked that it
// computes with the view's type.
void copy_packed(const model::SliceSpec& spec, const io::TensorView& view, std::span<std::byte> dst);

}  // namespace neuron::backend
