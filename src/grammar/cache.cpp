#include "grammar/cache.hpp"

namespace neuron::grammar {

Grammar Constraint::compile() const {
  switch (kind) {
    case Kind::json_object: return compile_json_object();
    case Kind::json_schema: return compile_json_schema(schema);
    case Kind::tool_call: return compile_tool_call(tools, tool_format);
  }
  return compile_json_object();
}

std::string Constraint::key() const {
  switch (kind) {
    case Kind::json_object: return "object";
    case Kind::json_schema: return "schema:" + schema.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    case Kind::tool_call: {
      std::string k = "tools/" + std::string(chat::to_string(tool_format));
      for (const ToolSpec& t : tools) {
        k += ':' + nlohmann::ordered_json(t.name).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
        k += '=' + t.parameters.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
      }
      return k;
    }
  }
  return {};
}

GrammarCache::GrammarCache(std::shared_ptr<const tokenizer::Tokenizer> tok, std::int64_t logits_vocab)
    : tok_(std::move(tok)), logits_vocab_(logits_vocab) {}

std::shared_ptr<const TokenTrie> GrammarCache::trie() {
  std::lock_guard lock(trie_mu_);
  if (!trie_) trie_ = std::make_shared<const TokenTrie>(*tok_, logits_vocab_);
  return trie_;
}

std::shared_ptr<const CompiledGrammar> GrammarCache::get(const Constraint& c) {
  const std::string key = c.key();
  {
    std::lock_guard lock(mu_);
    for (auto it = lru_.begin(); it != lru_.end(); ++it) {
      if (it->first != key) continue;
      lru_.splice(lru_.begin(), lru_, it);
      return lru_.front().second;
    }
  }
  auto compiled = std::make_shared<const CompiledGrammar>(c.compile(), trie());
  std::lock_guard lock(mu_);
  lru_.emplace_front(key, compiled);
  if (lru_.size() > kMaxGrammars) lru_.pop_back();
  return compiled;
}

}  // namespace neuron::grammar
