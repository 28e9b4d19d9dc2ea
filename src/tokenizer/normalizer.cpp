#include "tokenizer/normalizer.hpp"

#include <cstdlib>
#include <memory>

#include <nlohmann/json.hpp>
#include <utf8proc.h>

#include "tokenizer/utf8.hpp"
#include "util/error.hpp"

namespace neuron::tokenizer {

namespace {

void parse_into(const nlohmann::json& j, std::vector<NormalForm>& forms, const std::string& where) {
  if (j.is_null()) return;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    fail(errc::bad_model, "tokenizer.json: " + where + " must be an object with a string \"type\"");
  const std::string type = j["type"].get<std::string>();
  if (type == "NFC") {
    forms.push_back(NormalForm::nfc);
  } else if (type == "NFD") {
    forms.push_back(NormalForm::nfd);
  } else if (type == "NFKC") {
    forms.push_back(NormalForm::nfkc);
  } else if (type == "NFKD") {
    forms.push_back(NormalForm::nfkd);
  } else if (type == "Sequence") {
    const auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array())
      fail(errc::bad_model, "tokenizer.json: " + where + " (Sequence) needs a \"normalizers\" array");
    for (std::size_t i = 0; i < it->size(); ++i)
      parse_into((*it)[i], forms, where + ".normalizers[" + std::to_string(i) + "]");
  } else {
    fail(errc::bad_model, "tokenizer.json: unsupported normalizer type '" + type + "' at " + where);
  }
}

// Whether `c` passes through NFC unchanged *and* separates its neighbours:
// a starter (ccc 0) without a canonical decomposition that never composes
// with a preceding character. NFC(x + c + y) == NFC(x) + c + NFC(y) for such
// a c, so only the short runs around other characters need utf8proc.
bool nfc_inert(char32_t c) {
  if (c < 0x300) return true;                       // Latin-1 and friends: no combining marks, no seconds
  if (c >= 0xAC00 && c <= 0xD7A3) return true;      // Hangul syllables (a following T jamo is not inert)
  if (c >= 0x1100 && c <= 0x11FF) return false;     // conjoining jamo compose algorithmically
  const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(c));
  if (p->combining_class != 0) return false;
  if (p->decomp_seqindex != UINT16_MAX && p->decomp_type == 0) return false;  // has a canonical decomposition
  if (p->comb_index != UINT16_MAX && p->comb_index >= 0x8000) return false;    // second half of a composition
  return true;
}

// NFC that hands utf8proc only the runs that may change: from the inert
// character before a non-inert one up to the next inert character. Most text
// (ASCII, CJK, emoji) has none, and then costs one scan and no copy.
bool nfc(std::string_view text, std::string& out) {
  std::size_t copied = 0;      // text[0, copied) is already in `out`
  std::size_t seg_start = 0;   // start of the current run (an inert character or the text start)
  bool dirty = false;          // the current run holds a non-inert character
  bool changed = false;
  auto flush = [&](std::size_t end) {
    if (!changed) {
      out.clear();
      out.reserve(text.size() + 16);
    }
    out.append(text.substr(copied, seg_start - copied));
    out += normalize_form(text.substr(seg_start, end - seg_start), NormalForm::nfc);
    copied = end;
    changed = true;
  };
  std::size_t i = 0;
  while (i < text.size()) {
    const auto b = static_cast<unsigned char>(text[i]);
    std::size_t len = 1;
    bool inert = true;
    if (b >= 0xCC)
      inert = nfc_inert(decode_utf8(text, i, len));
    else if (b >= 0x80)
      len = 2;  // a lead byte below 0xCC starts a two-byte character below U+0300
    if (inert) {
      if (dirty) flush(i);
      dirty = false;
      seg_start = i;
    } else {
      dirty = true;
    }
    i += len;
  }
  if (dirty) flush(text.size());
  if (changed) out.append(text.substr(copied));
  return changed;
}

}  // namespace

Normalizer Normalizer::from_json(const nlohmann::json& j) {
  Normalizer n;
  parse_into(j, n.forms_, "normalizer");
  return n;
}

std::string normalize_form(std::string_view text, NormalForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::nfc: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::nfd: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::nfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::nfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* raw = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &raw,
                                          static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(raw, &std::free);
  if (n < 0) {
    if (n == UTF8PROC_ERROR_NOMEM) throw std::bad_alloc();
    // Callers pass repaired UTF-8, so anything else is a bug in neuron.
    fail(errc::internal, std::string("utf8proc normalization failed: ") + utf8proc_errmsg(n));
  }
  return std::string(reinterpret_cast<const char*>(raw), static_cast<std::size_t>(n));
}

bool Normalizer::normalize(std::string_view text, std::string& out) const {
  bool changed = false;
  std::string buf;
  for (NormalForm f : forms_) {
    const std::string_view cur = changed ? std::string_view(buf) : text;
    std::string next;
    if (f == NormalForm::nfc) {
      if (!nfc(cur, next)) continue;
    } else {
      next = normalize_form(cur, f);
    }
    if (!changed && next == text) continue;
    buf = std::move(next);
    changed = true;
  }
  if (changed) out = std::move(buf);
  return changed;
}

}  // namespace neuron::tokenizer
