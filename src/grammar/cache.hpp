#pragma once
// The entry point for request handlers: a constraint (what the client asked
// for) -> a CompiledGrammar for one model, reused across requests.
//
// One GrammarCache per loaded model (engine::ModelAssets::grammars). It
// builds the model's TokenTrie on first use (about 0.1 s for Qwen3's 152k
// tokens) and keeps the last kMaxGrammars compiled constraints, so a client
// that sends the same schema again reuses its grammar and its warm mask
// cache. Thread-safe; compilation runs outside the lock.
//
//   auto g = assets.grammars->get(grammar::Constraint::json_schema(schema));  // throws Error{invalid_argument}
//   engine::CompletionRequest cr; cr.grammar = g;
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "grammar/json_schema.hpp"
#include "grammar/matcher.hpp"
#include "tokenizer/tokenizer.hpp"

namespace neuron::grammar {

struct Constraint {
  enum class Kind { json_object, json_schema, tool_call };
  Kind kind = Kind::json_object;
  nlohmann::ordered_json schema;  // json_schema
  std::vector<ToolSpec> tools;    // tool_call: the allowed tools (one for a named tool_choice);
                                  // json_object / json_schema: tools a call of which may come instead (tool_choice
                                  // "auto"; tagged calls only: hermes, qwen3_coder)
  chat::ToolCallFormat tool_format = chat::ToolCallFormat::hermes;  // how the model writes a call (its template's)

  static Constraint json_object() { return {}; }
  static Constraint json_schema(nlohmann::ordered_json s) { return {Kind::json_schema, std::move(s), {}}; }
  static Constraint tool_call(std::vector<ToolSpec> t) { return {Kind::tool_call, nullptr, std::move(t)}; }

  // The grammar (Error{invalid_argument} naming what is unsupported).
  Grammar compile() const;
  // A canonical text: equal constraints have equal keys.
  std::string key() const;
};

class GrammarCache {
 public:
  static constexpr std::size_t kMaxGrammars = 16;  // with their mask caches: at most ~80 MB per model

  // `logits_vocab`: the model's logits row size (config vocab_size).
  GrammarCache(std::shared_ptr<const tokenizer::Tokenizer> tok, std::int64_t logits_vocab);

  std::shared_ptr<const CompiledGrammar> get(const Constraint& c);
  std::shared_ptr<const TokenTrie> trie();

 private:
  std::shared_ptr<const tokenizer::Tokenizer> tok_;
  std::int64_t logits_vocab_;
  std::mutex mu_;
  std::shared_ptr<const TokenTrie> trie_;  // built on first use, under trie_mu_
  std::mutex trie_mu_;
  std::list<std::pair<std::string, std::shared_ptr<const CompiledGrammar>>> lru_;  // most recent first
};

}  // namespace neuron::grammar
