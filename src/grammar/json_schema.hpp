#pragma once
// JSON constraints compiled to grammars (grammar/grammar.hpp): a JSON Schema,
// any JSON object (response_format json_object), and a tool call (in the
// model's format) whose arguments follow the tool's parameters schema.
//
// The JSON Schema subset (what OpenAI-style clients send: zod, pydantic,
// LangChain; about what llguidance covers): type (one or an array: nullable),
// object with properties (in declared order; every required one present,
// optional ones may be skipped), required, additionalProperties (absent or
// false: none, as OpenAI's strict mode; true: any extra keys with any values;
// a schema: extra values follow it; extra keys are ASCII without escapes and
// never a declared name), minProperties / maxProperties, propertyNames with a
// pattern or format (declared keys it refuses are left out; extra keys follow
// it); array with items, prefixItems (or draft 4's items array with
// additionalItems), minItems, maxItems; string with minLength, maxLength (in
// code points; an escape or a UTF-8 character counts one; a length-bounded
// string holds no characters past U+FFFF, which JavaScript counts twice),
// pattern (grammar/regex.hpp: no lookaround or backreferences), format
// (date-time, date, time, duration, email, hostname, ipv4, ipv6, uuid, uri
// as regular expressions; other formats only annotate; not together with a
// pattern), enum, const; integer and number with minimum, maximum,
// exclusiveMinimum, exclusiveMaximum (draft 4's boolean forms too) and, on
// integers, multipleOf (grammar/number_range.hpp); boolean, null, anyOf and
// oneOf (both as anyOf), allOf of one schema, $ref to "#" or a local JSON
// pointer ($defs, definitions; recursion included), OpenAPI's nullable: true.
// Annotations (title, description, default, examples, $schema, ...) are
// ignored. What a grammar cannot express (not, if/then/else, uniqueItems,
// contains, patternProperties, dependent*, unevaluated*, ...) is refused with
// Error{invalid_argument} naming the keyword and where it is
// ("'not' at properties.name is not supported").
//
// Output shape: no whitespace is required; after '{', '[', ',' and ':' and
// before '}' and ']' at most one space, or one newline and up to 16 spaces,
// may appear, so a model cannot loop on whitespace. Integers stay within
// +-(2^53-1) (what every JSON parser keeps exactly) and are written without
// leading zeros, "-0", a fraction or an exponent. A number with no bounds has
// at most 18 integer digits, 18 fraction digits and a 2-digit exponent (so it
// is a finite double); a bounded one is written without an exponent. Strings
// are valid UTF-8 with no escaped surrogates (\ud800-\udfff); a pattern's or
// format's string writes printable ASCII as itself, escapes only '"', '\\',
// tab, newline and carriage return, and never other control characters.
// Every output parses with any strict JSON parser.
//
// Schemas come from clients: work and memory are bounded (grammar.hpp's
// kMaxElements and kMaxRules; minLength/maxLength/minItems/maxItems above
// kMaxRepeat are refused, as are patterns past regex.hpp's bounds), and a
// schema is never walked recursively deeper than its JSON nesting (which
// util/json_parse bounds).
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
//   hermes       <tool_call>\n{"name": "<one of the names>", "arguments": <JSON>}\n</tool_call>
//   llama_json   {"name": "<one of the names>", "parameters": <JSON>}
//   qwen3_coder  <tool_call>\n<function=NAME>\n(<parameter=P>\nVALUE\n</parameter>\n)*</function>\n</tool_call>
//                with NAME one of the names; the parameters those of the
//                tool's schema "properties", in their declared order, every
//                "required" one present (no properties declared: any names
//                without '<', '>' or a newline); a VALUE whose schema
//                declares only non-string types (chat::qwen3_coder_value_is_json)
//                is JSON of that schema, any other VALUE free UTF-8 text
//                that does not contain "</parameter>" (a string's enum,
//                pattern or length are not enforced there). A function or
//                parameter name with '<', '>' or a newline is refused.
// Errors name the tool ("tools[1].function.parameters: ...") by its index.
Grammar compile_tool_call(const std::vector<ToolSpec>& tools, chat::ToolCallFormat format = chat::ToolCallFormat::hermes);

// Either one tool call (as compile_tool_call; hermes or qwen3_coder, both
// tagged, so a call and a value cannot be confused) or a value of `schema`
// (null: any JSON object): tool_choice "auto" with a response format.
// llama_json is refused (its call is a JSON object itself).
Grammar compile_tool_call_or_json(const std::vector<ToolSpec>& tools, const nlohmann::ordered_json* schema,
                                  chat::ToolCallFormat format = chat::ToolCallFormat::hermes);

}  // namespace neuron::grammar
