#include "tokenizer/post_processor.hpp"

#include <limits>
#include <string>

#include <nlohmann/json.hpp>

#include "util/error.hpp"

namespace neuron::tokenizer {

namespace {

[[noreturn]] void bad_post_processor(const std::string& msg) { fail(errc::bad_model, "tokenizer.json: " + msg); }

// TemplateProcessing: "single" is a list of {"SpecialToken": {"id": name}} and
// one {"Sequence": {"id": "A"}}; "special_tokens" maps each name to its ids.
void template_processing(const nlohmann::json& j, const std::string& where, PostProcessor& out) {
  const auto single = j.find("single");
  if (single == j.end() || !single->is_array()) bad_post_processor(where + ".single must be an array");
  const auto specials = j.find("special_tokens");
  bool seen_sequence = false;
  for (std::size_t i = 0; i < single->size(); ++i) {
    const nlohmann::json& piece = (*single)[i];
    const std::string at = where + ".single[" + std::to_string(i) + "]";
    if (piece.is_object() && piece.contains("Sequence")) {
      if (seen_sequence) bad_post_processor(at + ": the single template has more than one Sequence");
      seen_sequence = true;
      continue;
    }
    if (!piece.is_object() || !piece.contains("SpecialToken") || !piece["SpecialToken"].is_object() ||
        !piece["SpecialToken"].contains("id") || !piece["SpecialToken"]["id"].is_string())
      bad_post_processor(at + " must be {\"SpecialToken\": {\"id\": name}} or {\"Sequence\": ...}");
    const std::string name = piece["SpecialToken"]["id"].get<std::string>();
    if (specials == j.end() || !specials->is_object() || !specials->contains(name))
      bad_post_processor(at + ": special token '" + name + "' is not in " + where + ".special_tokens");
    const nlohmann::json& ids = (*specials)[name].contains("ids") ? (*specials)[name]["ids"] : nlohmann::json();
    if (!ids.is_array()) bad_post_processor(where + ".special_tokens['" + name + "'].ids must be an array");
    for (const nlohmann::json& id : ids) {
      if (!id.is_number_integer() || id.get<std::int64_t>() < 0 || id.get<std::int64_t>() > std::numeric_limits<std::int32_t>::max())
        bad_post_processor(where + ".special_tokens['" + name + "'].ids must hold token ids");
      (seen_sequence ? out.suffix : out.prefix).push_back(static_cast<std::int32_t>(id.get<std::int64_t>()));
    }
  }
  if (!seen_sequence) bad_post_processor(where + ".single has no Sequence");
}

void parse_processor(const nlohmann::json& j, const std::string& where, PostProcessor& out) {
  if (j.is_null()) return;
  if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) bad_post_processor(where + " must be an object with a \"type\"");
  const std::string type = j["type"].get<std::string>();
  if (type == "ByteLevel") return;
  if (type == "TemplateProcessing") return template_processing(j, where, out);
  if (type == "Sequence") {
    const auto list = j.find("processors");
    if (list == j.end() || !list->is_array()) bad_post_processor(where + " (Sequence) needs a \"processors\" array");
    for (std::size_t i = 0; i < list->size(); ++i) parse_processor((*list)[i], where + ".processors[" + std::to_string(i) + "]", out);
    return;
  }
  bad_post_processor(where + " type '" + type + "' is not supported (ByteLevel, TemplateProcessing, Sequence)");
}

}  // namespace

PostProcessor PostProcessor::from_json(const nlohmann::json& j) {
  PostProcessor p;
  parse_processor(j, "post_processor", p);
  return p;
}

}  // namespace neuron::tokenizer
