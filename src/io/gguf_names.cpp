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

constexpr std::array<std::pair<std::string_view, std::string_view>, 11> kLayer{{
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
}};

}  // namespace

std::optional<std::string> hf_name_for_gguf(std::string_view name) {
  std::string_view suffix;
  for (std::string_view s : {std::string_view(".weight"), std::string_view(".bias")}) {
    if (name.size() > s.size() && name.substr(name.size() - s.size()) == s) {
      suffix = s;
      name.remove_suffix(s.size());
      break;
    }
  }
  if (suffix.empty()) return std::nullopt;
  for (const auto& [g, hf] : kGlobal)
    if (name == g) return std::string(hf) + std::string(suffix);
  constexpr std::string_view kBlk = "blk.";
  if (name.substr(0, kBlk.size()) != kBlk) return std::nullopt;
  name.remove_prefix(kBlk.size());
  const std::size_t dot = name.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot > 6) return std::nullopt;
  unsigned layer = 0;
  const auto [end, ec] = std::from_chars(name.data(), name.data() + dot, layer);
  if (ec != std::errc() || end != name.data() + dot || (dot > 1 && name[0] == '0')) return std::nullopt;
  const std::string_view part = name.substr(dot + 1);
  for (const auto& [g, hf] : kLayer)
    if (part == g) return "model.layers." + std::to_string(layer) + "." + std::string(hf) + std::string(suffix);
  return std::nullopt;
}

}  // namespace neuron::io
