#include <gtest/gtest.h>

#include <string>

#include "util/sha256.hpp"

namespace neuron {
namespace {

std::string sha256(const std::string& text) {
  Sha256 h;
  h.update(text);
  return h.hex_digest();
}

// FIPS 180-4 examples and the NIST test vectors.
TEST(Sha256, MatchesTheStandardVectors) {
  EXPECT_EQ(sha256(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

// Every split of the input into updates gives the one-shot digest (block and padding edges included).
TEST(Sha256, IncrementalUpdatesAgreeWithOneShot) {
  std::string text;
  for (int i = 0; i < 300; ++i) text.push_back(static_cast<char>(i * 37 + 11));
  for (std::size_t len : {0u, 1u, 55u, 56u, 63u, 64u, 65u, 119u, 120u, 128u, 300u}) {
    const std::string input = text.substr(0, len);
    const std::string expected = sha256(input);
    for (std::size_t step : {1u, 3u, 63u, 64u, 100u}) {
      Sha256 h;
      for (std::size_t i = 0; i < input.size(); i += step) h.update(std::string_view(input).substr(i, step));
      EXPECT_EQ(h.hex_digest(), expected) << "length " << len << " in steps of " << step;
    }
  }
}

}  // namespace
}  // namespace neuron
