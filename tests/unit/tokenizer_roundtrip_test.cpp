// decode(encode(s)) == NFC(s): encoding loses nothing but the normalization
// the model was trained with. Random strings from a mixed-script alphabet
// (fixed seed, so a failure reproduces), plus what happens to bytes that are
// not UTF-8 at all.
#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

#include "tokenizer/normalizer.hpp"
#include "tokenizer/utf8.hpp"
#include "tokenizer_test_util.hpp"

namespace neuron::tokenizer {
namespace {

using testing::qwen;

TEST(TokenizerRoundTrip, RandomMixedScriptStringsDecodeToTheirNfc) {
  // Code point ranges: ASCII, whitespace, Latin-1, combining marks, Greek,
  // Cyrillic, Hebrew, Arabic, Devanagari, Hangul jamo and syllables, CJK,
  // kana, fullwidth forms, emoji, astral math letters, specials.
  const std::vector<std::pair<char32_t, char32_t>> ranges = {
      {0x20, 0x7E}, {0x09, 0x0D}, {0xA0, 0xFF}, {0x300, 0x36F}, {0x391, 0x3C9}, {0x400, 0x44F}, {0x5D0, 0x5EA},
      {0x621, 0x64A}, {0x905, 0x939}, {0x1100, 0x1112}, {0x1161, 0x1175}, {0xAC00, 0xAC40}, {0x4E00, 0x4E80},
      {0x3041, 0x3096}, {0xFF01, 0xFF5E}, {0x1F600, 0x1F64F}, {0x1F3FB, 0x1F3FF}, {0x1D400, 0x1D433},
      {0x2000, 0x200D}, {0x2028, 0x2029}, {0xFEFF, 0xFEFF}, {0x0, 0x1F}};
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 400; ++iter) {
    std::string s;
    const int len = 1 + static_cast<int>(rng() % 40);
    for (int k = 0; k < len; ++k) {
      const auto& [lo, hi] = ranges[rng() % ranges.size()];
      append_utf8(s, lo + static_cast<char32_t>(rng() % (hi - lo + 1)));
    }
    EXPECT_EQ(qwen().decode(qwen().encode(s)), normalize_form(s, NormalForm::nfc)) << "iteration " << iter;
  }
}

TEST(TokenizerRoundTrip, InvalidUtf8IsEncodedAsReplacementCharacters) {
  // Each maximal ill-formed subpart becomes one U+FFFD (as Python's errors="replace").
  const std::string bad = std::string("ok\xFF") + "\xE4\xBD" + "end\xC0\xAF" + "\xED\xA0\x80" + "\xF0\x9F\x98";
  const auto ids = qwen().encode(bad);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(qwen().decode(ids), "ok\uFFFD\uFFFDend\uFFFD\uFFFD\uFFFD\uFFFD\uFFFD\uFFFD");
  EXPECT_EQ(qwen().encode(std::string("a\x80")), qwen().encode("a\uFFFD"));
  // NUL bytes are ordinary characters.
  const std::string with_nul("a\0b", 3);
  EXPECT_EQ(qwen().decode(qwen().encode(with_nul)), with_nul);
}

TEST(TokenizerRoundTrip, LongInputsStayLinear) {
  // A single 200 KB "word" and a 200 KB run of spaces: BPE and the regex must
  // not go quadratic (the fuzzer's inputs are up to 64 KB).
  const std::string word(200'000, 'x');
  EXPECT_EQ(qwen().decode(qwen().encode(word)), word);
  const std::string spaces = std::string(200'000, ' ') + "x";
  EXPECT_EQ(qwen().decode(qwen().encode(spaces)), spaces);
}

TEST(TokenizerRoundTrip, ConcurrentEncodesAgree) {
  // The daemon encodes from many HTTP threads at once; the word cache is shared.
  const std::string text = "The quick brown fox 🦊 jumps over 13 lazy dogs. 日本語のテキスト。 ";
  const auto expected = qwen().encode(text);
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        const std::string varied = text + std::to_string(t * 1000 + i);
        const auto ids = qwen().encode(varied);
        if (!std::equal(expected.begin(), expected.end(), ids.begin())) ++mismatches;
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace neuron::tokenizer
