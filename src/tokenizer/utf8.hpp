#pragma once
// UTF-8 validation and repair. Text reaching the tokenizer may be any bytes
// (an HTTP body, a fuzzer) and token byte strings may split a character, so
// both directions need one precise definition of "valid": Unicode's
// well-formed byte sequences (Table 3-7). Ill-formed input is repaired the way
// Rust's String::from_utf8_lossy and Python's errors="replace" do it: each
// maximal subpart of an ill-formed sequence becomes one U+FFFD, which is what
// Hugging Face's decoders produce for invalid byte runs.
#include <cstddef>
#include <string>
#include <string_view>

namespace neuron::tokenizer {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

enum class Utf8Kind {
  valid,      // a complete, well-formed character
  invalid,    // a maximal subpart that can never become well-formed
  truncated,  // a well-formed prefix cut off by the end of the buffer
};

struct Utf8Step {
  Utf8Kind kind;
  std::size_t length;  // bytes consumed by this step, >= 1
};

// Classifies the sequence starting at s[pos] (pos < s.size()).
Utf8Step next_utf8(std::string_view s, std::size_t pos) noexcept;

bool is_valid_utf8(std::string_view s) noexcept;

// Appends `s` to `out` with every ill-formed subpart (truncated tail included)
// replaced by U+FFFD.
void append_utf8_lossy(std::string& out, std::string_view s);
std::string utf8_lossy(std::string_view s);

// Decodes the well-formed character at s[pos]; `length` receives its size.
// Precondition: next_utf8(s, pos).kind == valid.
char32_t decode_utf8(std::string_view s, std::size_t pos, std::size_t& length) noexcept;
void append_utf8(std::string& out, char32_t c);

}  // namespace neuron::tokenizer
