#pragma once
// A GGUF file's metadata as the configs a directory's config.json and
// generation_config.json give (model/config.hpp), so a .gguf alone describes
// a model. The qwen3.* keys are turned into the config.json fields they stand
// for and parsed by ModelConfig::parse, so both formats meet one validation:
//   general.architecture "qwen3"          model_type "qwen3" (the families' own: Family::gguf_architecture;
//                                         others: unsupported_arch)
//   qwen3.embedding_length                hidden_size
//   qwen3.feed_forward_length             intermediate_size (may be absent when the family names a MoE size)
//   qwen3.block_count                     num_hidden_layers, less qwen3.nextn_predict_layers
//                                         (llama.cpp's MTP blocks after the layers, skipped)
//   qwen3.attention.head_count[_kv]       num_attention_heads, num_key_value_heads
//   qwen3.attention.key_length            head_dim (value_length must agree)
//   qwen3.rope.freq_base                  rope_theta
//   qwen3.rope.dimension_count            partial_rotary_factor (as dimension_count / head_dim)
//   qwen3.attention.layer_norm_rms_epsilon rms_norm_eps
//   qwen3.context_length                  max_position_embeddings
//   token_embd's rows                     vocab_size (qwen3.vocab_size must agree)
//   no output.weight tensor               tie_word_embeddings
//   tokenizer.ggml.bos/eos_token_id       bos_token_id, eos_token_id
// The family's own keys (experts, the hybrids' ssm.*) come from
// Family::gguf_fields. Rope scaling and sliding windows are refused as for config.json. The stop
// ids are llama.cpp's end-of-generation set (llama-vocab.cpp): eos, eot, eom,
// and the control tokens spelled <|im_end|> or <|endoftext|> (which for
// Qwen3 is generation_config.json's [151645, 151643]); sampling defaults from
// general.sampling.{temp, top_k, top_p, min_p, penalty_repeat}.
#include "io/gguf.hpp"
#include "model/config.hpp"

namespace neuron::model {

// Throws Error{bad_model} for missing or mistyped keys, Error{unsupported_arch}
// for other architectures and features neuron does not implement.
ModelConfigs configs_from_gguf(const io::GgufFile& file);

}  // namespace neuron::model
