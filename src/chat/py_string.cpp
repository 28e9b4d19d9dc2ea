#include "chat/py_string.hpp"

#include <utf8proc.h>

namespace neuron::chat::py {

namespace {

constexpr char32_t escape_base = 0xDC00;  // surrogateescape: byte b -> U+DC00+b (b >= 0x80)

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Decodes one code point at s[i]; returns the byte length consumed, or 0 when
// the sequence is invalid (overlong, surrogate, out of range, truncated).
std::size_t decode_one(std::string_view s, std::size_t i, char32_t& cp) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  std::size_t len = 0;
  char32_t min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    len = 2, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    len = 3, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    len = 4, cp = b0 & 0x07, min = 0x10000;
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  for (std::size_t k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (!is_continuation(b)) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

bool in_chars(char32_t cp, const std::u32string& chars) { return chars.find(cp) != std::u32string::npos; }

bool is_cased(char32_t cp) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
}

char32_t to_upper(char32_t cp) { return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp))); }
char32_t to_lower(char32_t cp) { return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))); }
char32_t to_title(char32_t cp) { return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(cp))); }

}  // namespace

std::u32string decode(std::string_view utf8) {
  std::u32string out;
  out.reserve(utf8.size());
  for (std::size_t i = 0; i < utf8.size();) {
    char32_t cp = 0;
    const std::size_t n = decode_one(utf8, i, cp);
    if (n == 0) {
      out.push_back(escape_base + static_cast<unsigned char>(utf8[i]));
      ++i;
    } else {
      out.push_back(cp);
      i += n;
    }
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp >= escape_base + 0x80 && cp <= escape_base + 0xFF) {
    out.push_back(static_cast<char>(cp - escape_base));
  } else if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string encode(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t cp : code_points) append_utf8(out, cp);
  return out;
}

std::size_t length(std::string_view utf8) {
  std::size_t n = 0;
  for (std::size_t i = 0; i < utf8.size(); ++n) {
    char32_t cp = 0;
    const std::size_t k = decode_one(utf8, i, cp);
    i += k == 0 ? 1 : k;
  }
  return n;
}

bool is_space(char32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x1C: case 0x1D: case 0x1E: case 0x1F:
    case 0x20: case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  const std::u32string cps = decode(s);
  const std::u32string set = chars ? decode(*chars) : std::u32string{};
  auto strip_it = [&](char32_t cp) { return chars ? in_chars(cp, set) : is_space(cp); };
  std::size_t begin = 0, end = cps.size();
  if (left) {
    while (begin < end && strip_it(cps[begin])) ++begin;
  }
  if (right) {
    while (end > begin && strip_it(cps[end - 1])) --end;
  }
  return encode(std::u32string_view(cps).substr(begin, end - begin));
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, std::int64_t maxsplit) {
  std::vector<std::string> out;
  if (sep) {
    std::size_t pos = 0;
    while (maxsplit < 0 || static_cast<std::int64_t>(out.size()) < maxsplit) {
      const std::size_t hit = s.find(*sep, pos);
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    out.emplace_back(s.substr(pos));
    return out;
  }
  const std::u32string cps = decode(s);
  std::size_t i = 0;
  while (true) {
    while (i < cps.size() && is_space(cps[i])) ++i;
    if (i == cps.size()) break;
    if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) == maxsplit) {
      // The remainder keeps its inner and trailing whitespace, as in Python.
      std::size_t end = cps.size();
      while (end > i && is_space(cps[end - 1])) --end;
      out.push_back(encode(std::u32string_view(cps).substr(i, end - i)));
      break;
    }
    const std::size_t start = i;
    while (i < cps.size() && !is_space(cps[i])) ++i;
    out.push_back(encode(std::u32string_view(cps).substr(start, i - start)));
  }
  return out;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, std::int64_t maxsplit) {
  if (maxsplit < 0) return split(s, sep, maxsplit);
  std::vector<std::string> out;
  if (sep) {
    std::size_t end = s.size();
    while (static_cast<std::int64_t>(out.size()) < maxsplit) {
      if (end < sep->size()) break;
      const std::size_t hit = s.rfind(*sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      out.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    out.emplace_back(s.substr(0, end));
  } else {
    const std::u32string cps = decode(s);
    std::size_t i = cps.size();
    while (true) {
      while (i > 0 && is_space(cps[i - 1])) --i;
      if (i == 0) break;
      if (static_cast<std::int64_t>(out.size()) == maxsplit) {
        std::size_t begin = 0;
        while (begin < i && is_space(cps[begin])) ++begin;
        out.push_back(encode(std::u32string_view(cps).substr(begin, i - begin)));
        break;
      }
      const std::size_t end = i;
      while (i > 0 && !is_space(cps[i - 1])) --i;
      out.push_back(encode(std::u32string_view(cps).substr(i, end - i)));
    }
  }
  return {out.rbegin(), out.rend()};
}

std::string replace(std::string_view s, std::string_view old_text, std::string_view new_text, std::int64_t count) {
  std::string out;
  if (old_text.empty()) {
    // Python inserts `new` before every code point and at the end.
    const std::u32string cps = decode(s);
    std::int64_t done = 0;
    for (char32_t cp : cps) {
      if (count < 0 || done < count) {
        out += new_text;
        ++done;
      }
      append_utf8(out, cp);
    }
    if (count < 0 || done < count) out += new_text;
    return out;
  }
  std::size_t pos = 0;
  std::int64_t done = 0;
  while (count < 0 || done < count) {
    const std::size_t hit = s.find(old_text, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(new_text);
    pos = hit + old_text.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

std::int64_t count(std::string_view s, std::string_view needle) {
  if (needle.empty()) return static_cast<std::int64_t>(length(s)) + 1;
  std::int64_t n = 0;
  for (std::size_t pos = s.find(needle); pos != std::string_view::npos; pos = s.find(needle, pos + needle.size())) ++n;
  return n;
}

std::int64_t find(std::string_view s, std::string_view needle) {
  const std::size_t hit = s.find(needle);
  if (hit == std::string_view::npos) return -1;
  return static_cast<std::int64_t>(length(s.substr(0, hit)));
}

std::string upper(std::string_view s) {
  std::string out;
  for (char32_t cp : decode(s)) append_utf8(out, to_upper(cp));
  return out;
}

std::string lower(std::string_view s) {
  std::string out;
  for (char32_t cp : decode(s)) append_utf8(out, to_lower(cp));
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out;
  bool first = true;
  for (char32_t cp : decode(s)) {
    append_utf8(out, first ? to_title(cp) : to_lower(cp));
    first = false;
  }
  return out;
}

std::string title(std::string_view s) {
  std::string out;
  bool previous_cased = false;
  for (char32_t cp : decode(s)) {
    const bool cased = is_cased(cp);
    append_utf8(out, cased ? (previous_cased ? to_lower(cp) : to_title(cp)) : cp);
    previous_cased = cased;
  }
  return out;
}

std::string repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  static constexpr char hex[] = "0123456789abcdef";
  for (char32_t cp : decode(s)) {
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp < 0x20 || cp == 0x7F || (cp >= 0x80 && cp < 0xA0)) {
      out += "\\x";
      out += hex[cp >> 4];
      out += hex[cp & 0xF];
    } else if (cp >= escape_base + 0x80 && cp <= escape_base + 0xFF) {
      out += "\\udc";
      out += hex[(cp >> 4) & 0xF];
      out += hex[cp & 0xF];
    } else {
      append_utf8(out, cp);
    }
  }
  out += quote;
  return out;
}

}  // namespace neuron::chat::py
