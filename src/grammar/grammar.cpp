#include "grammar/grammar.hpp"

#include <algorithm>

#include "util/error.hpp"

namespace neuron::grammar {

namespace {
[[noreturn]] void too_large() {
  fail(errc::invalid_argument, "the schema is too large: it compiles to more than " + std::to_string(kMaxElements) +
                                   " grammar elements or " + std::to_string(kMaxRules) + " rules");
}
}  // namespace

std::uint32_t GrammarBuilder::rule(std::string name) {
  if (g_.rules.size() >= kMaxRules) too_large();
  g_.rules.emplace_back();
  g_.rule_names.push_back(std::move(name));
  return static_cast<std::uint32_t>(g_.rules.size() - 1);
}

void GrammarBuilder::alt(std::uint32_t rule, const std::vector<Element>& seq) {
  NEURON_ASSERT(rule < g_.rules.size());
  if (g_.elements.size() + seq.size() + 1 > kMaxElements) too_large();
  g_.rules[rule].push_back(static_cast<std::uint32_t>(g_.elements.size()));
  g_.elements.insert(g_.elements.end(), seq.begin(), seq.end());
  g_.elements.push_back({Op::end, 0});
}

std::uint32_t GrammarBuilder::set_index(const ByteSet& s) {
  const auto& w = s.words();
  auto it = std::lower_bound(set_lookup_.begin(), set_lookup_.end(), w,
                             [](const auto& entry, const auto& key) { return entry.first < key; });
  if (it != set_lookup_.end() && it->first == w) return it->second;
  const auto index = static_cast<std::uint32_t>(g_.sets.size());
  g_.sets.push_back(s);
  set_lookup_.insert(it, {w, index});
  return index;
}

Element GrammarBuilder::set(const ByteSet& s) { return {Op::bytes, set_index(s)}; }
Element GrammarBuilder::star(const ByteSet& s) { return {Op::star, set_index(s)}; }

void GrammarBuilder::literal(std::vector<Element>& seq, std::string_view text) {
  for (char c : text) seq.push_back(set(ByteSet::of(static_cast<std::uint8_t>(c))));
}

Grammar GrammarBuilder::finish(std::uint32_t root) && {
  Grammar g = std::move(g_);
  NEURON_ASSERT(root < g.rules.size());
  g.root = root;
  const std::size_t n = g.rules.size();
  auto alt_elements = [&](std::uint32_t start) {
    std::size_t end = start;
    while (g.elements[end].op != Op::end) ++end;
    return std::pair{start, end};
  };

  // Productive rules (derive some finite string): a least fixpoint.
  std::vector<char> productive(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t r = 0; r < n; ++r) {
      if (productive[r]) continue;
      for (std::uint32_t a : g.rules[r]) {
        auto [b, e] = alt_elements(a);
        bool ok = true;
        for (std::size_t i = b; i < e && ok; ++i) ok = g.elements[i].op != Op::ref || productive[g.elements[i].arg];
        if (ok) {
          productive[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  if (!productive[root])
    fail(errc::invalid_argument, "the schema admits no finite value (every branch of '" + g.rule_names[root] +
                                     "' needs an infinite or impossible value)");
  for (std::size_t r = 0; r < n; ++r) {
    auto& alts = g.rules[r];
    std::erase_if(alts, [&](std::uint32_t a) {
      auto [b, e] = alt_elements(a);
      for (std::size_t i = b; i < e; ++i)
        if (g.elements[i].op == Op::ref && !productive[g.elements[i].arg]) return true;
      return false;
    });
  }

  // Nullable rules (derive the empty string), then the "calls without
  // consuming" graph; a cycle in it is left recursion.
  std::vector<char> nullable(n, 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (std::uint32_t a : g.rules[r]) {
        auto [b, e] = alt_elements(a);
        bool ok = true;
        for (std::size_t i = b; i < e && ok; ++i)
          ok = g.elements[i].op == Op::star || (g.elements[i].op == Op::ref && nullable[g.elements[i].arg]);
        if (ok) {
          nullable[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  std::vector<std::vector<std::uint32_t>> leftmost(n);
  for (std::size_t r = 0; r < n; ++r)
    for (std::uint32_t a : g.rules[r]) {
      auto [b, e] = alt_elements(a);
      for (std::size_t i = b; i < e; ++i) {
        const Element& el = g.elements[i];
        if (el.op == Op::bytes) break;
        if (el.op == Op::ref) {
          leftmost[r].push_back(el.arg);
          if (!nullable[el.arg]) break;
        }
      }
    }
  // Iterative DFS (rules may be many): 0 unvisited, 1 on the path, 2 done.
  std::vector<char> color(n, 0);
  std::vector<std::pair<std::uint32_t, std::size_t>> path;
  for (std::size_t start = 0; start < n; ++start) {
    if (color[start]) continue;
    path.push_back({static_cast<std::uint32_t>(start), 0});
    color[start] = 1;
    while (!path.empty()) {
      auto& [r, next] = path.back();
      if (next == leftmost[r].size()) {
        color[r] = 2;
        path.pop_back();
        continue;
      }
      const std::uint32_t s = leftmost[r][next++];
      if (color[s] == 1)
        fail(errc::invalid_argument, "the schema refers to itself without consuming input (a $ref cycle through '" +
                                         g.rule_names[s] + "' that can be entered again before any character)");
      if (color[s] == 0) {
        color[s] = 1;
        path.push_back({s, 0});
      }
    }
  }
  return g;
}

}  // namespace neuron::grammar
