#include "tokenizer/normalizer.hpp"

#include <cstdlib>
#include <memory>

#include <nlohmann/json.hpp>
#include <utf8proc.h>

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

// Text whose code points are all below U+0300 is already NFC: every such
// character has NFC_Quick_Check=Yes and none composes with a predecessor (the
// first combining marks start at U+0300). Most prompts are like that, so NFC
// costs one byte scan for them. (NFD/NFKC/NFKD have no such shortcut: é
// decomposes, U+00A0 has a compatibility mapping.)
bool trivially_nfc(std::string_view text) {
  for (char c : text)
    if (static_cast<unsigned char>(c) >= 0xCC) return false;  // 0xCC 0x80 is U+0300
  return true;
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
    if (f == NormalForm::nfc && trivially_nfc(cur)) continue;
    std::string next = normalize_form(cur, f);
    if (!changed && next == text) continue;
    buf = std::move(next);
    changed = true;
  }
  if (changed) out = std::move(buf);
  return changed;
}

}  // namespace neuron::tokenizer
