#pragma once
// Qwen3-Reranker's scoring prompt, from its model card: a system turn asking
// for "yes" or "no", the pair as `<Instruct>: {instruction}\n<Query>:
// {query}\n<Document>: {document}` in the user turn, and an assistant turn
// opened after an empty <think> block. The three parts are tokenized on their
// own (no special tokens added) and concatenated, as the card does; the score
// is softmax([logit("no"), logit("yes")])[1] at the last position.
#include <cstdint>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.hpp"

namespace neuron::server {

inline constexpr std::string_view kRerankDefaultInstruction =
    "Given a web search query, retrieve relevant passages that answer the query";

// The prompt's token ids for one (query, document) pair; an empty instruction takes the default.
std::vector<std::int32_t> rerank_prompt_ids(const tokenizer::Tokenizer& tok, std::string_view instruction,
                                            std::string_view query, std::string_view document);

// The ids whose logits decide the score: {no, yes}. Throws Error{bad_model} when the vocabulary lacks either.
std::vector<std::int32_t> rerank_answer_ids(const tokenizer::Tokenizer& tok);

// softmax([no, yes])[1] from the two logits.
double rerank_score(float no_logit, float yes_logit) noexcept;

}  // namespace neuron::server
