// Qwen3.5's chat template (tests/data/qwen3_5/Qwen3.5-4B.jinja, llama.cpp's
// copy of Qwen's) rendered as transformers' apply_chat_template renders it.
// The expected strings follow the template's own logic: every tag trims
// whitespace ({%- ... %}), so the output is exactly the strings it prints;
// message contents are trimmed; tools are printed with tojson (json.dumps:
// ", " and ": ", keys in the order given); a past call's argument is printed
// with tojson when it is a mapping or a list, else with Python's str() (True,
// not true); an assistant turn after the last user query shows its reasoning
// in <think>, one before it does not; consecutive tool results share one
// user turn.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/formatter.hpp"
#include "chat/tool_call_format.hpp"
#include "tokenizer_test_util.hpp"
#include "util/error.hpp"

namespace neuron::chat {
namespace {

using nlohmann::ordered_json;

const std::filesystem::path kQwen35Data = std::filesystem::path(NEURON_TEST_DATA) / "qwen3_5";

ChatFormatter qwen35() { return ChatFormatter::from_template(tokenizer::testing::read_file(kQwen35Data / "Qwen3.5-4B.jinja")); }

const ordered_json kQwen35Tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "description": "Get the weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"},
    "days": {"type": "integer"}}, "required": ["city"]}}}])");

// The system turn the template writes for kQwen35Tools (before any system message's text).
const std::string kToolsPreamble =
    "<|im_start|>system\n# Tools\n\nYou have access to the following functions:\n\n<tools>\n"
    R"({"type": "function", "function": {"name": "get_weather", "description": "Get the weather", "parameters": )"
    R"({"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}, "required": ["city"]}}})"
    "\n</tools>"
    "\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n"
    "<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
    "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified "
    "format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n"
    "- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in natural "
    "language BEFORE the function call, but NOT after\n- If there is no function call available, answer the question "
    "like normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT>";

const std::string kThinkingOn = "<|im_start|>assistant\n<think>\n";
const std::string kThinkingOff = "<|im_start|>assistant\n<think>\n\n</think>\n\n";

std::string turn(const std::string& role, const std::string& text) { return "<|im_start|>" + role + "\n" + text + "<|im_end|>\n"; }

ordered_json thinking(bool on) { return ordered_json{{"enable_thinking", on}}; }

TEST(Qwen35ChatTemplate, PlainChatOpensThinkingByDefault) {
  const auto messages = ordered_json::parse(R"([{"role": "user", "content": "  Hello  "}])");
  EXPECT_EQ(qwen35().apply(messages, nullptr, true, nullptr), turn("user", "Hello") + kThinkingOn);
  EXPECT_EQ(qwen35().apply(messages, nullptr, true, thinking(true)), turn("user", "Hello") + kThinkingOn);
  EXPECT_EQ(qwen35().apply(messages, nullptr, true, thinking(false)), turn("user", "Hello") + kThinkingOff);
  EXPECT_EQ(qwen35().apply(messages, nullptr, false, nullptr), turn("user", "Hello"));
}

TEST(Qwen35ChatTemplate, SystemMessageWithoutTools) {
  const auto messages = ordered_json::parse(R"([{"role": "system", "content": "Be brief.\n"},
                                                {"role": "user", "content": "Hi"}])");
  EXPECT_EQ(qwen35().apply(messages, nullptr, true, thinking(false)), turn("system", "Be brief.") + turn("user", "Hi") + kThinkingOff);
  // Text parts: the template walks them itself.
  const auto parts = ordered_json::parse(R"([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])");
  EXPECT_EQ(qwen35().apply(parts, nullptr, true, nullptr), turn("user", "ab") + kThinkingOn);
}

TEST(Qwen35ChatTemplate, ToolsGoInTheSystemTurnBeforeTheSystemMessage) {
  const auto messages = ordered_json::parse(R"([{"role": "system", "content": "Be brief."},
                                                {"role": "user", "content": "Weather in Paris?"}])");
  EXPECT_EQ(qwen35().apply(messages, kQwen35Tools, true, nullptr),
            kToolsPreamble + "\n\nBe brief.<|im_end|>\n" + turn("user", "Weather in Paris?") + kThinkingOn);
  const auto no_system = ordered_json::parse(R"([{"role": "user", "content": "Weather in Paris?"}])");
  EXPECT_EQ(qwen35().apply(no_system, kQwen35Tools, true, nullptr), kToolsPreamble + "<|im_end|>\n" + turn("user", "Weather in Paris?") + kThinkingOn);
}

// A whole agentic conversation, as an OpenAI client sends it (content null
// beside tool_calls, arguments as JSON text, results as role "tool"): the
// first assistant turn precedes the last user query (no <think> block), the
// calling turn follows it (its reasoning_content in <think>), and two
// results in a row share one user turn.
TEST(Qwen35ChatTemplate, MultiTurnToolConversationRendersExactly) {
  const auto messages = ordered_json::parse(R"([
    {"role": "system", "content": "You are helpful."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello! How can I help?", "reasoning_content": "Greet back."},
    {"role": "user", "content": "Weather in Paris and Rome?"},
    {"role": "assistant", "content": null, "reasoning_content": "\nI need both cities.\n",
     "tool_calls": [
      {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\", \"days\": 2}"}},
      {"id": "call_2", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\", \"days\": 2}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"},
    {"role": "tool", "tool_call_id": "call_2", "content": "21C, rain"}
  ])");
  const std::string expected =
      kToolsPreamble + "\n\nYou are helpful.<|im_end|>\n" +  //
      turn("user", "Hi") +                                   //
      turn("assistant", "Hello! How can I help?") +          // before the last user query: no reasoning
      turn("user", "Weather in Paris and Rome?") +
      "<|im_start|>assistant\n<think>\nI need both cities.\n</think>\n\n"
      "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n</parameter>\n"
      "</function>\n</tool_call>"
      "\n<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n<parameter=days>\n2\n</parameter>\n"
      "</function>\n</tool_call><|im_end|>\n"
      "<|im_start|>user\n<tool_response>\n18C, sunny\n</tool_response>\n<tool_response>\n21C, rain\n</tool_response><|im_end|>\n";
  EXPECT_EQ(qwen35().apply(messages, kQwen35Tools, true, nullptr), expected + kThinkingOn);
  EXPECT_EQ(qwen35().apply(messages, kQwen35Tools, true, thinking(false)), expected + kThinkingOff);
  EXPECT_EQ(qwen35().apply(messages, kQwen35Tools, false, nullptr), expected);
}

// A call after text: "\n\n" before it; a mapping or list argument goes
// through tojson, a boolean through str() (True); the tool result ends the
// conversation's user turn with <|im_end|>.
TEST(Qwen35ChatTemplate, CallAfterTextAndArgumentKinds) {
  const auto messages = ordered_json::parse(R"([
    {"role": "user", "content": "Find rain."},
    {"role": "assistant", "content": "Searching.", "tool_calls": [{"type": "function", "function": {"name": "search",
      "arguments": {"query": "rain", "filters": {"days": [1, 2]}, "exact": true, "tags": ["a", "b"]}}}]},
    {"role": "tool", "content": "none"},
    {"role": "assistant", "content": "No rain."}
  ])");
  const std::string expected =
      turn("user", "Find rain.") +
      "<|im_start|>assistant\n<think>\n\n</think>\n\nSearching.\n\n<tool_call>\n<function=search>\n"
      "<parameter=query>\nrain\n</parameter>\n"
      "<parameter=filters>\n{\"days\": [1, 2]}\n</parameter>\n"
      "<parameter=exact>\nTrue\n</parameter>\n"
      "<parameter=tags>\n[\"a\", \"b\"]\n</parameter>\n"
      "</function>\n</tool_call><|im_end|>\n"
      "<|im_start|>user\n<tool_response>\nnone\n</tool_response><|im_end|>\n"
      "<|im_start|>assistant\n<think>\n\n</think>\n\nNo rain.<|im_end|>\n";
  EXPECT_EQ(qwen35().apply(messages, nullptr, false, nullptr), expected);
}

// Without reasoning_content, reasoning written inline in the content is split
// out of it (the text between <think> and </think>, its newlines trimmed).
TEST(Qwen35ChatTemplate, InlineThinkIsMovedIntoTheThinkBlock) {
  const auto messages = ordered_json::parse(R"([
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": "<think>\n\nadd them\n\n</think>\n\n4"}
  ])");
  EXPECT_EQ(qwen35().apply(messages, nullptr, false, nullptr),
            turn("user", "2+2?") + "<|im_start|>assistant\n<think>\nadd them\n</think>\n\n4<|im_end|>\n");
}

TEST(Qwen35ChatTemplate, TemplateErrorsAreTemplateErrors) {
  const auto expect_error = [](const ordered_json& messages, const std::string& what) {
    try {
      qwen35().apply(messages, nullptr, true, nullptr);
      ADD_FAILURE() << "rendered: " << messages.dump();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), errc::template_error);
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error(ordered_json::array(), "No messages provided.");
  expect_error(ordered_json::parse(R"([{"role": "system", "content": "s"}])"), "No user query found in messages.");
  expect_error(ordered_json::parse(R"([{"role": "user", "content": "a"}, {"role": "system", "content": "s"}])"),
               "System message must be at the beginning.");
}

TEST(ToolCallFormat, QwenCoderSyntaxIsDetectedFromQwen35AndQwen3Coder) {
  EXPECT_EQ(qwen35().tool_call_format(), ToolCallFormat::qwen3_coder);
  EXPECT_EQ(ChatFormatter::from_template(tokenizer::testing::read_file(kQwen35Data / "Qwen3-Coder.jinja")).tool_call_format(),
            ToolCallFormat::qwen3_coder);
  // Qwen3's own template stays hermes (tests/unit/chat_llama3_test.cpp checks it and Llama's).
  const auto qwen3 = ChatFormatter::from_tokenizer_config(std::filesystem::path(NEURON_REPO_ROOT) / "models" /
                                                          "qwen3-tiny-a" / "tokenizer_config.json");
  EXPECT_EQ(qwen3.tool_call_format(), ToolCallFormat::hermes);
  EXPECT_EQ(detect_tool_call_format("<tool_call>{{ '<function=' + n + '>' }}"), ToolCallFormat::hermes);  // no <parameter=
  EXPECT_EQ(to_string(ToolCallFormat::qwen3_coder), "qwen3_coder");
}

TEST(ToolCallFormat, QwenCoderValueIsJsonUnlessStringTyped) {
  EXPECT_TRUE(qwen3_coder_value_is_json(ordered_json::parse(R"({"type": "integer"})")));
  EXPECT_TRUE(qwen3_coder_value_is_json(ordered_json::parse(R"({"type": ["number", "null"]})")));
  EXPECT_TRUE(qwen3_coder_value_is_json(ordered_json::parse(R"({"type": "object", "properties": {}})")));
  EXPECT_FALSE(qwen3_coder_value_is_json(ordered_json::parse(R"({"type": "string"})")));
  EXPECT_FALSE(qwen3_coder_value_is_json(ordered_json::parse(R"({"type": ["string", "null"]})")));
  EXPECT_FALSE(qwen3_coder_value_is_json(ordered_json::parse(R"({"enum": [1, 2]})")));  // no type: text
  EXPECT_FALSE(qwen3_coder_value_is_json(nullptr));
}

}  // namespace
}  // namespace neuron::chat
