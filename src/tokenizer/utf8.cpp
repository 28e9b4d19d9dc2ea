#include "tokenizer/utf8.hpp"

#include <cstdint>

namespace neuron::tokenizer {

namespace {

bool in(unsigned char c, unsigned char lo, unsigned char hi) { return c >= lo && c <= hi; }

}  // namespace

Utf8Step next_utf8(std::string_view s, std::size_t pos) noexcept {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  if (b0 < 0x80) return {Utf8Kind::valid, 1};
  std::size_t need = 0;
  // Range of the second byte; it is what excludes overlongs, surrogates and > U+10FFFF.
  unsigned char lo = 0x80, hi = 0xBF;
  if (in(b0, 0xC2, 0xDF)) {
    need = 1;
  } else if (b0 == 0xE0) {
    need = 2, lo = 0xA0;
  } else if (in(b0, 0xE1, 0xEC) || in(b0, 0xEE, 0xEF)) {
    need = 2;
  } else if (b0 == 0xED) {
    need = 2, hi = 0x9F;
  } else if (b0 == 0xF0) {
    need = 3, lo = 0x90;
  } else if (in(b0, 0xF1, 0xF3)) {
    need = 3;
  } else if (b0 == 0xF4) {
    need = 3, hi = 0x8F;
  } else {
    return {Utf8Kind::invalid, 1};  // continuation byte, C0, C1, F5..FF
  }
  std::size_t i = 1;
  for (; i <= need; ++i) {
    if (pos + i >= s.size()) return {Utf8Kind::truncated, i};
    const auto b = static_cast<unsigned char>(s[pos + i]);
    const bool ok = i == 1 ? in(b, lo, hi) : in(b, 0x80, 0xBF);
    if (!ok) return {Utf8Kind::invalid, i};
  }
  return {Utf8Kind::valid, need + 1};
}

bool is_valid_utf8(std::string_view s) noexcept {
  std::size_t i = 0;
  while (i < s.size()) {
    // ASCII runs dominate real text; skip them eight bytes at a time.
    while (i + 8 <= s.size()) {
      std::uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= s.size()) break;
    const Utf8Step st = next_utf8(s, i);
    if (st.kind != Utf8Kind::valid) return false;
    i += st.length;
  }
  return true;
}

void append_utf8_lossy(std::string& out, std::string_view s) {
  std::size_t i = 0;
  std::size_t run = 0;  // start of the pending well-formed run
  while (i < s.size()) {
    const Utf8Step st = next_utf8(s, i);
    if (st.kind == Utf8Kind::valid) {
      i += st.length;
      continue;
    }
    out.append(s.substr(run, i - run));
    out.append(kReplacementChar);
    i += st.length;
    run = i;
  }
  out.append(s.substr(run));
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  append_utf8_lossy(out, s);
  return out;
}

char32_t decode_utf8(std::string_view s, std::size_t pos, std::size_t& length) noexcept {
  const auto b0 = static_cast<unsigned char>(s[pos]);
  auto cont = [&](std::size_t k) { return static_cast<char32_t>(static_cast<unsigned char>(s[pos + k]) & 0x3F); };
  if (b0 < 0x80) {
    length = 1;
    return b0;
  }
  if (b0 < 0xE0) {
    length = 2;
    return (static_cast<char32_t>(b0 & 0x1F) << 6) | cont(1);
  }
  if (b0 < 0xF0) {
    length = 3;
    return (static_cast<char32_t>(b0 & 0x0F) << 12) | (cont(1) << 6) | cont(2);
  }
  length = 4;
  return (static_cast<char32_t>(b0 & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

}  // namespace neuron::tokenizer
