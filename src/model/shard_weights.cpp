#include "model/shard_weights.hpp"

#include <string>

#include "io/safetensors.hpp"
#include "tensor/dtype.hpp"
#include "util/error.hpp"

namespace neuron::model {

namespace {

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

std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::string s = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

ShardSpecs shard_specs(const Qwen3Config& cfg, const ShardPlan& plan) {
  const std::int64_t hidden = cfg.hidden_size, hd = cfg.head_dim, ff = cfg.intermediate_size;
  const std::int64_t q_rows = cfg.num_attention_heads * hd, kv_rows = cfg.num_key_value_heads * hd;
  ShardSpecs s;
  s.embed = whole("model.embed_tokens.weight", {cfg.vocab_size, hidden});
  s.final_norm = whole("model.norm.weight", {hidden});
  s.lm_head = cfg.tie_word_embeddings ? s.embed : whole("lm_head.weight", {cfg.vocab_size, hidden});
  s.layers.reserve(static_cast<std::size_t>(cfg.num_hidden_layers));
  for (std::int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    LayerSpecs l;
    l.input_norm = whole(p + "input_layernorm.weight", {hidden});
    l.q_proj = row_slice(p + "self_attn.q_proj.weight", {q_rows, hidden}, plan.q_head_begin * hd, plan.q_heads * hd);
    l.k_proj = row_slice(p + "self_attn.k_proj.weight", {kv_rows, hidden}, plan.kv_head_begin * hd, plan.kv_heads * hd);
    l.v_proj = row_slice(p + "self_attn.v_proj.weight", {kv_rows, hidden}, plan.kv_head_begin * hd, plan.kv_heads * hd);
    l.o_proj = col_slice(p + "self_attn.o_proj.weight", {hidden, q_rows}, plan.q_head_begin * hd, plan.q_heads * hd);
    l.q_norm = whole(p + "self_attn.q_norm.weight", {hd});
    l.k_norm = whole(p + "self_attn.k_norm.weight", {hd});
    l.post_norm = whole(p + "post_attention_layernorm.weight", {hidden});
    l.gate_proj = row_slice(p + "mlp.gate_proj.weight", {ff, hidden}, plan.ff_begin, plan.ff_size);
    l.up_proj = row_slice(p + "mlp.up_proj.weight", {ff, hidden}, plan.ff_begin, plan.ff_size);
    l.down_proj = col_slice(p + "mlp.down_proj.weight", {hidden, ff}, plan.ff_begin, plan.ff_size);
    s.layers.push_back(std::move(l));
  }
  return s;
}

io::TensorView slice_view(const io::Checkpoint& ckpt, const SliceSpec& spec) {
  const io::TensorView* t = ckpt.find(spec.name);
  if (!t) fail(errc::not_found, "checkpoint has no tensor " + spec.name);
  if (t->shape() != spec.shape)
    fail(errc::bad_model, "tensor " + spec.name + " has shape " + t->shape_string() + " but the config implies " +
                              shape_str(spec.shape));
  io::TensorView v = t->rows(spec.row_begin, spec.row_end);
  if (spec.shape.size() == 2) v = v.cols(spec.col_begin, spec.col_end);
  return v;
}

void reject_unsupported_tensors(const io::Checkpoint& ckpt) {
  for (const std::string& name : ckpt.names())
    if (ends_with(name, ".bias"))
      fail(errc::unsupported_arch, "checkpoint tensor " + name + " is a bias; Qwen3 layers without biases only");
}

void fill_dummy(const SliceSpec& spec, std::span<std::uint16_t> out) {
  if (static_cast<std::int64_t>(out.size()) != spec.numel())
    fail(errc::invalid_argument, "dummy weight buffer for " + spec.name + " has the wrong size");
  const std::uint64_t key = fnv1a(spec.name);
  const bool norm = ends_with(spec.name, "norm.weight");
  const std::int64_t full_cols = spec.shape.size() == 2 ? spec.shape[1] : 1;
  const std::int64_t rows = spec.rows(), cols = spec.cols(), col0 = spec.shape.size() == 2 ? spec.col_begin : 0;
  // Uniform in [-a, a] has std a / sqrt(3): a = 0.0346 gives std 0.02.
  const float scale = norm ? 0.1f : 0.0346f;
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::uint64_t row_key = key ^ (static_cast<std::uint64_t>(spec.row_begin + r) * static_cast<std::uint64_t>(full_cols));
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::uint64_t h = splitmix64(row_key + static_cast<std::uint64_t>(col0 + c));
      const float u = static_cast<float>(h >> 40) * 0x1.0p-23f - 1.0f;  // [-1, 1)
      out[static_cast<std::size_t>(r * cols + c)] = f32_to_bf16((norm ? 1.0f : 0.0f) + scale * u);
    }
  }
}

std::int64_t weight_elements(const Qwen3Config& cfg, const ShardPlan& plan) {
  const ShardSpecs s = shard_specs(cfg, plan);
  std::int64_t n = s.embed.numel() + s.final_norm.numel() + (cfg.tie_word_embeddings ? 0 : s.lm_head.numel());
  for (const LayerSpecs& l : s.layers)
    n += l.input_norm.numel() + l.q_proj.numel() + l.k_proj.numel() + l.v_proj.numel() + l.o_proj.numel() +
         l.q_norm.numel() + l.k_norm.numel() + l.post_norm.numel() + l.gate_proj.numel() + l.up_proj.numel() +
         l.down_proj.numel();
  return n;
}

std::int64_t projection_elements(const Qwen3Config& cfg, const ShardPlan& plan) {
  std::int64_t n = 0;
  for (const LayerSpecs& l : shard_specs(cfg, plan).layers)
    n += l.q_proj.numel() + l.k_proj.numel() + l.v_proj.numel() + l.o_proj.numel() + l.gate_proj.numel() +
         l.up_proj.numel() + l.down_proj.numel();
  return n;
}

}  // namespace neuron::model
