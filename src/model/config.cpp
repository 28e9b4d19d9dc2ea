#include "model/config.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "io/gguf.hpp"
#include "model/arch/family.hpp"
#include "model/config_fields.hpp"
#include "model/gguf_config.hpp"
#include "util/error.hpp"
#include "util/json_parse.hpp"

namespace neuron::model {

using nlohmann::json;

namespace {

using namespace fields;
constexpr std::size_t kMaxConfigBytes = 16u << 20;

json parse_object(const std::string& text, const char* what) {
  json j = parse_json(text, what, errc::bad_model);
  if (!j.is_object()) bad(std::string(what) + " is not a JSON object");
  return j;
}

std::int32_t token_id(const json& v, const std::string& name) {
  std::int64_t id = to_int(v, name);
  if (id < 0 || id > std::numeric_limits<std::int32_t>::max())
    bad("field '" + name + "' = " + std::to_string(id) + " is not a valid token id");
  return static_cast<std::int32_t>(id);
}

// eos_token_id is an int or a list of ints in both config files.
std::vector<std::int32_t> token_ids(const json& j, const char* name) {
  const json* v = field(j, name);
  if (!v) return {};
  std::vector<std::int32_t> out;
  if (v->is_array()) {
    for (const auto& e : *v) out.push_back(token_id(e, name));
  } else {
    out.push_back(token_id(*v, name));
  }
  return out;
}

// rope_scaling (older transformers, released checkpoints) or rope_parameters
// (transformers 5): plain RoPE or Llama 3's scaling; anything else changes
// the math and must not run silently.
void parse_rope(const json& j, const char* name, RopeConfig& rope) {
  const json* v = field(j, name);
  if (!v) return;
  if (!v->is_object()) bad("config field '" + std::string(name) + "' must be an object or null");
  const std::string where = std::string(name) + ".";
  std::string type = "default";
  for (const char* key : {"rope_type", "type"}) {
    if (const json* t = field(*v, key)) {
      if (!t->is_string()) bad("config field '" + where + key + "' must be a string");
      type = t->get<std::string>();
    }
  }
  if (const json* t = field(*v, "rope_theta")) {
    if (!t->is_number()) bad("config field '" + where + "rope_theta' must be a number");
    rope.theta = t->get<double>();
  }
  if (const json* f = field(*v, "partial_rotary_factor")) {
    if (!f->is_number()) bad("config field '" + where + "partial_rotary_factor' must be a number");
    rope.partial_rotary_factor = f->get<double>();
  }
  // Qwen3.5's M-RoPE (mrope_section, mrope_interleaved) gives image tokens
  // three position axes; text positions are equal on all three, where it is
  // plain RoPE. Text is all neuron feeds it (vision requests are refused).
  if (type == "default") return;
  if (type == "freq_factors") {
    const json* f = field(*v, "factors");
    if (!f || !f->is_array() || f->empty() || f->size() > kMaxDim)
      bad("config field '" + where + "factors' must be a non-empty list (rope type freq_factors)");
    rope.type = RopeType::freq_factors;
    rope.freq_factors.clear();
    for (const json& x : *f) {
      if (!x.is_number() || !std::isfinite(x.get<double>()) || x.get<double>() <= 0)
        bad("config field '" + where + "factors' must hold positive numbers");
      rope.freq_factors.push_back(x.get<float>());
    }
    return;
  }
  if (type != "llama3")
    fail(errc::unsupported_arch, "config field '" + std::string(name) + "' asks for rope type '" + type +
                                     "'; implemented: default, llama3, freq_factors");
  rope.type = RopeType::llama3;
  auto positive = [&](const char* key) {
    const json* f = field(*v, key);
    if (!f) bad("config field '" + where + key + "' is missing (rope type llama3)");
    if (!f->is_number() || !std::isfinite(f->get<double>()) || f->get<double>() <= 0)
      bad("config field '" + where + key + "' must be a positive number");
    return f->get<double>();
  };
  rope.factor = positive("factor");
  rope.low_freq_factor = positive("low_freq_factor");
  rope.high_freq_factor = positive("high_freq_factor");
  if (rope.high_freq_factor <= rope.low_freq_factor)
    bad("config field '" + where + "high_freq_factor' must exceed low_freq_factor");
  rope.original_max_position_embeddings = dim_field(*v, "original_max_position_embeddings", kMaxPositions);
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(errc::io, "cannot read " + path.string());
  std::string text;
  char buf[65536];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxConfigBytes) bad(path.string() + " is larger than " + std::to_string(kMaxConfigBytes >> 20) + " MiB");
  }
  if (in.bad()) fail(errc::io, "error reading " + path.string());
  return text;
}

void append_unique(std::vector<std::int32_t>& to, const std::vector<std::int32_t>& from) {
  for (auto id : from)
    if (std::find(to.begin(), to.end(), id) == to.end()) to.push_back(id);
}


// layer_types: every entry full_attention or linear_attention, one per layer.
std::vector<LayerType> parse_layer_types(const json& j, std::int64_t layers) {
  const json* lt = field(j, "layer_types");
  if (!lt) return {};
  if (!lt->is_array()) bad("config field 'layer_types' must be a list");
  std::vector<LayerType> out;
  bool linear = false;
  for (const auto& t : *lt) {
    if (!t.is_string()) bad("config field 'layer_types' must hold strings");
    const std::string name = t.get<std::string>();
    if (name == "full_attention") {
      out.push_back(LayerType::full_attention);
    } else if (name == "linear_attention") {
      out.push_back(LayerType::linear_attention);
      linear = true;
    } else {
      fail(errc::unsupported_arch, "config field 'layer_types' holds '" + name +
                                       "'; implemented: full_attention, linear_attention");
    }
  }
  if (static_cast<std::int64_t>(out.size()) != layers)
    bad("config field 'layer_types' has " + std::to_string(out.size()) + " entries but 'num_hidden_layers' is " +
        std::to_string(layers));
  if (!linear) return {};  // a plain decoder
  return out;
}

}  // namespace

ModelConfig ModelConfig::parse(const std::string& json_text) {
  const json top = parse_object(json_text, "config.json");

  const json* model_type = field(top, "model_type");
  if (!model_type) bad("config field 'model_type' is missing");
  if (!model_type->is_string()) bad("config field 'model_type' must be a string");
  const Family* family = find_family(model_type->get<std::string>());
  if (!family)
    fail(errc::unsupported_arch, "config field 'model_type' is '" + model_type->get<std::string>() +
                                     "'; supported: " + supported_model_types_text());
  if (field(top, "quantization_config"))
    fail(errc::unsupported_arch, "config field 'quantization_config' is set; quantized checkpoints are not implemented");
  // Qwen3.5's text model's settings sit under text_config (the vision tower's under vision_config, unused).
  const json* text = family->nested_text_config() ? field(top, "text_config") : nullptr;
  if (text && !text->is_object()) bad("config field 'text_config' must be an object");
  const json& j = text ? *text : top;

  reject_if_true(j, "attention_bias", "attention biases");
  reject_if_true(j, "mlp_bias", "MLP biases");
  reject_if_true(j, "use_sliding_window", "sliding-window attention");
  if (const json* act = field(j, "hidden_act")) {
    if (!act->is_string()) bad("config field 'hidden_act' must be a string");
    if (act->get<std::string>() != "silu")
      fail(errc::unsupported_arch, "config field 'hidden_act' is '" + act->get<std::string>() + "'; only 'silu' is implemented");
  }
  ModelConfig c;
  c.model_type = std::string(family->model_type());
  c.vocab_size = dim_field(j, "vocab_size", kMaxDim);
  c.hidden_size = dim_field(j, "hidden_size", kMaxDim);
  // A model whose every layer is a MoE (Qwen3.5-MoE) may name no dense size.
  c.intermediate_size = dim_field(j, "intermediate_size", kMaxDim,
                                  field(j, "moe_intermediate_size") ? std::optional<std::int64_t>(0) : std::nullopt);
  c.num_hidden_layers = dim_field(j, "num_hidden_layers", kMaxLayers);
  c.num_attention_heads = dim_field(j, "num_attention_heads", kMaxDim);
  c.num_key_value_heads = dim_field(j, "num_key_value_heads", kMaxDim);
  if (c.num_key_value_heads > c.num_attention_heads || c.num_attention_heads % c.num_key_value_heads != 0)
    bad("config field 'num_attention_heads' (" + std::to_string(c.num_attention_heads) +
        ") is not a multiple of 'num_key_value_heads' (" + std::to_string(c.num_key_value_heads) + ")");
  if (!field(j, "head_dim") && c.hidden_size % c.num_attention_heads != 0)
    bad("config field 'head_dim' is missing and 'hidden_size' is not divisible by 'num_attention_heads'");
  c.head_dim = dim_field(j, "head_dim", kMaxDim, c.hidden_size / c.num_attention_heads);
  if (c.num_attention_heads * c.head_dim > kMaxDim)
    bad("config fields 'num_attention_heads' * 'head_dim' = " + std::to_string(c.num_attention_heads * c.head_dim) +
        " exceed " + std::to_string(kMaxDim));
  // RoPE rotates pairs of lanes (rotate-half), so head_dim must be even.
  if (c.head_dim % 2 != 0) bad("config field 'head_dim' = " + std::to_string(c.head_dim) + " must be even for RoPE");

  // Absent values take transformers' ModelConfig defaults, so both read the same file the same way.
  c.rope.theta = number_field(j, "rope_theta", 10000.0);
  parse_rope(j, "rope_scaling", c.rope);
  parse_rope(j, "rope_parameters", c.rope);
  c.rope.partial_rotary_factor = number_field(j, "partial_rotary_factor", c.rope.partial_rotary_factor);
  if (!(c.rope.partial_rotary_factor > 0 && c.rope.partial_rotary_factor <= 1))
    bad("config field 'partial_rotary_factor' must be in (0, 1]");
  {
    const std::int64_t rd = c.rope.rotary_dim(c.head_dim);
    if (rd < 2 || rd % 2 != 0)
      bad("config field 'partial_rotary_factor' gives a rotary dimension of " + std::to_string(rd) + " of head_dim " +
          std::to_string(c.head_dim) + "; it must be even and at least 2");
  }
  if (!std::isfinite(c.rope.theta) || c.rope.theta <= 1.0) bad("config field 'rope_theta' must be a finite number above 1");
  if (const std::int64_t pairs = c.rope.rotary_dim(c.head_dim) / 2;
      c.rope.type == RopeType::freq_factors && static_cast<std::int64_t>(c.rope.freq_factors.size()) != pairs)
    bad("config field 'rope_parameters.factors' holds " + std::to_string(c.rope.freq_factors.size()) +
        " factors; a rotary dimension of " + std::to_string(2 * pairs) + " (head_dim " + std::to_string(c.head_dim) +
        ") needs " + std::to_string(pairs));
  c.rms_norm_eps = number_field(j, "rms_norm_eps", 1e-6);
  if (!std::isfinite(c.rms_norm_eps) || c.rms_norm_eps <= 0 || c.rms_norm_eps >= 1)
    bad("config field 'rms_norm_eps' must be in (0, 1)");
  c.max_position_embeddings = dim_field(j, "max_position_embeddings", kMaxPositions, 32768);
  c.tie_word_embeddings = bool_field(j, "tie_word_embeddings", false);
  if (const json* bos = field(j, "bos_token_id")) c.bos_token_id = token_id(*bos, "bos_token_id");
  c.eos_token_ids = token_ids(j, "eos_token_id");
  // Newer transformers write "dtype", older "torch_dtype"; it is only a hint for the default load dtype.
  for (const char* key : {"torch_dtype", "dtype"}) {
    if (const json* d = field(j, key)) {
      if (!d->is_string()) bad("config field '" + std::string(key) + "' must be a string");
      c.torch_dtype = d->get<std::string>();
      break;
    }
  }
  c.linear.layer_types = parse_layer_types(j, c.num_hidden_layers);
  family->parse(j, c);
  if (c.linear.hybrid() && c.linear.num_value_heads == 0)
    fail(errc::unsupported_arch, "config field 'layer_types' holds linear_attention layers, which model_type '" +
                                     c.model_type + "' does not have (hybrids: qwen3_next, qwen3_5, qwen3_5_moe)");
  return c;
}

std::string ModelConfig::to_json() const {
  const Family& family = family_of(*this);
  json j = {
      {"architectures", {std::string(family.hf_architecture())}},
      {"model_type", model_type},
      {"vocab_size", vocab_size},
      {"hidden_size", hidden_size},
      {"num_hidden_layers", num_hidden_layers},
      {"num_attention_heads", num_attention_heads},
      {"num_key_value_heads", num_key_value_heads},
      {"head_dim", head_dim},
      {"hidden_act", "silu"},
      {"rope_theta", rope.theta},
      {"rms_norm_eps", rms_norm_eps},
      {"max_position_embeddings", max_position_embeddings},
      {"tie_word_embeddings", tie_word_embeddings},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"use_sliding_window", false},
      {"sliding_window", nullptr},
      {"max_window_layers", num_hidden_layers},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"torch_dtype", torch_dtype},
  };
  if (intermediate_size > 0) j["intermediate_size"] = intermediate_size;
  if (rope.type == RopeType::llama3)
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", rope.factor},
                         {"low_freq_factor", rope.low_freq_factor},
                         {"high_freq_factor", rope.high_freq_factor},
                         {"original_max_position_embeddings", rope.original_max_position_embeddings}};
  else if (rope.type == RopeType::freq_factors)
    j["rope_scaling"] = {{"rope_type", "freq_factors"}, {"factors", rope.freq_factors}};
  else
    j["rope_scaling"] = nullptr;
  if (rope.partial_rotary_factor != 1.0) j["partial_rotary_factor"] = rope.partial_rotary_factor;
  family.write(*this, j);
  j["bos_token_id"] = bos_token_id ? json(*bos_token_id) : json(nullptr);
  if (eos_token_ids.empty())
    j["eos_token_id"] = nullptr;
  else if (eos_token_ids.size() == 1)
    j["eos_token_id"] = eos_token_ids.front();
  else
    j["eos_token_id"] = eos_token_ids;
  return j.dump(2);
}

GenerationDefaults GenerationDefaults::parse(const std::string& json_text) {
  const json j = parse_object(json_text, "generation_config.json");
  GenerationDefaults g;
  g.eos_token_ids = token_ids(j, "eos_token_id");
  auto prob = [&](const char* name, double lo, double hi) -> std::optional<float> {
    const json* v = field(j, name);
    if (!v) return std::nullopt;
    if (!v->is_number()) bad("generation_config field '" + std::string(name) + "' must be a number");
    double d = v->get<double>();
    if (!(d >= lo && d <= hi))
      bad("generation_config field '" + std::string(name) + "' = " + std::to_string(d) + " is outside [" + std::to_string(lo) +
          ", " + std::to_string(hi) + "]");
    return static_cast<float>(d);
  };
  g.temperature = prob("temperature", 0.0, 1e4);
  g.top_p = prob("top_p", 0.0, 1.0);
  g.min_p = prob("min_p", 0.0, 1.0);
  g.repetition_penalty = prob("repetition_penalty", 1e-6, 1e4);
  if (const json* v = field(j, "top_k")) {
    std::int64_t k = to_int(*v, "top_k");
    if (k < 0 || k > std::numeric_limits<std::int32_t>::max()) bad("generation_config field 'top_k' = " + std::to_string(k) + " is out of range");
    g.top_k = static_cast<std::int32_t>(k);
  }
  return g;
}

std::vector<std::int32_t> ModelConfigs::stop_ids() const {
  std::vector<std::int32_t> ids = generation.eos_token_ids;
  append_unique(ids, model.eos_token_ids);
  return ids;
}

ModelConfigs load_model_configs(const std::filesystem::path& dir) {
  namespace fs = std::filesystem;
  if (io::is_gguf_path(dir) && !fs::is_directory(dir)) return configs_from_gguf(io::GgufFile(dir));
  const fs::path config = dir / "config.json";
  if (!fs::is_regular_file(config)) fail(errc::not_found, "no config.json in " + dir.string());
  ModelConfigs out;
  try {
    out.model = ModelConfig::parse(read_text(config));
  } catch (const Error& e) {
    throw Error(e.kind(), config.string() + ": " + e.what());
  }
  const fs::path gen = dir / "generation_config.json";
  if (fs::is_regular_file(gen)) {
    try {
      out.generation = GenerationDefaults::parse(read_text(gen));
    } catch (const Error& e) {
      throw Error(e.kind(), gen.string() + ": " + e.what());
    }
  }
  append_unique(out.model.eos_token_ids, out.generation.eos_token_ids);
  return out;
}

std::int64_t RopeConfig::rotary_dim(std::int64_t head_dim) const noexcept {
  return static_cast<std::int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);
}

bool LinearAttentionConfig::linear_layer(std::int64_t layer) const noexcept {
  return layer >= 0 && layer < static_cast<std::int64_t>(layer_types.size()) &&
         layer_types[static_cast<std::size_t>(layer)] == LayerType::linear_attention;
}

bool LinearAttentionConfig::hybrid() const noexcept {
  return std::find(layer_types.begin(), layer_types.end(), LayerType::linear_attention) != layer_types.end();
}

std::int64_t ModelConfig::kv_layers() const noexcept {
  std::int64_t n = 0;
  for (std::int64_t l = 0; l < num_hidden_layers; ++l) n += linear.linear_layer(l) ? 0 : 1;
  return n;
}

std::int64_t ModelConfig::kv_layer_index(std::int64_t layer) const noexcept {
  if (linear.linear_layer(layer)) return -1;
  std::int64_t n = 0;
  for (std::int64_t l = 0; l < layer; ++l) n += linear.linear_layer(l) ? 0 : 1;
  return n;
}

bool MoeConfig::sparse_layer(std::int64_t layer) const noexcept {
  if (num_experts <= 0) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) return false;
  return sparse_step > 0 && (layer + 1) % sparse_step == 0;
}

ModelConfig preset_config(const std::string& name) {
  struct Shape {
    const char* name;
    const char* model_type;
    std::int64_t vocab, hidden, inter, layers, heads, kv, head_dim;
    bool tied;
    std::int64_t experts = 0, top_k = 0, moe_inter = 0;
  };
  // Shapes of the released checkpoints' config.json files.
  static constexpr Shape kShapes[] = {
      {"qwen3-0.6b", "qwen3", 151936, 1024, 3072, 28, 16, 8, 128, true},
      {"qwen3-1.7b", "qwen3", 151936, 2048, 6144, 28, 16, 8, 128, true},
      {"qwen3-4b", "qwen3", 151936, 2560, 9728, 36, 32, 8, 128, true},
      {"qwen3-8b", "qwen3", 151936, 4096, 12288, 36, 32, 8, 128, false},
      {"qwen3-14b", "qwen3", 151936, 5120, 17408, 40, 40, 8, 128, false},
      {"qwen3-32b", "qwen3", 151936, 5120, 25600, 64, 64, 8, 128, false},
      {"llama-3.2-1b", "llama", 128256, 2048, 8192, 16, 32, 8, 64, true},
      {"llama-3.2-3b", "llama", 128256, 3072, 8192, 28, 24, 8, 128, true},
      {"llama-3.1-8b", "llama", 128256, 4096, 14336, 32, 32, 8, 128, false},
      {"qwen3-30b-a3b", "qwen3_moe", 151936, 2048, 6144, 48, 32, 4, 128, false, 128, 8, 768},
      {"qwen3-235b-a22b", "qwen3_moe", 151936, 4096, 12288, 94, 64, 4, 128, false, 128, 8, 1536},
  };
  // The Gated DeltaNet hybrids, as their released config.json files have them (text fields only).
  struct Hybrid {
    const char* name;
    const char* json;
  };
  static constexpr Hybrid kHybrids[] = {
      {"qwen3.5-27b",
       R"({"model_type": "qwen3_5", "vocab_size": 248320, "hidden_size": 5120, "intermediate_size": 17408,
           "num_hidden_layers": 64, "num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256,
           "linear_num_key_heads": 16, "linear_num_value_heads": 48, "linear_key_head_dim": 128,
           "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "full_attention_interval": 4,
           "rms_norm_eps": 1e-6, "max_position_embeddings": 262144, "tie_word_embeddings": false,
           "eos_token_id": 248044, "rope_parameters": {"rope_theta": 10000000.0, "partial_rotary_factor": 0.25}})"},
      {"qwen3.5-35b-a3b",
       R"({"model_type": "qwen3_5_moe", "vocab_size": 248320, "hidden_size": 2048, "num_hidden_layers": 40,
           "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256, "linear_num_key_heads": 16,
           "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
           "linear_conv_kernel_dim": 4, "full_attention_interval": 4, "num_experts": 256, "num_experts_per_tok": 8,
           "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512, "rms_norm_eps": 1e-6,
           "max_position_embeddings": 262144, "tie_word_embeddings": false, "eos_token_id": 248044,
           "rope_parameters": {"rope_theta": 10000000.0, "partial_rotary_factor": 0.25}})"},
      {"qwen3-next-80b-a3b",
       R"({"model_type": "qwen3_next", "vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 5120,
           "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 2, "head_dim": 256,
           "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
           "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "full_attention_interval": 4,
           "num_experts": 512, "num_experts_per_tok": 10, "moe_intermediate_size": 512,
           "shared_expert_intermediate_size": 512, "norm_topk_prob": true, "rms_norm_eps": 1e-6,
           "max_position_embeddings": 262144, "tie_word_embeddings": false, "eos_token_id": 151645,
           "rope_theta": 10000000.0, "partial_rotary_factor": 0.25})"},
  };
  std::string known;
  for (const auto& h : kHybrids) {
    known += (known.empty() ? "" : ", ") + std::string(h.name);
    if (name == h.name) return ModelConfig::parse(h.json);
  }
  for (const auto& s : kShapes) {
    known += (known.empty() ? "" : ", ") + std::string(s.name);
    if (name != s.name) continue;
    ModelConfig c;
    c.model_type = s.model_type;
    c.vocab_size = s.vocab;
    c.hidden_size = s.hidden;
    c.intermediate_size = s.inter;
    c.num_hidden_layers = s.layers;
    c.num_attention_heads = s.heads;
    c.num_key_value_heads = s.kv;
    c.head_dim = s.head_dim;
    c.rms_norm_eps = 1e-6;
    c.max_position_embeddings = 40960;
    c.tie_word_embeddings = s.tied;
    c.bos_token_id = 151643;
    c.eos_token_ids = {151645, 151643};
    c.torch_dtype = "bfloat16";
    c.rope.theta = 1e6;
    if (c.model_type == "llama") {
      c.qk_norm = false;
      c.rms_norm_eps = 1e-5;
      c.max_position_embeddings = 131072;
      c.rope = RopeConfig{RopeType::llama3, 500000.0, 32.0, 1.0, 4.0, 8192};
      if (name == "llama-3.1-8b") c.rope.factor = 8.0;
      c.bos_token_id = 128000;
      c.eos_token_ids = {128001, 128008, 128009};
    }
    if (s.experts > 0) {
      c.moe.num_experts = s.experts;
      c.moe.experts_per_token = s.top_k;
      c.moe.intermediate_size = s.moe_inter;
      c.moe.norm_topk_prob = true;
    }
    return c;
  }
  fail(errc::invalid_argument, "unknown model preset '" + name + "' (known: " + known + ")");
}

std::int32_t resolve_max_context(const ModelConfig& cfg, std::int64_t requested, std::int32_t backend_default) {
  const std::int64_t limit = cfg.max_position_embeddings > 0 ? cfg.max_position_embeddings : backend_default;
  if (requested < 0 || requested > limit)
    fail(errc::invalid_argument, "max_context " + std::to_string(requested) + " is outside [0, " + std::to_string(limit) +
                                     "] (the model's max_position_embeddings)");
  return static_cast<std::int32_t>(requested > 0 ? requested : std::min<std::int64_t>(limit, backend_default));
}

}  // namespace neuron::model
