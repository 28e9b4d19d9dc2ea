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

void PreTokenizer::apply_split(const Regex& re, SplitBehavior behavior, bool invert, std::string_view piece,
                               std::vector<std::string_view>& out, std::vector<Span>& scratch) {
  scratch.clear();
  // A pathological input may exhaust PCRE2's limits; the unmatched rest then
  // stays one piece, which BPE still encodes losslessly.
  re.find_all(piece, scratch);
  // The pieces of `piece` in order, each flagged as a match or a gap, as
  // Hugging Face's Split builds them before applying the behaviour.
  struct Part {
    std::size_t begin, end;
    bool match;
  };
  thread_local std::vector<Part> parts;
  parts.clear();
  std::size_t prev = 0;
  for (const Span& m : scratch) {
    if (m.begin > prev) parts.push_back({prev, m.begin, invert});
    parts.push_back({m.begin, m.end, !invert});
    prev = m.end;
  }
  if (prev < piece.size()) parts.push_back({prev, piece.size(), invert});

  auto emit = [&](std::size_t b, std::size_t e) {
    if (e > b) out.push_back(piece.substr(b, e - b));
  };
  switch (behavior) {
    case SplitBehavior::isolated:
      for (const Part& p : parts) emit(p.begin, p.end);
      break;
    case SplitBehavior::removed:
      for (const Part& p : parts)
        if (!p.match) emit(p.begin, p.end);
      break;
    case SplitBehavior::merged_with_previous:
    case SplitBehavior::contiguous: {
      // Grow the last piece while the rule says the part joins it.
      std::vector<Span> merged;
      bool previous_match = false;
      for (const Part& p : parts) {
        const bool joins = behavior == SplitBehavior::contiguous ? p.match == previous_match
                                                                 : p.match && !previous_match;
        if (joins && !merged.empty())
          merged.back().end = p.end;
        else
          merged.push_back({p.begin, p.end});
        previous_match = p.match;
      }
      for (const Span& s : merged) emit(s.begin, s.end);
      break;
    }
    case SplitBehavior::merged_with_next: {
      std::vector<Span> merged;  // built back to front
      bool previous_match = false;
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->match && !previous_match && !merged.empty())
          merged.back().begin = it->begin;
        else
          merged.push_back({it->begin, it->end});
        previous_match = it->match;
      }
      for (auto it = merged.rbegin(); it != merged.rend(); ++it) emit(it->begin, it->end);
      break;
    }
  }
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>& words,
                         std::deque<std::string>& arena) const {
  if (text.empty()) return;
  if (steps_.empty()) {
    words.push_back(text);
    return;
  }
  std::vector<std::string_view> cur{text};
  std::vector<std::string_view> next;
  std::vector<Span> scratch;
  for (const Step& step : steps_) {
    next.clear();
    for (std::string_view piece : cur) {
      if (step.kind == Step::Kind::byte_level && step.add_prefix_space && piece.front() != ' ') {
        arena.push_back(" ");
        arena.back().append(piece);
        piece = arena.back();
      }
      if (step.regex.empty())
        next.push_back(piece);
      else
        apply_split(step.regex.front(), step.kind == Step::Kind::split ? step.behavior : SplitBehavior::isolated,
                    step.invert, piece, next, scratch);
    }
    cur.swap(next);
  }
  words.insert(words.end(), cur.begin(), cur.end());
}

}  // namespace neuron::tokenizer
