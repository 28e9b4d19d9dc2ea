#include "io/gguf_names.hpp"

#include <array>
#include <charconv>
#include <utility>

namespace neuron::io {

namespace {

constexpr std::array<std::pair<std::string_view, std::string_view>, 3> kGlobal{{
    {"token_embd", "model.embed_tokens"},
    {"output_norm", "model.norm"},
    {"output", "lm_head"},
}};

constexpr std::array<std::pair<std::string_view, std::string_view>, 25> kLayer{{
    {"attn_norm", "input_layernorm"},
    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},
    {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},
    {"ffn_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},
    {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
    {"ffn_gate_inp", "mlp.gate"},
    // The hybrids (qwen3next, qwen35, qwen35moe): their pre-MLP norm, shared expert and linear attention.
    {"post_attention_norm", "post_attention_layernorm"},
    {"ffn_gate_inp_shexp", "mlp.shared_expert_gate"},
    {"ffn_gate_shexp", "mlp.shared_expert.gate_proj"},
    {"ffn_up_shexp", "mlp.shared_expert.up_proj"},
    {"ffn_down_shexp", "mlp.shared_expert.down_proj"},
    {"attn_qkv", "linear_attn.in_proj_qkv"},
    {"attn_gate", "linear_attn.in_proj_z"},
    {"ssm_beta", "linear_attn.in_proj_b"},
    {"ssm_alpha", "linear_attn.in_proj_a"},
    {"ssm_ba", "linear_attn.in_proj_ba"},
    {"ssm_conv1d", "linear_attn.conv1d"},
    {"ssm_norm", "linear_attn.norm"},
    {"ssm_out", "linear_attn.out_proj"},
}};

// Whole names after "blk.N." whose Hugging Face name has no .weight / .bias suffix.
constexpr std::array<std::pair<std::string_view, std::string_view>, 2> kLayerExact{{
    {"ssm_a", "linear_attn.A_log"},
    {"ssm_dt.bias", "linear_attn.dt_bias"},
}};

constexpr std::array<std::pair<std::string_view, std::string_view>, 3> kExperts{{
    {"ffn_gate_exps", "gate_proj"},
    {"ffn_up_exps", "up_proj"},
    {"ffn_down_exps", "down_proj"},
}};

// "blk.N.<rest>" -> (N, rest); nullopt for other names.
struct LayerRest {
  unsigned layer = 0;
  std::string_view rest;
};

std::optional<LayerRest> split_layer(std::string_view name) {
  constexpr std::string_view kBlk = "blk.";
  if (name.substr(0, kBlk.size()) != kBlk) return std::nullopt;
  name.remove_prefix(kBlk.size());
  const std::size_t dot = name.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot > 6) return std::nullopt;
  unsigned layer = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + dot, layer);
  if (ec != std::errc() || end != name.data() + dot || (dot > 1 && name[0] == '0')) return std::nullopt;
  return LayerRest{layer, name.substr(dot + 1)};
}

// "blk.N.<part><suffix>" -> (N, part, suffix); nullopt for other names.
struct LayerName {
  unsigned layer = 0;
  std::string_view part, suffix;
};

std::optional<LayerName> split_layer_name(std::string_view name) {
  const auto l = split_layer(name);
  if (!l) return std::nullopt;
  for (std::string_view s : {std::string_view(".weight"), std::string_view(".bias")})
    if (l->rest.size() > s.size() && l->rest.substr(l->rest.size() - s.size()) == s)
      return LayerName{l->layer, l->rest.substr(0, l->rest.size() - s.size()), s};
  return std::nullopt;
}

}  // namespace

std::optional<std::string> hf_name_for_gguf(std::string_view name) {
  for (std::string_view suffix : {std::string_view(".weight"), std::string_view(".bias")}) {
    if (name.size() <= suffix.size() || name.substr(name.size() - suffix.size()) != suffix) continue;
    const std::string_view base = name.substr(0, name.size() - suffix.size());
    for (const auto& [g, hf] : kGlobal)
      if (base == g) return std::string(hf) + std::string(suffix);
  }
  if (const auto e = split_layer(name))
    for (const auto& [g, hf] : kLayerExact)
      if (e->rest == g) return "model.layers." + std::to_string(e->layer) + "." + std::string(hf);
  const auto l = split_layer_name(name);
  if (!l) return std::nullopt;
  for (const auto& [g, hf] : kLayer)
    if (l->part == g) return "model.layers." + std::to_string(l->layer) + "." + std::string(hf) + std::string(l->suffix);
  return std::nullopt;
}

std::optional<GgufExperts> gguf_experts(std::string_view name) {
  const auto l = split_layer_name(name);
  if (!l || l->suffix != ".weight") return std::nullopt;
  for (const auto& [g, proj] : kExperts)
    if (l->part == g) return GgufExperts{static_cast<std::int64_t>(l->layer), proj};
  return std::nullopt;
}

std::string hf_expert_name(std::int64_t layer, std::int64_t expert, std::string_view proj) {
  return "model.layers." + std::to_string(layer) + ".mlp.experts." + std::to_string(expert) + "." + std::string(proj) +
         ".weight";
}

std::optional<std::string> gguf_name_for_hf(std::string_view name) {
  constexpr std::string_view kNested = "model.language_model.", kModel = "model.", kLayers = "model.layers.";
  std::string flat = name.starts_with(kNested) ? std::string(kModel) + std::string(name.substr(kNested.size())) : std::string(name);
  for (std::string_view suffix : {std::string_view(".weight"), std::string_view(".bias")})
    for (const auto& [g, hf] : kGlobal)
      if (flat == std::string(hf) + std::string(suffix)) return std::string(g) + std::string(suffix);
  if (!flat.starts_with(kLayers)) return std::nullopt;
  const std::string_view rest = std::string_view(flat).substr(kLayers.size());
  const std::size_t dot = rest.find('.');
  if (dot == std::string_view::npos) return std::nullopt;
  const std::string blk = "blk." + std::string(rest.substr(0, dot)) + ".";
  const std::string_view part = rest.substr(dot + 1);
  for (const auto& [g, hf] : kLayerExact)
    if (part == hf) return blk + std::string(g);
  for (std::string_view suffix : {std::string_view(".weight"), std::string_view(".bias")})
    for (const auto& [g, hf] : kLayer)
      if (part == std::string(hf) + std::string(suffix)) return blk + std::string(g) + std::string(suffix);
  constexpr std::string_view kWeight = ".weight";
  if (part.starts_with("mlp.experts.") && part.ends_with(kWeight)) {
    const std::string_view head = part.substr(0, part.size() - kWeight.size());  // "mlp.experts.E.gate_proj"
    for (const auto& [g, proj] : kExperts)
      if (head.size() > proj.size() && head.ends_with(proj) && head[head.size() - proj.size() - 1] == '.')
        return blk + std::string(g) + std::string(kWeight);
  }
  return std::nullopt;
}

bool gguf_permutes_qk(std::string_view architecture) noexcept { return architecture == "llama"; }

}  // namespace neuron::io
