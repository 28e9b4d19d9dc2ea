#pragma once
// Grammar test helpers: a vocabulary of the 256 single bytes (any text can be
// fed token by token) and whole-text / prefix acceptance of a JSON Schema.
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "grammar/json_schema.hpp"
#include "grammar/matcher.hpp"
#include "util/error.hpp"

namespace neuron::grammar::testing {

using json = nlohmann::ordered_json;

inline std::shared_ptr<const TokenTrie> byte_trie() {
  static const auto trie = [] {
    std::vector<std::string> v;
    for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
    return std::make_shared<const TokenTrie>(v);
  }();
  return trie;
}

inline std::shared_ptr<const CompiledGrammar> compiled(Grammar g) {
  return std::make_shared<const CompiledGrammar>(std::move(g), byte_trie());
}

// The whole text is a complete value of the grammar.
inline bool accepts(const std::shared_ptr<const CompiledGrammar>& g, std::string_view text) {
  Matcher m(g);
  return m.accept_bytes(text) && m.complete();
}
inline bool accepts(const json& schema, std::string_view text) { return accepts(compiled(compile_json_schema(schema)), text); }
// The text is a valid prefix (possibly complete).
inline bool prefix(const json& schema, std::string_view text) {
  Matcher m(compiled(compile_json_schema(schema)));
  return m.accept_bytes(text);
}

// The invalid_argument message compiling `schema` gives (a failure if it compiles).
inline std::string refusal(const json& schema) {
  try {
    compile_json_schema(schema);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::invalid_argument);
    return e.what();
  }
  ADD_FAILURE() << "accepted: " << schema.dump();
  return {};
}

}  // namespace neuron::grammar::testing
