// The prefill-only routes: POST /v1/embeddings (OpenAI's shape), POST
// /v1/rerank (also /rerank and /v2/rerank: Jina's and Cohere's shape) and
// POST /v1/score (vLLM's: a reranker's pair scores, or an embedder's cosine
// similarities). Each input becomes one prefill-only request
// (engine/prefill_output.hpp) through Api::run_prefill, so it batches with
// everything else the model runs; pooling happened in the engine, the rest
// (truncation, normalization, scores) happens here.
#include <algorithm>
#include <bit>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "model/embedding.hpp"
#include "server/api.hpp"
#include "server/api_error.hpp"
#include "server/api_helpers.hpp"
#include "server/openai_request.hpp"
#include "server/openai_response.hpp"
#include "server/request_fields.hpp"
#include "server/rerank_prompt.hpp"
#include "util/base64.hpp"

namespace neuron::server {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;
using detail::json_response;
using detail::string_field;

// Inputs one /v1/embeddings request may carry (OpenAI's limit), and documents one rerank or score request may.
constexpr std::size_t kMaxEmbeddingInputs = 2048;
constexpr std::size_t kMaxRerankDocuments = 1024;

// How to load a model for a task, for the 400 a request for another task gets.
std::string how_to_load(engine::ModelTask task) {
  switch (task) {
    case engine::ModelTask::embed:
      return "load an embedding model (a sentence-transformers folder such as Qwen3-Embedding), or any model with "
             "task embed and pooling " + std::string(engine::kPoolingNames) + " (POST /models/load {\"model_id\": ..., \"task\": \"embed\", "
             "\"pooling\": \"last\"}; neuron serve --model 'ID:task=embed,pooling=last')";
    case engine::ModelTask::rerank:
      return "load a Qwen3-Reranker-style model with task rerank (POST /models/load {\"model_id\": ..., \"task\": "
             "\"rerank\"}; neuron serve --model 'ID:task=rerank')";
    case engine::ModelTask::generate: break;
  }
  return "load it with task generate";
}

void require_task(const engine::ModelAssets& assets, engine::ModelTask task, const std::string& name, const std::string& route) {
  if (assets.task.task == task) return;
  throw FieldError("model", "model '" + name + "' serves task " + std::string(engine::task_name(assets.task.task)) + ", not " +
                                std::string(engine::task_name(task)) + " (" + route + "): " + how_to_load(task));
}

// A token id list from a JSON array, each id in the model's vocabulary.
std::vector<std::int32_t> input_token_ids(const ordered_json& a, const tokenizer::Tokenizer& tok, const std::string& param) {
  std::vector<std::int32_t> ids;
  ids.reserve(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const ordered_json& t = a[i];
    const std::string where = param + "[" + std::to_string(i) + "]";
    if (!t.is_number_integer() || (t.is_number_unsigned() && t.get<std::uint64_t>() > 0x7fffffffu) || t.get<std::int64_t>() < 0 ||
        !tok.is_known(static_cast<std::int32_t>(t.get<std::int64_t>())))
      throw FieldError(where, "'" + where + "' is not a token id of this model");
    ids.push_back(static_cast<std::int32_t>(t.get<std::int64_t>()));
  }
  return ids;
}

// The prompt a text input is prefixed with (sentence-transformers' prompts: engine/model_task.hpp), and
// how many of the input's first tokens mean pooling leaves out for it: with include_prompt false,
// sentence-transformers' prompt_length (the prompt's ids with special tokens, less one: the
// post-processor's appended token), else none.
struct TextPrompt {
  std::string prefix;
  std::int32_t unpooled = 0;
};

// The prompt `name` (a request's `prompt_name`), else the model's default prompt, else none.
TextPrompt text_prompt(const engine::TaskSetup& task, const tokenizer::Tokenizer& tok, const std::optional<std::string>& name) {
  TextPrompt out;
  if (!name) {
    if (task.default_prompt) out.prefix = task.prompts.find(*task.default_prompt)->second;
  } else if (const auto it = task.prompts.find(*name); it != task.prompts.end()) {
    out.prefix = it->second;
  } else {
    std::string known;
    for (const auto& [key, prefix] : task.prompts) known += (known.empty() ? "'" : ", '") + key + "'";
    throw FieldError("prompt_name", "'prompt_name' '" + *name + "' is not a prompt of this model (" +
                                        (known.empty() ? "it has none" : "its prompts: " + known) + ")");
  }
  if (!task.include_prompt && task.pooling == engine::Pooling::mean && !out.prefix.empty())
    out.unpooled = std::max<std::int32_t>(0, static_cast<std::int32_t>(tok.encode_with_special_tokens(out.prefix).size()) - 1);
  return out;
}

// One input of an embedding: its ids, and how many of the first ones mean pooling leaves out.
struct EmbeddingInput {
  std::vector<std::int32_t> ids;
  std::int32_t unpooled = 0;
};

// A text with its prompt before it.
EmbeddingInput text_input(const std::string& text, const tokenizer::Tokenizer& tok, const TextPrompt& prompt) {
  EmbeddingInput in{tok.encode_with_special_tokens(prompt.prefix + text), 0};
  in.unpooled = std::min(prompt.unpooled, static_cast<std::int32_t>(in.ids.size()));
  return in;
}

// `input` of /v1/embeddings: a string, strings, token ids, or lists of token ids. A text is encoded with
// `prompt` before it; token ids are taken as they are.
std::vector<EmbeddingInput> embedding_inputs(const ordered_json& body, const tokenizer::Tokenizer& tok, const TextPrompt& prompt) {
  const ordered_json* input = field(body, "input");
  if (!input) throw FieldError("input", "'input' is required: a string, an array of strings, or token ids");
  std::vector<EmbeddingInput> out;
  const auto text = [&](const ordered_json& s, const std::string& param) {
    if (s.get_ref<const std::string&>().empty()) throw FieldError(param, "'" + param + "' is an empty string");
    out.push_back(text_input(s.get_ref<const std::string&>(), tok, prompt));
  };
  if (input->is_string()) {
    text(*input, "input");
  } else if (input->is_array()) {
    if (input->empty()) throw FieldError("input", "'input' is an empty array");
    if ((*input)[0].is_number()) {
      out.push_back({input_token_ids(*input, tok, "input"), 0});
    } else {
      if (input->size() > kMaxEmbeddingInputs)
        throw FieldError("input", "'input' has " + std::to_string(input->size()) + " entries; at most " +
                                      std::to_string(kMaxEmbeddingInputs) + " are allowed in one request");
      for (std::size_t i = 0; i < input->size(); ++i) {
        const ordered_json& e = (*input)[i];
        const std::string param = "input[" + std::to_string(i) + "]";
        if (e.is_string()) {
          text(e, param);
        } else if (e.is_array()) {
          if (e.empty()) throw FieldError(param, "'" + param + "' is an empty list of token ids");
          out.push_back({input_token_ids(e, tok, param), 0});
        } else {
          throw FieldError(param, "'" + param + "' must be a string or an array of token ids");
        }
      }
    }
  } else {
    throw FieldError("input", "'input' must be a string, an array of strings, or token ids");
  }
  for (std::size_t i = 0; i < out.size(); ++i)
    if (out[i].ids.empty()) throw FieldError(out.size() == 1 ? "input" : "input[" + std::to_string(i) + "]", "the input encodes to no tokens");
  return out;
}

// One prefill-only request per prompt, each checked against the context.
std::vector<engine::CompletionRequest> prefill_requests(std::vector<std::vector<std::int32_t>> prompts, engine::PrefillOutput output,
                                                        const std::vector<std::int32_t>& output_ids, std::int64_t context,
                                                        const std::string& param) {
  std::vector<engine::CompletionRequest> out;
  out.reserve(prompts.size());
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    if (static_cast<std::int64_t>(prompts[i].size()) > context)
      throw FieldError(prompts.size() == 1 ? param : param + "[" + std::to_string(i) + "]",
                       "the input is " + std::to_string(prompts[i].size()) + " tokens; the model's context is " +
                           std::to_string(context),
                       errc::context_length_exceeded);
    engine::CompletionRequest r;
    r.prompt = std::move(prompts[i]);
    r.output = output;
    r.output_ids = output_ids;
    out.push_back(std::move(r));
  }
  return out;
}

// One prefill-only request per embedding input (prefill_requests' checks), each computing only the tokens
// its pooling needs (engine::pooled_prefix: one for cls) and, for mean pooling, leaving out its unpooled ones.
std::vector<engine::CompletionRequest> embedding_requests(std::vector<EmbeddingInput> inputs, engine::Pooling pooling,
                                                          std::int64_t context, const std::string& param) {
  std::vector<std::vector<std::int32_t>> prompts;
  for (EmbeddingInput& in : inputs) prompts.push_back(std::move(in.ids));
  auto out = prefill_requests(std::move(prompts), engine::pooling_output(pooling), {}, context, param);
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i].prompt.resize(engine::pooled_prefix(pooling, out[i].prompt.size()));
    if (pooling == engine::Pooling::mean) out[i].mean_from = inputs[i].unpooled;
  }
  return out;
}

// Tokens over every input, as the client sent them (a prompt's included): an embedding's usage, whatever part
// of it the pooling needed computed.
std::int64_t tokens_of(const std::vector<std::vector<std::int32_t>>& prompts) {
  std::int64_t n = 0;
  for (const auto& p : prompts) n += static_cast<std::int64_t>(p.size());
  return n;
}
std::int64_t tokens_of(const std::vector<EmbeddingInput>& inputs) {
  std::int64_t n = 0;
  for (const auto& in : inputs) n += static_cast<std::int64_t>(in.ids.size());
  return n;
}

json embedding_usage(std::int64_t prompt_tokens) { return {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}; }

// A document of rerank: a string, or an object with a string `text` (Cohere's and Jina's object form).
std::string document_text(const ordered_json& d, const std::string& param) {
  if (d.is_string()) return d.get<std::string>();
  if (d.is_object()) {
    const ordered_json* text = field(d, "text");
    if (text && text->is_string()) return text->get<std::string>();
  }
  throw FieldError(param, "'" + param + "' must be a string or an object with a string 'text'");
}

// Strings of a field that is a string or a non-empty array of strings (/v1/score's text_1, text_2).
std::vector<std::string> strings_of(const ordered_json& body, const char* key) {
  const ordered_json* v = field(body, key);
  if (!v) throw FieldError(key, std::string("'") + key + "' is required");
  std::vector<std::string> out;
  if (v->is_string()) {
    out.push_back(v->get<std::string>());
  } else if (v->is_array() && !v->empty()) {
    if (v->size() > kMaxRerankDocuments)
      throw FieldError(key, std::string("'") + key + "' has " + std::to_string(v->size()) + " entries; at most " +
                                std::to_string(kMaxRerankDocuments) + " are allowed");
    for (std::size_t i = 0; i < v->size(); ++i) out.push_back(document_text((*v)[i], std::string(key) + "[" + std::to_string(i) + "]"));
  } else {
    throw FieldError(key, std::string("'") + key + "' must be a string or a non-empty array of strings");
  }
  return out;
}

}  // namespace

HttpResponse Api::embeddings(const HttpRequest& request) {
  const ordered_json body = parse_body(request.body);
  const std::string requested = string_field(body, "model", false);
  const std::string model = load_on_request(resolve_model_name(requested));
  const auto assets = assets_for(model);
  const std::string name = requested.empty() ? display_name(model) : requested;
  require_task(*assets, engine::ModelTask::embed, name, "/v1/embeddings");
  const auto engine = engine_for(model);

  bool base64 = false;
  if (const auto format = string_in(body, "encoding_format")) {
    if (*format != "float" && *format != "base64")
      throw FieldError("encoding_format", "'encoding_format' must be float or base64, got '" + *format + "'");
    base64 = *format == "base64";
  }
  const std::int64_t hidden = assets->configs.model.hidden_size;
  const auto dimensions = integer_in(body, "dimensions", 1, hidden);
  (void)string_in(body, "user");  // accepted, as OpenAI's; not used

  auto prompts = embedding_inputs(body, *assets->tokenizer,
                                  text_prompt(assets->task, *assets->tokenizer, string_in(body, "prompt_name")));
  const std::int64_t prompt_tokens = tokens_of(prompts);
  auto inputs = embedding_requests(std::move(prompts), assets->task.pooling, engine->max_context(), "input");
  const auto result = run_prefill(model, *engine, std::move(inputs), request);
  if (!result) return client_gone_response();

  json data = json::array();
  for (std::size_t i = 0; i < result->outputs.size(); ++i) {
    const std::vector<float> v =
        model::finish_embedding(result->outputs[i], static_cast<std::int32_t>(dimensions.value_or(0)), assets->task.normalize);
    json item = {{"object", "embedding"}, {"index", i}};
    if (base64) {
      // Little-endian f32, as OpenAI's clients decode it (this host is little-endian, as every supported one is).
      static_assert(std::endian::native == std::endian::little);
      item["embedding"] = base64_encode({reinterpret_cast<const unsigned char*>(v.data()), v.size() * sizeof(float)});
    } else {
      item["embedding"] = v;
    }
    data.push_back(std::move(item));
  }
  return json_response({{"object", "list"}, {"data", std::move(data)}, {"model", name}, {"usage", embedding_usage(prompt_tokens)}});
}

HttpResponse Api::rerank(const HttpRequest& request) {
  const ordered_json body = parse_body(request.body);
  const std::string requested = string_field(body, "model", false);
  const std::string model = load_on_request(resolve_model_name(requested));
  const auto assets = assets_for(model);
  const std::string name = requested.empty() ? display_name(model) : requested;
  require_task(*assets, engine::ModelTask::rerank, name, request.path);
  const auto engine = engine_for(model);

  const std::string query = string_field(body, "query", true);
  const ordered_json* documents = field(body, "documents");
  if (!documents || !documents->is_array() || documents->empty())
    throw FieldError("documents", "'documents' is required: a non-empty array of strings or {\"text\": ...} objects");
  if (documents->size() > kMaxRerankDocuments)
    throw FieldError("documents", "'documents' has " + std::to_string(documents->size()) + " entries; at most " +
                                      std::to_string(kMaxRerankDocuments) + " are allowed in one request");
  std::vector<std::string> texts;
  for (std::size_t i = 0; i < documents->size(); ++i)
    texts.push_back(document_text((*documents)[i], "documents[" + std::to_string(i) + "]"));
  const auto top_n = integer_in(body, "top_n", 1, std::numeric_limits<std::int32_t>::max());
  const bool return_documents = boolean(body, "return_documents").value_or(true);
  const std::string instruction = string_in(body, "instruction").value_or("");

  const std::vector<std::int32_t> answer = rerank_answer_ids(*assets->tokenizer);
  std::vector<std::vector<std::int32_t>> prompts;
  for (const std::string& doc : texts) prompts.push_back(rerank_prompt_ids(*assets->tokenizer, instruction, query, doc));
  auto inputs = prefill_requests(std::move(prompts), engine::PrefillOutput::logits, answer, engine->max_context(), "documents");
  const auto result = run_prefill(model, *engine, std::move(inputs), request);
  if (!result) return client_gone_response();

  std::vector<std::size_t> order(texts.size());
  std::iota(order.begin(), order.end(), 0);
  std::vector<double> scores;
  for (const auto& o : result->outputs) scores.push_back(rerank_score(o[0], o[1]));
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return scores[a] > scores[b]; });
  if (top_n && static_cast<std::size_t>(*top_n) < order.size()) order.resize(static_cast<std::size_t>(*top_n));
  json results = json::array();
  for (const std::size_t i : order) {
    json r = {{"index", i}, {"relevance_score", scores[i]}};
    if (return_documents) r["document"] = {{"text", texts[i]}};
    results.push_back(std::move(r));
  }
  return json_response({{"id", "rerank-" + new_completion_id(false)},
                        {"model", name},
                        {"results", std::move(results)},
                        {"usage", embedding_usage(result->prompt_tokens)}});
}

HttpResponse Api::score(const HttpRequest& request) {
  const ordered_json body = parse_body(request.body);
  const std::string requested = string_field(body, "model", false);
  const std::string model = load_on_request(resolve_model_name(requested));
  const auto assets = assets_for(model);
  const std::string name = requested.empty() ? display_name(model) : requested;
  // A reranker scores each pair; an embedder scores the cosine of the two texts' embeddings (as vLLM does).
  const bool cosine = assets->task.task == engine::ModelTask::embed;
  if (!cosine) require_task(*assets, engine::ModelTask::rerank, name, "/v1/score");
  const auto engine = engine_for(model);

  const std::vector<std::string> first = strings_of(body, "text_1");
  const std::vector<std::string> second = strings_of(body, "text_2");
  if (first.size() != 1 && first.size() != second.size())
    throw FieldError("text_2", "'text_1' has " + std::to_string(first.size()) + " entries and 'text_2' " +
                                   std::to_string(second.size()) + ": give one text_1, or as many as text_2");
  const std::string instruction = string_in(body, "instruction").value_or("");
  std::vector<engine::CompletionRequest> inputs;
  std::int64_t prompt_tokens = 0;
  if (cosine) {  // text_1's entries, then text_2's, each with the model's default prompt as /v1/embeddings gives it
    const TextPrompt prompt = text_prompt(assets->task, *assets->tokenizer, std::nullopt);
    std::vector<EmbeddingInput> texts_in;
    for (const auto* texts : {&first, &second})
      for (const std::string& t : *texts) {
        if (t.empty()) throw FieldError(texts == &first ? "text_1" : "text_2", "an empty text has no embedding");
        texts_in.push_back(text_input(t, *assets->tokenizer, prompt));
      }
    prompt_tokens = tokens_of(texts_in);
    inputs = embedding_requests(std::move(texts_in), assets->task.pooling, engine->max_context(), "text_1");
  } else {
    std::vector<std::vector<std::int32_t>> prompts;
    const std::vector<std::int32_t> answer = rerank_answer_ids(*assets->tokenizer);
    for (std::size_t i = 0; i < second.size(); ++i)
      prompts.push_back(rerank_prompt_ids(*assets->tokenizer, instruction, first[first.size() == 1 ? 0 : i], second[i]));
    prompt_tokens = tokens_of(prompts);
    inputs = prefill_requests(std::move(prompts), engine::PrefillOutput::logits, answer, engine->max_context(), "text_2");
  }
  const auto result = run_prefill(model, *engine, std::move(inputs), request);
  if (!result) return client_gone_response();

  json data = json::array();
  for (std::size_t i = 0; i < second.size(); ++i) {
    double score = 0;
    if (cosine) {
      const auto a = model::finish_embedding(result->outputs[first.size() == 1 ? 0 : i], 0, true);
      const auto b = model::finish_embedding(result->outputs[first.size() + i], 0, true);
      for (std::size_t k = 0; k < a.size(); ++k) score += static_cast<double>(a[k]) * b[k];
    } else {
      score = rerank_score(result->outputs[i][0], result->outputs[i][1]);
    }
    data.push_back({{"index", i}, {"object", "score"}, {"score", score}});
  }
  return json_response({{"id", "score-" + new_completion_id(false)},
                        {"object", "list"},
                        {"created", unix_now()},
                        {"model", name},
                        {"data", std::move(data)},
                        {"usage", embedding_usage(prompt_tokens)}});
}

}  // namespace neuron::server
