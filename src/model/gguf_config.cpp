#include "model/gguf_config.hpp"

#include <algorithm>
#include <limits>
#include <utility>
#include <nlohmann/json.hpp>

#include "model/arch/family.hpp"
#include "util/error.hpp"

namespace neuron::model {

namespace {

using nlohmann::json;

const io::GgufTensor* find_tensor(const io::GgufFile& f, const std::string& name) {
  for (const io::GgufTensor& t : f.tensors())
    if (t.name == name) return &t;
  return nullptr;
}

// Token ids llama.cpp ends generation on (llama-vocab.cpp special_eog_ids), for Qwen's spellings.
std::vector<std::int32_t> stop_ids(const io::GgufMetadata& md) {
  std::vector<std::int32_t> ids;
  auto add = [&](std::int64_t id) {
    if (id < 0 || id > std::numeric_limits<std::int32_t>::max()) return;
    if (std::find(ids.begin(), ids.end(), static_cast<std::int32_t>(id)) == ids.end())
      ids.push_back(static_cast<std::int32_t>(id));
  };
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"})
    if (auto id = md.integer(key)) add(*id);
  const auto* tokens = md.strings("tokenizer.ggml.tokens");
  const auto* types = md.integers("tokenizer.ggml.token_type");
  if (tokens && types && types->size() == tokens->size()) {
    constexpr std::int64_t kControl = 3;
    for (std::size_t i = 0; i < tokens->size(); ++i)
      if ((*types)[i] == kControl && ((*tokens)[i] == "<|im_end|>" || (*tokens)[i] == "<|endoftext|>" ||
                                        (*tokens)[i] == "<|eot_id|>" || (*tokens)[i] == "<|eom_id|>"))
        add(static_cast<std::int64_t>(i));
  }
  return ids;
}

}  // namespace

ModelConfigs configs_from_gguf(const io::GgufFile& file) {
  const io::GgufMetadata& md = file.metadata();
  const std::string what = file.path().string();
  const std::string arch = md.require_string("general.architecture");
  const Family* family = find_gguf_family(arch);
  if (!family)
    fail(errc::unsupported_arch, what + ": general.architecture is '" + arch + "'; GGUF files of qwen3, llama, qwen3moe, qwen3next, qwen35 and qwen35moe load (families: " +
                                     supported_model_types_text() + ")");
  const std::string p = arch + ".";
  if (auto t = md.string(p + "rope.scaling.type"); t && *t != "none")
    fail(errc::unsupported_arch, what + ": " + p + "rope.scaling.type is '" + *t + "'; only plain RoPE is implemented");
  if (md.contains(p + "attention.sliding_window"))
    fail(errc::unsupported_arch, what + ": " + p + "attention.sliding_window is set; sliding-window attention is not implemented");

  json j;
  j["model_type"] = std::string(family->model_type());
  j["hidden_size"] = md.require_integer(p + "embedding_length");
  // block_count counts the multi-token-prediction blocks llama.cpp keeps after the model's layers.
  const std::int64_t blocks = md.require_integer(p + "block_count");
  const std::int64_t nextn = md.integer(p + "nextn_predict_layers").value_or(0);
  if (nextn < 0 || nextn >= blocks)
    fail(errc::bad_model, what + ": " + p + "nextn_predict_layers " + std::to_string(nextn) + " leaves no layer of " + p +
                              "block_count " + std::to_string(blocks));
  j["num_hidden_layers"] = blocks - nextn;
  j["num_attention_heads"] = md.require_integer(p + "attention.head_count");
  j["num_key_value_heads"] = md.integer(p + "attention.head_count_kv").value_or(j["num_attention_heads"].get<std::int64_t>());
  if (auto k = md.integer(p + "attention.key_length")) {
    if (auto v = md.integer(p + "attention.value_length"); v && *v != *k)
      fail(errc::unsupported_arch, what + ": attention.key_length " + std::to_string(*k) + " differs from value_length " +
                                       std::to_string(*v));
    j["head_dim"] = *k;
  }
  if (auto r = md.real(p + "rope.freq_base")) j["rope_theta"] = *r;
  const std::int64_t heads = std::max<std::int64_t>(1, j["num_attention_heads"].get<std::int64_t>());
  const std::int64_t head_dim = j.contains("head_dim") ? j["head_dim"].get<std::int64_t>() : j["hidden_size"].get<std::int64_t>() / heads;
  // Partial rotary (Qwen3-Next, Qwen3.5): the first dimension_count lanes of a head rotate.
  if (auto d = md.integer(p + "rope.dimension_count")) {
    const double factor = static_cast<double>(*d) / static_cast<double>(std::max<std::int64_t>(1, head_dim));
    if (*d < 2 || *d > head_dim || *d % 2 != 0 || static_cast<std::int64_t>(static_cast<double>(head_dim) * factor) != *d)
      fail(errc::bad_model, what + ": " + p + "rope.dimension_count is " + std::to_string(*d) +
                                ", not an even number of rotated lanes in [2, head size " + std::to_string(head_dim) + "]");
    j["partial_rotary_factor"] = factor;
  }
  family->gguf_fields(md, j);  // after the shared keys: a family may read num_hidden_layers
  // A model whose every layer is a MoE (Qwen3.5-MoE) may have no dense feed-forward size.
  if (auto ff = md.integer(p + "feed_forward_length"))
    j["intermediate_size"] = *ff;
  else if (!j.contains("moe_intermediate_size"))
    (void)md.require_integer(p + "feed_forward_length");
  // llama.cpp's converter stores Llama 3's RoPE scaling as per-frequency divisors.
  if (const io::GgufTensor* f = find_tensor(file, "rope_freqs.weight")) {
    if (f->ne.size() != 1 || f->type != quant::GgmlType::f32)
      fail(errc::bad_model, what + ": tensor 'rope_freqs.weight' must be a 1-D f32 tensor");
    const std::vector<float> factors = f->view().to_f32();
    j["rope_parameters"] = {{"rope_type", "freq_factors"}, {"factors", factors}};
  }
  if (auto e = md.real(p + "attention.layer_norm_rms_epsilon")) j["rms_norm_eps"] = *e;
  if (auto c = md.integer(p + "context_length")) j["max_position_embeddings"] = *c;

  const io::GgufTensor* embd = find_tensor(file, "token_embd.weight");
  if (!embd || embd->ne.size() != 2) fail(errc::bad_model, what + ": tensor 'token_embd.weight' is missing or not 2-D");
  j["vocab_size"] = embd->ne[1];
  if (auto v = md.integer(p + "vocab_size"); v && *v != embd->ne[1])
    fail(errc::bad_model, what + ": " + p + "vocab_size " + std::to_string(*v) + " differs from token_embd's " +
                              std::to_string(embd->ne[1]) + " rows");
  j["tie_word_embeddings"] = find_tensor(file, "output.weight") == nullptr;
  if (auto b = md.integer("tokenizer.ggml.bos_token_id")) j["bos_token_id"] = *b;
  if (auto e = md.integer("tokenizer.ggml.eos_token_id")) j["eos_token_id"] = *e;

  json g;
  g["eos_token_id"] = stop_ids(md);
  for (const auto& [key, field] : {std::pair{"general.sampling.temp", "temperature"}, std::pair{"general.sampling.top_p", "top_p"},
                                   std::pair{"general.sampling.min_p", "min_p"},
                                   std::pair{"general.sampling.penalty_repeat", "repetition_penalty"}})
    if (auto r = md.real(key)) g[field] = *r;
  if (auto k = md.integer("general.sampling.top_k")) g["top_k"] = *k;

  ModelConfigs out;
  try {
    out.model = ModelConfig::parse(j.dump());
    out.generation = GenerationDefaults::parse(g.dump());
  } catch (const Error& e) {
    fail(e.kind(), what + " (GGUF metadata as config.json): " + e.what());
  }
  for (std::int32_t id : out.generation.eos_token_ids)
    if (std::find(out.model.eos_token_ids.begin(), out.model.eos_token_ids.end(), id) == out.model.eos_token_ids.end())
      out.model.eos_token_ids.push_back(id);
  return out;
}

}  // namespace neuron::model
