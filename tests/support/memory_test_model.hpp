#pragma once
// A random Qwen3 checkpoint of ~90 MB of bf16 weights with the bundled
// tokenizer: big enough that loading and unloading it shows in a process's
// RSS above allocator and thread noise, small enough to write in a second.
#include <filesystem>

#include "model/config.hpp"
#include "model/random_checkpoint.hpp"

namespace neuron::test_support {

inline void write_memory_test_model(const std::filesystem::path& dir, const std::filesystem::path& tiny_model) {
  model::ModelConfig cfg = model::load_model_configs(tiny_model).model;
  cfg.hidden_size = 512;
  cfg.intermediate_size = 1536;
  cfg.num_hidden_layers = 4;
  cfg.num_attention_heads = 8;
  cfg.num_key_value_heads = 4;
  cfg.head_dim = 64;
  cfg.vocab_size = 32000;
  cfg.tie_word_embeddings = false;
  model::write_random_checkpoint(dir, cfg);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) std::filesystem::copy_file(tiny_model / f, dir / f);
}

}  // namespace neuron::test_support
