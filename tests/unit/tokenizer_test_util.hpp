#pragma once
// Shared by the tokenizer tests: the bundled Qwen3 tokenizer, loaded once per
// test binary (11 MB of JSON; loading it per test would dominate the run).
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "tokenizer/tokenizer.hpp"
#include "util/error.hpp"

namespace neuron::tokenizer::testing {

inline const std::filesystem::path kQwenTokenizerJson =
    std::filesystem::path(NEURON_REPO_ROOT) / "models" / "qwen3-tiny-a" / "tokenizer.json";

inline const Tokenizer& qwen() {
  static const Tokenizer tok = Tokenizer::from_file(kQwenTokenizerJson);
  return tok;
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace neuron::tokenizer::testing
