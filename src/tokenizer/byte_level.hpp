#pragma once
// GPT-2's byte-level alphabet: every byte maps to one printable character so
// that BPE vocabularies are plain strings. Printable Latin-1 bytes map to
// themselves; the other 68 (controls, space, DEL, NBSP, soft hyphen) map to
// U+0100.. in byte order. Vocab and merges in tokenizer.json are written in
// this alphabet; neuron runs BPE on token ids and raw bytes, so the alphabet is
// only crossed at load time and when decoding.
#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace neuron::tokenizer {

// The character (UTF-8) standing for byte b.
const std::string& byte_level_char(unsigned char b);

// The byte a byte-level character stands for, if it is one.
std::optional<unsigned char> byte_level_byte(char32_t c);

// Raw bytes -> byte-level text.
std::string to_byte_level(std::string_view bytes);

// Byte-level text -> raw bytes; nullopt when `text` holds a character outside
// the alphabet (or is not valid UTF-8).
std::optional<std::string> from_byte_level(std::string_view text);

}  // namespace neuron::tokenizer
