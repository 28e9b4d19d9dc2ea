#pragma once
// Python str semantics over UTF-8 std::string. Templates index, slice, measure
// and strip strings by code point, as Python does; byte-wise operations would
// split multi-byte characters and disagree with transformers on non-ASCII text.
//
// Invalid UTF-8 bytes are carried through as lone surrogates U+DC80..U+DCFF
// (Python's "surrogateescape"), so decode/encode round-trips any byte string.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace neuron::chat::py {

std::u32string decode(std::string_view utf8);
std::string encode(std::u32string_view code_points);
void append_utf8(std::string& out, char32_t cp);
// len(s): number of code points.
std::size_t length(std::string_view utf8);

// str.isspace() for one code point (Unicode whitespace, as Python defines it).
bool is_space(char32_t cp);

// str.strip([chars]) / lstrip / rstrip; no chars = Unicode whitespace.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);
// str.split(sep=None, maxsplit=-1): no sep splits on whitespace runs, dropping empties.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, std::int64_t maxsplit);
// str.rsplit(sep=None, maxsplit=-1).
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, std::int64_t maxsplit);
// str.replace(old, new, count=-1), including Python's empty `old` case.
std::string replace(std::string_view s, std::string_view old_text, std::string_view new_text, std::int64_t count);
// Number of non-overlapping occurrences (str.count); an empty needle counts len(s)+1.
std::int64_t count(std::string_view s, std::string_view needle);
// str.find: code point index or -1.
std::int64_t find(std::string_view s, std::string_view needle);

std::string upper(std::string_view s);
std::string lower(std::string_view s);
// str.capitalize(): first code point upper-cased, the rest lower-cased.
std::string capitalize(std::string_view s);
// str.title(): a cased letter after an uncased character starts a word.
std::string title(std::string_view s);

// repr(str): single quotes unless the text has ' and no ".
std::string repr(std::string_view s);

}  // namespace neuron::chat::py
