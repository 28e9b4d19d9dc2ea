#pragma once
// Shared by the tokenizer tests: the bundled Qwen3 tokenizer, loaded once per
// test binary (11 MB of JSON; loading it per test would dominate the run).
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.hpp"
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

// A small but complete byte-level BPE tokenizer.json: 256 byte tokens, three
// merges (h e, l l, he ll; one in the "a b" string form) and one special token.
inline nlohmann::json tiny_tokenizer_json() {
  using nlohmann::json;
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level_char(static_cast<unsigned char>(b))] = b;
  vocab["he"] = 256;
  vocab["ll"] = 257;
  vocab["hell"] = 258;
  return {
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array({json::array({"h", "e"}), "l l", json::array({"he", "ll"})})}}},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"added_tokens", json::array({{{"id", 259}, {"content", "<|end|>"}, {"special", true}, {"normalized", false}}})},
  };
}

}  // namespace neuron::tokenizer::testing
