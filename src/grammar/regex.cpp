#include "grammar/regex.hpp"

#include <algorithm>
#include <map>
#include <memory>

#include "util/error.hpp"

namespace neuron::grammar {

// ---- CodeSet ----

CodeSet CodeSet::of(char32_t lo, char32_t hi) {
  CodeSet s;
  s.add(lo, hi);
  return s;
}

void CodeSet::add(char32_t lo, char32_t hi) {
  if (lo > hi) return;
  ranges_.push_back({lo, hi});
  normalize();
}

void CodeSet::add_all(const CodeSet& o) {
  ranges_.insert(ranges_.end(), o.ranges_.begin(), o.ranges_.end());
  normalize();
}

void CodeSet::normalize() {
  std::sort(ranges_.begin(), ranges_.end());
  std::vector<Range> out;
  for (const Range& r : ranges_) {
    if (!out.empty() && r.first <= out.back().second + 1) out.back().second = std::max(out.back().second, r.second);
    else out.push_back(r);
  }
  ranges_ = std::move(out);
}

CodeSet CodeSet::complement() const {
  CodeSet out;
  char32_t next = 0;
  for (const Range& r : ranges_) {
    if (r.first > next) out.ranges_.push_back({next, r.first - 1});
    next = r.second + 1;
  }
  if (next <= kMaxCodePoint) out.ranges_.push_back({next, kMaxCodePoint});
  return out;
}

CodeSet CodeSet::intersect(const CodeSet& o) const {
  CodeSet out;
  std::size_t i = 0, j = 0;
  while (i < ranges_.size() && j < o.ranges_.size()) {
    const char32_t lo = std::max(ranges_[i].first, o.ranges_[j].first);
    const char32_t hi = std::min(ranges_[i].second, o.ranges_[j].second);
    if (lo <= hi) out.ranges_.push_back({lo, hi});
    if (ranges_[i].second < o.ranges_[j].second) ++i;
    else ++j;
  }
  return out;
}

bool CodeSet::has(char32_t c) const {
  auto it = std::upper_bound(ranges_.begin(), ranges_.end(), c, [](char32_t v, const Range& r) { return v < r.first; });
  return it != ranges_.begin() && std::prev(it)->second >= c;
}

std::u32string decode_utf8(std::string_view text) {
  std::u32string out;
  for (std::size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    int n = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > text.size()) fail(errc::invalid_argument, "the pattern is not valid UTF-8");
    char32_t c = n == 1 ? b : b & (0x7f >> n);
    for (int k = 1; k < n; ++k) {
      const auto cb = static_cast<unsigned char>(text[i + k]);
      if ((cb & 0xc0) != 0x80) fail(errc::invalid_argument, "the pattern is not valid UTF-8");
      c = (c << 6) | (cb & 0x3f);
    }
    static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < kMin[n] || c > kMaxCodePoint || (c >= 0xd800 && c <= 0xdfff))
      fail(errc::invalid_argument, "the pattern is not valid UTF-8");
    out.push_back(c);
    i += n;
  }
  return out;
}

bool Nfa::matches(std::u32string_view text) const {
  std::vector<char> cur(edges.size(), 0), next(edges.size(), 0);
  cur[start] = 1;
  for (char32_t c : text) {
    std::fill(next.begin(), next.end(), 0);
    bool any = false;
    for (std::size_t q = 0; q < edges.size(); ++q) {
      if (!cur[q]) continue;
      for (const Edge& e : edges[q])
        if (sets[e.set].has(c)) next[e.to] = 1, any = true;
    }
    if (!any) return false;
    std::swap(cur, next);
  }
  for (std::size_t q = 0; q < edges.size(); ++q)
    if (cur[q] && accepting[q]) return true;
  return false;
}

// ---- parsing ----

namespace {

constexpr int kMaxGroupDepth = 64;

struct Node {
  enum Kind { set, concat, alt, repeat, bol, eol } kind;
  CodeSet chars;                              // set
  std::vector<std::unique_ptr<Node>> kids;   // concat, alt, repeat (one)
  int min = 0, max = 0;                       // repeat; max -1: unbounded
};
using NodePtr = std::unique_ptr<Node>;

NodePtr make(Node::Kind k) {
  auto n = std::make_unique<Node>();
  n->kind = k;
  return n;
}

CodeSet digits() { return CodeSet::of('0', '9'); }
CodeSet word() {
  CodeSet s = CodeSet::of('a', 'z');
  s.add('A', 'Z');
  s.add('0', '9');
  s.add('_', '_');
  return s;
}
CodeSet space() {
  CodeSet s = CodeSet::of('\t', '\r');  // \t \n \v \f \r
  for (char32_t c : {U' ', U'\u00a0', U'\u1680', U'\u2028', U'\u2029', U'\u202f', U'\u205f', U'\u3000', U'\ufeff'})
    s.add(c, c);
  s.add(0x2000, 0x200a);
  return s;
}
CodeSet line_terminators() {
  CodeSet s;
  for (char32_t c : {U'\n', U'\r', U'\u2028', U'\u2029'}) s.add(c, c);
  return s;
}

class Parser {
 public:
  explicit Parser(std::string_view pattern) : text_(decode_utf8(pattern)) {}

  NodePtr parse() {
    NodePtr n = alternation(0);
    if (i_ < text_.size()) error("unbalanced ')'");
    return n;
  }

 private:
  [[noreturn]] void error(const std::string& what) const {
    fail(errc::invalid_argument, "pattern: " + what + " at character " + std::to_string(i_));
  }
  bool more() const { return i_ < text_.size(); }
  char32_t peek() const { return text_[i_]; }
  bool eat(char32_t c) {
    if (more() && peek() == c) return ++i_, true;
    return false;
  }

  NodePtr alternation(int depth) {
    if (depth > kMaxGroupDepth) error("groups nested too deeply");
    NodePtr first = sequence(depth);
    if (!more() || peek() != '|') return first;
    NodePtr n = make(Node::alt);
    n->kids.push_back(std::move(first));
    while (eat('|')) n->kids.push_back(sequence(depth));
    return n;
  }

  NodePtr sequence(int depth) {
    NodePtr n = make(Node::concat);
    while (more() && peek() != '|' && peek() != ')') {
      NodePtr atom = this->atom(depth);
      if (atom->kind == Node::bol || atom->kind == Node::eol) {
        n->kids.push_back(std::move(atom));
        continue;
      }
      n->kids.push_back(quantified(std::move(atom)));
    }
    return n;
  }

  // A decimal number at the cursor, or -1 if none.
  long number() {
    long v = -1;
    while (more() && peek() >= '0' && peek() <= '9') {
      v = (v < 0 ? 0 : v) * 10 + (peek() - '0');
      if (v > 100000) v = 100000;
      ++i_;
    }
    return v;
  }

  NodePtr quantified(NodePtr atom) {
    for (;;) {
      if (!more()) return atom;
      int min = 0, max = 0;
      const std::size_t at = i_;
      const char32_t c = peek();
      if (c == '*') min = 0, max = -1, ++i_;
      else if (c == '+') min = 1, max = -1, ++i_;
      else if (c == '?') min = 0, max = 1, ++i_;
      else if (c == '{') {
        ++i_;
        const long lo = number();
        long hi = lo;
        if (lo >= 0 && eat(',')) hi = more() && peek() == '}' ? -1 : number();
        if (lo < 0 || !eat('}')) {  // not a quantifier: a literal '{' (Annex B)
          i_ = at;
          return atom;
        }
        if (hi != -1 && hi < lo) error("repetition {n,m} with m < n");
        if (lo > 1000 || hi > 1000) error("repetition counts above 1000 are not supported");
        min = static_cast<int>(lo), max = static_cast<int>(hi);
      } else {
        return atom;
      }
      eat('?');  // lazy: the same strings
      if (more() && (peek() == '*' || peek() == '+' || peek() == '?')) error("nothing to repeat");
      NodePtr r = make(Node::repeat);
      r->min = min, r->max = max;
      r->kids.push_back(std::move(atom));
      atom = std::move(r);
    }
  }

  NodePtr set_node(CodeSet s) {
    NodePtr n = make(Node::set);
    n->chars = std::move(s);
    return n;
  }

  NodePtr atom(int depth) {
    const char32_t c = text_[i_++];
    switch (c) {
      case '^': return make(Node::bol);
      case '$': return make(Node::eol);
      case '.': return set_node(line_terminators().complement());
      case '[': return set_node(char_class());
      case '*':
      case '+':
      case '?': --i_, error("nothing to repeat");
      case '(': {
        if (eat('?')) {
          if (eat(':')) {
          } else if (more() && peek() == '<' && i_ + 1 < text_.size() && text_[i_ + 1] != '=' && text_[i_ + 1] != '!') {
            while (more() && peek() != '>') ++i_;
            if (!eat('>')) error("unterminated group name");
          } else if (more() && (peek() == '=' || peek() == '!' || peek() == '<')) {
            error("lookaround assertions are not supported");
          } else {
            error("inline flags are not supported");
          }
        }
        NodePtr inner = alternation(depth + 1);
        if (!eat(')')) error("missing ')'");
        return inner;
      }
      case ')': --i_, error("unbalanced ')'");
      case '\\': {
        CodeSet s;
        escape(/*in_class=*/false, s);
        return set_node(std::move(s));
      }
      default: return set_node(CodeSet::of(c, c));
    }
  }

  char32_t hex(int n) {
    char32_t v = 0;
    for (int k = 0; k < n; ++k) {
      if (!more()) error("bad hexadecimal escape");
      const char32_t h = peek();
      int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (d < 0) error("bad hexadecimal escape");
      v = v * 16 + d;
      ++i_;
    }
    return v;
  }

  // After a backslash: the escape's code points into `out`.
  void escape(bool in_class, CodeSet& out) {
    if (!more()) error("'\\' at the end of the pattern");
    const char32_t c = text_[i_++];
    auto one = [&](char32_t v) { out.add(v, v); };
    switch (c) {
      case 'd': return out.add_all(digits());
      case 'D': return out.add_all(digits().complement());
      case 'w': return out.add_all(word());
      case 'W': return out.add_all(word().complement());
      case 's': return out.add_all(space());
      case 'S': return out.add_all(space().complement());
      case 't': return one('\t');
      case 'n': return one('\n');
      case 'r': return one('\r');
      case 'f': return one('\f');
      case 'v': return one('\v');
      case '0':
        if (more() && peek() >= '0' && peek() <= '9') error("octal escapes are not supported");
        return one(0);
      case 'x': return one(hex(2));
      case 'u':
        if (eat('{')) {
          char32_t v = 0;
          int n = 0;
          while (more() && peek() != '}') {
            v = v * 16 + hex(1);
            if (++n > 6 || v > kMaxCodePoint) error("bad \\u{...} escape");
          }
          if (!eat('}') || n == 0) error("bad \\u{...} escape");
          return one(v);
        } else {
          char32_t v = hex(4);
          if (v >= 0xd800 && v <= 0xdbff && i_ + 1 < text_.size() && text_[i_] == '\\' && text_[i_ + 1] == 'u') {
            const std::size_t save = i_;
            i_ += 2;
            const char32_t lo = hex(4);
            if (lo >= 0xdc00 && lo <= 0xdfff) return one(0x10000 + ((v - 0xd800) << 10) + (lo - 0xdc00));
            i_ = save;
          }
          if (v >= 0xd800 && v <= 0xdfff) error("a lone surrogate escape is not supported");
          return one(v);
        }
      case 'c':
        if (more() && ((peek() >= 'a' && peek() <= 'z') || (peek() >= 'A' && peek() <= 'Z'))) return one(text_[i_++] % 32);
        error("bad \\c escape");
      case 'b':
        if (in_class) return one('\b');
        error("word boundary assertions (\\b) are not supported");
      case 'B': error("word boundary assertions (\\B) are not supported");
      case 'k': error("named backreferences are not supported");
      default:
        if (c >= '1' && c <= '9') error("backreferences are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') error(std::string("unknown escape '\\") + static_cast<char>(c) + "'");
        return one(c);  // identity escape of punctuation (or any other character)
    }
  }

  CodeSet char_class() {
    const bool negate = eat('^');
    CodeSet s;
    bool first = true;
    for (;;) {
      if (!more()) error("missing ']'");
      if (peek() == ']' && !first) break;
      if (peek() == ']' && first) {  // "[]" matches nothing; "[^]" anything
        break;
      }
      first = false;
      // One class atom: a code point, or a set from an escape like \d.
      auto class_atom = [&](CodeSet& as_set) -> long {
        const char32_t c = text_[i_++];
        if (c != '\\') return static_cast<long>(c);
        CodeSet e;
        escape(/*in_class=*/true, e);
        if (e.ranges().size() == 1 && e.ranges()[0].first == e.ranges()[0].second) return static_cast<long>(e.ranges()[0].first);
        as_set = std::move(e);
        return -1;
      };
      CodeSet lo_set;
      const long lo = class_atom(lo_set);
      if (more() && peek() == '-' && i_ + 1 < text_.size() && text_[i_ + 1] != ']') {
        ++i_;
        CodeSet hi_set;
        const long hi = class_atom(hi_set);
        if (lo < 0 || hi < 0) error("a class range with a class escape as an end");
        if (hi < lo) error("class range out of order");
        s.add(static_cast<char32_t>(lo), static_cast<char32_t>(hi));
      } else if (lo < 0) {
        s.add_all(lo_set);
      } else {
        s.add(static_cast<char32_t>(lo), static_cast<char32_t>(lo));
      }
    }
    ++i_;  // ']'
    return negate ? s.complement() : s;
  }

  std::u32string text_;
  std::size_t i_ = 0;
};

// ---- Thompson construction, then epsilon removal ----

class Builder {
 public:
  std::uint32_t state() {
    if (eps_.size() >= kMaxRegexStates)
      fail(errc::invalid_argument, "pattern: too complex (more than " + std::to_string(kMaxRegexStates) + " automaton states)");
    eps_.emplace_back();
    chars_.emplace_back();
    return static_cast<std::uint32_t>(eps_.size() - 1);
  }

  // A fragment for `n` from state `from`; returns its end state.
  std::uint32_t build(const Node& n, std::uint32_t from) {
    switch (n.kind) {
      case Node::set: {
        const std::uint32_t to = state();
        chars_[from].push_back({set_index(n.chars), to});
        return to;
      }
      case Node::concat: {
        std::uint32_t at = from;
        for (const auto& k : n.kids) {
          if (k->kind == Node::bol || k->kind == Node::eol)
            fail(errc::invalid_argument, "pattern: '^' and '$' are supported only at the start and end of the pattern");
          at = build(*k, at);
        }
        return at;
      }
      case Node::alt: {
        const std::uint32_t end = state();
        for (const auto& k : n.kids) {
          const std::uint32_t s = state();
          eps_[from].push_back(s);
          eps_[build(*k, s)].push_back(end);
        }
        return end;
      }
      case Node::repeat: {
        const Node& k = *n.kids[0];
        std::uint32_t at = from;
        for (int i = 0; i < n.min; ++i) at = build(k, at);
        if (n.max == -1) {  // at --eps--> loop body --eps--> at
          const std::uint32_t s = state();
          eps_[at].push_back(s);
          const std::uint32_t e = build(k, s);
          eps_[e].push_back(at);
          return at;
        }
        const std::uint32_t end = state();
        for (int i = n.min; i < n.max; ++i) {
          eps_[at].push_back(end);
          at = build(k, at);
        }
        eps_[at].push_back(end);
        return end;
      }
      case Node::bol:
      case Node::eol: break;
    }
    fail(errc::invalid_argument, "pattern: '^' and '$' are supported only at the start and end of the pattern");
  }

  void link(std::uint32_t from, std::uint32_t to) { eps_[from].push_back(to); }

  std::uint32_t set_index(const CodeSet& s) {
    auto [it, inserted] = set_ids_.try_emplace(s, static_cast<std::uint32_t>(sets_.size()));
    if (inserted) sets_.push_back(s);
    return it->second;
  }

  Nfa finish(std::uint32_t start, std::uint32_t accept) {
    const std::size_t n = eps_.size();
    // Epsilon closures; a state's edges are those of its closure.
    std::vector<std::vector<Nfa::Edge>> edges(n);
    std::vector<char> accepting(n, 0);
    std::vector<std::uint32_t> seen(n, UINT32_MAX), stack;
    auto closure_edges = [&](std::uint32_t q) {
      stack = {q};
      seen[q] = q;
      while (!stack.empty()) {
        const std::uint32_t p = stack.back();
        stack.pop_back();
        if (p == accept) accepting[q] = 1;
        for (const auto& e : chars_[p]) edges[q].push_back(e);
        for (std::uint32_t t : eps_[p])
          if (seen[t] != q) seen[t] = q, stack.push_back(t);
      }
      std::sort(edges[q].begin(), edges[q].end(), [](const auto& a, const auto& b) { return std::pair(a.set, a.to) < std::pair(b.set, b.to); });
      edges[q].erase(std::unique(edges[q].begin(), edges[q].end(), [](const auto& a, const auto& b) { return a.set == b.set && a.to == b.to; }),
                     edges[q].end());
    };
    // Keep only states reachable through consuming edges, renumbered.
    std::vector<std::int64_t> id(n, -1);
    std::vector<std::uint32_t> order{start};
    id[start] = 0;
    for (std::size_t i = 0; i < order.size(); ++i) {
      closure_edges(order[i]);
      for (const auto& e : edges[order[i]])
        if (id[e.to] < 0) id[e.to] = static_cast<std::int64_t>(order.size()), order.push_back(e.to);
    }
    Nfa out;
    out.sets = sets_;
    out.edges.resize(order.size());
    out.accepting.resize(order.size());
    for (std::size_t i = 0; i < order.size(); ++i) {
      out.accepting[i] = accepting[order[i]];
      for (const auto& e : edges[order[i]]) out.edges[i].push_back({e.set, static_cast<std::uint32_t>(id[e.to])});
    }
    out.start = 0;
    return out;
  }

 private:
  std::vector<std::vector<std::uint32_t>> eps_;
  std::vector<std::vector<Nfa::Edge>> chars_;
  std::vector<CodeSet> sets_;
  std::map<CodeSet, std::uint32_t> set_ids_;
};

}  // namespace

Nfa compile_regex(std::string_view pattern) {
  if (pattern.size() > kMaxPatternBytes)
    fail(errc::invalid_argument, "pattern: longer than " + std::to_string(kMaxPatternBytes) + " bytes is not supported");
  NodePtr root = Parser(pattern).parse();
  // Top-level alternatives, each anchored or searched at either end.
  std::vector<Node*> alts;
  if (root->kind == Node::alt)
    for (auto& k : root->kids) alts.push_back(k.get());
  else
    alts.push_back(root.get());
  Builder b;
  const std::uint32_t start = b.state(), accept = b.state();
  const CodeSet any = CodeSet::of(0, kMaxCodePoint);
  for (Node* a : alts) {
    std::vector<std::unique_ptr<Node>>& kids = a->kids;  // a concat
    bool bol = false, eol = false;
    if (!kids.empty() && kids.front()->kind == Node::bol) bol = true, kids.erase(kids.begin());
    if (!kids.empty() && kids.back()->kind == Node::eol) eol = true, kids.pop_back();
    const std::uint32_t at = b.state();
    std::uint32_t s = at;
    Node loop;  // anything before / after an unanchored alternative
    loop.kind = Node::repeat;
    loop.min = 0, loop.max = -1;
    loop.kids.push_back(make(Node::set));
    loop.kids[0]->chars = any;
    if (!bol) s = b.build(loop, s);
    s = b.build(*a, s);
    if (!eol) s = b.build(loop, s);
    b.link(start, at);
    b.link(s, accept);
  }
  return b.finish(start, accept);
}

}  // namespace neuron::grammar
