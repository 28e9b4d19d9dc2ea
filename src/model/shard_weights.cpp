#include "model/shard_weights.hpp"

#include <string>

#include "io/gguf_names.hpp"
#include "io/safetensors.hpp"
#include "model/arch/family.hpp"
#include "tensor/dtype.hpp"
#include "util/error.hpp"

namespace neuron::model {

SliceSpec whole(std::string name, std::vector<std::int64_t> shape) {
  SliceSpec s;
  s.name = std::move(name);
  s.row_end = shape.at(0);
  if (shape.size() == 2) s.col_end = shape[1];
  s.shape = std::move(shape);
  return s;
}

SliceSpec row_slice(std::string name, std::vector<std::int64_t> shape, std::int64_t begin, std::int64_t count) {
  SliceSpec s = whole(std::move(name), std::move(shape));
  s.row_begin = begin;
  s.row_end = begin + count;
  return s;
}

SliceSpec col_slice(std::string name, std::vector<std::int64_t> shape, std::int64_t begin, std::int64_t count) {
  SliceSpec s = whole(std::move(name), std::move(shape));
  s.col_begin = begin;
  s.col_end = begin + count;
  return s;
}

namespace {

std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::uint64_t mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::uint64_t name_hash(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

bool has_suffix(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

AttentionSpecs attention_specs(const std::string& prefix, const ModelConfig& cfg, const ShardPlan& plan, bool qk_norm) {
  const std::int64_t hidden = cfg.hidden_size, hd = cfg.head_dim;
  const std::int64_t q_rows = cfg.num_attention_heads * hd, kv_rows = cfg.num_key_value_heads * hd;
  const std::int64_t q_per_head = cfg.attention_output_gate ? 2 * hd : hd;  // [query, gate] rows of a head
  AttentionSpecs a;
  a.norm = whole(prefix + "input_layernorm.weight", {hidden});
  a.output_gate = cfg.attention_output_gate;
  const std::string p = prefix + "self_attn.";
  a.q_proj = row_slice(p + "q_proj.weight", {cfg.num_attention_heads * q_per_head, hidden},
                       plan.q_head_begin * q_per_head, plan.q_heads * q_per_head);
  a.k_proj = row_slice(p + "k_proj.weight", {kv_rows, hidden}, plan.kv_head_begin * hd, plan.kv_heads * hd);
  a.v_proj = row_slice(p + "v_proj.weight", {kv_rows, hidden}, plan.kv_head_begin * hd, plan.kv_heads * hd);
  a.o_proj = col_slice(p + "o_proj.weight", {hidden, q_rows}, plan.q_head_begin * hd, plan.q_heads * hd);
  if (qk_norm) {
    a.q_norm = whole(p + "q_norm.weight", {hd});
    a.k_norm = whole(p + "k_norm.weight", {hd});
  }
  return a;
}

MlpSpecs mlp_specs(const std::string& prefix, const ModelConfig& cfg, std::int64_t ff, std::int64_t ff_begin,
                   std::int64_t ff_size) {
  const std::int64_t hidden = cfg.hidden_size;
  MlpSpecs m;
  m.gate_proj = row_slice(prefix + "gate_proj.weight", {ff, hidden}, ff_begin, ff_size);
  m.up_proj = row_slice(prefix + "up_proj.weight", {ff, hidden}, ff_begin, ff_size);
  m.down_proj = col_slice(prefix + "down_proj.weight", {hidden, ff}, ff_begin, ff_size);
  return m;
}

MoeSpecs moe_specs(const std::string& prefix, const ModelConfig& cfg, const ShardPlan& plan) {
  MoeSpecs m;
  m.router = whole(prefix + "gate.weight", {cfg.moe.num_experts, cfg.hidden_size});
  m.expert_begin = plan.expert_begin;
  m.experts.reserve(static_cast<std::size_t>(plan.experts));
  for (std::int64_t e = plan.expert_begin; e < plan.expert_begin + plan.experts; ++e)
    m.experts.push_back(mlp_specs(prefix + "experts." + std::to_string(e) + ".", cfg, cfg.moe.intermediate_size,
                                  plan.moe_ff_begin, plan.moe_ff_size));
  if (const std::int64_t fs = cfg.moe.shared_expert_intermediate_size; fs > 0) {
    m.shared_expert = mlp_specs(prefix + "shared_expert.", cfg, fs, plan.shared_ff_begin, plan.shared_ff_size);
    m.shared_expert_gate = whole(prefix + "shared_expert_gate.weight", {1, cfg.hidden_size});
  }
  return m;
}

void ffn_specs(const std::string& prefix, const ModelConfig& cfg, const ShardPlan& plan, std::int64_t layer,
               LayerSpecs& l) {
  l.ffn_norm = whole(prefix + "post_attention_layernorm.weight", {cfg.hidden_size});
  if (cfg.moe.sparse_layer(layer))
    l.moe = moe_specs(prefix + "mlp.", cfg, plan);
  else
    l.mlp = mlp_specs(prefix + "mlp.", cfg, cfg.intermediate_size, plan.ff_begin, plan.ff_size);
}

LayerSpecs decoder_layer_specs(const ModelConfig& cfg, const ShardPlan& plan, std::int64_t layer, bool qk_norm) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  LayerSpecs l;
  l.attention = attention_specs(p, cfg, plan, qk_norm);
  ffn_specs(p, cfg, plan, layer, l);
  return l;
}

ShardSpecs shard_specs(const ModelConfig& cfg, const ShardPlan& plan) {
  const Family& family = family_of(cfg);
  const std::int64_t hidden = cfg.hidden_size;
  ShardSpecs s;
  const std::string prefix(family.weight_prefix());
  s.embed = whole(prefix + "embed_tokens.weight", {cfg.vocab_size, hidden});
  s.final_norm = whole(prefix + "norm.weight", {hidden});
  s.lm_head = cfg.tie_word_embeddings ? s.embed : whole("lm_head.weight", {cfg.vocab_size, hidden});
  s.layers.reserve(static_cast<std::size_t>(cfg.num_hidden_layers));
  for (std::int64_t i = 0; i < cfg.num_hidden_layers; ++i) s.layers.push_back(family.layer_specs(cfg, plan, i));
  return s;
}

io::TensorView slice_view(const io::Checkpoint& ckpt, const SliceSpec& spec) {
  const io::TensorView* t = ckpt.find(spec.name);
  // With a GGUF file's own name for the tensor ("model.layers.0.linear_attn.A_log (GGUF blk.0.ssm_a)").
  auto name = [&] {
    const auto stored = ckpt.gguf() ? io::gguf_name_for_hf(spec.name) : std::nullopt;
    return stored ? spec.name + " (GGUF " + *stored + ")" : spec.name;
  };
  if (!t) fail(errc::not_found, "checkpoint has no tensor " + name());
  if (t->shape() != spec.shape)
    fail(errc::bad_model, "tensor " + name() + " has shape " + t->shape_string() + " but the config implies " +
                              shape_str(spec.shape));
  io::TensorView v = t->rows(spec.row_begin, spec.row_end);  // a conv1d weight [C, 1, K]: rows only (SliceSpec)
  if (spec.shape.size() == 2) v = v.cols(spec.col_begin, spec.col_end);
  return v;
}

void reject_unsupported_tensors(const io::Checkpoint& ckpt, const ModelConfig& cfg) {
  const Family& family = family_of(cfg);
  for (const std::string& name : ckpt.names())
    if (has_suffix(name, ".bias") && !family.ignores_tensor(name))
      fail(errc::unsupported_arch, "checkpoint tensor " + name + " is a bias; Qwen3 layers without biases only");
}

void to_norm_scale(const ModelConfig& cfg, std::span<float> weight) {
  if (!cfg.zero_centred_norms) return;
  for (float& w : weight) w += 1.0f;
}

void fill_dummy(const SliceSpec& spec, std::span<std::uint16_t> out) {
  if (static_cast<std::int64_t>(out.size()) != spec.numel())
    fail(errc::invalid_argument, "dummy weight buffer for " + spec.name + " has the wrong size");
  const std::uint64_t key = name_hash(spec.name);
  const bool norm = has_suffix(spec.name, "norm.weight");
  const std::int64_t full_cols = spec.shape.size() == 2 ? spec.shape[1] : 1;
  const std::int64_t rows = spec.rows(), cols = spec.cols(), col0 = spec.shape.size() == 2 ? spec.col_begin : 0;
  // Uniform in [-a, a] has std a / sqrt(3): a = 0.0346 gives std 0.02.
  const float scale = norm ? 0.1f : 0.0346f;
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::uint64_t row_key = key ^ (static_cast<std::uint64_t>(spec.row_begin + r) * static_cast<std::uint64_t>(full_cols));
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::uint64_t h = mix64(row_key + static_cast<std::uint64_t>(col0 + c));
      const float u = static_cast<float>(h >> 40) * 0x1.0p-23f - 1.0f;  // [-1, 1)
      out[static_cast<std::size_t>(r * cols + c)] = f32_to_bf16((norm ? 1.0f : 0.0f) + scale * u);
    }
  }
}

namespace {

std::int64_t projections(const MlpSpecs& m) { return m.gate_proj.numel() + m.up_proj.numel() + m.down_proj.numel(); }

std::int64_t numel(const std::vector<SliceSpec>& pieces) {
  std::int64_t n = 0;
  for (const SliceSpec& s : pieces) n += s.numel();
  return n;
}

std::int64_t projections(const LayerSpecs& l) {
  std::int64_t n = 0;
  if (const auto& a = l.attention) n += a->q_proj.numel() + a->k_proj.numel() + a->v_proj.numel() + a->o_proj.numel();
  if (const auto& la = l.linear) n += numel(la->qkv) + numel(la->z) + la->out_proj.numel();
  if (l.mlp) n += projections(*l.mlp);
  if (l.moe) {
    for (const MlpSpecs& e : l.moe->experts) n += projections(e);
    if (l.moe->shared_expert) n += projections(*l.moe->shared_expert);
  }
  return n;
}

}  // namespace

std::int64_t weight_elements(const ModelConfig& cfg, const ShardPlan& plan) {
  const ShardSpecs s = shard_specs(cfg, plan);
  std::int64_t n = s.embed.numel() + s.final_norm.numel() + (cfg.tie_word_embeddings ? 0 : s.lm_head.numel());
  for (const LayerSpecs& l : s.layers) {
    n += projections(l) + l.ffn_norm.numel();
    if (const auto& a = l.attention) {
      n += a->norm.numel();
      if (a->q_norm) n += a->q_norm->numel() + a->k_norm->numel();
    }
    if (const auto& la = l.linear)
      n += la->norm.numel() + numel(la->b) + numel(la->a) + numel(la->conv) + la->a_log.numel() +
           la->dt_bias.numel() + la->gated_norm.numel();
    if (l.moe) {
      n += l.moe->router.numel();
      if (l.moe->shared_expert_gate) n += l.moe->shared_expert_gate->numel();
    }
  }
  return n;
}

std::int64_t projection_elements(const ModelConfig& cfg, const ShardPlan& plan) {
  std::int64_t n = 0;
  for (const LayerSpecs& l : shard_specs(cfg, plan).layers) n += projections(l);
  return n;
}

}  // namespace neuron::model
