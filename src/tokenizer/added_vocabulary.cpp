#include "tokenizer/added_vocabulary.hpp"

#include <algorithm>
#include <cstring>

#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include "tokenizer/bpe.hpp"
#include "tokenizer/normalizer.hpp"
#include "tokenizer/utf8.hpp"
#include "util/error.hpp"

namespace neuron::tokenizer {

namespace {

// Rust's char::is_whitespace (the White_Space property), which lstrip/rstrip use.
bool is_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// Unicode \w as the regex crate defines it: Alphabetic, marks, decimal
// digits, connector punctuation, joiners. Alphabetic is the letters and Nl
// plus Other_Alphabetic, whose only members outside the marks and letters
// are the circled and squared Latin letters (category So).
bool is_word_char(char32_t c) {
  if (c == 0x200C || c == 0x200D) return true;
  if ((c >= 0x24B6 && c <= 0x24E9) || (c >= 0x1F130 && c <= 0x1F149) || (c >= 0x1F150 && c <= 0x1F169) ||
      (c >= 0x1F170 && c <= 0x1F189))
    return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT: case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_MN: case UTF8PROC_CATEGORY_MC: case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND: case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

// The character ending just before byte `end` of valid UTF-8 `s` (end > 0).
char32_t char_before(std::string_view s, std::size_t end) {
  std::size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  std::size_t len = 0;
  return decode_utf8(s, b, len);
}

char32_t char_at(std::string_view s, std::size_t pos) {
  std::size_t len = 0;
  return decode_utf8(s, pos, len);
}

bool get_flag(const nlohmann::json& e, const char* key, bool fallback, const std::string& where) {
  const auto it = e.find(key);
  if (it == e.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) fail(errc::bad_model, "tokenizer.json: " + where + "." + key + " must be a boolean");
  return it->get<bool>();
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<std::string> patterns, std::vector<AddedToken> tokens)
    : patterns_(std::move(patterns)), tokens_(std::move(tokens)) {
  for (std::uint32_t i = 0; i < patterns_.size(); ++i)
    if (!patterns_[i].empty()) by_first_byte_[static_cast<unsigned char>(patterns_[i][0])].push_back(i);
  for (auto& v : by_first_byte_)
    std::stable_sort(v.begin(), v.end(),
                     [&](std::uint32_t a, std::uint32_t b) { return patterns_[a].size() > patterns_[b].size(); });
}

void AddedTokenMatcher::split(std::string_view text, std::vector<Segment>& out) const {
  std::size_t emitted = 0;  // text before this is already in `out`
  std::size_t pos = 0;
  while (pos < text.size()) {
    const auto& cands = by_first_byte_[static_cast<unsigned char>(text[pos])];
    std::uint32_t hit = UINT32_MAX;
    for (std::uint32_t i : cands) {
      const std::string& p = patterns_[i];
      if (p.size() <= text.size() - pos && std::memcmp(text.data() + pos, p.data(), p.size()) == 0) {
        hit = i;
        break;
      }
    }
    if (hit == UINT32_MAX) {
      ++pos;
      continue;
    }
    const AddedToken& tok = tokens_[hit];
    std::size_t start = pos;
    std::size_t stop = pos + patterns_[hit].size();
    if (tok.single_word) {
      const bool alone_left = start == 0 || !is_word_char(char_before(text, start));
      const bool alone_right = stop == text.size() || !is_word_char(char_at(text, stop));
      if (!alone_left || !alone_right) {
        pos = stop;  // the matcher resumes after a rejected match, like Aho-Corasick's iterator
        continue;
      }
    }
    if (tok.lstrip) {
      while (start > emitted && is_whitespace(char_before(text, start))) {
        std::size_t b = start - 1;
        while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
        start = b;
      }
    }
    if (tok.rstrip) {
      while (stop < text.size() && is_whitespace(char_at(text, stop))) stop += next_utf8(text, stop).length;
    }
    if (start > emitted) out.push_back({text.substr(emitted, start - emitted), -1});
    out.push_back({text.substr(start, stop - start), tok.id});
    emitted = pos = stop;
  }
  if (emitted < text.size()) out.push_back({text.substr(emitted), -1});
}

AddedVocabulary AddedVocabulary::from_json(const nlohmann::json& j, const Normalizer& normalizer, const Bpe& model) {
  AddedVocabulary av;
  if (j.is_null()) return av;
  if (!j.is_array()) fail(errc::bad_model, "tokenizer.json: added_tokens must be an array");
  std::vector<std::string> raw_pat, norm_pat;
  std::vector<AddedToken> raw_tok, norm_tok;
  for (std::size_t i = 0; i < j.size(); ++i) {
    const auto& e = j[i];
    const std::string where = "added_tokens[" + std::to_string(i) + "]";
    if (!e.is_object()) fail(errc::bad_model, "tokenizer.json: " + where + " must be an object");
    const auto id = e.find("id");
    if (id == e.end() || !id->is_number_integer() || id->get<std::int64_t>() < 0 ||
        id->get<std::int64_t>() >= kMaxTokenId)
      fail(errc::bad_model, "tokenizer.json: " + where + ".id must be a token id in [0, " +
                                std::to_string(kMaxTokenId) + ")");
    const auto content = e.find("content");
    if (content == e.end() || !content->is_string() || content->get_ref<const std::string&>().empty())
      fail(errc::bad_model, "tokenizer.json: " + where + ".content must be a non-empty string");
    AddedToken t;
    t.content = content->get<std::string>();
    const auto same = std::find_if(av.tokens_.begin(), av.tokens_.end(),
                                   [&](const AddedToken& o) { return o.content == t.content; });
    if (same != av.tokens_.end()) continue;
    if (const auto in_vocab = model.token_to_id(t.content)) {
      t.id = *in_vocab;
    } else {
      const auto vocab = static_cast<std::int64_t>(model.size());
      std::int64_t max_added = -1;
      for (const auto& o : av.tokens_) max_added = std::max<std::int64_t>(max_added, o.id);
      const std::int64_t next = max_added >= vocab ? max_added + 1 : vocab;
      if (next >= kMaxTokenId) fail(errc::bad_model, "tokenizer.json: " + where + " gets an id past the supported range");
      t.id = static_cast<std::int32_t>(next);
    }
    t.special = get_flag(e, "special", false, where);
    t.single_word = get_flag(e, "single_word", false, where);
    t.lstrip = get_flag(e, "lstrip", false, where);
    t.rstrip = get_flag(e, "rstrip", false, where);
    t.normalized = get_flag(e, "normalized", !t.special, where);
    if (t.normalized) {
      std::string n;
      norm_pat.push_back(normalizer.normalize(t.content, n) ? n : t.content);
      norm_tok.push_back(t);
    } else {
      raw_pat.push_back(t.content);
      raw_tok.push_back(t);
    }
    av.tokens_.push_back(std::move(t));
  }
  av.raw_ = AddedTokenMatcher(std::move(raw_pat), std::move(raw_tok));
  av.normalized_ = AddedTokenMatcher(std::move(norm_pat), std::move(norm_tok));
  return av;
}

}  // namespace neuron::tokenizer
