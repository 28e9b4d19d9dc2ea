#include "grammar/token_trie.hpp"

#include <algorithm>
#include <numeric>

#include "util/error.hpp"

namespace neuron::grammar {

TokenTrie::TokenTrie(const tokenizer::Tokenizer& tok, std::int64_t logits_vocab) : logits_vocab_(logits_vocab) {
  NEURON_ASSERT(logits_vocab > 0);
  offsets_.assign(static_cast<std::size_t>(logits_vocab) + 1, 0);
  std::vector<std::int32_t> order;
  for (std::int32_t id = 0; id < logits_vocab; ++id) {
    offsets_[static_cast<std::size_t>(id)] = static_cast<std::uint32_t>(data_.size());
    if (!tok.is_known(id) || tok.is_special(id)) continue;
    const std::string_view b = tok.token_bytes(id);
    if (b.empty()) continue;
    data_.append(b);
    order.push_back(id);
  }
  offsets_.back() = static_cast<std::uint32_t>(data_.size());
  build(order);
}

TokenTrie::TokenTrie(const std::vector<std::string>& bytes_by_id) : logits_vocab_(static_cast<std::int64_t>(bytes_by_id.size())) {
  NEURON_ASSERT(!bytes_by_id.empty());
  offsets_.assign(bytes_by_id.size() + 1, 0);
  std::vector<std::int32_t> order;
  for (std::size_t id = 0; id < bytes_by_id.size(); ++id) {
    offsets_[id] = static_cast<std::uint32_t>(data_.size());
    data_ += bytes_by_id[id];
    if (!bytes_by_id[id].empty()) order.push_back(static_cast<std::int32_t>(id));
  }
  offsets_.back() = static_cast<std::uint32_t>(data_.size());
  build(order);
}

void TokenTrie::build(const std::vector<std::int32_t>& tokens) {
  std::vector<std::int32_t> order = tokens;
  std::sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    const auto ba = bytes(a), bb = bytes(b);
    return ba < bb || (ba == bb && a < b);
  });
  ids_ = order;

  // Breadth-first over sorted ranges, so each node's children are contiguous.
  struct Work {
    std::uint32_t node;
    std::size_t lo, hi, depth;
  };
  nodes_.push_back({});
  std::vector<Work> work{{0, 0, ids_.size(), 0}}, next;
  while (!work.empty()) {
    next.clear();
    for (const Work& w : work) {
      std::size_t lo = w.lo;
      nodes_[w.node].ids_begin = static_cast<std::uint32_t>(lo);
      while (lo < w.hi && bytes(ids_[lo]).size() == w.depth) ++lo;  // tokens ending here sort first
      nodes_[w.node].ids_end = static_cast<std::uint32_t>(lo);
      nodes_[w.node].first_child = static_cast<std::uint32_t>(nodes_.size());
      std::uint32_t children = 0;
      while (lo < w.hi) {
        const auto c = static_cast<std::uint8_t>(bytes(ids_[lo])[w.depth]);
        std::size_t hi = lo;
        while (hi < w.hi && static_cast<std::uint8_t>(bytes(ids_[hi])[w.depth]) == c) ++hi;
        Node child;
        child.byte = c;
        nodes_.push_back(child);
        next.push_back({static_cast<std::uint32_t>(nodes_.size() - 1), lo, hi, w.depth + 1});
        ++children;
        lo = hi;
      }
      nodes_[w.node].num_children = children;
      nodes_[w.node].subtree_end = static_cast<std::uint32_t>(w.hi);
    }
    work.swap(next);
  }
  // Children come after their parents, so one backward pass unions the bytes below each node.
  below_.assign(nodes_.size(), ByteSet{});
  for (std::size_t n = nodes_.size(); n-- > 0;) {
    const Node& node = nodes_[n];
    for (std::uint32_t c = node.first_child; c < node.first_child + node.num_children; ++c) {
      below_[n].add(nodes_[c].byte);
      below_[n].add_all(below_[c]);
    }
  }
}

std::string_view TokenTrie::bytes(std::int32_t id) const noexcept {
  if (id < 0 || id >= logits_vocab_) return {};
  const auto i = static_cast<std::size_t>(id);
  return std::string_view(data_).substr(offsets_[i], offsets_[i + 1] - offsets_[i]);
}

}  // namespace neuron::grammar
