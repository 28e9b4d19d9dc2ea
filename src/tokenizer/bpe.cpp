#include "tokenizer/bpe.hpp"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "tokenizer/byte_level.hpp"
#include "util/error.hpp"

namespace neuron::tokenizer {

namespace {

[[noreturn]] void bad_bpe(const std::string& msg) { fail(errc::bad_model, "tokenizer.json: " + msg); }

std::string short_json(const nlohmann::json& j) {
  std::string s = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// A merge rule as its two tokens: "a b" (older files) or ["a", "b"].
std::pair<std::string_view, std::string_view> parse_merge(const nlohmann::json& m, std::size_t i) {
  if (m.is_string()) {
    const std::string_view s = m.get_ref<const std::string&>();
    const auto sp = s.find(' ');
    if (sp == std::string::npos || sp == 0 || sp + 1 == s.size() || s.find(' ', sp + 1) != std::string::npos)
      bad_bpe("model.merges[" + std::to_string(i) + "] must be two tokens separated by one space, got " + short_json(m));
    return {s.substr(0, sp), s.substr(sp + 1)};
  }
  if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string())
    return {m[0].get_ref<const std::string&>(), m[1].get_ref<const std::string&>()};
  bad_bpe("model.merges[" + std::to_string(i) + "] must be \"a b\" or [\"a\", \"b\"], got " + short_json(m));
}

}  // namespace

Bpe Bpe::from_json(const nlohmann::json& model) {
  if (!model.is_object()) bad_bpe("\"model\" must be an object");
  if (const auto t = model.find("type"); t != model.end() && !(t->is_string() && t->get<std::string>() == "BPE"))
    bad_bpe("unsupported model type " + short_json(*t) + " (neuron serves byte-level BPE tokenizers)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const auto it = model.find(key);
    if (it != model.end() && !it->is_null() && !(it->is_string() && it->get_ref<const std::string&>().empty()))
      bad_bpe(std::string("model.") + key + " is not supported (byte-level BPE does not use it)");
  }
  // Dropout makes Hugging Face's output random; inference tokenizers leave it off.
  if (const auto d = model.find("dropout"); d != model.end() && !d->is_null() && !(d->is_number() && d->get<double>() == 0.0))
    bad_bpe("model.dropout is not supported");

  Bpe bpe;
  if (const auto im = model.find("ignore_merges"); im != model.end() && !im->is_null()) {
    if (!im->is_boolean()) bad_bpe("model.ignore_merges must be a boolean");
    bpe.ignore_merges_ = im->get<bool>();
  }

  const auto v = model.find("vocab");
  if (v == model.end() || !v->is_object()) bad_bpe("model.vocab is missing or not an object");
  if (v->empty()) bad_bpe("model.vocab is empty");
  bpe.vocab_.reserve(v->size());
  std::int64_t max_id = -1;
  for (const auto& [token, id] : v->items()) {
    if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() >= kMaxTokenId)
      bad_bpe("model.vocab[" + short_json(token) + "] must be a token id in [0, " + std::to_string(kMaxTokenId) +
          "), got " + short_json(id));
    max_id = std::max(max_id, id.get<std::int64_t>());
    bpe.vocab_.emplace(token, static_cast<std::int32_t>(id.get<std::int64_t>()));
  }
  bpe.tokens_.assign(static_cast<std::size_t>(max_id + 1), nullptr);
  for (const auto& [token, id] : bpe.vocab_) {
    if (bpe.tokens_[id] != nullptr) bad_bpe("model.vocab gives id " + std::to_string(id) + " to two tokens");
    bpe.tokens_[id] = &token;
  }
  for (int b = 0; b < 256; ++b) {
    const auto it = bpe.vocab_.find(byte_level_char(static_cast<unsigned char>(b)));
    bpe.byte_ids_[b] = it == bpe.vocab_.end() ? -1 : it->second;
  }

  const auto m = model.find("merges");
  if (m != model.end() && !m->is_null() && !m->is_array()) bad_bpe("model.merges must be an array");
  const std::size_t n_merges = (m == model.end() || m->is_null()) ? 0 : m->size();
  bpe.merges_ = MergeTable(n_merges);
  std::string joined, left, right;
  for (std::size_t i = 0; i < n_merges; ++i) {
    const auto [a, b] = parse_merge((*m)[i], i);
    left.assign(a);
    right.assign(b);
    const auto ia = bpe.vocab_.find(left), ib = bpe.vocab_.find(right);
    if (ia == bpe.vocab_.end() || ib == bpe.vocab_.end())
      bad_bpe("model.merges[" + std::to_string(i) + "] names token '" + (ia == bpe.vocab_.end() ? left : right) +
          "' which is not in model.vocab");
    joined.assign(a).append(b);
    const auto ij = bpe.vocab_.find(joined);
    if (ij == bpe.vocab_.end())
      bad_bpe("model.merges[" + std::to_string(i) + "] produces '" + joined + "' which is not in model.vocab");
    bpe.merges_.insert(ia->second, ib->second, Merge{static_cast<std::int32_t>(i), ij->second});
  }
  return bpe;
}

std::optional<std::int32_t> Bpe::token_to_id(std::string_view token) const {
  const auto it = vocab_.find(std::string(token));
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* Bpe::id_to_token(std::int32_t id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= tokens_.size()) return nullptr;
  return tokens_[id];
}

void Bpe::tokenize(std::string_view word, std::vector<std::int32_t>& out) const {
  if (cache_.lookup(word, out)) return;
  const std::size_t first = out.size();
  if (ignore_merges_) {
    if (const auto it = vocab_.find(to_byte_level(word)); it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  merge_word(word, out);
  cache_.insert(word, std::span<const std::int32_t>(out).subspan(first));
}

void Bpe::merge_word(std::string_view word, std::vector<std::int32_t>& out) const {
  // Symbols form a doubly linked list over the word's bytes; a merge folds
  // the right symbol into the left one and marks it dead.
  struct Symbol {
    std::int32_t id;
    std::int32_t prev;  // index, -1 at the start
    std::int32_t next;  // index, -1 at the end
    bool alive;
  };
  struct Candidate {
    std::int32_t rank;
    std::int32_t pos;  // index of the pair's left symbol
    std::int32_t id;   // what the pair merges into, to detect stale entries
  };
  // Min-heap on (rank, pos): lowest rank first, leftmost on ties.
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  thread_local std::vector<Symbol> sym;
  thread_local std::vector<Candidate> heap;
  sym.clear();
  heap.clear();

  for (unsigned char b : word) {
    const std::int32_t id = byte_ids_[b];
    // Hugging Face drops characters missing from the vocab when there is no
    // unk token; a byte-level vocab has all 256, so this only guards odd files.
    if (id < 0) continue;
    const auto n = static_cast<std::int32_t>(sym.size());
    sym.push_back({id, n - 1, -1, true});
    if (n > 0) sym[n - 1].next = n;
  }
  const auto push_pair = [&](std::int32_t pos) {
    const std::int32_t nx = sym[pos].next;
    if (nx < 0) return;
    if (const Merge* m = merges_.find(sym[pos].id, sym[nx].id)) {
      heap.push_back({m->rank, pos, m->id});
      std::push_heap(heap.begin(), heap.end(), later);
    }
  };
  for (std::int32_t i = 0; i + 1 < static_cast<std::int32_t>(sym.size()); ++i) push_pair(i);

  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& left = sym[c.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = sym[left.next];
    // The pair at pos may have changed since this entry was queued.
    const Merge* m = merges_.find(left.id, right.id);
    if (m == nullptr || m->id != c.id) continue;
    left.id = c.id;
    left.next = right.next;
    right.alive = false;
    if (left.next >= 0) sym[left.next].prev = c.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(c.pos);
  }
  for (std::int32_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

}  // namespace neuron::tokenizer
