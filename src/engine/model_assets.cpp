#include "engine/model_assets.hpp"

#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include "io/gguf.hpp"
#include "model/gguf_config.hpp"
#include "tokenizer/gguf_vocab.hpp"
#include "tokenizer/utf8.hpp"
#include "util/error.hpp"

namespace neuron::engine {

namespace {

// A .gguf file carries everything: configs, tokenizer and chat template in its metadata.
ModelAssets load_gguf_assets(const std::filesystem::path& path) {
  const io::GgufFile file(path);
  ModelAssets assets;
  assets.dir = path;
  assets.configs = model::configs_from_gguf(file);
  assets.tokenizer = std::make_shared<const tokenizer::Tokenizer>(tokenizer::tokenizer_from_gguf(file.metadata()));
  if (auto source = file.metadata().string("tokenizer.chat_template")) {
    if (!tokenizer::is_valid_utf8(*source))
      fail(errc::template_error, path.string() + ": tokenizer.chat_template is not valid UTF-8");
    // The special tokens a template may print ({{ bos_token }}, {{ eos_token }}), by id.
    nlohmann::json special = nlohmann::json::object();
    for (const auto& [field, key] : {std::pair{"bos_token", "tokenizer.ggml.bos_token_id"},
                                     std::pair{"eos_token", "tokenizer.ggml.eos_token_id"},
                                     std::pair{"pad_token", "tokenizer.ggml.padding_token_id"}}) {
      const auto id = file.metadata().integer(key);
      if (id && *id >= 0 && *id <= std::numeric_limits<std::int32_t>::max() &&
          assets.tokenizer->is_known(static_cast<std::int32_t>(*id)))
        special[field] = assets.tokenizer->id_to_token(static_cast<std::int32_t>(*id));
    }
    try {
      assets.chat.emplace(chat::ChatFormatter::from_template(*source, special));
    } catch (const Error& e) {
      fail(errc::template_error, path.string() + ": tokenizer.chat_template: " + e.what());
    }
  }
  return assets;
}

}  // namespace

ModelAssets load_model_assets(const std::filesystem::path& dir) {
  if (io::is_gguf_path(dir) && !std::filesystem::is_directory(dir)) return load_gguf_assets(dir);
  ModelAssets assets;
  assets.dir = dir;
  assets.configs = model::load_model_configs(dir);

  const auto tokenizer_json = dir / "tokenizer.json";
  std::error_code ec;
  if (!std::filesystem::is_regular_file(tokenizer_json, ec)) {
    fail(errc::not_found, "model directory " + dir.string() + " has no tokenizer.json");
  }
  assets.tokenizer = std::make_shared<const tokenizer::Tokenizer>(tokenizer::Tokenizer::from_file(tokenizer_json));
  assets.grammars = std::make_shared<grammar::GrammarCache>(assets.tokenizer, assets.configs.model.vocab_size);

  const auto tokenizer_config = dir / "tokenizer_config.json";
  if (std::filesystem::is_regular_file(tokenizer_config, ec)) {
    auto formatter = chat::ChatFormatter::from_tokenizer_config(tokenizer_config);
    if (formatter.has_template()) assets.chat.emplace(std::move(formatter));
  }
  return assets;
}

}  // namespace neuron::engine
