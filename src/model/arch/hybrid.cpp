#include "model/arch/hybrid.hpp"

#include <string>

#include <nlohmann/json.hpp>

#include "io/gguf.hpp"
#include "io/gguf_hybrid.hpp"
#include "model/arch/block_ops.hpp"
#include "model/config_fields.hpp"
#include "model/shard_weights.hpp"
#include "util/error.hpp"

namespace neuron::model {

namespace {

using namespace fields;

// Linear attention's slices under "<prefix>linear_attn.", for the key heads
// [kb, kb + hk) of `plan` and the value heads [vb, vb + hv) that read them.
LinearAttentionSpecs linear_specs(const std::string& prefix, const ModelConfig& cfg, const ShardPlan& plan, bool fused) {
  const LinearAttentionConfig& c = cfg.linear;
  const std::int64_t hidden = cfg.hidden_size, dk = c.key_head_dim, dv = c.value_head_dim;
  const std::int64_t r = c.num_value_heads / c.num_key_heads;  // value heads per key head
  const std::int64_t kb = plan.linear_key_head_begin, hk = plan.linear_key_heads;
  const std::int64_t vb = plan.linear_value_head_begin, hv = plan.linear_value_heads;
  const std::string p = prefix + "linear_attn.";
  LinearAttentionSpecs s;
  s.norm = whole(prefix + "input_layernorm.weight", {hidden});
  if (fused) {
    // in_proj_qkvz rows per key head g: q [dk], k [dk], v [r dv], z [r dv];
    // in_proj_ba rows per key head: b [r], a [r]. The rank's key heads' pieces, in the split layout.
    const std::int64_t group = 2 * dk + 2 * r * dv;
    const std::string qkvz = p + "in_proj_qkvz.weight", ba = p + "in_proj_ba.weight";
    const std::vector<std::int64_t> qkvz_shape{c.num_key_heads * group, hidden}, ba_shape{c.num_key_heads * 2 * r, hidden};
    for (std::int64_t g = kb; g < kb + hk; ++g) s.qkv.push_back(row_slice(qkvz, qkvz_shape, g * group, dk));
    for (std::int64_t g = kb; g < kb + hk; ++g) s.qkv.push_back(row_slice(qkvz, qkvz_shape, g * group + dk, dk));
    for (std::int64_t g = kb; g < kb + hk; ++g) s.qkv.push_back(row_slice(qkvz, qkvz_shape, g * group + 2 * dk, r * dv));
    for (std::int64_t g = kb; g < kb + hk; ++g)
      s.z.push_back(row_slice(qkvz, qkvz_shape, g * group + 2 * dk + r * dv, r * dv));
    for (std::int64_t g = kb; g < kb + hk; ++g) s.b.push_back(row_slice(ba, ba_shape, g * 2 * r, r));
    for (std::int64_t g = kb; g < kb + hk; ++g) s.a.push_back(row_slice(ba, ba_shape, g * 2 * r + r, r));
  } else {
    // in_proj_qkv rows: q of every key head, k of every key head, v of every value head.
    const std::string qkv = p + "in_proj_qkv.weight";
    const std::vector<std::int64_t> qkv_shape{c.conv_dim(), hidden};
    s.qkv.push_back(row_slice(qkv, qkv_shape, kb * dk, hk * dk));
    s.qkv.push_back(row_slice(qkv, qkv_shape, c.key_dim() + kb * dk, hk * dk));
    s.qkv.push_back(row_slice(qkv, qkv_shape, 2 * c.key_dim() + vb * dv, hv * dv));
    s.z.push_back(row_slice(p + "in_proj_z.weight", {c.value_dim(), hidden}, vb * dv, hv * dv));
    s.b.push_back(row_slice(p + "in_proj_b.weight", {c.num_value_heads, hidden}, vb, hv));
    s.a.push_back(row_slice(p + "in_proj_a.weight", {c.num_value_heads, hidden}, vb, hv));
  }
  // The conv's channels are in_proj_qkv's rows (fused or not): the same q, k and v sections.
  const std::string conv = p + "conv1d.weight";
  const std::vector<std::int64_t> conv_shape{c.conv_dim(), 1, c.conv_kernel};
  s.conv.push_back(row_slice(conv, conv_shape, kb * dk, hk * dk));
  s.conv.push_back(row_slice(conv, conv_shape, c.key_dim() + kb * dk, hk * dk));
  s.conv.push_back(row_slice(conv, conv_shape, 2 * c.key_dim() + vb * dv, hv * dv));
  s.a_log = row_slice(p + "A_log", {c.num_value_heads}, vb, hv);
  s.dt_bias = row_slice(p + "dt_bias", {c.num_value_heads}, vb, hv);
  s.gated_norm = whole(p + "norm.weight", {dv});
  s.out_proj = col_slice(p + "out_proj.weight", {hidden, c.value_dim()}, vb * dv, hv * dv);
  return s;
}

}  // namespace

LayerSpecs HybridFamily::layer_specs(const ModelConfig& cfg, const ShardPlan& plan, std::int64_t layer) const {
  const std::string p = std::string(weight_prefix()) + "layers." + std::to_string(layer) + ".";
  LayerSpecs l;
  if (cfg.linear.linear_layer(layer))
    l.linear = linear_specs(p, cfg, plan, fused_in_proj());
  else
    l.attention = attention_specs(p, cfg, plan, true);
  ffn_specs(p, cfg, plan, layer, l);
  return l;
}

void HybridFamily::layer(BlockOps& ops, const ModelConfig& cfg, std::int64_t layer) const {
  if (cfg.linear.linear_layer(layer))
    ops.linear_attention(layer);
  else
    ops.attention(layer);
  if (cfg.moe.sparse_layer(layer))
    ops.moe(layer);
  else
    ops.mlp(layer);
}

void HybridFamily::gguf_fields(const io::GgufMetadata& md, nlohmann::json& j) const {
  const std::string arch(gguf_architecture()), p = arch + ".";
  const io::GgufLinearShape s = io::gguf_linear_shape(md, arch);
  j["linear_num_key_heads"] = s.key_heads;
  j["linear_num_value_heads"] = s.value_heads;
  j["linear_key_head_dim"] = s.key_head_dim;
  j["linear_value_head_dim"] = s.value_head_dim;
  j["linear_conv_kernel_dim"] = s.conv_kernel;
  // One flag per block (the MTP blocks after the layers are false), or else every interval-th layer full attention.
  const auto layers = j.at("num_hidden_layers").get<std::int64_t>();
  if (const std::vector<std::int64_t>* recurrent = md.booleans(p + "attention.recurrent_layers")) {
    if (static_cast<std::int64_t>(recurrent->size()) < layers)
      fail(errc::bad_model, md.what + ": " + p + "attention.recurrent_layers holds " + std::to_string(recurrent->size()) +
                                " flags for " + std::to_string(layers) + " layers");
    nlohmann::json types = nlohmann::json::array();
    for (std::int64_t l = 0; l < layers; ++l)
      types.push_back((*recurrent)[static_cast<std::size_t>(l)] != 0 ? "linear_attention" : "full_attention");
    j["layer_types"] = std::move(types);
  } else {
    const std::int64_t interval = md.require_integer(p + "full_attention_interval");
    if (interval < 1)
      fail(errc::bad_model, md.what + ": " + p + "full_attention_interval is " + std::to_string(interval) + "; it must be positive");
    j["full_attention_interval"] = interval;
  }
  // llama.cpp's qwen3next and qwen35moe: every layer sparse, the top-k weights renormalized, a shared expert.
  if (md.contains(p + "expert_count")) {
    j["num_experts"] = md.require_integer(p + "expert_count");
    j["num_experts_per_tok"] = md.require_integer(p + "expert_used_count");
    j["moe_intermediate_size"] = md.require_integer(p + "expert_feed_forward_length");
    if (auto shared = md.integer(p + "expert_shared_feed_forward_length")) j["shared_expert_intermediate_size"] = *shared;
    j["norm_topk_prob"] = true;
  }
}

void HybridFamily::parse_hybrid(const nlohmann::json& j, ModelConfig& cfg) {
  LinearAttentionConfig& c = cfg.linear;
  c.num_key_heads = dim_field(j, "linear_num_key_heads", kMaxDim);
  c.num_value_heads = dim_field(j, "linear_num_value_heads", kMaxDim);
  c.key_head_dim = dim_field(j, "linear_key_head_dim", kMaxDim);
  c.value_head_dim = dim_field(j, "linear_value_head_dim", kMaxDim);
  c.conv_kernel = dim_field(j, "linear_conv_kernel_dim", 64, 4);
  if (c.num_value_heads % c.num_key_heads != 0)
    bad("config field 'linear_num_value_heads' (" + std::to_string(c.num_value_heads) +
        ") is not a multiple of 'linear_num_key_heads' (" + std::to_string(c.num_key_heads) + ")");
  if (c.conv_dim() > kMaxDim || c.num_value_heads * c.key_head_dim * c.value_head_dim > kMaxDim * 64)
    bad("config fields 'linear_*' give a linear-attention layer past " + std::to_string(kMaxDim) + " channels");
  if (!field(j, "layer_types")) {
    // transformers' default: every full_attention_interval-th layer is full attention.
    const std::int64_t interval = dim_field(j, "full_attention_interval", kMaxLayers, 4);
    c.layer_types.clear();
    for (std::int64_t l = 0; l < cfg.num_hidden_layers; ++l)
      c.layer_types.push_back((l + 1) % interval == 0 ? LayerType::full_attention : LayerType::linear_attention);
  }
  if (cfg.kv_layers() == 0)
    fail(errc::unsupported_arch, "config field 'layer_types' has no full_attention layer; neuron's KV planning "
                                 "needs at least one (every released hybrid has one in four)");
  cfg.qk_norm = true;
  cfg.attention_output_gate = true;
  cfg.zero_centred_norms = true;
  // transformers' default partial_rotary_factor for these families is 0.25.
  const nlohmann::json* rope = field(j, "rope_parameters");
  if (!field(j, "partial_rotary_factor") && !(rope && rope->is_object() && field(*rope, "partial_rotary_factor"))) {
    cfg.rope.partial_rotary_factor = 0.25;
    const std::int64_t rd = cfg.rope.rotary_dim(cfg.head_dim);
    if (rd < 2 || rd % 2 != 0)
      bad("config field 'head_dim' = " + std::to_string(cfg.head_dim) +
          " leaves no even rotary dimension at the default partial_rotary_factor 0.25");
  }
}

void HybridFamily::write_hybrid(const ModelConfig& cfg, nlohmann::json& j) {
  const LinearAttentionConfig& c = cfg.linear;
  j["linear_num_key_heads"] = c.num_key_heads;
  j["linear_num_value_heads"] = c.num_value_heads;
  j["linear_key_head_dim"] = c.key_head_dim;
  j["linear_value_head_dim"] = c.value_head_dim;
  j["linear_conv_kernel_dim"] = c.conv_kernel;
  nlohmann::json types = nlohmann::json::array();
  for (std::int64_t l = 0; l < cfg.num_hidden_layers; ++l)
    types.push_back(c.linear_layer(l) ? "linear_attention" : "full_attention");
  j["layer_types"] = types;
}

}  // namespace neuron::model
