#pragma once
// Where the tests' models are: the repository's models/ (the bundled
// qwen3-tiny-a) and the family fixtures under tests/data/families/.
#include <filesystem>
#include <string>

namespace neuron::test_support {

inline std::string repo_path(const std::string& rel) { return std::string(NEURON_REPO_ROOT) + "/" + rel; }
inline std::string models_dir() { return repo_path("models"); }
inline std::string tiny_model_dir() { return models_dir() + "/qwen3-tiny-a"; }
inline const std::filesystem::path kTinyModel = tiny_model_dir();
// A family fixture (tests/data/families/<name>: config, weights, golden.json).
inline std::filesystem::path family_dir(const std::string& name) {
  return std::filesystem::path(NEURON_TEST_DATA) / "families" / name;
}

}  // namespace neuron::test_support
