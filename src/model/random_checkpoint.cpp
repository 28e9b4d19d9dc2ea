#include "model/random_checkpoint.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

#include "model/arch/family.hpp"
#include "model/shard.hpp"
#include "model/shard_weights.hpp"
#include "util/error.hpp"

namespace neuron::model {

namespace fs = std::filesystem;
using io::TensorSpec;

namespace {

constexpr std::uint64_t splitmix64(std::uint64_t& state) noexcept {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

constexpr std::uint64_t fnv1a(std::string_view s) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) h = (h ^ static_cast<std::uint8_t>(c)) * 0x100000001b3ull;
  return h;
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// One tensor's values: center + scale * u, u uniform in [-1, 1), drawn from a
// stream keyed by (seed, name) and consumed in chunks so that huge tensors
// never sit in memory whole.
class ValueStream {
 public:
  ValueStream(const TensorSpec& spec, const ModelConfig& cfg, std::uint64_t seed) {
    state_ = seed * 0xd1342543de82ef95ull ^ fnv1a(spec.name);
    const std::string_view name = spec.name;
    if (ends_with(name, "norm.weight")) {
      center_ = 1.0f;
      scale_ = 0.2f;
    } else if (ends_with(name, "embed_tokens.weight") || name == "lm_head.weight") {
      // std(u) = 1/sqrt(3): logits of a unit-RMS hidden state get std ~2.
      scale_ = static_cast<float>(2.0 * std::sqrt(3.0 / static_cast<double>(cfg.hidden_size)));
    } else {
      const std::int64_t fan_in = spec.shape.empty() ? 1 : spec.shape.back();
      scale_ = static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in)));
    }
  }

  void fill(std::span<float> out) {
    constexpr float k24 = 1.0f / static_cast<float>(1u << 23);
    for (float& v : out) {
      if (spare_bits_ == 0) {
        bits_ = splitmix64(state_);
        spare_bits_ = 2;
      }
      const auto r = static_cast<std::uint32_t>(bits_ & 0xffffffu);
      bits_ >>= 32;
      --spare_bits_;
      v = center_ + scale_ * (static_cast<float>(r) * k24 - 1.0f);
    }
  }

 private:
  std::uint64_t state_ = 0;
  std::uint64_t bits_ = 0;
  int spare_bits_ = 0;  // 24-bit draws left in bits_
  float center_ = 0.0f;
  float scale_ = 1.0f;
};

std::string torch_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "float32";
    case DType::f16: return "float16";
    case DType::bf16: return "bfloat16";
  }
  return "bfloat16";
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text << '\n';
  out.close();
  if (!out) fail(errc::io, "cannot write " + path.string());
}

std::string shard_name(int i, int n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", i, n);
  return buf;
}

// Model files an earlier write may have left; a stale index would shadow a new single file.
void remove_old_weights(const fs::path& dir) {
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string n = e.path().filename().string();
    const bool shard = n.size() == shard_name(1, 1).size() && n.starts_with("model-") && ends_with(n, ".safetensors") &&
                       n.find("-of-") != std::string::npos;
    if (n == "model.safetensors" || n == "model.safetensors.index.json" || shard) fs::remove(e.path());
  }
}

}  // namespace

std::vector<TensorSpec> checkpoint_tensor_specs(const ModelConfig& cfg, DType dtype) {
  const ShardSpecs whole = shard_specs(cfg, ShardPlan::make(cfg, 0, 1));
  std::vector<TensorSpec> specs;
  std::set<std::string> named;  // a fused tensor (Qwen3-Next's in_proj_qkvz) is several slices of one tensor
  auto add = [&](const SliceSpec& s) {
    if (named.insert(s.name).second) specs.push_back({s.name, dtype, s.shape});
  };
  auto add_all = [&](const std::vector<SliceSpec>& pieces) {
    for (const SliceSpec& s : pieces) add(s);
  };
  add(whole.embed);
  for (const LayerSpecs& l : whole.layers) {
    if (const auto& a = l.attention) {
      for (const SliceSpec* s : {&a->norm, &a->q_proj, &a->k_proj, &a->v_proj, &a->o_proj}) add(*s);
      if (a->q_norm) add(*a->q_norm);
      if (a->k_norm) add(*a->k_norm);
    }
    if (const auto& la = l.linear) {
      add(la->norm);
      for (const auto* pieces : {&la->qkv, &la->z, &la->b, &la->a, &la->conv}) add_all(*pieces);
      for (const SliceSpec* s : {&la->a_log, &la->dt_bias, &la->gated_norm, &la->out_proj}) add(*s);
    }
    add(l.ffn_norm);
    auto add_mlp = [&](const MlpSpecs& m) {
      for (const SliceSpec* s : {&m.gate_proj, &m.up_proj, &m.down_proj}) add(*s);
    };
    if (l.mlp) add_mlp(*l.mlp);
    if (l.moe) {
      add(l.moe->router);
      for (const MlpSpecs& e : l.moe->experts) add_mlp(e);
      if (l.moe->shared_expert) add_mlp(*l.moe->shared_expert);
      if (l.moe->shared_expert_gate) add(*l.moe->shared_expert_gate);
    }
  }
  add(whole.final_norm);
  if (!cfg.tie_word_embeddings) add(whole.lm_head);
  // Within each layer in name order, as transformers lists them.
  const std::string layers = std::string(family_of(cfg).weight_prefix()) + "layers.";
  std::stable_sort(specs.begin(), specs.end(), [&](const TensorSpec& x, const TensorSpec& y) {
    auto layer_of = [&](const std::string& n) -> long {
      if (n.rfind(layers, 0) != 0) return ends_with(n, "embed_tokens.weight") ? -1 : 1L << 30;
      return std::stol(n.substr(layers.size()));
    };
    const long lx = layer_of(x.name), ly = layer_of(y.name);
    return lx != ly ? lx < ly : (lx >= 0 && lx < (1L << 30) && x.name < y.name);
  });
  return specs;
}

std::vector<float> random_tensor_values(const TensorSpec& spec, const ModelConfig& cfg, std::uint64_t seed) {
  std::vector<float> out(static_cast<std::size_t>(spec.numel()));
  ValueStream(spec, cfg, seed).fill(out);
  return out;
}

std::vector<fs::path> write_random_checkpoint(const fs::path& dir, const ModelConfig& cfg_in,
                                              const RandomCheckpointOptions& opts) {
  ModelConfig cfg = cfg_in;
  cfg.torch_dtype = torch_dtype_name(opts.dtype);
  try {
    cfg = ModelConfig::parse(cfg.to_json());
  } catch (const Error& e) {
    fail(errc::invalid_argument, std::string("cannot write a checkpoint for this config: ") + e.what());
  }
  const std::vector<TensorSpec> specs = checkpoint_tensor_specs(cfg, opts.dtype);
  const int n = opts.shards;
  if (n < 1 || static_cast<std::size_t>(n) > specs.size())
    fail(errc::invalid_argument, "shards must be between 1 and " + std::to_string(specs.size()) + " (one tensor per shard at least), not " +
                                     std::to_string(n));

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir)) fail(errc::io, "cannot create directory " + dir.string());
  remove_old_weights(dir);
  write_text(dir / "config.json", cfg.to_json());
  nlohmann::json gen = {{"bos_token_id", cfg.bos_token_id ? nlohmann::json(*cfg.bos_token_id) : nlohmann::json(nullptr)},
                        {"eos_token_id", cfg.eos_token_ids}};
  write_text(dir / "generation_config.json", gen.dump(2));

  // Contiguous groups of about equal bytes, never an empty shard.
  std::uint64_t total = 0;
  for (const auto& s : specs) total += s.nbytes();
  std::vector<std::vector<TensorSpec>> groups(static_cast<std::size_t>(n));
  std::size_t k = 0;
  std::uint64_t done = 0;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    groups[k].push_back(specs[i]);
    done += specs[i].nbytes();
    const std::size_t tensors_left = specs.size() - i - 1, shards_left = groups.size() - k - 1;
    if (shards_left > 0 && (tensors_left == shards_left ||
                            static_cast<long double>(done) * n >= static_cast<long double>(total) * static_cast<long double>(k + 1)))
      ++k;
  }

  std::vector<fs::path> files;
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  std::vector<float> chunk(1u << 20);
  for (int s = 0; s < n; ++s) {
    const std::string name = n == 1 ? "model.safetensors" : shard_name(s + 1, n);
    io::SafetensorsWriter w(dir / name, groups[static_cast<std::size_t>(s)]);
    for (const auto& spec : w.specs()) {
      ValueStream values(spec, cfg, opts.seed);
      for (std::uint64_t left = spec.numel(); left > 0;) {
        const std::size_t m = static_cast<std::size_t>(std::min<std::uint64_t>(left, chunk.size()));
        std::span<float> part(chunk.data(), m);
        values.fill(part);
        w.write_values(part);
        left -= m;
      }
      weight_map[spec.name] = name;
    }
    w.finish();
    files.push_back(dir / name);
  }
  if (n > 1) {
    nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_text(dir / "model.safetensors.index.json", index.dump(2));
  }
  return files;
}

}  // namespace neuron::model
