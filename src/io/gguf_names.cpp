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

constexpr std::array<std::pair<std::string_view, std::string_view>, 12> kLayer{{
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
}};

constexpr std::array<std::pair<std::string_view, std::string_view>, 3> kExperts{{
    {"ffn_gate_exps", "gate_proj"},
    {"ffn_up_exps", "up_proj"},
    {"ffn_down_exps", "down_proj"},
}};

// "blk.N.<part><suffix>" -> (N, part, suffix); nullopt for other names.
struct LayerName {
  unsigned layer = 0;
  std::string_view part, suffix;
};

std::optional<LayerName> split_layer_name(std::string_view name) {
  std::string_view suffix;
  for (std::string_view s : {std::string_view(".weight"), std::string_view(".bias")}) {
    if (name.size() > s.size() && name.substr(name.size() - s.size()) == s) {
      suffix = s;
      name.remove_suffix(s.size());
      break;
    }
  }
  constexpr std::string_view kBlk = "blk.";
  if (suffix.empty() || name.substr(0, kBlk.size()) != kBlk) return std::nullopt;
  name.remove_prefix(kBlk.size());
  const std::size_t dot = name.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot > 6) return std::nullopt;
  unsigned layer = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + dot, layer);
  if (ec != std::errc() || end != name.data() + dot || (dot > 1 && name[0] == '0')) return std::nullopt;
  return LayerName{layer, name.substr(dot + 1), suffix};
}

}  // namespace

std::optional<std::string> hf_name_for_gguf(std::string_view name) {
  for (std::string_view suffix : {std::string_view(".weight"), std::string_view(".bias")}) {
    if (name.size() <= suffix.size() || name.substr(name.size() - suffix.size()) != suffix) continue;
    const std::string_view base = name.substr(0, name.size() - suffix.size());
    for (const auto& [g, hf] : kGlobal)
      if (base == g) return std::string(hf) + std::string(suffix);
  }
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

bool gguf_permutes_qk(std::string_view architecture) noexcept { return architecture == "llama"; }

}  // namespace neuron::io
