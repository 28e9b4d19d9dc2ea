// NFC as the tokenizer applies it. Normalizer hands utf8proc only the runs
// around characters that can change; that shortcut must agree with a plain
// whole-string NFC on exactly the inputs where it could go wrong: combining
// marks, conjoining Hangul jamo, Indic two-part vowels, singletons.
#include <gtest/gtest.h>

#include <random>

#include <nlohmann/json.hpp>

#include "tokenizer/normalizer.hpp"
#include "tokenizer/utf8.hpp"

namespace neuron::tokenizer {
namespace {

std::string nfc_of(const Normalizer& n, const std::string& s) {
  std::string out;
  return n.normalize(s, out) ? out : s;
}

TEST(TokenizerNormalizer, KnownCompositions) {
  const auto n = Normalizer::from_json(nlohmann::json{{"type", "NFC"}});
  EXPECT_EQ(nfc_of(n, "e\u0301"), "\u00e9");
  EXPECT_EQ(nfc_of(n, "A\u030a and \u212b"), "\u00c5 and \u00c5");       // combining ring; Angstrom sign singleton
  EXPECT_EQ(nfc_of(n, "\u1100\u1161\u11a8"), "\uac01");                 // L V T jamo -> one syllable
  EXPECT_EQ(nfc_of(n, "\ud558\u11a8"), "\ud559");                       // LV syllable + T jamo
  EXPECT_EQ(nfc_of(n, "\u0b92\u0bd7"), "\u0b94");                       // Tamil two-part vowel (second has ccc 0)
  EXPECT_EQ(nfc_of(n, "q\u0307\u0323"), "q\u0323\u0307");               // canonical reordering
  EXPECT_EQ(nfc_of(n, "\u0344x"), "\u0308\u0301x");                     // decomposes, does not recompose
  std::string unchanged;
  EXPECT_FALSE(n.normalize("plain ASCII, 中文, 😀", unchanged));
}

TEST(TokenizerNormalizer, ShortcutAgreesWithWholeStringNfc) {
  const auto n = Normalizer::from_json(nlohmann::json{{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}});
  const std::vector<std::pair<char32_t, char32_t>> ranges = {
      {0x41, 0x5A}, {0x61, 0x7A}, {0x20, 0x20}, {0xC0, 0xFF}, {0x300, 0x36F}, {0x1100, 0x1175}, {0x11A8, 0x11C2},
      {0xAC00, 0xAC1F}, {0xD558, 0xD55C}, {0x0B92, 0x0B94}, {0x0BBE, 0x0BD7}, {0x0CC6, 0x0CD6}, {0x0D46, 0x0D57},
      {0x0DD9, 0x0DDF}, {0x1025, 0x102E}, {0x1B05, 0x1B35}, {0x3099, 0x309A}, {0x304B, 0x304D}, {0x2126, 0x212B},
      {0x0340, 0x0344}, {0x0F71, 0x0F81}, {0x1D15E, 0x1D169}, {0x4E00, 0x4E05}, {0x1F600, 0x1F602}, {0x05D0, 0x05D5},
      {0x05B0, 0x05C7}, {0x0627, 0x0627}, {0x0653, 0x0655}, {0x0915, 0x0915}, {0x093C, 0x094D}, {0x1E00, 0x1E10}};
  std::mt19937 rng(77);
  for (int iter = 0; iter < 3000; ++iter) {
    std::string s;
    const int len = 1 + static_cast<int>(rng() % 12);
    for (int k = 0; k < len; ++k) {
      const auto& [lo, hi] = ranges[rng() % ranges.size()];
      append_utf8(s, lo + static_cast<char32_t>(rng() % (hi - lo + 1)));
    }
    ASSERT_EQ(nfc_of(n, s), normalize_form(s, NormalForm::nfc)) << "input " << nlohmann::json(s).dump();
  }
}

TEST(TokenizerNormalizer, CompatibilityFormsAndIdentity) {
  EXPECT_EQ(nfc_of(Normalizer::from_json(nlohmann::json{{"type", "NFKC"}}), "\ufb01 x\u00b2"), "fi x2");
  EXPECT_EQ(nfc_of(Normalizer::from_json(nlohmann::json{{"type", "NFD"}}), "\u00e9"), "e\u0301");
  EXPECT_EQ(nfc_of(Normalizer::from_json(nlohmann::json{{"type", "NFKD"}}), "\u00bd"), "1\u20442");
  EXPECT_TRUE(Normalizer::from_json(nlohmann::json()).is_identity());
}

}  // namespace
}  // namespace neuron::tokenizer
