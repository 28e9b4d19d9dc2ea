#pragma once
// The one way text becomes JSON in neuron. nlohmann's parser is iterative,
// but its copy, comparison, dump and destructor recurse once per level: a
// document of 100,000 '[' (200 KB, well under any body limit) parses and then
// overflows the stack when it is copied or freed. parse_json counts nesting
// while parsing and stops at the limit, so a deep document is never built.
// Every boundary where outside text arrives parses through it: HTTP bodies,
// TP RPC lines, config files, tokenizer.json, safetensors headers, tool-call
// JSON in model output.
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "util/error.hpp"

namespace neuron {

// Containers inside containers, the outermost counting 1 ("[[1]]" is 2 deep).
// Real inputs stay far below it (OpenAI tool schemas nest about a dozen
// levels, configs and tokenizer.json under 8), and the recursive algorithms
// above stay a few KB of stack deep.
inline constexpr int kMaxJsonDepth = 64;

// Parses `text` as one JSON document (trailing non-whitespace is an error).
// Throws Error{kind} with a message that starts with `what`: "<what> is not
// valid JSON: ..." (syntax, invalid UTF-8, a number that overflows), or
// "<what> nests deeper than <max_depth> levels, the limit for JSON input".
// Json is nlohmann::json or nlohmann::ordered_json.
template <class Json = nlohmann::json>
Json parse_json(std::string_view text, std::string_view what, const std::string& kind = errc::invalid_argument,
                int max_depth = kMaxJsonDepth);

extern template nlohmann::json parse_json<nlohmann::json>(std::string_view, std::string_view, const std::string&, int);
extern template nlohmann::ordered_json parse_json<nlohmann::ordered_json>(std::string_view, std::string_view, const std::string&, int);

}  // namespace neuron
