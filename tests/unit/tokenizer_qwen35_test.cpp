// Qwen3.5's vocabulary as llama.cpp's converter writes it (tokenizer.ggml.pre
// "qwen35": Qwen2's pre-tokenizer with combining marks in words, 248k
// tokens) against llama.cpp's test vectors for it: its
// models/ggml-vocab-qwen35.gguf and .inp/.out (test-tokenizer-0 checks them
// against Hugging Face `tokenizers`), copied unchanged into tests/data/qwen3_5
// from llama.cpp as node-llama-cpp 3.22.1 ships it.
#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "io/gguf.hpp"
#include "tokenizer/gguf_vocab.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer_test_util.hpp"

namespace neuron::tokenizer {
namespace {

const std::filesystem::path kQwen35Data = std::filesystem::path(NEURON_TEST_DATA) / "qwen3_5";

TEST(Qwen35GgufVocab, LlamaCppVectors) {
  const io::GgufFile file(kQwen35Data / "ggml-vocab-qwen35.gguf");
  ASSERT_EQ(file.metadata().string("tokenizer.ggml.pre"), "qwen35");
  const Tokenizer t = tokenizer_from_gguf(file.metadata());
  // llama.cpp's format: inputs separated by "\n__ggml_vocab_test__\n"; one output line per input.
  const std::string inp = testing::read_file(kQwen35Data / "ggml-vocab-qwen35.gguf.inp");
  const std::string out = testing::read_file(kQwen35Data / "ggml-vocab-qwen35.gguf.out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::istringstream lines(out);
  int checked = 0;
  for (std::size_t at = 0;;) {
    const std::size_t next = inp.find(sep, at);
    if (next == std::string::npos) break;
    const std::string text = inp.substr(at, next - at);
    at = next + sep.size();
    std::string line;
    ASSERT_TRUE(std::getline(lines, line)) << "no output line for '" << text << "'";
    std::istringstream ids_text(line);
    std::vector<std::int32_t> want;
    for (std::int32_t id; ids_text >> id;) want.push_back(id);
    EXPECT_EQ(t.encode(text), want) << "text: '" << text << "'";
    ++checked;
  }
  EXPECT_GE(checked, 40);
}

}  // namespace
}  // namespace neuron::tokenizer
