#include "tokenizer/pre_tokenizer.hpp"

#include <nlohmann/json.hpp>

#include "util/error.hpp"

namespace neuron::tokenizer {

namespace {

bool get_bool(const nlohmann::json& j, const char* key, bool fallback, const std::string& where) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) fail(errc::bad_model, "tokenizer.json: " + where + "." + key + " must be a boolean");
  return it->get<bool>();
}

SplitBehavior parse_behavior(const nlohmann::json& j, const std::string& where) {
  const auto it = j.find("behavior");
  if (it == j.end() || !it->is_string()) fail(errc::bad_model, "tokenizer.json: " + where + ".behavior must be a string");
  const std::string b = it->get<std::string>();
  if (b == "Removed") return SplitBehavior::removed;
  if (b == "Isolated") return SplitBehavior::isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::merged_with_previous;
  if (b == "MergedWithNext") return SplitBehavior::merged_with_next;
  if (b == "Contiguous") return SplitBehavior::contiguous;
  fail(errc::bad_model, "tokenizer.json: unknown split behavior '" + b + "' at " + where);
}

}  // namespace

void PreTokenizer::parse_into(const nlohmann::json& j, std::vector<Step>& steps, const std::string& where) {
  if (j.is_null()) return;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string())
    fail(errc::bad_model, "tokenizer.json: " + where + " must be an object with a string \"type\"");
  const std::string type = j["type"].get<std::string>();
  if (type == "Sequence") {
    const auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array())
      fail(errc::bad_model, "tokenizer.json: " + where + " (Sequence) needs a \"pretokenizers\" array");
    for (std::size_t i = 0; i < it->size(); ++i)
      parse_into((*it)[i], steps, where + ".pretokenizers[" + std::to_string(i) + "]");
  } else if (type == "Split") {
    Step s;
    s.kind = Step::Kind::split;
    const auto p = j.find("pattern");
    if (p == j.end() || !p->is_object())
      fail(errc::bad_model, "tokenizer.json: " + where + ".pattern must be {\"Regex\": ...} or {\"String\": ...}");
    if (const auto r = p->find("Regex"); r != p->end() && r->is_string()) {
      s.regex.emplace_back(r->get<std::string>(), "tokenizer.json: " + where + ".pattern.Regex");
    } else if (const auto l = p->find("String"); l != p->end() && l->is_string()) {
      s.regex.push_back(Regex::literal(l->get<std::string>(), "tokenizer.json: " + where + ".pattern.String"));
    } else {
      fail(errc::bad_model, "tokenizer.json: " + where + ".pattern must be {\"Regex\": ...} or {\"String\": ...}");
    }
    s.behavior = parse_behavior(j, where);
    s.invert = get_bool(j, "invert", false, where);
    steps.push_back(std::move(s));
  } else if (type == "ByteLevel") {
    Step s;
    s.kind = Step::Kind::byte_level;
    s.add_prefix_space = get_bool(j, "add_prefix_space", true, where);
    if (get_bool(j, "use_regex", true, where))
      s.regex.emplace_back(kGpt2Pattern, "tokenizer.json: " + where + " (ByteLevel built-in pattern)");
    steps.push_back(std::move(s));
  } else {
    fail(errc::bad_model, "tokenizer.json: unsupported pre_tokenizer type '" + type + "' at " + where);
  }
}

PreTokenizer PreTokenizer::from_json(const nlohmann::json& j) {
  PreTokenizer p;
  parse_into(j, p.steps_, "pre_tokenizer");
  return p;
}

bool PreTokenizer::has_byte_level() const noexcept {
  for (const auto& s : steps_)
    if (s.kind == Step::Kind::byte_level) return true;
  return false;
}

void PreTokenizer::run(std::size_t step, std::string_view piece, const WordSink& on_word,
                       std::deque<std::string>& arena) const {
  if (step == steps_.size()) {
    on_word(piece);
    return;
  }
  const Step& st = steps_[step];
  if (st.kind == Step::Kind::byte_level && st.add_prefix_space && piece.front() != ' ') {
    arena.push_back(" ");
    arena.back().append(piece);
    piece = arena.back();
  }
  if (st.regex.empty()) {
    run(step + 1, piece, on_word, arena);
    return;
  }
  const SplitBehavior behavior = st.kind == Step::Kind::split ? st.behavior : SplitBehavior::isolated;
  const bool invert = st.invert;
  auto next = [&](std::size_t b, std::size_t e) {
    if (e > b) run(step + 1, piece.substr(b, e - b), on_word, arena);
  };
  // A pathological input may exhaust PCRE2's limits; the unmatched rest then
  // stays one gap, which BPE still encodes losslessly.
  if (behavior == SplitBehavior::isolated || behavior == SplitBehavior::removed) {
    // Matches and gaps stream straight on; Removed drops whichever side is "the match".
    const bool keep_matches = behavior == SplitBehavior::isolated || invert;
    const bool keep_gaps = behavior == SplitBehavior::isolated || !invert;
    std::size_t prev = 0;
    st.regex.front().for_each_match(piece, [&](Span m) {
      if (keep_gaps) next(prev, m.begin);
      if (keep_matches) next(m.begin, m.end);
      prev = m.end;
    });
    if (keep_gaps) next(prev, piece.size());
    return;
  }
  // The merging behaviours look at neighbours: collect the parts (each flagged
  // match or gap, as Hugging Face's Split builds them), then merge.
  struct Part {
    std::size_t begin, end;
    bool match;
  };
  std::vector<Part> parts;
  std::size_t prev = 0;
  st.regex.front().for_each_match(piece, [&](Span m) {
    if (m.begin > prev) parts.push_back({prev, m.begin, invert});
    parts.push_back({m.begin, m.end, !invert});
    prev = m.end;
  });
  if (prev < piece.size()) parts.push_back({prev, piece.size(), invert});
  std::vector<Span> merged;
  bool previous_match = false;
  if (behavior == SplitBehavior::merged_with_next) {
    for (auto it = parts.rbegin(); it != parts.rend(); ++it) {  // built back to front
      if (it->match && !previous_match && !merged.empty())
        merged.back().begin = it->begin;
      else
        merged.push_back({it->begin, it->end});
      previous_match = it->match;
    }
    for (auto it = merged.rbegin(); it != merged.rend(); ++it) next(it->begin, it->end);
    return;
  }
  for (const Part& p : parts) {
    const bool joins = behavior == SplitBehavior::contiguous ? p.match == previous_match : p.match && !previous_match;
    if (joins && !merged.empty())
      merged.back().end = p.end;
    else
      merged.push_back({p.begin, p.end});
    previous_match = p.match;
  }
  for (const Span& m : merged) next(m.begin, m.end);
}

void PreTokenizer::split(std::string_view text, const WordSink& on_word, std::deque<std::string>& arena) const {
  if (!text.empty()) run(0, text, on_word, arena);
}

}  // namespace neuron::tokenizer
