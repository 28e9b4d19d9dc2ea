#include "server/rerank_prompt.hpp"

#include <cmath>
#include <string>

#include "util/error.hpp"

namespace neuron::server {

namespace {
constexpr std::string_view kRerankPrefix =
    "<|im_start|>system\nJudge whether the Document meets the requirements based on the Query and the Instruct provided. "
    "Note that the answer can only be \"yes\" or \"no\".<|im_end|>\n<|im_start|>user\n";
constexpr std::string_view kSuffix = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n";
}  // namespace

std::vector<std::int32_t> rerank_prompt_ids(const tokenizer::Tokenizer& tok, std::string_view instruction,
                                            std::string_view query, std::string_view document) {
  std::string body = "<Instruct>: ";
  body += instruction.empty() ? kRerankDefaultInstruction : instruction;
  body += "\n<Query>: ";
  body += query;
  body += "\n<Document>: ";
  body += document;
  std::vector<std::int32_t> ids = tok.encode(kRerankPrefix);
  const std::vector<std::int32_t> middle = tok.encode(body);
  const std::vector<std::int32_t> suffix = tok.encode(kSuffix);
  ids.insert(ids.end(), middle.begin(), middle.end());
  ids.insert(ids.end(), suffix.begin(), suffix.end());
  return ids;
}

std::vector<std::int32_t> rerank_answer_ids(const tokenizer::Tokenizer& tok) {
  const auto no = tok.token_to_id("no");
  const auto yes = tok.token_to_id("yes");
  if (!no || !yes) fail(errc::bad_model, "the vocabulary has no 'yes' or 'no' token: this model cannot rerank");
  return {*no, *yes};
}

double rerank_score(float no_logit, float yes_logit) noexcept {
  return 1.0 / (1.0 + std::exp(static_cast<double>(no_logit) - static_cast<double>(yes_logit)));
}

}  // namespace neuron::server
