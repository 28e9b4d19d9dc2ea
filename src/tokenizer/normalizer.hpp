#pragma once
// tokenizer.json's "normalizer": Unicode normalization forms (NFC, NFD, NFKC,
// NFKD, via utf8proc), a Sequence of them, or null. Other Hugging Face
// normalizers (BERT's, Replace, Lowercase, ...) belong to tokenizers neuron
// does not serve and are refused at load time.
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace neuron::tokenizer {

enum class NormalForm { nfc, nfd, nfkc, nfkd };

class Normalizer {
 public:
  Normalizer() = default;  // identity
  // Throws Error{bad_model} naming the unsupported or malformed entry.
  static Normalizer from_json(const nlohmann::json& j);

  bool is_identity() const noexcept { return forms_.empty(); }
  // `text` must be valid UTF-8. Returns false and leaves `out` untouched when
  // `text` is already normalized (the common case costs no copy).
  bool normalize(std::string_view text, std::string& out) const;

 private:
  std::vector<NormalForm> forms_;  // applied in order
};

// One normalization form of valid UTF-8 text.
std::string normalize_form(std::string_view text, NormalForm form);

}  // namespace neuron::tokenizer
