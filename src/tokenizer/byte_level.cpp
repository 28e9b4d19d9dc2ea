#include "tokenizer/byte_level.hpp"

#include <cstdint>

#include "tokenizer/utf8.hpp"

namespace neuron::tokenizer {

namespace {

struct Tables {
  std::array<std::string, 256> chars;       // byte -> UTF-8 of its character
  std::array<std::int16_t, 324> bytes{};    // code point (< 0x144) -> byte, -1 if none

  Tables() {
    bytes.fill(-1);
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const char32_t c = printable ? static_cast<char32_t>(b) : next++;
      append_utf8(chars[b], c);
      bytes[c] = static_cast<std::int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

const std::string& byte_level_char(unsigned char b) { return tables().chars[b]; }

std::optional<unsigned char> byte_level_byte(char32_t c) {
  const auto& t = tables();
  if (c >= t.bytes.size() || t.bytes[c] < 0) return std::nullopt;
  return static_cast<unsigned char>(t.bytes[c]);
}

std::string to_byte_level(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char b : bytes) out += byte_level_char(b);
  return out;
}

std::optional<std::string> from_byte_level(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t i = 0;
  while (i < text.size()) {
    if (next_utf8(text, i).kind != Utf8Kind::valid) return std::nullopt;
    std::size_t len = 0;
    const auto b = byte_level_byte(decode_utf8(text, i, len));
    if (!b) return std::nullopt;
    out.push_back(static_cast<char>(*b));
    i += len;
  }
  return out;
}

}  // namespace neuron::tokenizer
