#pragma once
// A small Qwen3 shape whose every projection splits into whole Q4_K blocks
// (256 columns) at TP=1 and TP=2: hidden 256, ff 1024 (512 a rank), o_proj
// 4 heads of 64 a rank. The quantize-at-load tests write a random checkpoint
// of it (model::write_random_checkpoint).
#include "model/config.hpp"

namespace neuron::test_support {

inline model::ModelConfig quant_test_config() {
  model::ModelConfig c;
  c.vocab_size = 384;
  c.hidden_size = 256;
  c.intermediate_size = 1024;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 8;
  c.num_key_value_heads = 2;
  c.head_dim = 64;
  c.rope.theta = 10000;
  c.rms_norm_eps = 1e-6;
  c.max_position_embeddings = 1024;
  c.eos_token_ids = {1};
  return c;
}

}  // namespace neuron::test_support
