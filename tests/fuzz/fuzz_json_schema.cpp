// libFuzzer target: arbitrary bytes as a client's JSON Schema (the first
// line) and a candidate answer (the rest). Compiling must end in a grammar or
// neuron::Error{invalid_argument} (bounded work: regex.hpp's and the
// builder's limits); a grammar then matches the answer byte by byte without
// crashing, and an answer it completes must parse as JSON.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/json_schema.hpp"
#include "grammar/matcher.hpp"
#include "util/error.hpp"
#include "util/json_parse.hpp"

namespace {

std::shared_ptr<const neuron::grammar::TokenTrie> byte_trie() {
  static const auto trie = [] {
    std::vector<std::string> v;
    for (int b = 0; b < 256; ++b) v.push_back(std::string(1, static_cast<char>(b)));
    return std::make_shared<const neuron::grammar::TokenTrie>(v);
  }();
  return trie;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto nl = input.find('\n');
  const std::string_view schema_text = input.substr(0, nl);
  const std::string_view answer = nl == std::string_view::npos ? std::string_view{} : input.substr(nl + 1);
  nlohmann::ordered_json schema;
  neuron::grammar::Grammar g;
  try {
    schema = neuron::parse_json<nlohmann::ordered_json>(schema_text, "schema");
    g = neuron::grammar::compile_json_schema(schema);
  } catch (const neuron::Error& e) {
    if (e.kind() != neuron::errc::invalid_argument) __builtin_trap();
    return 0;
  }
  neuron::grammar::Matcher m(std::make_shared<const neuron::grammar::CompiledGrammar>(std::move(g), byte_trie()));
  for (char c : answer)
    if (!m.accept_bytes(std::string_view(&c, 1))) return 0;
  if (m.complete() && !nlohmann::json::accept(answer)) __builtin_trap();  // the grammar completed text that is not JSON
  return 0;
}
