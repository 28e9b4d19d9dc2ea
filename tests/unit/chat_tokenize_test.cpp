// Rendering the Qwen3 chat template and tokenizing the text must give the
// exact ids transformers' apply_chat_template(tokenize=True) produced.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "chat/formatter.hpp"
#include "tokenizer/tokenizer.hpp"

namespace neuron::chat {
namespace {

TEST(ChatTokenize, Qwen3GoldenCasesTokenizeToRecordedIds) {
  const auto model = std::filesystem::path(NEURON_REPO_ROOT) / "models" / "qwen3-tiny-a";
  const auto formatter = ChatFormatter::from_tokenizer_config(model / "tokenizer_config.json");
  const auto tokenizer = tokenizer::Tokenizer::from_file(model / "tokenizer.json");
  std::ifstream in(std::filesystem::path(NEURON_TEST_DATA) / "chat-template-golden.json");
  const auto golden = nlohmann::json::parse(in);
  ASSERT_EQ(golden["cases"].size(), 8u);
  for (std::size_t i = 0; i < golden["cases"].size(); ++i) {
    const auto& c = golden["cases"][i];
    nlohmann::json extra = nlohmann::json::object();
    if (!c["enable_thinking"].is_null()) extra["enable_thinking"] = c["enable_thinking"];
    const std::string text = formatter.apply(c["messages"], nullptr, c["add_generation_prompt"].get<bool>(), extra);
    const auto ids = tokenizer.encode(text);
    EXPECT_EQ(std::vector<std::int32_t>(ids.begin(), ids.end()), c["ids"].get<std::vector<std::int32_t>>()) << "case " << i;
  }
}

}  // namespace
}  // namespace neuron::chat
