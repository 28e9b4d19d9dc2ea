#pragma once
// JSON constraints compiled to grammars (grammar/grammar.hpp): a JSON Schema,
// any JSON object (response_format json_object), and a Qwen3 tool call whose
// arguments follow the tool's parameters schema.
//
// The JSON Schema subset (what OpenAI-style clients send: zod, pydantic,
// LangChain): type (one or an array: nullable), object with properties (in
// declared order; every required one present, optional ones may be skipped),
// required, additionalProperties (absent or false: none, as OpenAI's strict
// mode; true: any extra keys with any values; a schema: extra values follow
// it; extra keys are ASCII without escapes and never a declared name), array
// with items, minItems, maxItems; string with minLength, maxLength (in code
// points; an escape or a UTF-8 character counts one), enum, const, integer
// and number (minimum 0 / exclusiveMinimum 0 on integers; a length-bounded
// string holds no characters past U+FFFF, which JavaScript counts twice), boolean, null,
// anyOf and oneOf (both as anyOf), allOf of one schema, $ref to "#" or a
// local JSON pointer ($defs, definitions; recursion included), OpenAPI's
// nullable: true. Annotations (title, description, default, examples,
// $schema, ...) and `format` are ignored. Anything else that constrains
// values (pattern, maximum, not, if/then/else, uniqueItems, ...) is refused
// with Error{invalid_argument} naming the keyword and where it is
// ("'pattern' at properties.name is not supported").
//
// Output shape: no whitespace is required; after '{', '[', ',' and ':' and
// before '}' and ']' at most one space, or one newline and up to 16 spaces,
// may appear, so a model cannot loop on whitespace. Numbers have at most 18
// integer digits, 18 fraction digits and a 3-digit exponent, strings are
// valid UTF-8 with no escaped surrogates (\ud800-\udfff), so every output
// parses with any strict JSON parser.
//
// Schemas come from clients: work and memory are bounded (grammar.hpp's
// kMaxElements and kMaxRules; minLength/maxLength/minItems/maxItems above
// kMaxRepeat are refused), and a schema is never walked recursively deeper
// than its JSON nesting (which util/json_parse bounds).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/tool_call_format.hpp"
#include "grammar/grammar.hpp"

namespace neuron::grammar {

inline constexpr std::int64_t kMaxRepeat = 4096;  // largest minLength/maxLength/minItems/maxItems unrolled

// `schema`: a JSON Schema (object or boolean).
Grammar compile_json_schema(const nlohmann::ordered_json& schema);

// Any JSON object (OpenAI's response_format {"type": "json_object"}).
Grammar compile_json_object();

struct ToolSpec {
  std::string name;                   // non-empty
  nlohmann::ordered_json parameters;  // a JSON Schema for the arguments; null: any object
};

// One tool call, exactly as the chat template writes them and
// server/tool_calls.hpp parses them, in the model's format:
//   hermes      <tool_call>\n{"name": "<one of the names>", "arguments": <JSON>}\n</tool_call>
//   llama_json  {"name": "<one of the names>", "parameters": <JSON>}
// Errors name the tool ("tools[1].function.parameters: ...") by its index.
Grammar compile_tool_call(const std::vector<ToolSpec>& tools, chat::ToolCallFormat format = chat::ToolCallFormat::hermes);

}  // namespace neuron::grammar
