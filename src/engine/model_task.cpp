#include "engine/model_task.hpp"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "util/error.hpp"
#include "util/json_parse.hpp"

namespace neuron::engine {

namespace {

using nlohmann::json;

std::optional<json> read_json(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  if (std::filesystem::file_size(path, ec) > (1u << 20)) fail(errc::bad_model, path.string() + " is larger than 1 MiB");
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return parse_json(text.str(), path.string(), errc::bad_model);
}

// A sentence-transformers folder's pooling and normalization, or nullopt when `dir` is none.
std::optional<TaskSetup> sentence_transformers(const std::filesystem::path& dir) {
  const auto modules = read_json(dir / "modules.json");
  if (!modules) return std::nullopt;
  if (!modules->is_array()) fail(errc::bad_model, (dir / "modules.json").string() + " is not an array");
  std::optional<std::string> pooling_path;
  bool normalize = false;
  for (const json& m : *modules) {
    if (!m.is_object() || !m.contains("type") || !m["type"].is_string()) continue;
    const std::string type = m["type"].get<std::string>();
    const std::string path = m.contains("path") && m["path"].is_string() ? m["path"].get<std::string>() : "";
    if (type.ends_with(".Pooling")) pooling_path = path;
    if (type.ends_with(".Normalize")) normalize = true;
  }
  if (!pooling_path) return std::nullopt;
  const auto file = dir / *pooling_path / "config.json";
  const auto config = read_json(file);
  if (!config || !config->is_object()) fail(errc::bad_model, file.string() + " is missing or not an object");
  std::string mode;
  if (config->contains("pooling_mode") && (*config)["pooling_mode"].is_string()) {
    mode = (*config)["pooling_mode"].get<std::string>();
  } else {  // older files: one boolean per mode
    for (const auto& [key, flag] : {std::pair{"pooling_mode_lasttoken", "lasttoken"}, std::pair{"pooling_mode_mean_tokens", "mean"},
                                    std::pair{"pooling_mode_cls_token", "cls"}, std::pair{"pooling_mode_max_tokens", "max"}})
      if (config->contains(key) && (*config)[key].is_boolean() && (*config)[key].get<bool>()) mode = flag;
  }
  const auto pooling = parse_pooling(mode);
  if (!pooling)
    fail(errc::unsupported_arch, file.string() + ": pooling mode '" + mode + "' is not supported (lasttoken, mean and cls are)");
  TaskSetup out;
  out.task = ModelTask::embed;
  out.pooling = *pooling;
  out.normalize = normalize;
  if (const auto it = config->find("include_prompt"); it != config->end() && !it->is_null()) {
    if (!it->is_boolean()) fail(errc::bad_model, file.string() + ": 'include_prompt' " + it->dump() + " is not a boolean");
    out.include_prompt = it->get<bool>();
  }
  return out;
}

// config_sentence_transformers.json's prompts and default prompt name into `out` (none when the file is absent).
void read_prompts(const std::filesystem::path& dir, TaskSetup& out) {
  const auto file = dir / "config_sentence_transformers.json";
  const auto config = read_json(file);
  if (!config) return;
  if (!config->is_object()) fail(errc::bad_model, file.string() + " is not an object");
  if (const auto it = config->find("prompts"); it != config->end() && !it->is_null()) {
    if (!it->is_object()) fail(errc::bad_model, file.string() + ": 'prompts' is not an object of strings");
    for (const auto& [name, prefix] : it->items()) {
      if (!prefix.is_string()) fail(errc::bad_model, file.string() + ": prompt '" + name + "' is not a string");
      out.prompts.emplace(name, prefix.get<std::string>());
    }
  }
  if (const auto it = config->find("default_prompt_name"); it != config->end() && !it->is_null()) {
    if (!it->is_string() || !out.prompts.contains(it->get<std::string>()))
      fail(errc::bad_model, file.string() + ": 'default_prompt_name' " + it->dump() + " is not a key of 'prompts'");
    out.default_prompt = it->get<std::string>();
  }
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

}  // namespace

std::string_view task_name(ModelTask t) noexcept {
  switch (t) {
    case ModelTask::embed: return "embed";
    case ModelTask::rerank: return "rerank";
    case ModelTask::generate: break;
  }
  return "generate";
}

std::string_view pooling_name(Pooling p) noexcept {
  switch (p) {
    case Pooling::mean: return "mean";
    case Pooling::cls: return "cls";
    case Pooling::last: break;
  }
  return "last";
}

std::optional<ModelTask> parse_task(std::string_view s) noexcept {
  if (s == "generate") return ModelTask::generate;
  if (s == "embed") return ModelTask::embed;
  if (s == "rerank") return ModelTask::rerank;
  return std::nullopt;
}

std::optional<Pooling> parse_pooling(std::string_view s) noexcept {
  if (s == "last" || s == "lasttoken") return Pooling::last;
  if (s == "mean") return Pooling::mean;
  if (s == "cls") return Pooling::cls;
  return std::nullopt;
}

PrefillOutput pooling_output(Pooling p) noexcept { return p == Pooling::mean ? PrefillOutput::hidden_mean : PrefillOutput::hidden_last; }

std::size_t pooled_prefix(Pooling p, std::size_t tokens) noexcept { return p == Pooling::cls ? std::min<std::size_t>(tokens, 1) : tokens; }

TaskSetup resolve_task(const std::filesystem::path& dir, const std::optional<std::string>& task,
                       const std::optional<std::string>& pooling, std::string_view name) {
  std::optional<ModelTask> asked;
  if (task) {
    asked = parse_task(*task);
    if (!asked) fail(errc::invalid_argument, "task must be generate, embed or rerank, got '" + *task + "'");
  }
  std::optional<Pooling> pool;
  if (pooling) {
    pool = parse_pooling(*pooling);
    if (!pool) fail(errc::invalid_argument, "pooling must be " + std::string(kPoolingNames) + ", got '" + *pooling + "'");
  }
  const std::optional<TaskSetup> st = std::filesystem::is_directory(dir) ? sentence_transformers(dir) : std::nullopt;
  TaskSetup out;
  if (asked) {
    out.task = *asked;
  } else if (st || pool) {
    out.task = ModelTask::embed;
  } else if (lower(name).find("reranker") != std::string::npos ||
             lower(dir.filename().string()).find("reranker") != std::string::npos) {
    out.task = ModelTask::rerank;
  }
  if (pool && out.task != ModelTask::embed)
    fail(errc::invalid_argument, "pooling applies to task embed, not " + std::string(task_name(out.task)));
  if (out.task != ModelTask::embed) return out;
  if (st) out = *st;
  if (pool) out.pooling = *pool;
  if (!st && !pool)
    fail(errc::invalid_argument, "task embed on a model with no sentence-transformers pooling (1_Pooling/config.json) "
                                 "needs pooling: load it with pooling " + std::string(kPoolingNames));
  if (std::filesystem::is_directory(dir)) read_prompts(dir, out);
  return out;
}

}  // namespace neuron::engine
