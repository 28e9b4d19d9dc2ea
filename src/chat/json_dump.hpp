#pragma once
// The `tojson` filter as transformers defines it: Python's json.dumps with
// ensure_ascii=False, so the bytes match what the model saw in training
// (", " and ": " separators by default, "," and ": " once an indent is given,
// keys in insertion order unless sorted, floats in Python's repr).
#include <optional>
#include <string>

#include "chat/value.hpp"

namespace neuron::chat {

struct JsonStyle {
  std::optional<std::string> indent;  // unset: one line; "" or "  ": newline + that per level
  bool ensure_ascii = false;          // true: non-ASCII as \uXXXX (surrogate pairs above the BMP)
  std::optional<std::string> item_separator;  // default ", " (one line) or "," (indented)
  std::string key_separator = ": ";
  bool sort_keys = false;
};

// Throws Fault for values JSON cannot hold (Undefined, functions).
std::string to_json(const Value& value, const JsonStyle& style = {});

}  // namespace neuron::chat
