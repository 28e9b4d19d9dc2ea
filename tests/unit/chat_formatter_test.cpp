// ChatFormatter: reading the chat format from tokenizer_config.json, and
// rendering other model families' templates. The family templates are the
// published Llama 3.1, Mistral and Gemma chat templates; expected strings were
// produced by jinja2 3.1 configured as transformers configures it.
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>

#include <nlohmann/json.hpp>

#include "chat/formatter.hpp"
#include "util/error.hpp"
#include "support/temp_dir.hpp"

namespace neuron::chat {
namespace {

const char* const llama3_template = R"T({{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
        {{- '{"name": "' + tool_call.name + '", ' }}
        {{- '"parameters": ' }}
        {{- tool_call.arguments | tojson }}
        {{- "}" }}
        {{- "<|eot_id|>" }}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)T";
const char* const mistral_template = R"T({%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content'] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}
        {{- raise_exception('After the optional system message, conversation roles must alternate user/assistant/user/assistant/...') }}
    {%- endif %}
    {%- if message['role'] == 'user' %}
        {%- if loop.first and system_message is defined %}
            {{- ' [INST] ' + system_message + '\n\n' + message['content'] + ' [/INST]' }}
        {%- else %}
            {{- ' [INST] ' + message['content'] + ' [/INST]' }}
        {%- endif %}
    {%- elif message['role'] == 'assistant' %}
        {{- ' ' + message['content'] + eos_token}}
    {%- else %}
        {{- raise_exception('Only user and assistant roles are supported, with the exception of an initial optional system message!') }}
    {%- endif %}
{%- endfor %}
)T";
const char* const gemma_template = R"T({{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %})T";
const char* const expected_llama3_plain = R"X(<s><|start_header_id|>system<|end_header_id|>

Cutting Knowledge Date: December 2023
Today Date: 26 Jul 2024

Sys prompt.<|eot_id|><|start_header_id|>user<|end_header_id|>

Hi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>

Hello!<|eot_id|><|start_header_id|>user<|end_header_id|>

Bye<|eot_id|><|start_header_id|>assistant<|end_header_id|>

)X";
const char* const expected_llama3_tools = R"X(<s><|start_header_id|>system<|end_header_id|>

Environment: ipython
Cutting Knowledge Date: December 2023
Today Date: 26 Jul 2024

<|eot_id|><|start_header_id|>user<|end_header_id|>

Given the following functions, please respond with a JSON for a function call with its proper arguments that best answers the given prompt.

Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.Do not use variables.

{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get weather",
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
}

Hi there<|eot_id|><|start_header_id|>assistant<|end_header_id|>

Hello!<|eot_id|><|start_header_id|>user<|end_header_id|>

Bye<|eot_id|><|start_header_id|>assistant<|end_header_id|>

{"name": "get_weather", "parameters": {"city": "Paris"}}<|eot_id|><|start_header_id|>ipython<|end_header_id|>

"18C"<|eot_id|><|start_header_id|>assistant<|end_header_id|>

)X";
const char* const expected_mistral = R"X(<s> [INST]   Sys prompt. 

Hi there [/INST] Hello!</s> [INST] Bye [/INST])X";
const char* const expected_gemma = R"X(<s><start_of_turn>user
Hi there<end_of_turn>
<start_of_turn>model
Hello!<end_of_turn>
<start_of_turn>user
Bye<end_of_turn>
<start_of_turn>model
)X";
const nlohmann::json conversation = nlohmann::json::parse(R"([
  {"role": "system", "content": "  Sys prompt. "}, {"role": "user", "content": "Hi there"},
  {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}])");

const nlohmann::json special_tokens = {{"bos_token", "<s>"}, {"eos_token", "</s>"}};

// A scratch model directory, removed with the test.
using test_support::TempDir;

template <class Fn>
std::string error_kind(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.kind();
  }
  return "no error";
}

TEST(ChatFormatter, Llama3RendersLikeTransformers) {
  const auto f = ChatFormatter::from_template(llama3_template, special_tokens);
  EXPECT_EQ(f.apply(conversation, nullptr, true, nullptr), expected_llama3_plain);
}

TEST(ChatFormatter, Llama3ToolCallsRenderLikeTransformers) {
  const auto f = ChatFormatter::from_template(llama3_template, special_tokens);
  auto messages = nlohmann::json::array({conversation[1], conversation[2], conversation[3]});
  messages.push_back(nlohmann::json::parse(
      R"({"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]})"));
  messages.push_back({{"role", "tool"}, {"content", "18C"}});
  // In the order an OpenAI client writes a tool, not sorted: transformers'
  // tojson (json.dumps without sort_keys) keeps the order it was given.
  const auto tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
      "description": "Get weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])");
  EXPECT_EQ(f.apply(messages, tools, true, nullptr), expected_llama3_tools);
}

TEST(ChatFormatter, MistralAndGemmaRenderLikeTransformers) {
  EXPECT_EQ(ChatFormatter::from_template(mistral_template, special_tokens).apply(conversation, nullptr, false, nullptr),
            expected_mistral);
  const auto rest = nlohmann::json::array({conversation[1], conversation[2], conversation[3]});
  EXPECT_EQ(ChatFormatter::from_template(gemma_template, special_tokens).apply(rest, nullptr, true, nullptr),
            expected_gemma);
}

TEST(ChatFormatter, TemplateRaiseExceptionIsATemplateError) {
  // Gemma's template refuses a system message.
  const auto f = ChatFormatter::from_template(gemma_template, special_tokens);
  try {
    f.apply(conversation, nullptr, true, nullptr);
    FAIL() << "expected raise_exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::template_error);
    EXPECT_NE(std::string(e.what()).find("System role not supported"), std::string::npos) << e.what();
  }
}

TEST(ChatFormatter, ReadsNamedTemplateListAndAddedTokenObjects) {
  TempDir dir;
  const auto config = dir.write("tokenizer_config.json", R"({
    "bos_token": {"content": "<s>", "lstrip": false, "__type": "AddedToken"},
    "eos_token": "</s>",
    "chat_template": [{"name": "tool_use", "template": "TOOLS"},
                      {"name": "default", "template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}{{ eos_token }}{{ flag }}"}]})");
  const auto f = ChatFormatter::from_tokenizer_config(config);
  ASSERT_TRUE(f.has_template());
  EXPECT_EQ(f.apply(nlohmann::json::parse(R"([{"role": "user", "content": "hi"}])"), nullptr, false, {{"flag", "!"}}),
            "<s>[user:hi]</s>!");
}

TEST(ChatFormatter, FallsBackToChatTemplateJinjaFile) {
  TempDir dir;
  const auto config = dir.write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  dir.write("chat_template.jinja", "{% for m in messages %}{{ m.content }}{% endfor %}{{ eos_token }}\n");
  const auto f = ChatFormatter::from_tokenizer_config(config);
  ASSERT_TRUE(f.has_template());
  EXPECT_EQ(f.apply(nlohmann::json::parse(R"([{"role": "user", "content": "x"}])"), nullptr, false, nullptr), "x</s>");
}

TEST(ChatFormatter, ModelWithoutTemplate) {
  TempDir dir;
  const auto f = ChatFormatter::from_tokenizer_config(dir.write("tokenizer_config.json", R"({"eos_token": "</s>"})"));
  EXPECT_FALSE(f.has_template());
  EXPECT_EQ(error_kind([&] { f.apply(nlohmann::json::array(), nullptr, true, nullptr); }), errc::not_found);
}

TEST(ChatFormatter, MalformedConfigsAreClearErrors) {
  TempDir dir;
  EXPECT_EQ(error_kind([&] { ChatFormatter::from_tokenizer_config(dir.write("a.json", "{not json")); }), errc::bad_model);
  EXPECT_EQ(error_kind([&] { ChatFormatter::from_tokenizer_config(dir.write("b.json", R"({"chat_template": 5})")); }),
            errc::bad_model);
  EXPECT_EQ(error_kind([&] {
              ChatFormatter::from_tokenizer_config(dir.write("c.json", R"({"chat_template": [{"name": "x", "template": "y"}]})"));
            }),
            errc::bad_model);
  EXPECT_EQ(error_kind([&] { ChatFormatter::from_tokenizer_config(dir.write("d.json", R"({"eos_token": 7})")); }),
            errc::bad_model);
  EXPECT_EQ(error_kind([&] { ChatFormatter::from_tokenizer_config(dir.write("e.json", "[1]")); }), errc::bad_model);
  EXPECT_EQ(error_kind([&] { ChatFormatter::from_tokenizer_config("/nonexistent/tokenizer_config.json"); }),
            errc::not_found);
  try {
    ChatFormatter::from_tokenizer_config(dir.write("f.json", R"({"chat_template": "ok\n{% if x %}never closed"})"));
    FAIL() << "expected a template error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::template_error);
    EXPECT_NE(std::string(e.what()).find("line 2"), std::string::npos) << e.what();
  }
}

TEST(ChatFormatter, RejectsMalformedInputs) {
  const auto f = ChatFormatter::from_template("{% for m in messages %}{{ m.content }}{% endfor %}");
  EXPECT_EQ(error_kind([&] { f.apply(nlohmann::json::object(), nullptr, false, nullptr); }), errc::invalid_argument);
  EXPECT_EQ(error_kind([&] { f.apply(nlohmann::json::parse(R"([{"content": "no role"}])"), nullptr, false, nullptr); }),
            errc::invalid_argument);
  EXPECT_EQ(error_kind([&] {
              f.apply(nlohmann::json::parse(R"([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])"),
                      nullptr, false, nullptr);
            }),
            errc::invalid_argument);
  EXPECT_EQ(error_kind([&] { f.apply(nlohmann::json::array(), nlohmann::json::object(), false, nullptr); }),
            errc::invalid_argument);
  EXPECT_EQ(error_kind([&] { f.apply(nlohmann::json::array(), nullptr, false, {{"messages", 1}}); }),
            errc::invalid_argument);
}

TEST(ChatFormatter, FilesThatAreNotRegularFilesAreABadModel) {
  // An endless device or a directory where a config or template should be must not hang the load.
  test_support::TempDir dir;
  std::filesystem::create_symlink("/dev/zero", dir / "tokenizer_config.json");
  EXPECT_EQ(error_kind([&] { ChatFormatter::from_tokenizer_config(dir / "tokenizer_config.json"); }), errc::bad_model);
  test_support::TempDir side;
  side.write("tokenizer_config.json", "{}");
  std::filesystem::create_directory(side / "chat_template.jinja");
  EXPECT_EQ(error_kind([&] { ChatFormatter::from_tokenizer_config(side / "tokenizer_config.json"); }), errc::bad_model);
}

TEST(ChatFormatter, TemplatesThatIterateContentPartsGetTheParts) {
  const auto f = ChatFormatter::from_template(
      "{% for m in messages %}{% if m.content is string %}{{ m.content }}{% else %}"
      "{% for part in m.content %}<{{ part.type }}:{{ part.text }}>{% endfor %}{% endif %}{% endfor %}");
  const auto messages = nlohmann::json::parse(
      R"([{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}])");
  EXPECT_EQ(f.apply(messages, nullptr, false, nullptr), "<text:a><text:b>");
}

TEST(ChatFormatter, DefaultVariablesMatchTransformers) {
  // transformers passes tools=None and documents=None, and add_generation_prompt.
  const auto f = ChatFormatter::from_template(
      "{{ tools is none }} {{ documents is none }} {{ add_generation_prompt }} {{ bos_token is defined }} {{ eos_token }}",
      {{"eos_token", "</s>"}});
  EXPECT_EQ(f.apply(nlohmann::json::array(), nullptr, true, nullptr), "True True True False </s>");
}

}  // namespace
}  // namespace neuron::chat
