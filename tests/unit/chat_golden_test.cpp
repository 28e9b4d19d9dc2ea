// The bundled Qwen3 model's chat template must render exactly what
// transformers' apply_chat_template produced (tests/data/chat-template-golden.json).
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "chat/formatter.hpp"

namespace neuron::chat {
namespace {

const std::filesystem::path model_dir = std::filesystem::path(NEURON_REPO_ROOT) / "models" / "qwen3-tiny-a";

nlohmann::json load_golden() {
  std::ifstream in(std::filesystem::path(NEURON_TEST_DATA) / "chat-template-golden.json");
  return nlohmann::json::parse(in);
}

TEST(ChatGolden, Qwen3RendersEveryCaseExactly) {
  const auto formatter = ChatFormatter::from_tokenizer_config(model_dir / "tokenizer_config.json");
  ASSERT_TRUE(formatter.has_template());
  const auto golden = load_golden();
  ASSERT_EQ(golden["cases"].size(), 8u);
  for (std::size_t i = 0; i < golden["cases"].size(); ++i) {
    const auto& c = golden["cases"][i];
    nlohmann::json extra = nlohmann::json::object();
    if (!c["enable_thinking"].is_null()) extra["enable_thinking"] = c["enable_thinking"];
    const std::string rendered = formatter.apply(c["messages"], nullptr, c["add_generation_prompt"].get<bool>(), extra);
    EXPECT_EQ(rendered, c["rendered"].get<std::string>()) << "case " << i;
  }
}

TEST(ChatGolden, Qwen3ToolsAndToolCalls) {
  // The assistant turn has content null, as OpenAI clients send it. Expected text follows the template's own logic with transformers' tojson
  // (json.dumps separators ", " and ": "); dict keys come out sorted because
  // nlohmann::json sorts them.
  const auto formatter = ChatFormatter::from_tokenizer_config(model_dir / "tokenizer_config.json");
  const auto tools = nlohmann::json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
  const auto messages = nlohmann::json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": null, "tool_calls": [
      {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
    {"role": "tool", "content": "18C, sunny"}
  ])");
  const std::string rendered = formatter.apply(messages, tools, true, nullptr);
  const std::string expected =
      "<|im_start|>system\nBe brief.\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
      R"({"function": {"name": "get_weather", "parameters": {"properties": {"city": {"type": "string"}}, "type": "object"}}, "type": "function"})"
      "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
      "<tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n"
      "</tool_call><|im_end|>\n"
      "<|im_start|>user\nWeather in Paris?<|im_end|>\n"
      "<|im_start|>assistant\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\n<tool_response>\n18C, sunny\n</tool_response><|im_end|>\n"
      "<|im_start|>assistant\n";
  EXPECT_EQ(rendered, expected);
}

TEST(ChatGolden, TextPartsAreJoinedForStringTemplates) {
  const auto formatter = ChatFormatter::from_tokenizer_config(model_dir / "tokenizer_config.json");
  const auto messages = nlohmann::json::parse(
      R"([{"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]}])");
  EXPECT_EQ(formatter.apply(messages, nullptr, false, nullptr), "<|im_start|>user\nHello\nthere<|im_end|>\n");
}

}  // namespace
}  // namespace neuron::chat
