#include "engine/model_assets.hpp"

#include "util/error.hpp"

namespace neuron::engine {

ModelAssets load_model_assets(const std::filesystem::path& dir) {
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
