#pragma once
// llama.cpp's storage of the Gated DeltaNet hybrids (general.architecture
// qwen3next, qwen35, qwen35moe; convert_hf_to_gguf.py's Qwen3NextModel and
// _LinearAttentionVReorderBase), undone so the runners see the Hugging Face
// checkpoint's tensors. The names are mapped first (io/gguf_names.hpp); then:
//   - zero-centred RMSNorm weights (every "...norm.weight" but linear
//     attention's gated linear_attn.norm) are stored as 1 + w: w = stored - 1,
//     in f32 (the runner adds the 1 back: model::to_norm_scale, which gives
//     the stored f32 value again for |w| <= 1);
//   - A_log is stored as ssm_a = -exp(A_log): A_log = log(-ssm_a) (in double;
//     an ssm_a entry that is not negative is refused);
//   - conv1d.weight [C, 1, K] is stored squeezed [C, K]: the view gets its 1 back;
//   - qwen3next: in_proj_qkvz (rows per key head g: q [dk], k [dk], v [r dv],
//     z [r dv], r = Hv / Hk) is stored as attn_qkv [every q; every k; every v]
//     and attn_gate [every z]: regrouped into one copy (in_proj_ba is stored as it is);
//   - qwen35 / qwen35moe with fewer key than value heads: the value heads are
//     stored tiled (stored head j Hk + g is Hugging Face's head g r + j) in the
//     v rows of in_proj_qkv, the rows of in_proj_z, in_proj_b and in_proj_a,
//     A_log and dt_bias, conv1d's v channels and out_proj's columns: put back
//     in copies. out_proj's column groups that do not fall on its type's
//     blocks (dv = 128 in Q4_K's 256-wide blocks) are dequantized to f32.
// Head counts and sizes are the "<arch>.ssm.*" metadata (gguf_linear_shape).
// A stored tensor whose shape does not fit them is Error{bad_model} naming
// the GGUF tensor and the shape expected.
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/gguf.hpp"
#include "io/tensor_view.hpp"

namespace neuron::io {

// True for qwen3next, qwen35 and qwen35moe.
bool gguf_hybrid_architecture(std::string_view architecture) noexcept;

// Linear attention's shape as a hybrid file's metadata gives it:
//   ssm.group_count     key heads Hk        ssm.state_size   key head size dk
//   ssm.time_step_rank  value heads Hv      ssm.inner_size   Hv * dv
//   ssm.conv_kernel     conv1d taps
// Throws Error{bad_model} naming the key when one is missing or outside [1, 2^24],
// when time_step_rank is no multiple of group_count, or inner_size no multiple of time_step_rank.
struct GgufLinearShape {
  std::int64_t key_heads = 0, value_heads = 0, key_head_dim = 0, value_head_dim = 0, conv_kernel = 0;
  std::int64_t key_dim() const noexcept { return key_heads * key_head_dim; }
  std::int64_t value_dim() const noexcept { return value_heads * value_head_dim; }
};
GgufLinearShape gguf_linear_shape(const GgufMetadata& md, std::string_view architecture);

// A GGUF file's tensors under their Hugging Face names (views into the file
// or into `owned`), the hybrids' storage undone in place. `gguf_names` gives
// each view's GGUF name, for messages; `what` names the file. Does nothing
// for other architectures.
using GgufOwned = std::vector<std::unique_ptr<std::byte[]>>;
void undo_hybrid_storage(const GgufMetadata& md, std::string_view architecture, std::map<std::string, TensorView>& views,
                         const std::map<std::string, std::string>& gguf_names, GgufOwned& owned, const std::string& what);

}  // namespace neuron::io
