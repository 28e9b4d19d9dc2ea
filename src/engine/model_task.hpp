#pragma once
// What a loaded model serves: generation (chat, completions), embeddings, or
// rerank scores. Decided once at load, from the load options (`task`,
// `pooling`) or the checkpoint: a sentence-transformers folder (modules.json
// with a Pooling module, 1_Pooling/config.json's mode, a Normalize module)
// is an embedder; a name containing "reranker" (Qwen3-Reranker, as vLLM
// guesses it) is a reranker. An embedder's config_sentence_transformers.json
// names its prompts. The HTTP routes refuse a request for another task with a
// 400 that says how to load the model for it.
#include <cstddef>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "engine/prefill_output.hpp"

namespace neuron::engine {

enum class ModelTask { generate, embed, rerank };
// Which final-norm hidden rows make the embedding: the last token's, the mean of every token's, or the
// first token's (sentence-transformers' "cls").
enum class Pooling { last, mean, cls };

// The pooling names a load option accepts, for messages: "last, mean or cls".
inline constexpr std::string_view kPoolingNames = "last, mean or cls";

std::string_view task_name(ModelTask t) noexcept;         // "generate" | "embed" | "rerank"
std::string_view pooling_name(Pooling p) noexcept;        // "last" | "mean" | "cls"
std::optional<ModelTask> parse_task(std::string_view s) noexcept;
// "last" (also sentence-transformers' "lasttoken") | "mean" | "cls"
std::optional<Pooling> parse_pooling(std::string_view s) noexcept;

// What the engine computes to pool an input of `tokens` tokens by `p`: the prefill-only output
// (hidden_last for last and cls, hidden_mean for mean) over the input's first `pooled_prefix` tokens.
// That is every token except for cls: every family neuron runs is causal (attention over positions
// [0, own], recurrent state carried forward), so the first token's final hidden row depends on that
// token alone, and a one-token prefill of it computes that row and nothing else.
PrefillOutput pooling_output(Pooling p) noexcept;
std::size_t pooled_prefix(Pooling p, std::size_t tokens) noexcept;

struct TaskSetup {
  ModelTask task = ModelTask::generate;
  Pooling pooling = Pooling::last;  // embed
  bool normalize = true;            // embed: L2-normalize the pooled vector
  // embed: whether a prompt's tokens count in the pooling (1_Pooling/config.json's include_prompt,
  // default true). False changes mean pooling only: the mean leaves out the first
  // (prompt tokens with special tokens) - 1 tokens of a text given a prompt, as sentence-transformers
  // does (it zeroes their attention mask for pooling; its cls and last-token pooling ignore that).
  bool include_prompt = true;
  // embed: config_sentence_transformers.json's `prompts` ({name: prefix}, prepended to a text input
  // before it is tokenized) and its `default_prompt_name` (a key of `prompts`: applied when a request
  // names none).
  std::map<std::string, std::string, std::less<>> prompts;
  std::optional<std::string> default_prompt;
};

// The setup of the model in `dir` loaded as `name` with the spec's options.
// An explicit task wins; `task: embed` on a model with no sentence-transformers
// pooling needs `pooling`. Throws Error{invalid_argument} naming the option
// for an unknown task or pooling, pooling on a non-embedding task, or an
// embedder with no pooling; Error{bad_model} for a sentence-transformers file
// that does not parse (prompts that are not strings, a default prompt name
// that is not one of them, an include_prompt that is not a boolean), Error{unsupported_arch} for a pooling mode neuron
// does not implement.
TaskSetup resolve_task(const std::filesystem::path& dir, const std::optional<std::string>& task,
                       const std::optional<std::string>& pooling, std::string_view name);

}  // namespace neuron::engine
