#include "grammar/cache.hpp"

namespace neuron::grammar {

Grammar Constraint::compile() const {
  switch (kind) {
    case Kind::json_object: return tools.empty() ? compile_json_object() : compile_tool_call_or_json(tools, nullptr, tool_format);
    case Kind::json_schema: return tools.empty() ? compile_json_schema(schema) : compile_tool_call_or_json(tools, &schema, tool_format);
    case Kind::tool_call: return compile_tool_call(tools, tool_format);
  }
  return compile_json_object();
}

std::string Constraint::key() const {
  auto dump = [](const nlohmann::ordered_json& j) { return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace); };
  std::string k;
  switch (kind) {
    case Kind::json_object: k = "object"; break;
    case Kind::json_schema: k = "schema:" + dump(schema); break;
    case Kind::tool_call: k = "tools/" + std::string(chat::to_string(tool_format)); break;
  }
  if (kind != Kind::tool_call && !tools.empty()) k += "|or_tools/" + std::string(chat::to_string(tool_format));
  for (const ToolSpec& t : tools) k += ':' + dump(nlohmann::ordered_json(t.name)) + '=' + dump(t.parameters);
  return k;
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
