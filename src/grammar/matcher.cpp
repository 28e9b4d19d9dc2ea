#include "grammar/matcher.hpp"

#include <algorithm>
#include <bit>

#include "util/error.hpp"

namespace neuron::grammar {

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenTrie> trie)
    : grammar_(std::move(grammar)), trie_(std::move(trie)) {
  NEURON_ASSERT(trie_ != nullptr);
}

std::shared_ptr<const TokenMask> CompiledGrammar::cached(const std::string& key) const {
  std::lock_guard lock(mu_);
  auto it = masks_.find(key);
  if (it == masks_.end()) {
    stats_.misses += 1;
    return nullptr;
  }
  stats_.hits += 1;
  return it->second;
}

void CompiledGrammar::remember(const std::string& key, std::shared_ptr<const TokenMask> mask) const {
  std::lock_guard lock(mu_);
  if (masks_.size() >= kMaxCachedMasks) masks_.clear();  // a crude bound: states repeat, so it refills with the live ones
  masks_.emplace(key, std::move(mask));
}

CompiledGrammar::CacheStats CompiledGrammar::cache_stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

Matcher::Matcher(std::shared_ptr<const CompiledGrammar> grammar, std::uint64_t max_mask_work)
    : g_(std::move(grammar)), max_mask_work_(max_mask_work) {
  NEURON_ASSERT(g_ != nullptr);
  table_.resize(256);
  begin_round();
  const Grammar& gr = g_->grammar();
  for (std::uint32_t a : gr.rules[gr.root]) expand(a, -1, state_);
}

void Matcher::begin_round() {
  gen_ += 1;
  round_nodes_ = 0;
  if (gen_ == 0) {  // wrapped: forget every slot for real
    for (Slot& s : table_) s = Slot{};
    gen_ = 1;
  }
}

namespace {
std::uint64_t slot_key(std::uint32_t pos, std::int32_t parent) {
  return (std::uint64_t{pos} << 32) | static_cast<std::uint32_t>(parent + 1);
}
std::size_t slot_hash(std::uint64_t key) { return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> 17); }
}  // namespace

std::size_t Matcher::slot(std::uint32_t pos, std::int32_t parent) {
  if ((round_nodes_ + 1) * 2 >= table_.size()) {  // keep the table at most half full
    std::vector<Slot> old(table_.size() * 2);
    old.swap(table_);
    for (const Slot& s : old) {
      if (s.gen != gen_) continue;
      std::size_t i = slot_hash(s.key) & (table_.size() - 1);
      while (table_[i].gen == gen_) i = (i + 1) & (table_.size() - 1);
      table_[i] = s;
    }
  }
  const std::uint64_t key = slot_key(pos, parent);
  std::size_t i = slot_hash(key) & (table_.size() - 1);
  while (table_[i].gen == gen_ && table_[i].key != key) i = (i + 1) & (table_.size() - 1);
  if (table_[i].gen != gen_) {
    table_[i] = Slot{key, -1, gen_, false};
    round_nodes_ += 1;
  }
  return i;
}

std::int32_t Matcher::node(std::uint32_t pos, std::int32_t parent) {
  const std::size_t i = slot(pos, parent);
  if (table_[i].id < 0) {
    const std::uint32_t depth = parent < 0 ? 1 : arena_[static_cast<std::size_t>(parent)].depth + 1;
    if (depth > kMaxStackDepth) return -1;
    arena_.push_back({pos, parent, depth});
    table_[i].id = static_cast<std::int32_t>(arena_.size() - 1);
  }
  return table_[i].id;
}

void Matcher::expand(std::uint32_t pos, std::int32_t parent, State& out, std::int32_t existing) {
  const Grammar& g = g_->grammar();
  // An explicit stack: expansion never recurses on the C++ stack.
  std::vector<Item>& work = work_;
  work.clear();
  work.push_back({pos, parent, existing});
  while (!work.empty()) {
    const Item it = work.back();
    work.pop_back();
    // Each (position, parent) is expanded once a round: diamonds and repeats cost nothing more.
    const std::size_t si = slot(it.pos, it.parent);
    if (table_[si].expanded) continue;
    table_[si].expanded = true;
    const Element& el = g.elements[it.pos];
    switch (el.op) {
      case Op::bytes:
      case Op::star: {
        if (it.existing >= 0 && table_[si].id < 0) table_[si].id = it.existing;
        const std::int32_t id = node(it.pos, it.parent);
        if (id < 0) break;
        if (out.tops.size() < kMaxStacks) out.tops.push_back(id);
        if (el.op == Op::star) work.push_back({it.pos + 1, it.parent, -1});
        break;
      }
      case Op::end:
        if (it.parent < 0) {
          out.accepted = true;
        } else {
          const Node& p = arena_[static_cast<std::size_t>(it.parent)];
          work.push_back({p.pos, p.parent, it.parent});
        }
        break;
      case Op::ref: {
        const std::uint32_t cont = it.pos + 1;
        std::int32_t frame = it.parent;
        if (g.elements[cont].op != Op::end) {  // not a tail call: remember where to come back
          frame = node(cont, it.parent);
          if (frame < 0) break;
        }
        for (std::uint32_t a : g.rules[el.arg]) work.push_back({a, frame, -1});
        break;
      }
    }
  }
}

void Matcher::advance(const State& in, std::uint8_t byte, State& out) {
  begin_round();
  out.tops.clear();
  out.accepted = false;
  const Grammar& g = g_->grammar();
  for (std::int32_t id : in.tops) {
    const Node n = arena_[static_cast<std::size_t>(id)];
    const Element& el = g.elements[n.pos];
    if (!g.sets[el.arg].has(byte)) continue;
    if (el.op == Op::bytes) expand(n.pos + 1, n.parent, out);
    else expand(n.pos, n.parent, out, id);  // a star stays where it is (and may still be left)
  }
}

bool Matcher::accept_bytes(std::string_view bytes) {
  if (bytes.empty()) return false;
  State cur = state_;
  for (char c : bytes) {
    advance(cur, static_cast<std::uint8_t>(c), scratch_);
    if (scratch_.tops.empty() && !scratch_.accepted) return false;
    std::swap(cur, scratch_);
  }
  state_ = std::move(cur);
  current_.reset();
  collect_garbage();
  return true;
}

bool Matcher::accept_token(std::int32_t id) { return accept_bytes(g_->trie().bytes(id)); }

std::string Matcher::key(const State& s) const {
  std::vector<std::string> stacks;
  stacks.reserve(s.tops.size());
  for (std::int32_t id : s.tops) {
    std::string k;
    for (std::int32_t n = id; n >= 0; n = arena_[static_cast<std::size_t>(n)].parent) {
      const std::uint32_t pos = arena_[static_cast<std::size_t>(n)].pos;
      k.append(reinterpret_cast<const char*>(&pos), sizeof pos);
    }
    stacks.push_back(std::move(k));
  }
  std::sort(stacks.begin(), stacks.end());
  std::string out(1, s.accepted ? 'A' : 'a');
  for (const std::string& k : stacks) {
    const std::uint32_t len = static_cast<std::uint32_t>(k.size());
    out.append(reinterpret_cast<const char*>(&len), sizeof len);
    out += k;
  }
  return out;
}

void Matcher::compute(const State& s, TokenMask& out) {
  const TokenTrie& trie = g_->trie();
  const auto& nodes = trie.nodes();
  const auto& ids = trie.ids();
  const Grammar& g = g_->grammar();
  out.bits.assign(static_cast<std::size_t>((trie.logits_vocab() + 63) / 64), 0);
  out.count = 0;
  const std::size_t mark = arena_.size();
  if (levels_.empty()) levels_.resize(1);
  levels_[0] = s;
  struct Frame {
    std::uint32_t node, next;
  };
  std::vector<Frame> path{{0, 0}};
  std::uint64_t work = 0;  // stacks advanced; bounded so that no schema makes a step slow
  while (!path.empty() && work < max_mask_work_) {
    Frame& f = path.back();
    const TokenTrie::Node& parent = nodes[f.node];
    if (f.next == parent.num_children) {
      path.pop_back();
      continue;
    }
    const std::uint32_t child = parent.first_child + f.next++;
    const std::size_t depth = path.size();
    if (levels_.size() <= depth) levels_.resize(depth + 1);
    work += levels_[depth - 1].tops.size();
    advance(levels_[depth - 1], nodes[child].byte, levels_[depth]);
    const State& here = levels_[depth];
    if (here.tops.empty() && !here.accepted) continue;
    // A top that loops on every byte below (a string's content) keeps the
    // whole subtree alive: its tokens are allowed without walking them.
    bool whole = false;
    if (nodes[child].num_children > 0)
      for (std::int32_t id : here.tops) {
        const Element& el = g.elements[arena_[static_cast<std::size_t>(id)].pos];
        if (el.op == Op::star && g.sets[el.arg].contains_all(trie.below(child))) {
          whole = true;
          break;
        }
      }
    const std::uint32_t end = whole ? nodes[child].subtree_end : nodes[child].ids_end;
    for (std::uint32_t i = nodes[child].ids_begin; i < end; ++i) {
      const auto id = static_cast<std::uint32_t>(ids[i]);
      out.bits[id >> 6] |= std::uint64_t{1} << (id & 63);
      out.count += 1;
    }
    if (!whole && !here.tops.empty() && nodes[child].num_children > 0) path.push_back({child, 0});
  }
  arena_.resize(mark);  // the walk's nodes are garbage
}

const TokenMask& Matcher::mask(std::span<const std::int32_t> eos_ids) {
  if (!current_) {
    const std::string k = key(state_);
    current_ = g_->cached(k);
    if (!current_) {
      auto m = std::make_shared<TokenMask>();
      compute(state_, *m);
      g_->remember(k, m);
      current_ = std::move(m);
    }
  }
  return with_eos(eos_ids);
}

const TokenMask* Matcher::cached_mask(std::span<const std::int32_t> eos_ids) {
  if (!current_) current_ = g_->cached(key(state_));
  if (!current_) return nullptr;
  return &with_eos(eos_ids);
}

bool Matcher::allows(std::int32_t id, std::span<const std::int32_t> eos_ids) {
  if (std::find(eos_ids.begin(), eos_ids.end(), id) != eos_ids.end()) return state_.accepted;
  const std::string_view bytes = g_->trie().bytes(id);
  if (bytes.empty()) return false;
  const std::size_t mark = arena_.size();
  State cur = state_;
  bool ok = true;
  for (char c : bytes) {
    advance(cur, static_cast<std::uint8_t>(c), scratch_);
    if (scratch_.tops.empty() && !scratch_.accepted) {
      ok = false;
      break;
    }
    std::swap(cur, scratch_);
  }
  arena_.resize(mark);  // a trial: its nodes are garbage
  return ok;
}

const TokenMask& Matcher::with_eos(std::span<const std::int32_t> eos_ids) {
  if (!state_.accepted) return *current_;
  with_eos_ = *current_;
  for (std::int32_t id : eos_ids) {
    if (id < 0 || id >= g_->logits_vocab()) continue;
    std::uint64_t& w = with_eos_.bits[static_cast<std::size_t>(id) >> 6];
    const std::uint64_t bit = std::uint64_t{1} << (id & 63);
    if (!(w & bit)) with_eos_.count += 1;
    w |= bit;
  }
  return with_eos_;
}

void Matcher::collect_garbage() {
  if (arena_.size() < 4096) return;
  // Parents are always made before their children, so one pass in index order compacts.
  std::vector<char> live(arena_.size(), 0);
  for (std::int32_t id : state_.tops)
    for (std::int32_t n = id; n >= 0 && !live[static_cast<std::size_t>(n)]; n = arena_[static_cast<std::size_t>(n)].parent)
      live[static_cast<std::size_t>(n)] = 1;
  std::size_t count = static_cast<std::size_t>(std::count(live.begin(), live.end(), 1));
  if (count * 4 > arena_.size()) return;
  std::vector<std::int32_t> remap(arena_.size(), -1);
  std::vector<Node> compact;
  compact.reserve(count);
  for (std::size_t i = 0; i < arena_.size(); ++i) {
    if (!live[i]) continue;
    Node n = arena_[i];
    if (n.parent >= 0) n.parent = remap[static_cast<std::size_t>(n.parent)];
    remap[i] = static_cast<std::int32_t>(compact.size());
    compact.push_back(n);
  }
  for (std::int32_t& id : state_.tops) id = remap[static_cast<std::size_t>(id)];
  arena_.swap(compact);
}

}  // namespace neuron::grammar
