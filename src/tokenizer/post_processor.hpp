#pragma once
// tokenizer.json's "post_processor" for a single text: the special tokens
// transformers' encode(text) (add_special_tokens=True, its default) puts
// around the text's ids. Supported: TemplateProcessing's "single" template
// (Llama 3: <|begin_of_text|> $A), ByteLevel (offsets only: adds nothing,
// Qwen's), a Sequence of those, or none.
#include <cstdint>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace neuron::tokenizer {

struct PostProcessor {
  std::vector<std::int32_t> prefix;  // ids before the text's
  std::vector<std::int32_t> suffix;  // ids after them

  // Throws Error{bad_model} naming the unsupported type or malformed field.
  static PostProcessor from_json(const nlohmann::json& j);
};

}  // namespace neuron::tokenizer
