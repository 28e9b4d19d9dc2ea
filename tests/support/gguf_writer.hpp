#pragma once
// A small GGUF writer for tests, symmetric to src/io/gguf.*: metadata of
// every type, tensors of any ggml type (the caller supplies the encoded
// bytes), padding to the alignment. gguf_from_checkpoint() turns a Hugging
// Face model directory (config.json, model.safetensors, tokenizer.json,
// tokenizer_config.json) into the GGUF llama.cpp's convert_hf_to_gguf.py
// would write for it, with the weight matrices stored as `type`.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
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
  void add_i32s(const std::string& k, const std::vector<std::int32_t>& v) {
    key(k, Type::array);
    pod(kv_, static_cast<std::uint32_t>(Type::i32));
    pod(kv_, static_cast<std::uint64_t>(v.size()));
    for (auto x : v) pod(kv_, x);
  }
  // Raw bytes after the key (for malformed files).
  void add_raw(const std::string& k, const std::vector<std::byte>& value_with_type) {
    str(kv_, k);
    kv_.insert(kv_.end(), value_with_type.begin(), value_with_type.end());
    ++n_kv_;
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
  std::vector<Tensor> tensors_;
};

// The GGUF of a Hugging Face Qwen3 directory, as convert_hf_to_gguf.py lays it
// out: qwen3.* hyper-parameters, the gpt2 tokenizer (vocab_size tokens, holes
// as UNUSED "[PAD<i>]"), the chat template, norms in F32 and the 2-D weights
// (embedding included) as `type`; rows not a whole number of blocks fall back to F32.
inline GgufWriter gguf_from_checkpoint(const std::filesystem::path& dir, quant::GgmlType type) {
  using nlohmann::json;
  auto read = [&](const char* name) {
    std::ifstream in(dir / name);
    return json::parse(in);
  };
  const json cfg = read("config.json");
  GgufWriter w;
  w.add_string("general.architecture", "qwen3");
  w.add_u32("qwen3.block_count", cfg["num_hidden_layers"].get<std::uint32_t>());
  w.add_u32("qwen3.context_length", cfg["max_position_embeddings"].get<std::uint32_t>());
  w.add_u32("qwen3.embedding_length", cfg["hidden_size"].get<std::uint32_t>());
  w.add_u32("qwen3.feed_forward_length", cfg["intermediate_size"].get<std::uint32_t>());
  w.add_u32("qwen3.attention.head_count", cfg["num_attention_heads"].get<std::uint32_t>());
  w.add_u32("qwen3.attention.head_count_kv", cfg["num_key_value_heads"].get<std::uint32_t>());
  w.add_u32("qwen3.attention.key_length", cfg["head_dim"].get<std::uint32_t>());
  w.add_u32("qwen3.attention.value_length", cfg["head_dim"].get<std::uint32_t>());
  w.add_f32("qwen3.rope.freq_base", cfg["rope_theta"].get<float>());
  w.add_f32("qwen3.attention.layer_norm_rms_epsilon", cfg["rms_norm_eps"].get<float>());

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
  w.add_string("tokenizer.ggml.pre", "qwen2");
  w.add_strings("tokenizer.ggml.tokens", tokens);
  w.add_i32s("tokenizer.ggml.token_type", types);
  w.add_strings("tokenizer.ggml.merges", merges);
  w.add_u32("tokenizer.ggml.eos_token_id", 151645);
  w.add_u32("tokenizer.ggml.padding_token_id", 151643);
  w.add_u32("tokenizer.ggml.bos_token_id", cfg["bos_token_id"].get<std::uint32_t>());
  w.add_bool("tokenizer.ggml.add_bos_token", false);
  const json tc = read("tokenizer_config.json");
  w.add_string("tokenizer.chat_template", tc["chat_template"].get<std::string>());

  const auto ckpt = io::Checkpoint::open_dir(dir);
  auto put = [&](const std::string& hf, const std::string& gguf_name) {
    const io::TensorView& v = ckpt.tensor(hf);
    const auto values = v.to_f32();
    const bool matrix = v.rank() == 2;
    quant::GgmlType t = matrix ? type : quant::GgmlType::f32;
    if (v.shape().back() % quant::traits(t).block_size != 0) t = quant::GgmlType::f32;
    w.add_floats(gguf_name, t, v.shape(), values);
  };
  put("model.embed_tokens.weight", "token_embd.weight");
  put("model.norm.weight", "output_norm.weight");
  if (ckpt.find("lm_head.weight")) put("lm_head.weight", "output.weight");
  const std::map<std::string, std::string> layer = {
      {"input_layernorm", "attn_norm"},        {"self_attn.q_proj", "attn_q"},   {"self_attn.k_proj", "attn_k"},
      {"self_attn.v_proj", "attn_v"},          {"self_attn.o_proj", "attn_output"},
      {"self_attn.q_norm", "attn_q_norm"},     {"self_attn.k_norm", "attn_k_norm"},
      {"post_attention_layernorm", "ffn_norm"}, {"mlp.gate_proj", "ffn_gate"}, {"mlp.up_proj", "ffn_up"},
      {"mlp.down_proj", "ffn_down"}};
  for (int i = 0; i < cfg["num_hidden_layers"].get<int>(); ++i)
    for (const auto& [hf, g] : layer)
      put("model.layers." + std::to_string(i) + "." + hf + ".weight", "blk." + std::to_string(i) + "." + g + ".weight");
  return w;
}

}  // namespace neuron::test_support
