#pragma once
// Everything about a loaded model that is not its weights: the tokenizer, the
// chat format and the configs. HTTP threads use these (encode a prompt,
// render messages, read sampling defaults) without ever going through the
// engine thread, so they are immutable once loaded and shared by pointer.
#include <filesystem>
#include <memory>
#include <optional>

#include "chat/formatter.hpp"
#include "engine/model_task.hpp"
#include "grammar/cache.hpp"
#include "model/config.hpp"
#include "tokenizer/tokenizer.hpp"

namespace neuron::engine {

struct ModelAssets {
  std::shared_ptr<const tokenizer::Tokenizer> tokenizer;  // from tokenizer.json
  std::optional<chat::ChatFormatter> chat;  // tokenizer_config.json's chat_template; absent when the model has none
  model::ModelConfigs configs;              // config.json + generation_config.json (sampling defaults, EOS ids)
  std::filesystem::path dir;                // the resolved model directory (or .gguf file)
  std::shared_ptr<grammar::GrammarCache> grammars;  // constrained decoding: compiled constraints for this vocabulary
  TaskSetup task;  // what it serves (generate, embed with its pooling, rerank); set by the registry at load
};

// Reads a model directory's tokenizer.json (required), tokenizer_config.json
// (optional; a template that does not parse fails the load with
// Error{template_error}) and configs; or a .gguf file's metadata
// (tokenizer.ggml.*, tokenizer.chat_template, qwen3.*). Throws
// Error{not_found|bad_model|...} naming the file.
ModelAssets load_model_assets(const std::filesystem::path& dir);

}  // namespace neuron::engine
