#pragma once
// What a loaded model serves: generation (chat, completions), embeddings, or
// rerank scores. Decided once at load, from the load options (`task`,
// `pooling`) or the checkpoint: a sentence-transformers folder (modules.json
// with a Pooling module, 1_Pooling/config.json's mode, a Normalize module)
// is an embedder; a name containing "reranker" (Qwen3-Reranker, as vLLM
// guesses it) is a reranker. The HTTP routes refuse a request for another
// task with a 400 that says how to load the model for it.
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace neuron::engine {

enum class ModelTask { generate, embed, rerank };
enum class Pooling { last, mean };

std::string_view task_name(ModelTask t) noexcept;         // "generate" | "embed" | "rerank"
std::string_view pooling_name(Pooling p) noexcept;        // "last" | "mean"
std::optional<ModelTask> parse_task(std::string_view s) noexcept;
// "last" (also sentence-transformers' "lasttoken") | "mean"
std::optional<Pooling> parse_pooling(std::string_view s) noexcept;

struct TaskSetup {
  ModelTask task = ModelTask::generate;
  Pooling pooling = Pooling::last;  // embed
  bool normalize = true;            // embed: L2-normalize the pooled vector
};

// The setup of the model in `dir` loaded as `name` with the spec's options.
// An explicit task wins; `task: embed` on a model with no sentence-transformers
// pooling needs `pooling`. Throws Error{invalid_argument} naming the option
// for an unknown task or pooling, pooling on a non-embedding task, or an
// embedder with no pooling; Error{bad_model} for a sentence-transformers file
// that does not parse or a pooling mode neuron does not implement.
TaskSetup resolve_task(const std::filesystem::path& dir, const std::optional<std::string>& task,
                       const std::optional<std::string>& pooling, std::string_view name);

}  // namespace neuron::engine
