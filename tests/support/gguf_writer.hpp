#pragma once
// A small GGUF writer for tests, symmetric to src/io/gguf.*: metadata of
// every type, tensors of any ggml type (the caller supplies the encoded
// bytes), padding to the alignment. gguf_from_checkpoint() turns a Hugging
// Face model directory (config.json, model.safetensors, tokenizer.json,
// tokenizer_config.json) into the GGUF llama.cpp's convert_hf_to_gguf.py
// would write for it, with the weight matrices stored as `type`.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/gguf.hpp"
#include "io/safetensors.hpp"
#include "quant/ggml_type.hpp"
#include "quant/quantize.hpp"
#include "tensor/dtype.hpp"

namespace neuron::test_support {

class GgufWriter {
 public:
  using Type = io::GgufType;

  void add_u8(const std::string& k, std::uint8_t v) { scalar(k, Type::u8, v); }
  void add_i32(const std::string& k, std::int32_t v) { scalar(k, Type::i32, v); }
  void add_u32(const std::string& k, std::uint32_t v) { scalar(k, Type::u32, v); }
  void add_u64(const std::string& k, std::uint64_t v) { scalar(k, Type::u64, v); }
  void add_f32(const std::string& k, float v) { scalar(k, Type::f32, v); }
  void add_bool(const std::string& k, bool v) { scalar(k, Type::boolean, static_cast<std::uint8_t>(v)); }
  void add_string(const std::string& k, const std::string& v) {
    key(k, Type::string);
    str(kv_, v);
  }
  void add_strings(const std::string& k, const std::vector<std::string>& v) {
    key(k, Type::array);
    pod(kv_, static_cast<std::uint32_t>(Type::string));
    pod(kv_, static_cast<std::uint64_t>(v.size()));
    for (const auto& s : v) str(kv_, s);
  }
  void add_bools(const std::string& k, const std::vector<bool>& v) {
    key(k, Type::array);
    pod(kv_, static_cast<std::uint32_t>(Type::boolean));
    pod(kv_, static_cast<std::uint64_t>(v.size()));
    for (bool b : v) pod(kv_, static_cast<std::uint8_t>(b));
  }
  void add_i32s(const std::string& k, const std::vector<std::int32_t>& v) {
    key(k, Type::array);
    pod(kv_, static_cast<std::uint32_t>(Type::i32));
    pod(kv_, static_cast<std::uint64_t>(v.size()));
    for (auto x : v) pod(kv_, x);
  }
  // Raw bytes after the key (for malformed files).
  void add_raw(const std::string& k, const std::vector<std::byte>& value_with_type) {
    starts_.push_back({k, kv_.size()});
    str(kv_, k);
    kv_.insert(kv_.end(), value_with_type.begin(), value_with_type.end());
    ++n_kv_;
  }

  // Drops every metadata entry of key `k` / tensor `name` (to write a file that lacks it, or to add it again otherwise).
  void erase_key(const std::string& k) {
    for (std::size_t i = starts_.size(); i-- > 0;) {
      if (starts_[i].first != k) continue;
      const std::size_t begin = starts_[i].second, end = i + 1 < starts_.size() ? starts_[i + 1].second : kv_.size();
      kv_.erase(kv_.begin() + static_cast<std::ptrdiff_t>(begin), kv_.begin() + static_cast<std::ptrdiff_t>(end));
      for (std::size_t j = i + 1; j < starts_.size(); ++j) starts_[j].second -= end - begin;
      starts_.erase(starts_.begin() + static_cast<std::ptrdiff_t>(i));
      --n_kv_;
    }
  }
  void erase_tensor(const std::string& name) {
    std::erase_if(tensors_, [&](const Tensor& t) { return t.name == name; });
  }

  // ne in ggml order (ne[0] = row length); `data` the encoded elements.
  void add_tensor(const std::string& name, quant::GgmlType type, std::vector<std::int64_t> ne, std::vector<std::byte> data) {
    tensors_.push_back({name, type, std::move(ne), std::move(data)});
  }
  // A float tensor in PyTorch order stored as `type` (f32, f16, bf16 or a quantizable type).
  void add_floats(const std::string& name, quant::GgmlType type, const std::vector<std::int64_t>& shape,
                  const std::vector<float>& values) {
    std::vector<std::int64_t> ne(shape.rbegin(), shape.rend());
    const std::int64_t row = ne[0];
    std::vector<std::byte> out;
    for (std::size_t r = 0; r * static_cast<std::size_t>(row) < values.size(); ++r) {
      const float* src = values.data() + r * static_cast<std::size_t>(row);
      const std::size_t at = out.size();
      out.resize(at + quant::row_bytes(type, row));
      encode(type, src, out.data() + at, row);
    }
    add_tensor(name, type, std::move(ne), std::move(out));
  }

  std::vector<std::byte> bytes(std::uint64_t alignment = 32) const {
    std::vector<std::byte> out;
    pod(out, std::uint32_t{0x46554747});
    pod(out, std::uint32_t{3});
    pod(out, static_cast<std::uint64_t>(tensors_.size()));
    pod(out, static_cast<std::uint64_t>(n_kv_ + (alignment != 32 ? 1 : 0)));
    out.insert(out.end(), kv_.begin(), kv_.end());
    if (alignment != 32) {
      str(out, "general.alignment");
      pod(out, static_cast<std::uint32_t>(Type::u32));
      pod(out, static_cast<std::uint32_t>(alignment));
    }
    std::uint64_t offset = 0;
    for (const auto& t : tensors_) {
      str(out, t.name);
      pod(out, static_cast<std::uint32_t>(t.ne.size()));
      for (auto d : t.ne) pod(out, static_cast<std::uint64_t>(d));
      pod(out, static_cast<std::uint32_t>(t.type));
      pod(out, offset);
      offset += (t.data.size() + alignment - 1) / alignment * alignment;
    }
    pad(out, alignment);
    for (const auto& t : tensors_) {
      out.insert(out.end(), t.data.begin(), t.data.end());
      pad(out, alignment);
    }
    return out;
  }

  void write(const std::filesystem::path& path, std::uint64_t alignment = 32) const {
    const auto b = bytes(alignment);
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }

  static void encode(quant::GgmlType type, const float* src, std::byte* dst, std::int64_t n) {
    switch (type) {
      case quant::GgmlType::f32: std::memcpy(dst, src, static_cast<std::size_t>(n) * 4); break;
      case quant::GgmlType::f16:
      case quant::GgmlType::bf16:
        for (std::int64_t i = 0; i < n; ++i) {
          const std::uint16_t h = type == quant::GgmlType::f16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
          std::memcpy(dst + 2 * i, &h, 2);
        }
        break;
      default: quant::quantize_row(type, src, dst, n);
    }
  }

 private:
  struct Tensor {
    std::string name;
    quant::GgmlType type;
    std::vector<std::int64_t> ne;
    std::vector<std::byte> data;
  };

  template <typename T>
  static void pod(std::vector<std::byte>& out, T v) {
    const auto at = out.size();
    out.resize(at + sizeof(T));
    std::memcpy(out.data() + at, &v, sizeof(T));
  }
  static void str(std::vector<std::byte>& out, const std::string& s) {
    pod(out, static_cast<std::uint64_t>(s.size()));
    for (char c : s) out.push_back(static_cast<std::byte>(c));
  }
  static void pad(std::vector<std::byte>& out, std::uint64_t alignment) {
    while (out.size() % alignment != 0) out.push_back(std::byte{0});
  }
  void key(const std::string& k, Type t) {
    starts_.push_back({k, kv_.size()});
    str(kv_, k);
    pod(kv_, static_cast<std::uint32_t>(t));
    ++n_kv_;
  }
  template <typename T>
  void scalar(const std::string& k, Type t, T v) {
    key(k, t);
    pod(kv_, v);
  }

  std::vector<std::byte> kv_;
  std::uint64_t n_kv_ = 0;
  std::vector<std::pair<std::string, std::size_t>> starts_;  // each key's first byte in kv_
  std::vector<Tensor> tensors_;
};

// The GGUF of a Hugging Face Qwen3 directory, as convert_hf_to_gguf.py lays it
// out: qwen3.* hyper-parameters, the gpt2 tokenizer (vocab_size tokens, holes
// as UNUSED "[PAD<i>]"), the chat template, norms in F32 and the 2-D weights
// (embedding included) as `type`; rows not a whole number of blocks fall back to F32.
// convert_hf_to_gguf.py's LlamaModel.permute: within each of `heads` heads,
// Hugging Face row s * head_dim / 2 + i becomes row 2 * i + s ([rows, cols] row-major).
inline std::vector<float> permute_rope_rows(const std::vector<float>& w, std::int64_t rows, std::int64_t heads) {
  const std::int64_t cols = static_cast<std::int64_t>(w.size()) / rows, head_dim = rows / heads, half = head_dim / 2;
  std::vector<float> out(w.size());
  for (std::int64_t h = 0; h < heads; ++h)
    for (std::int64_t s = 0; s < 2; ++s)
      for (std::int64_t i = 0; i < half; ++i)
        std::copy_n(w.begin() + (h * head_dim + s * half + i) * cols, cols, out.begin() + (h * head_dim + 2 * i + s) * cols);
  return out;
}

// convert_hf_to_gguf.py's LlamaModel.generate_extra_tensors: Llama 3's
// rope_scaling as one divisor per frequency (computed in double, stored f32).
inline std::vector<float> llama3_rope_factors(const nlohmann::json& rope, double base, std::int64_t dim) {
  const double factor = rope.value("factor", 8.0), low = rope.value("low_freq_factor", 1.0),
               high = rope.value("high_freq_factor", 4.0);
  const double old_len = rope.value("original_max_position_embeddings", 8192.0);
  std::vector<float> out;
  for (std::int64_t i = 0; i < dim; i += 2) {
    const double freq = 1.0 / std::pow(base, static_cast<double>(static_cast<float>(i) / static_cast<float>(dim)));
    const double wavelen = 2 * 3.141592653589793 / freq;
    if (wavelen < old_len / high) {
      out.push_back(1.0f);
    } else if (wavelen > old_len / low) {
      out.push_back(static_cast<float>(factor));
    } else {
      const double smooth = (old_len / wavelen - low) / (high - low);
      out.push_back(static_cast<float>(1 / ((1 - smooth) / factor + smooth)));
    }
  }
  return out;
}

// convert_hf_to_gguf.py's _LinearAttentionVReorderBase._reorder_v_heads over
// the rows of a [rows, cols] row-major block: `heads` value heads of `group`
// rows each, grouped by key head (head g r + j), become tiled (row block j Hk + g).
inline std::vector<float> tile_value_heads(const std::vector<float>& w, std::int64_t cols, std::int64_t key_heads,
                                           std::int64_t heads, std::int64_t group) {
  const std::int64_t r = heads / key_heads, block = group * cols;
  std::vector<float> out(w.size());
  for (std::int64_t g = 0; g < key_heads; ++g)
    for (std::int64_t j = 0; j < r; ++j)
      std::copy_n(w.begin() + (g * r + j) * block, block, out.begin() + (j * key_heads + g) * block);
  return out;
}

// The GGUF llama.cpp's convert_hf_to_gguf.py writes for a qwen3, llama,
// qwen3_moe, qwen3_next, qwen3_5 or qwen3_5_moe checkpoint directory
// (config.json, model.safetensors; the tokenizer's metadata when
// tokenizer.json and tokenizer_config.json are there), the matrices stored as
// `type` (rows whose length is no multiple of its block stay f32; the
// embedding and LM head as `embedding_type` when given; the MoE routers f32,
// as the converter keeps them). LLaMA q/k rows permuted, Llama 3's RoPE
// scaling as rope_freqs, the experts stacked per layer, as the converter does;
// for the hybrids (Qwen3NextModel, Qwen3_5[Moe]TextModel): the ssm.* keys,
// recurrent_layers and the rotary dimension, zero-centred norms stored 1 + w,
// A_log as -exp(A_log), dt_bias as ssm_dt.bias, conv1d squeezed, Qwen3-Next's
// in_proj_qkvz split into attn_qkv and attn_gate, and Qwen3.5's value heads
// tiled when it has fewer key heads. The vision tower is left out (the
// converter writes it to a separate mmproj file).
inline GgufWriter gguf_from_checkpoint(const std::filesystem::path& dir, quant::GgmlType type,
                                       std::optional<quant::GgmlType> embedding_type = std::nullopt) {
  using nlohmann::json;
  auto read = [&](const char* name) {
    std::ifstream in(dir / name);
    return json::parse(in);
  };
  const json top = read("config.json");
  const json cfg = top.contains("text_config") ? top["text_config"] : top;
  const std::string model_type = top.value("model_type", "qwen3");
  const std::map<std::string, std::string> archs = {
      {"qwen3_moe", "qwen3moe"}, {"qwen3_next", "qwen3next"}, {"qwen3_5", "qwen35"}, {"qwen3_5_moe", "qwen35moe"}};
  const std::string arch = archs.count(model_type) ? archs.at(model_type) : model_type;
  const bool hybrid = arch == "qwen3next" || arch == "qwen35" || arch == "qwen35moe";
  const std::string p = arch + ".";
  const auto heads = cfg["num_attention_heads"].get<std::int64_t>(), kv_heads = cfg["num_key_value_heads"].get<std::int64_t>();
  const std::int64_t head_dim = cfg.contains("head_dim") && cfg["head_dim"].is_number()
                                    ? cfg["head_dim"].get<std::int64_t>()
                                    : cfg["hidden_size"].get<std::int64_t>() / heads;
  const json rope = cfg.contains("rope_parameters") && cfg["rope_parameters"].is_object() ? cfg["rope_parameters"]
                    : cfg.contains("rope_scaling") && cfg["rope_scaling"].is_object() ? cfg["rope_scaling"]
                                                                                        : json::object();
  const double theta = rope.contains("rope_theta") ? rope["rope_theta"].get<double>() : cfg.value("rope_theta", 10000.0);
  const auto n_layers = cfg["num_hidden_layers"].get<std::int64_t>();
  GgufWriter w;
  w.add_string("general.architecture", arch);
  w.add_u32(p + "block_count", static_cast<std::uint32_t>(n_layers));
  w.add_u32(p + "context_length", cfg["max_position_embeddings"].get<std::uint32_t>());
  w.add_u32(p + "embedding_length", cfg["hidden_size"].get<std::uint32_t>());
  if (cfg.contains("intermediate_size")) w.add_u32(p + "feed_forward_length", cfg["intermediate_size"].get<std::uint32_t>());
  w.add_u32(p + "attention.head_count", static_cast<std::uint32_t>(heads));
  w.add_u32(p + "attention.head_count_kv", static_cast<std::uint32_t>(kv_heads));
  w.add_u32(p + "attention.key_length", static_cast<std::uint32_t>(head_dim));
  w.add_u32(p + "attention.value_length", static_cast<std::uint32_t>(head_dim));
  w.add_f32(p + "rope.freq_base", static_cast<float>(theta));
  w.add_f32(p + "attention.layer_norm_rms_epsilon", cfg["rms_norm_eps"].get<float>());
  w.add_u32(p + "vocab_size", cfg["vocab_size"].get<std::uint32_t>());
  if (arch == "llama") w.add_u32(p + "rope.dimension_count", static_cast<std::uint32_t>(head_dim));
  const std::int64_t experts = arch == "qwen3moe" || arch == "qwen3next" || arch == "qwen35moe"
                                   ? cfg.value("num_experts", cfg.value("num_local_experts", 0))
                                   : 0;
  if (experts > 0) {
    w.add_u32(p + "expert_count", static_cast<std::uint32_t>(experts));
    w.add_u32(p + "expert_used_count", cfg["num_experts_per_tok"].get<std::uint32_t>());
    w.add_u32(p + "expert_feed_forward_length", cfg["moe_intermediate_size"].get<std::uint32_t>());
    if (cfg.contains("shared_expert_intermediate_size"))
      w.add_u32(p + "expert_shared_feed_forward_length", cfg["shared_expert_intermediate_size"].get<std::uint32_t>());
  }
  std::int64_t hk = 0, hv = 0, dk = 0, dv = 0;
  if (hybrid) {
    hk = cfg["linear_num_key_heads"].get<std::int64_t>();
    hv = cfg["linear_num_value_heads"].get<std::int64_t>();
    dk = cfg["linear_key_head_dim"].get<std::int64_t>();
    dv = cfg["linear_value_head_dim"].get<std::int64_t>();
    w.add_u32(p + "ssm.conv_kernel", cfg["linear_conv_kernel_dim"].get<std::uint32_t>());
    w.add_u32(p + "ssm.state_size", static_cast<std::uint32_t>(dk));
    w.add_u32(p + "ssm.group_count", static_cast<std::uint32_t>(hk));
    w.add_u32(p + "ssm.time_step_rank", static_cast<std::uint32_t>(hv));
    w.add_u32(p + "ssm.inner_size", static_cast<std::uint32_t>(dv * hv));
    if (cfg.contains("layer_types")) {
      std::vector<bool> recurrent;
      for (const auto& t : cfg["layer_types"]) recurrent.push_back(t.get<std::string>() == "linear_attention");
      w.add_bools(p + "attention.recurrent_layers", recurrent);
    }
    w.add_u32(p + "full_attention_interval", cfg.value("full_attention_interval", 4u));
    const double factor = rope.value("partial_rotary_factor", cfg.value("partial_rotary_factor", 0.25));
    w.add_u32(p + "rope.dimension_count", static_cast<std::uint32_t>(static_cast<double>(head_dim) * factor));
    if (arch != "qwen3next") w.add_i32s(p + "rope.dimension_sections", {11, 11, 10, 0});
  }

  if (std::filesystem::exists(dir / "tokenizer.json")) {
    const json tok = read("tokenizer.json");
    const auto vocab_size = cfg["vocab_size"].get<std::size_t>();
    std::vector<std::string> tokens(vocab_size);
    std::vector<std::int32_t> types(vocab_size, 5);
    for (std::size_t i = 0; i < vocab_size; ++i) tokens[i] = "[PAD" + std::to_string(i) + "]";
    for (const auto& [text, id] : tok["model"]["vocab"].items()) {
      tokens[id.get<std::size_t>()] = text;
      types[id.get<std::size_t>()] = 1;
    }
    for (const auto& a : tok["added_tokens"]) {
      const auto id = a["id"].get<std::size_t>();
      tokens[id] = a["content"].get<std::string>();
      types[id] = a["special"].get<bool>() ? 3 : 4;
    }
    std::vector<std::string> merges;
    for (const auto& m : tok["model"]["merges"])
      merges.push_back(m.is_string() ? m.get<std::string>() : m[0].get<std::string>() + " " + m[1].get<std::string>());
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", arch == "llama" ? "llama-bpe" : "qwen2");
    w.add_strings("tokenizer.ggml.tokens", tokens);
    w.add_i32s("tokenizer.ggml.token_type", types);
    w.add_strings("tokenizer.ggml.merges", merges);
    if (arch != "llama") {
      w.add_u32("tokenizer.ggml.eos_token_id", 151645);
      w.add_u32("tokenizer.ggml.padding_token_id", 151643);
    }
    if (cfg.contains("bos_token_id") && cfg["bos_token_id"].is_number())
      w.add_u32("tokenizer.ggml.bos_token_id", cfg["bos_token_id"].get<std::uint32_t>());
    w.add_bool("tokenizer.ggml.add_bos_token", arch == "llama");
    const json tc = read("tokenizer_config.json");
    if (tc.contains("chat_template")) w.add_string("tokenizer.chat_template", tc["chat_template"].get<std::string>());
  }

  const auto ckpt = io::Checkpoint::open_dir(dir);
  // The checkpoint's name of a text-model tensor ("model." + rest; Qwen3.5's sit under model.language_model.).
  const std::string text = ckpt.find("model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
  auto stored_as = [&](const std::vector<std::int64_t>& shape) {
    const quant::GgmlType t = shape.size() >= 2 ? type : quant::GgmlType::f32;
    return shape.back() % quant::traits(t).block_size == 0 ? t : quant::GgmlType::f32;
  };
  auto add = [&](const std::string& gguf_name, std::vector<std::int64_t> shape, const std::vector<float>& values) {
    quant::GgmlType t = stored_as(shape);
    if (gguf_name.ends_with("ffn_gate_inp.weight") || gguf_name.ends_with("ffn_gate_inp_shexp.weight") ||
        gguf_name.ends_with("ssm_conv1d.weight"))
      t = quant::GgmlType::f32;
    if ((gguf_name == "token_embd.weight" || gguf_name == "output.weight") && embedding_type) t = *embedding_type;
    w.add_floats(gguf_name, t, shape, values);
  };
  // A zero-centred norm of a hybrid is stored 1 + w (Qwen3NextModel.modify_tensors), the linear attention's gated norm as it is.
  auto put = [&](const std::string& hf, const std::string& gguf_name, std::int64_t permute_heads = 0) {
    const io::TensorView& v = ckpt.tensor(hf);
    auto values = v.to_f32();
    if (permute_heads > 0) values = permute_rope_rows(values, v.dim(0), permute_heads);
    if (hybrid && hf.ends_with("norm.weight") && !hf.ends_with("linear_attn.norm.weight"))
      for (float& x : values) x += 1.0f;
    add(gguf_name, v.shape(), values);
  };
  if (arch == "llama" && rope.value("rope_type", std::string("default")) == "llama3")
    w.add_floats("rope_freqs.weight", quant::GgmlType::f32, {head_dim / 2}, llama3_rope_factors(rope, theta, head_dim));
  put(text + "embed_tokens.weight", "token_embd.weight");
  put(text + "norm.weight", "output_norm.weight");
  if (ckpt.find("lm_head.weight")) put("lm_head.weight", "output.weight");
  const std::map<std::string, std::string> layer = {
      {"input_layernorm", "attn_norm"},        {"self_attn.v_proj", "attn_v"},   {"self_attn.o_proj", "attn_output"},
      {"self_attn.q_norm", "attn_q_norm"},     {"self_attn.k_norm", "attn_k_norm"},
      {"post_attention_layernorm", hybrid ? "post_attention_norm" : "ffn_norm"}, {"mlp.gate_proj", "ffn_gate"},
      {"mlp.up_proj", "ffn_up"},               {"mlp.down_proj", "ffn_down"},     {"mlp.gate", "ffn_gate_inp"},
      {"mlp.shared_expert_gate", "ffn_gate_inp_shexp"}, {"mlp.shared_expert.gate_proj", "ffn_gate_shexp"},
      {"mlp.shared_expert.up_proj", "ffn_up_shexp"},    {"mlp.shared_expert.down_proj", "ffn_down_shexp"},
      {"linear_attn.norm", "ssm_norm"}};
  const std::int64_t key_dim = hk * dk, value_dim = hv * dv;
  const bool tiled = hybrid && arch != "qwen3next" && hk != hv;  // _LinearAttentionVReorderBase
  auto tile = [&](const std::vector<float>& x, std::int64_t cols, std::int64_t group) {
    return tiled ? tile_value_heads(x, cols, hk, hv, group) : x;
  };
  for (std::int64_t i = 0; i < n_layers; ++i) {
    const std::string hf = text + "layers." + std::to_string(i) + ".", g = "blk." + std::to_string(i) + ".";
    const bool permute = arch == "llama";
    if (ckpt.find(hf + "self_attn.q_proj.weight")) {
      put(hf + "self_attn.q_proj.weight", g + "attn_q.weight", permute ? heads : 0);
      put(hf + "self_attn.k_proj.weight", g + "attn_k.weight", permute ? kv_heads : 0);
    }
    for (const auto& [h, name] : layer)
      if (ckpt.find(hf + h + ".weight")) put(hf + h + ".weight", g + name + ".weight");
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"}) {
      if (!ckpt.find(hf + "mlp.experts.0." + proj + ".weight")) continue;
      std::vector<float> stacked;  // [E, rows, cols]
      std::vector<std::int64_t> shape;
      for (std::int64_t e = 0; e < experts; ++e) {
        const io::TensorView& v = ckpt.tensor(hf + "mlp.experts." + std::to_string(e) + "." + proj + ".weight");
        const auto values = v.to_f32();
        stacked.insert(stacked.end(), values.begin(), values.end());
        shape = {experts, v.dim(0), v.dim(1)};
      }
      const std::string part = std::string(proj) == "gate_proj" ? "ffn_gate_exps" : std::string(proj) == "up_proj" ? "ffn_up_exps" : "ffn_down_exps";
      w.add_floats(g + part + ".weight", stored_as(shape), shape, stacked);
    }
    const std::string la = hf + "linear_attn.";
    if (!hybrid || !ckpt.find(la + "A_log")) continue;
    const std::int64_t hidden = cfg["hidden_size"].get<std::int64_t>();
    {  // A_log -> ssm_a = -exp(A_log), dt_bias -> ssm_dt.bias, both f32 [Hv]
      auto a = tile(ckpt.tensor(la + "A_log").to_f32(), 1, 1);
      for (float& x : a) x = -std::exp(x);
      w.add_floats(g + "ssm_a", quant::GgmlType::f32, {hv}, a);
      w.add_floats(g + "ssm_dt.bias", quant::GgmlType::f32, {hv}, tile(ckpt.tensor(la + "dt_bias").to_f32(), 1, 1));
    }
    {  // conv1d [C, 1, K] squeezed to [C, K]; its v channels tiled
      const io::TensorView& c = ckpt.tensor(la + "conv1d.weight");
      auto x = c.to_f32();
      const std::int64_t k = c.dim(2), qk = 2 * key_dim * k;
      std::vector<float> v(x.begin() + qk, x.end());
      v = tile(v, k, dv);
      std::copy(v.begin(), v.end(), x.begin() + qk);
      add(g + "ssm_conv1d.weight", {c.dim(0), k}, x);
    }
    if (arch == "qwen3next") {  // in_proj_qkvz: per key head q, k, v, z -> attn_qkv [q..., k..., v...], attn_gate [z...]
      const auto x = ckpt.tensor(la + "in_proj_qkvz.weight").to_f32();
      const std::int64_t r = hv / hk, group = 2 * dk + 2 * r * dv;
      std::vector<float> qkv, z;
      auto rows = [&](std::vector<float>& out, std::int64_t first, std::int64_t count) {
        out.insert(out.end(), x.begin() + first * hidden, x.begin() + (first + count) * hidden);
      };
      for (std::int64_t gi = 0; gi < hk; ++gi) rows(qkv, gi * group, dk);
      for (std::int64_t gi = 0; gi < hk; ++gi) rows(qkv, gi * group + dk, dk);
      for (std::int64_t gi = 0; gi < hk; ++gi) rows(qkv, gi * group + 2 * dk, r * dv);
      for (std::int64_t gi = 0; gi < hk; ++gi) rows(z, gi * group + 2 * dk + r * dv, r * dv);
      add(g + "attn_qkv.weight", {2 * key_dim + value_dim, hidden}, qkv);
      add(g + "attn_gate.weight", {value_dim, hidden}, z);
      put(la + "in_proj_ba.weight", g + "ssm_ba.weight");
    } else {
      auto qkv = ckpt.tensor(la + "in_proj_qkv.weight").to_f32();
      std::vector<float> v(qkv.begin() + 2 * key_dim * hidden, qkv.end());
      v = tile(v, hidden, dv);
      std::copy(v.begin(), v.end(), qkv.begin() + 2 * key_dim * hidden);
      add(g + "attn_qkv.weight", {2 * key_dim + value_dim, hidden}, qkv);
      add(g + "attn_gate.weight", {value_dim, hidden}, tile(ckpt.tensor(la + "in_proj_z.weight").to_f32(), hidden, dv));
      add(g + "ssm_beta.weight", {hv, hidden}, tile(ckpt.tensor(la + "in_proj_b.weight").to_f32(), hidden, 1));
      add(g + "ssm_alpha.weight", {hv, hidden}, tile(ckpt.tensor(la + "in_proj_a.weight").to_f32(), hidden, 1));
    }
    {  // out_proj [hidden, Hv dv]: its columns tiled
      auto x = ckpt.tensor(la + "out_proj.weight").to_f32();
      if (tiled)
        for (std::int64_t row = 0; row < hidden; ++row) {
          std::vector<float> cols(x.begin() + row * value_dim, x.begin() + (row + 1) * value_dim);
          cols = tile_value_heads(cols, 1, hk, hv, dv);
          std::copy(cols.begin(), cols.end(), x.begin() + row * value_dim);
        }
      add(g + "ssm_out.weight", {hidden, value_dim}, x);
    }
  }
  return w;
}

}  // namespace neuron::test_support
