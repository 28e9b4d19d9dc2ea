// libFuzzer target: arbitrary bytes as a chat template, parsed and rendered
// against a fixed chat context. Chat templates ship inside model files, so any
// input must end in output or neuron::Error, never a crash, hang or leak.
#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "chat/template.hpp"
#include "util/error.hpp"
#include "util/json_parse.hpp"

namespace {

const nlohmann::ordered_json& context() {
  static const nlohmann::ordered_json ctx = neuron::parse_json<nlohmann::ordered_json>(R"({
    "messages": [
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "Hi <tool_response>x</tool_response> é 😀"},
      {"role": "assistant", "content": "<think>\nhm\n</think>\n\nok", "reasoning_content": null,
       "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"a": [1, 2.5, true, null]}}}]},
      {"role": "tool", "content": [{"type": "text", "text": "42"}]}
    ],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true, "enable_thinking": false, "bos_token": "<s>", "eos_token": "</s>",
    "n": 3, "f": -0.5, "s": "a,b,,c", "nothing": null
  })", "fuzz_jinja context");
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // Small limits keep each run fast; the code paths are the same.
  neuron::chat::Limits limits;
  limits.max_output_bytes = 1 << 20;
  limits.max_list_items = 10'000;
  limits.max_steps = 50'000;
  limits.max_call_depth = 32;
  try {
    const auto t = neuron::chat::ChatTemplate::parse(std::string(reinterpret_cast<const char*>(data), size));
    const std::string out = t.render(context(), limits);
    if (out.size() > limits.max_output_bytes) __builtin_trap();
  } catch (const neuron::Error&) {
  }
  return 0;
}
