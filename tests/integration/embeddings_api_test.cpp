// Embeddings, rerank and score through the API and the engine, against the
// references in tests/data/embed (sentence-transformers 6.0.1 / transformers
// 5.17, float32; see its README): a Qwen3-Embedding-shaped checkpoint
// (bare Qwen3Model tensors, no LM head, last-token pooling, Normalize),
// qwen3-tiny-a used as an embedder (mean and last pooling) and as a
// Qwen3-Reranker (yes/no at the last position). The CPU runs f32, so the
// vectors agree to ~1e-6; the bar is 1e-4.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <numeric>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/batch.hpp"
#include "backend/cpu/activations.hpp"
#include "backend/model_runner.hpp"
#include "dist/communicator.hpp"
#include "engine/model_loader.hpp"
#include "engine/model_task.hpp"
#include "engine/registry.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "model/embedding.hpp"
#include "model/shard.hpp"
#include "server/api.hpp"
#include "server/model_spec.hpp"
#include "server/rerank_prompt.hpp"
#include "support/cosine.hpp"
#include "support/temp_dir.hpp"
#include "tokenizer/tokenizer.hpp"
#include "util/error.hpp"

namespace neuron::server {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

const fs::path kEmbedData = fs::path(NEURON_TEST_DATA) / "embed";
const fs::path kTiny = fs::path(NEURON_REPO_ROOT) / "models" / "qwen3-tiny-a";
constexpr double kTolerance = 1e-4;

json read_json(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return json::parse(s.str());
}

// qwen3_embed-a as released: its tokenizer.json is qwen3-tiny-a's with Qwen3-Embedding's post-processor
// (append <|endoftext|>), written here (make_goldens.py's EOS_POST).
fs::path make_embed_dir(const test_support::TempDir& tmp) {
  const fs::path dir = tmp / "qwen3_embed-a";
  fs::copy(kEmbedData / "qwen3_embed-a", dir, fs::copy_options::recursive);
  json tok = read_json(kTiny / "tokenizer.json");
  tok["post_processor"] = json::parse(R"({
    "type": "TemplateProcessing",
    "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
    "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}},
             {"Sequence": {"id": "B", "type_id": 1}}, {"SpecialToken": {"id": "<|endoftext|>", "type_id": 1}}],
    "special_tokens": {"<|endoftext|>": {"id": "<|endoftext|>", "ids": [151643], "tokens": ["<|endoftext|>"]}}})");
  std::ofstream(dir / "tokenizer.json") << tok.dump();
  return dir;
}

// A registry serving one model and the Api over it.
struct Served {
  explicit Served(const engine::ModelSpec& spec, std::int32_t max_batch_tokens = 0) {
    engine::RegistryOptions ro;
    ro.allow_any_directory = true;
    ro.worker_binary = NEURON_BINARY;
    ro.engine.max_batch_tokens = max_batch_tokens;
    registry = std::make_unique<engine::Registry>(ro);
    registry->load(spec, true);
    api = std::make_unique<Api>(*registry, ApiOptions{});
  }
  HttpResponse post(const std::string& path, const json& body) {
    return api->handle(HttpRequest{"POST", path, {}, body.dump(), "test"});
  }
  json ok(const std::string& path, const json& body) {
    const HttpResponse r = post(path, body);
    EXPECT_EQ(r.status, 200) << r.body;
    return json::parse(r.body);
  }
  std::unique_ptr<engine::Registry> registry;
  std::unique_ptr<Api> api;
};

engine::ModelSpec spec_of(const fs::path& dir, std::optional<std::string> task = std::nullopt,
                          std::optional<std::string> pooling = std::nullopt, int tp = 1) {
  engine::ModelSpec s;
  s.model_id = dir.string();
  s.device = "cpu";
  s.max_context = 1024;
  s.task = std::move(task);
  s.pooling = std::move(pooling);
  s.tensor_parallel = tp;
  return s;
}

double max_abs_diff(const std::vector<float>& a, const json& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) d = std::max(d, std::abs(a[i] - b[i].get<double>()));
  return d;
}

std::vector<float> floats(const json& j) { return j.get<std::vector<float>>(); }

std::vector<float> from_base64(const std::string& s) {
  static const std::string alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<unsigned char> bytes;
  unsigned buf = 0;
  int bits = 0;
  for (char c : s) {
    if (c == '=') break;
    buf = (buf << 6) | static_cast<unsigned>(alphabet.find(c));
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes.push_back(static_cast<unsigned char>((buf >> bits) & 0xff));
    }
  }
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

// Every golden input's text as sent: the query prompt prepended for queries (the client's job, as in OpenAI's API).
std::vector<std::string> golden_texts(const json& golden) {
  std::vector<std::string> out;
  for (const json& in : golden["inputs"])
    out.push_back((in["prompt_name"].is_null() ? std::string() : golden["query_prompt"].get<std::string>()) +
                  in["text"].get<std::string>());
  return out;
}

// A 400 naming `param`, whose message contains `words`.
void expect_400(Served& s, const std::string& path, const json& body, const std::string& param, const std::string& words = "") {
  const HttpResponse r = s.post(path, body);
  EXPECT_EQ(r.status, 400) << body.dump() << " -> " << r.body;
  const json e = json::parse(r.body)["error"];
  EXPECT_EQ(e["param"], param) << r.body;
  if (!words.empty()) {
    EXPECT_NE(e["message"].get<std::string>().find(words), std::string::npos) << r.body;
  }
}

class Embeddings : public ::testing::Test {
 protected:
  test_support::TempDir tmp{"neuron-embed"};
  fs::path dir = make_embed_dir(tmp);
  json golden = read_json(kEmbedData / "qwen3_embed-a" / "embed_golden.json");
};

TEST_F(Embeddings, SentenceTransformersFolderIsDetectedAsALastTokenNormalizedEmbedder) {
  const engine::TaskSetup t = engine::resolve_task(dir, std::nullopt, std::nullopt, "qwen3_embed-a");
  EXPECT_EQ(t.task, engine::ModelTask::embed);
  EXPECT_EQ(t.pooling, engine::Pooling::last);
  EXPECT_TRUE(t.normalize);
  // The tokenizer with Qwen3-Embedding's post-processor gives the ids sentence-transformers fed the model.
  const auto tok = tokenizer::Tokenizer::from_file(dir / "tokenizer.json");
  const auto texts = golden_texts(golden);
  for (std::size_t i = 0; i < texts.size(); ++i)
    EXPECT_EQ(tok.encode_with_special_tokens(texts[i]), golden["inputs"][i]["token_ids"].get<std::vector<std::int32_t>>()) << i;
}

TEST_F(Embeddings, DocumentsAndQueriesInOneRequestMatchSentenceTransformers) {
  Served s(spec_of(dir));
  const auto texts = golden_texts(golden);
  const json r = s.ok("/v1/embeddings", {{"model", "qwen3_embed-a"}, {"input", texts}});
  ASSERT_EQ(r["data"].size(), texts.size());
  std::int64_t tokens = 0;
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const json& want = golden["inputs"][i];
    EXPECT_EQ(r["data"][i]["index"], i);
    EXPECT_EQ(r["data"][i]["object"], "embedding");
    EXPECT_LT(max_abs_diff(floats(r["data"][i]["embedding"]), want["embedding"]), kTolerance) << "input " << i;
    tokens += static_cast<std::int64_t>(want["token_ids"].size());
  }
  EXPECT_EQ(r["object"], "list");
  EXPECT_EQ(r["model"], "qwen3_embed-a");
  EXPECT_EQ(r["usage"]["prompt_tokens"], tokens);
  EXPECT_EQ(r["usage"]["total_tokens"], tokens);
  // The model's task is visible.
  const HttpResponse models = s.api->handle(HttpRequest{"GET", "/v1/models", {}, "", "test"});
  EXPECT_EQ(json::parse(models.body)["data"][0]["task"], "embed") << models.body;
  const HttpResponse listed = s.api->handle(HttpRequest{"GET", "/models", {}, "", "test"});
  EXPECT_NE(listed.body.find("\"embeddings\""), std::string::npos) << listed.body;
}

TEST_F(Embeddings, TokenIdsWithDimensionsAndBase64MatchTheTruncatedReference) {
  Served s(spec_of(dir));
  json ids = json::array();
  for (const json& in : golden["inputs"]) ids.push_back(in["token_ids"]);
  const json r = s.ok("/v1/embeddings", {{"input", ids}, {"dimensions", 8}, {"encoding_format", "base64"}});
  ASSERT_EQ(r["data"].size(), ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const std::vector<float> v = from_base64(r["data"][i]["embedding"].get<std::string>());
    EXPECT_LT(max_abs_diff(v, golden["inputs"][i]["embedding_dims8"]), kTolerance) << "input " << i;
  }
  // One list of ids, and one string, are single inputs.
  const json one = s.ok("/v1/embeddings", {{"input", golden["inputs"][0]["token_ids"]}});
  EXPECT_LT(max_abs_diff(floats(one["data"][0]["embedding"]), golden["inputs"][0]["embedding"]), kTolerance);
  const json text = s.ok("/v1/embeddings", {{"input", golden["inputs"][1]["text"]}, {"encoding_format", "float"}});
  EXPECT_LT(max_abs_diff(floats(text["data"][0]["embedding"]), golden["inputs"][1]["embedding"]), kTolerance);
}

// sentence-transformers' prompts (config_sentence_transformers.json): qwen3_embed-a names `query` (Qwen3-Embedding's
// instruction) and `document` (""), with no default.
TEST_F(Embeddings, PromptNameQueryMatchesSentenceTransformersQueries) {
  Served s(spec_of(dir));
  const std::string prefix = golden["query_prompt"].get<std::string>();
  for (std::size_t i = 5; i < golden["inputs"].size(); ++i) {  // the queries
    const json& want = golden["inputs"][i];
    ASSERT_EQ(want["prompt_name"], "query");
    const json named = s.ok("/v1/embeddings", {{"input", want["text"]}, {"prompt_name", "query"}});
    const json plain = s.ok("/v1/embeddings", {{"input", prefix + want["text"].get<std::string>()}});
    EXPECT_LT(max_abs_diff(floats(named["data"][0]["embedding"]), want["embedding"]), kTolerance) << "input " << i;
    // The same ids; the second request takes the prompt's KV from the prefix cache, so the rows differ in rounding only.
    EXPECT_LT(max_abs_diff(floats(named["data"][0]["embedding"]), plain["data"][0]["embedding"]), 1e-5) << "input " << i;
    EXPECT_EQ(named["usage"], plain["usage"]) << "input " << i;
    // Usage counts the prompt's tokens.
    EXPECT_EQ(named["usage"]["prompt_tokens"], want["token_ids"].size()) << "input " << i;
  }
  // The document prompt is empty: a document's embedding; token ids never get a prompt.
  const json doc = s.ok("/v1/embeddings", {{"input", {golden["inputs"][0]["text"], golden["inputs"][0]["token_ids"]}},
                                           {"prompt_name", "document"}});
  EXPECT_LT(max_abs_diff(floats(doc["data"][0]["embedding"]), golden["inputs"][0]["embedding"]), kTolerance);
  const json ids = s.ok("/v1/embeddings", {{"input", golden["inputs"][1]["token_ids"]}, {"prompt_name", "query"}});
  EXPECT_LT(max_abs_diff(floats(ids["data"][0]["embedding"]), golden["inputs"][1]["embedding"]), kTolerance);
  EXPECT_EQ(ids["usage"]["prompt_tokens"], golden["inputs"][1]["token_ids"].size());
  expect_400(s, "/v1/embeddings", {{"input", "x"}, {"prompt_name", "passage"}}, "prompt_name", "'document', 'query'");
  expect_400(s, "/v1/embeddings", {{"input", "x"}, {"prompt_name", 3}}, "prompt_name", "must be a string");
  EXPECT_TRUE(s.registry->engine(dir.string())->idle());
}

// config_sentence_transformers.json rewritten in the temporary copy with `prompts` and `default_prompt_name`.
void write_st_config(const fs::path& dir, const json& prompts, const json& default_name) {
  json config = read_json(dir / "config_sentence_transformers.json");
  config["prompts"] = prompts;
  config["default_prompt_name"] = default_name;
  std::ofstream(dir / "config_sentence_transformers.json") << config.dump(2);
}

TEST_F(Embeddings, TheDefaultPromptIsPrependedUnlessTheRequestNamesAnother) {
  const std::string prefix = golden["query_prompt"].get<std::string>();
  write_st_config(dir, {{"query", prefix}, {"document", ""}}, "query");
  const engine::TaskSetup t = engine::resolve_task(dir, std::nullopt, std::nullopt, "qwen3_embed-a");
  EXPECT_EQ(t.default_prompt, "query");
  EXPECT_EQ(t.prompts.at("query"), prefix);
  Served s(spec_of(dir));
  const json& query = golden["inputs"][7];  // "What is the capital of China?" as a query
  const json& document = golden["inputs"][2];  // the same text as a document
  const json plain = s.ok("/v1/embeddings", {{"input", document["text"]}});
  EXPECT_LT(max_abs_diff(floats(plain["data"][0]["embedding"]), query["embedding"]), kTolerance);
  EXPECT_EQ(plain["usage"]["prompt_tokens"], query["token_ids"].size());
  const json named = s.ok("/v1/embeddings", {{"input", document["text"]}, {"prompt_name", "document"}});
  EXPECT_LT(max_abs_diff(floats(named["data"][0]["embedding"]), document["embedding"]), kTolerance);
  const json ids = s.ok("/v1/embeddings", {{"input", {document["token_ids"]}}});
  EXPECT_LT(max_abs_diff(floats(ids["data"][0]["embedding"]), document["embedding"]), kTolerance);
  // /v1/score embeds its texts as /v1/embeddings does: with the default prompt.
  const json sc = s.ok("/v1/score", {{"text_1", document["text"]}, {"text_2", golden["inputs"][3]["text"]}});
  double want = 0;
  for (std::size_t k = 0; k < query["embedding"].size(); ++k)
    want += query["embedding"][k].get<double>() * golden["inputs"][8]["embedding"][k].get<double>();
  EXPECT_NEAR(sc["data"][0]["score"].get<double>(), want, kTolerance);
  EXPECT_EQ(sc["usage"]["prompt_tokens"], query["token_ids"].size() + golden["inputs"][8]["token_ids"].size());
}

TEST_F(Embeddings, PromptsThatAreNotStringsOrAnUnknownDefaultAreABadModel) {
  for (const auto& [prompts, default_name] : {std::pair{json{{"query", 1}}, json(nullptr)},
                                              std::pair{json{{"query", "q: "}}, json("passage")},
                                              std::pair{json::array({"q: "}), json(nullptr)}}) {
    write_st_config(dir, prompts, default_name);
    try {
      engine::resolve_task(dir, std::nullopt, std::nullopt, "qwen3_embed-a");
      FAIL() << "accepted prompts " << prompts.dump() << " default " << default_name.dump();
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.kind()), errc::bad_model) << e.what();
      EXPECT_NE(std::string(e.what()).find("config_sentence_transformers.json"), std::string::npos) << e.what();
    }
  }
  // The registry refuses the load and keeps nothing.
  engine::RegistryOptions ro;
  ro.allow_any_directory = true;
  engine::Registry registry(ro);
  EXPECT_THROW(registry.load(spec_of(dir), true), Error);
  EXPECT_TRUE(registry.list().empty());
}

TEST_F(Embeddings, ConcurrentRequestsEqualOneAtATime) {
  // Small steps: the 632-token input is prefilled in chunks among the others.
  Served s(spec_of(dir), /*max_batch_tokens=*/64);
  const auto texts = golden_texts(golden);
  std::vector<std::vector<float>> alone;
  for (const std::string& t : texts) alone.push_back(floats(s.ok("/v1/embeddings", {{"input", t}})["data"][0]["embedding"]));
  std::vector<std::vector<float>> together(texts.size());
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < texts.size(); ++i)
    threads.emplace_back([&, i] { together[i] = floats(s.ok("/v1/embeddings", {{"input", texts[i]}})["data"][0]["embedding"]); });
  for (auto& t : threads) t.join();
  for (std::size_t i = 0; i < texts.size(); ++i) {
    EXPECT_LT(max_abs_diff(together[i], json(alone[i])), 1e-5) << "input " << i;
    EXPECT_LT(max_abs_diff(alone[i], golden["inputs"][i]["embedding"]), kTolerance) << "input " << i;
  }
  // Prefill-only sequences keep no KV: every block is back in the pool.
  EXPECT_EQ(s.registry->engine(dir.string())->stats().kv_blocks_used, 0);
}

TEST_F(Embeddings, ScoreIsTheCosineOfTheEmbeddings) {
  Served s(spec_of(dir));
  const auto texts = golden_texts(golden);
  // The query "What is the capital of China?" against two documents.
  const json r = s.ok("/v1/score", {{"text_1", texts[7]}, {"text_2", {texts[3], texts[0]}}});
  ASSERT_EQ(r["data"].size(), 2u) << r.dump();
  for (const auto& [i, doc] : {std::pair{0, 3}, std::pair{1, 0}}) {
    double want = 0;
    for (std::size_t k = 0; k < golden["inputs"][7]["embedding"].size(); ++k)
      want += golden["inputs"][7]["embedding"][k].get<double>() * golden["inputs"][doc]["embedding"][k].get<double>();
    EXPECT_NEAR(r["data"][i]["score"].get<double>(), want, kTolerance) << "pair " << i;
  }
  EXPECT_EQ(r["usage"]["prompt_tokens"], golden["inputs"][7]["token_ids"].size() + golden["inputs"][3]["token_ids"].size() +
                                             golden["inputs"][0]["token_ids"].size());
}

TEST_F(Embeddings, TensorParallelTwoOnTheCpuEqualsOneRank) {
  Served single(spec_of(dir));
  Served sharded(spec_of(dir, std::nullopt, std::nullopt, 2));
  const auto texts = golden_texts(golden);
  const json a = single.ok("/v1/embeddings", {{"input", texts}});
  const json b = sharded.ok("/v1/embeddings", {{"input", texts}});
  for (std::size_t i = 0; i < texts.size(); ++i) {
    EXPECT_LT(max_abs_diff(floats(b["data"][i]["embedding"]), a["data"][i]["embedding"]), 1e-5) << "input " << i;
    EXPECT_LT(max_abs_diff(floats(b["data"][i]["embedding"]), golden["inputs"][i]["embedding"]), kTolerance) << "input " << i;
  }
}

TEST_F(Embeddings, BadInputIs400NamingTheField) {
  engine::ModelSpec spec = spec_of(dir);
  spec.max_context = 64;
  Served s(spec);
  expect_400(s, "/v1/embeddings", json::object(), "input", "required");
  expect_400(s, "/v1/embeddings", {{"input", ""}}, "input", "empty");
  expect_400(s, "/v1/embeddings", {{"input", json::array()}}, "input", "empty");
  expect_400(s, "/v1/embeddings", {{"input", {"a", ""}}}, "input[1]", "empty");
  expect_400(s, "/v1/embeddings", {{"input", {"a", json::array()}}}, "input[1]", "empty");
  expect_400(s, "/v1/embeddings", {{"input", std::vector<std::string>(2049, "a")}}, "input", "at most 2048");
  expect_400(s, "/v1/embeddings", {{"input", {1, -2}}}, "input[1]");
  expect_400(s, "/v1/embeddings", {{"input", {{1, 2}, {3, 999999999}}}}, "input[1][1]");
  expect_400(s, "/v1/embeddings", {{"input", {"a", 3}}}, "input[1]");
  expect_400(s, "/v1/embeddings", {{"input", 7}}, "input");
  expect_400(s, "/v1/embeddings", {{"input", golden["inputs"][4]["text"]}}, "input", "context");
  expect_400(s, "/v1/embeddings", {{"input", {"a", golden["inputs"][4]["text"]}}}, "input[1]", "context");
  expect_400(s, "/v1/embeddings", {{"input", "a"}, {"encoding_format", "int8"}}, "encoding_format");
  expect_400(s, "/v1/embeddings", {{"input", "a"}, {"dimensions", 0}}, "dimensions");
  expect_400(s, "/v1/embeddings", {{"input", "a"}, {"dimensions", 17}}, "dimensions");
  // A wrong-task model says how to load one for the task.
  expect_400(s, "/v1/rerank", {{"query", "q"}, {"documents", {"d"}}}, "model", "task rerank");
  expect_400(s, "/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "hi"}}}}}, "model", "/v1/embeddings");
  // Nothing above left anything running.
  EXPECT_TRUE(s.registry->engine(dir.string())->idle());
  EXPECT_EQ(s.api->in_flight(), 0u);
}

TEST_F(Embeddings, AClientThatLeavesCancelsTheRestAndFreesEverything) {
  Served s(spec_of(dir));
  // 1024 inputs of 632 tokens, each its own first token so that the prefix cache shares nothing: seconds of
  // prefill on the CPU; the client is gone at the first probe (100 ms).
  json many = json::array();
  for (std::int32_t i = 0; i < 1024; ++i) {
    json ids = golden["inputs"][4]["token_ids"];
    ids[0] = 1000 + i;
    many.push_back(std::move(ids));
  }
  HttpRequest r{"POST", "/v1/embeddings", {}, json({{"input", many}}).dump(), "test"};
  r.client_gone = [] { return true; };
  const auto started = std::chrono::steady_clock::now();
  const HttpResponse answer = s.api->handle(r);
  EXPECT_EQ(answer.status, 499) << answer.body.substr(0, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5)) << "the request ran on after its client left";
  const auto engine = s.registry->engine(dir.string());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!engine->idle() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(engine->idle());
  EXPECT_EQ(engine->stats().kv_blocks_used, 0);
  EXPECT_GT(engine->stats().requests_cancelled, 0u) << "done " << engine->stats().requests_done << " failed " << engine->stats().requests_failed;
  EXPECT_EQ(s.api->in_flight(), 0u);
  EXPECT_EQ(s.api->metrics().value("neuron_requests_cancelled_total", {{"model", dir.string()}}), 1);
}

TEST(EmbeddingsPooled, AGenerativeModelEmbedsWithMeanAndLastPooling) {
  const json golden = read_json(kEmbedData / "pooled_golden.json");
  for (const std::string pooling : {"mean", "last"}) {
    Served s(spec_of(kTiny, "embed", pooling), /*max_batch_tokens=*/64);
    json texts = json::array();
    for (const json& in : golden["inputs"]) texts.push_back(in["text"]);
    const json r = s.ok("/v1/embeddings", {{"input", texts}});
    ASSERT_EQ(r["data"].size(), texts.size());
    for (std::size_t i = 0; i < texts.size(); ++i)
      EXPECT_LT(max_abs_diff(floats(r["data"][i]["embedding"]), golden["inputs"][i][pooling]), kTolerance)
          << pooling << " input " << i;
    EXPECT_EQ(s.registry->engine(kTiny.string())->stats().kv_blocks_used, 0);
  }
}

// The runner's final-norm rows (backend/batch.hpp: hidden_all) of a whole input of the model in `dir`, computed
// in one step: [tokens, hidden]. An embedder without an LM head reads its embedding table (as engine::open_runner does).
std::vector<float> hidden_rows(const fs::path& dir, const std::vector<std::int32_t>& ids) {
  model::ModelConfig cfg = model::load_model_configs(dir).model;
  const auto ckpt = io::Checkpoint::open_dir(dir);
  if (!ckpt.find("lm_head.weight")) cfg.tie_word_embeddings = true;
  auto runner = backend::make_runner(cfg, &ckpt, model::ShardPlan::make(cfg, 0, 1), backend::Device{},
                                     std::make_shared<dist::LocalCommunicator>(),
                                     {.max_context = 1024, .kv_block_size = 16, .kv_blocks = 64});
  std::vector<std::int32_t> blocks((ids.size() + 15) / 16);
  std::iota(blocks.begin(), blocks.end(), 0);
  backend::Batch batch;
  batch.add(ids, 0, blocks, backend::LogitsWanted::hidden_all);
  std::vector<float> rows(ids.size() * static_cast<std::size_t>(cfg.hidden_size));  // [tokens, hidden]
  runner->step(batch, {}, {}, rows);
  return rows;
}

// The L2-normalized mean of rows [from, end) of `rows` ([tokens, hidden]), in double.
std::vector<float> normalized_mean(const std::vector<float>& rows, std::size_t hidden, std::size_t from) {
  const std::size_t tokens = rows.size() / hidden;
  std::vector<double> sum(hidden, 0.0);
  for (std::size_t t = from; t < tokens; ++t)
    for (std::size_t c = 0; c < hidden; ++c) sum[c] += rows[t * hidden + c];
  std::vector<float> mean(hidden);
  for (std::size_t c = 0; c < hidden; ++c) mean[c] = static_cast<float>(sum[c] / static_cast<double>(tokens - from));
  return model::finish_embedding(mean, 0, true);
}

// cls pooling's reference: row 0 of the runner's final-norm rows over the whole input, L2-normalized. The engine
// computes the first token alone (engine::pooled_prefix); this computes them all.
std::vector<float> first_row_of_whole_input(const std::vector<std::int32_t>& ids) {
  const std::vector<float> rows = hidden_rows(kTiny, ids);
  const auto hidden = static_cast<std::size_t>(model::load_model_configs(kTiny).model.hidden_size);
  return model::finish_embedding(std::span<const float>(rows.data(), hidden), 0, true);
}

TEST(EmbeddingsPooled, ClsIsTheFirstTokensRowComputedAlone) {
  const json golden = read_json(kEmbedData / "pooled_golden.json");
  Served s(spec_of(kTiny, "embed", "cls"), /*max_batch_tokens=*/64);
  json texts = json::array();
  std::int64_t tokens = 0;
  for (const json& in : golden["inputs"]) {
    texts.push_back(in["text"]);
    tokens += static_cast<std::int64_t>(in["token_ids"].size());
  }
  const json r = s.ok("/v1/embeddings", {{"input", texts}});
  ASSERT_EQ(r["data"].size(), texts.size());
  for (std::size_t i = 0; i < texts.size(); ++i) {
    const auto want = first_row_of_whole_input(golden["inputs"][i]["token_ids"].get<std::vector<std::int32_t>>());
    EXPECT_LT(max_abs_diff(floats(r["data"][i]["embedding"]), json(want)), kTolerance) << "input " << i;
  }
  // "hello" is one token: its first row is its last, transformers' reference.
  ASSERT_EQ(golden["inputs"][1]["token_ids"].size(), 1u);
  EXPECT_LT(max_abs_diff(floats(r["data"][1]["embedding"]), golden["inputs"][1]["last"]), kTolerance);
  // Texts that share their first token share a cls embedding ("The quick ..." and "The capital ...").
  EXPECT_LT(max_abs_diff(floats(r["data"][0]["embedding"]), r["data"][3]["embedding"]), 1e-6);
  // Usage counts the inputs as sent; the engine computed one token of each, and kept nothing.
  EXPECT_EQ(r["usage"]["prompt_tokens"], tokens);
  EXPECT_EQ(s.api->metrics().value("neuron_prompt_tokens_total", {{"model", kTiny.string()}}), static_cast<double>(texts.size()));
  EXPECT_EQ(s.registry->engine(kTiny.string())->stats().kv_blocks_used, 0);
  // The pooling is named where the task is.
  const json models = json::parse(s.api->handle(HttpRequest{"GET", "/v1/models", {}, "", "test"}).body);
  EXPECT_EQ(models["data"][0]["task"], "embed") << models.dump();
  EXPECT_EQ(models["data"][0]["pooling"], "cls") << models.dump();
  const json listed = json::parse(s.api->handle(HttpRequest{"GET", "/models", {}, "", "test"}).body);
  EXPECT_NE(listed.dump().find("\"pooling\":\"cls\""), std::string::npos) << listed.dump();
}

TEST(EmbeddingsPooled, SentenceTransformersClsModeIsDetected) {
  test_support::TempDir tmp{"neuron-embed-cls"};
  const fs::path dir = make_embed_dir(tmp);
  for (const json& config : {json{{"pooling_mode", "cls"}}, json{{"pooling_mode_cls_token", true}, {"pooling_mode_mean_tokens", false}}}) {
    std::ofstream(dir / "1_Pooling" / "config.json") << config.dump();
    const engine::TaskSetup t = engine::resolve_task(dir, std::nullopt, std::nullopt, "qwen3_embed-a");
    EXPECT_EQ(t.task, engine::ModelTask::embed) << config.dump();
    EXPECT_EQ(t.pooling, engine::Pooling::cls) << config.dump();
  }
  std::ofstream(dir / "1_Pooling" / "config.json") << json{{"pooling_mode", "max"}}.dump();
  try {
    engine::resolve_task(dir, std::nullopt, std::nullopt, "qwen3_embed-a");
    FAIL() << "max pooling was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.kind()), errc::unsupported_arch);
    EXPECT_NE(std::string(e.what()).find("lasttoken, mean and cls are"), std::string::npos) << e.what();
  }
}

// 1_Pooling/config.json's include_prompt false (sentence-transformers, e.g. INSTRUCTOR-style models): mean
// pooling leaves out a prompt's tokens (the prompt's ids with special tokens, less one: sentence-transformers'
// prompt_length), for a named prompt, the default one and /v1/score's; a text with no prompt and token ids
// pool every row. Reference: the runner's rows of the whole input in one step, averaged here.
TEST_F(Embeddings, IncludePromptFalseLeavesThePromptOutOfTheMean) {
  std::ofstream(dir / "1_Pooling" / "config.json") << json{{"pooling_mode", "mean"}, {"include_prompt", false}}.dump();
  const engine::TaskSetup t = engine::resolve_task(dir, std::nullopt, std::nullopt, "qwen3_embed-a");
  EXPECT_EQ(t.pooling, engine::Pooling::mean);
  EXPECT_FALSE(t.include_prompt);
  const auto tok = tokenizer::Tokenizer::from_file(dir / "tokenizer.json");
  const std::string prefix = golden["query_prompt"].get<std::string>();
  const std::size_t prompt_tokens = tok.encode_with_special_tokens(prefix).size() - 1;  // less the appended <|endoftext|>
  EXPECT_GT(prompt_tokens, 10u);
  const auto hidden = static_cast<std::size_t>(model::load_model_configs(dir).model.hidden_size);
  const json& query = golden["inputs"][7];  // "What is the capital of China?" with the query prompt
  const auto ids = query["token_ids"].get<std::vector<std::int32_t>>();
  const std::vector<float> rows = hidden_rows(dir, ids);
  const std::vector<float> want = normalized_mean(rows, hidden, prompt_tokens);
  const std::vector<float> with_prompt = normalized_mean(rows, hidden, 0);
  EXPECT_GT(max_abs_diff(want, json(with_prompt)), 0.05);  // leaving the prompt out matters

  {
    Served s(spec_of(dir));
    const json named = s.ok("/v1/embeddings", {{"input", query["text"]}, {"prompt_name", "query"}});
    EXPECT_LT(max_abs_diff(floats(named["data"][0]["embedding"]), json(want)), kTolerance);
    EXPECT_EQ(named["usage"]["prompt_tokens"], ids.size());  // usage counts the prompt
    // The same ids sent as a text with the prompt typed in, or as token ids: no prompt was applied, every row counts.
    const json typed = s.ok("/v1/embeddings", {{"input", {prefix + query["text"].get<std::string>(), query["token_ids"]}}});
    EXPECT_LT(max_abs_diff(floats(typed["data"][0]["embedding"]), json(with_prompt)), kTolerance);
    EXPECT_LT(max_abs_diff(floats(typed["data"][1]["embedding"]), json(with_prompt)), kTolerance);
    const json models = json::parse(s.api->handle(HttpRequest{"GET", "/v1/models", {}, "", "test"}).body);
    EXPECT_EQ(models["data"][0]["pooling"], "mean") << models.dump();
    EXPECT_EQ(models["data"][0]["include_prompt"], false) << models.dump();
    EXPECT_TRUE(s.registry->engine(dir.string())->idle());
  }
  {  // The default prompt, on /v1/embeddings and on /v1/score's texts.
    write_st_config(dir, {{"query", prefix}, {"document", ""}}, "query");
    Served s(spec_of(dir));
    const json r = s.ok("/v1/embeddings", {{"input", query["text"]}});
    EXPECT_LT(max_abs_diff(floats(r["data"][0]["embedding"]), json(want)), kTolerance);
    const std::string other = golden["inputs"][0]["text"].get<std::string>();
    const std::vector<float> other_want =
        normalized_mean(hidden_rows(dir, tok.encode_with_special_tokens(prefix + other)), hidden, prompt_tokens);
    double cosine = 0;
    for (std::size_t c = 0; c < hidden; ++c) cosine += static_cast<double>(want[c]) * other_want[c];
    const json sc = s.ok("/v1/score", {{"text_1", query["text"]}, {"text_2", other}});
    EXPECT_NEAR(sc["data"][0]["score"].get<double>(), cosine, kTolerance) << sc.dump();
    // A prompt that is empty leaves nothing out.
    const json doc = s.ok("/v1/embeddings", {{"input", golden["inputs"][2]["text"]}, {"prompt_name", "document"}});
    const std::vector<float> doc_rows = hidden_rows(dir, golden["inputs"][2]["token_ids"].get<std::vector<std::int32_t>>());
    EXPECT_LT(max_abs_diff(floats(doc["data"][0]["embedding"]), json(normalized_mean(doc_rows, hidden, 0))), kTolerance);
  }
  {  // Last-token pooling ignores it: sentence-transformers' reference for the query.
    std::ofstream(dir / "1_Pooling" / "config.json") << json{{"pooling_mode", "lasttoken"}, {"include_prompt", false}}.dump();
    Served s(spec_of(dir));
    const json r = s.ok("/v1/embeddings", {{"input", query["text"]}, {"prompt_name", "query"}});
    EXPECT_LT(max_abs_diff(floats(r["data"][0]["embedding"]), query["embedding"]), kTolerance);
  }
  std::ofstream(dir / "1_Pooling" / "config.json") << json{{"pooling_mode", "mean"}, {"include_prompt", "no"}}.dump();
  try {
    (void)engine::resolve_task(dir, std::nullopt, std::nullopt, "qwen3_embed-a");
    ADD_FAILURE() << "a non-boolean include_prompt loaded";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.kind()), errc::bad_model);
    EXPECT_NE(std::string(e.what()).find("include_prompt"), std::string::npos) << e.what();
  }
}

TEST(EmbeddingsPooled, AGenerativeModelWithoutPoolingSaysHowToLoadIt) {
  Served s(spec_of(kTiny));
  expect_400(s, "/v1/embeddings", {{"input", "hello"}}, "model", "pooling last");
  // task embed without pooling on such a model is refused at load, naming the option.
  engine::RegistryOptions ro;
  ro.allow_any_directory = true;
  engine::Registry registry(ro);
  try {
    registry.load(spec_of(kTiny, "embed"), true);
    FAIL() << "loaded an embedder with no pooling";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.kind()), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("pooling"), std::string::npos) << e.what();
  }
}

TEST(EmbeddingsLoadOptions, SpecTextAndJsonCarryTaskAndPooling) {
  const engine::ModelSpec a = parse_model_spec_text("/m/qwen3:task=embed,pooling=mean");
  EXPECT_EQ(a.model_id, "/m/qwen3");
  EXPECT_EQ(a.task, "embed");
  EXPECT_EQ(a.pooling, "mean");
  const engine::ModelSpec b = parse_model_spec_text(R"({"model_id": "x", "task": "rerank"})");
  EXPECT_EQ(b.task, "rerank");
  EXPECT_THROW(parse_model_spec_text("/m/qwen3:task=summarize"), Error);
  EXPECT_THROW(parse_model_spec_text("/m/qwen3:pooling=max"), Error);
  EXPECT_EQ(parse_model_spec_text("/m/qwen3:task=embed,pooling=cls").pooling, "cls");
  EXPECT_EQ(engine::resolve_task(kTiny, "embed", "cls", "x").pooling, engine::Pooling::cls);
  EXPECT_EQ(engine::pooling_name(engine::Pooling::cls), "cls");
  EXPECT_THROW(engine::resolve_task(kTiny, "rerank", "mean", "x"), Error);  // pooling is for embedders
  EXPECT_EQ(engine::resolve_task(kTiny, std::nullopt, std::nullopt, "Qwen/Qwen3-Reranker-0.6B").task, engine::ModelTask::rerank);
  EXPECT_EQ(engine::resolve_task(kTiny, std::nullopt, std::nullopt, "qwen3-tiny-a").task, engine::ModelTask::generate);
}

class Rerank : public ::testing::Test {
 protected:
  json golden = read_json(kEmbedData / "rerank_golden.json");
};

TEST_F(Rerank, PromptIdsMatchTheModelCard) {
  const auto tok = tokenizer::Tokenizer::from_file(kTiny / "tokenizer.json");
  for (const json& p : golden["pairs"]) {
    const std::string instruction = p["instruction"].is_null() ? "" : p["instruction"].get<std::string>();
    EXPECT_EQ(rerank_prompt_ids(tok, instruction, p["query"].get<std::string>(), p["document"].get<std::string>()),
              p["token_ids"].get<std::vector<std::int32_t>>());
  }
  EXPECT_EQ(rerank_answer_ids(tok),
            (std::vector<std::int32_t>{golden["no_token_id"].get<std::int32_t>(), golden["yes_token_id"].get<std::int32_t>()}));
}

TEST_F(Rerank, ScoresMatchTransformersAndResultsAreSortedByScore) {
  Served s(spec_of(kTiny, "rerank"), /*max_batch_tokens=*/64);
  // The first two pairs share a query: one rerank call.
  const json& p0 = golden["pairs"][0];
  const json& p1 = golden["pairs"][1];
  const json r = s.ok("/v1/rerank", {{"query", p0["query"]}, {"documents", {p0["document"], {{"text", p1["document"]}}}}});
  ASSERT_EQ(r["results"].size(), 2u) << r.dump();
  const double s0 = p0["score"].get<double>(), s1 = p1["score"].get<double>();
  for (const json& res : r["results"]) {
    const json& want = golden["pairs"][res["index"].get<std::size_t>()];
    EXPECT_NEAR(res["relevance_score"].get<double>(), want["score"].get<double>(), kTolerance);
    EXPECT_EQ(res["document"]["text"], want["document"]);
  }
  EXPECT_EQ(r["results"][0]["index"], s0 >= s1 ? 0 : 1);
  EXPECT_GT(r["usage"]["prompt_tokens"].get<std::int64_t>(), 0);
  // top_n and return_documents.
  const json top = s.ok("/v2/rerank", {{"query", p0["query"]}, {"documents", {p0["document"], p1["document"]}}, {"top_n", 1},
                                      {"return_documents", false}});
  ASSERT_EQ(top["results"].size(), 1u);
  EXPECT_FALSE(top["results"][0].contains("document"));
  // Every pair through /v1/score (text_1 lists pair up with text_2), the instruction and the 700-token document included.
  json first = json::array(), second = json::array();
  for (const json& p : golden["pairs"]) {
    first.push_back(p["query"]);
    second.push_back(p["document"]);
  }
  // The instruction applies to a whole request: score the pairs without one here, the third with it below.
  const json sc = s.ok("/v1/score", {{"text_1", first}, {"text_2", second}});
  ASSERT_EQ(sc["data"].size(), golden["pairs"].size());
  for (std::size_t i = 0; i < golden["pairs"].size(); ++i) {
    if (!golden["pairs"][i]["instruction"].is_null()) continue;
    EXPECT_NEAR(sc["data"][i]["score"].get<double>(), golden["pairs"][i]["score"].get<double>(), kTolerance) << i;
  }
  const json& p2 = golden["pairs"][2];
  const json with = s.ok("/rerank", {{"query", p2["query"]}, {"documents", {p2["document"]}}, {"instruction", p2["instruction"]}});
  EXPECT_NEAR(with["results"][0]["relevance_score"].get<double>(), p2["score"].get<double>(), kTolerance);
  EXPECT_EQ(s.registry->engine(kTiny.string())->stats().kv_blocks_used, 0);
}

TEST_F(Rerank, BadInputIs400NamingTheField) {
  Served s(spec_of(kTiny, "rerank"));
  expect_400(s, "/v1/rerank", {{"query", "q"}}, "documents");
  expect_400(s, "/v1/rerank", {{"query", "q"}, {"documents", json::array()}}, "documents");
  expect_400(s, "/v1/rerank", {{"documents", {"d"}}}, "query");
  expect_400(s, "/v1/rerank", {{"query", "q"}, {"documents", {"d", 4}}}, "documents[1]");
  expect_400(s, "/v1/rerank", {{"query", "q"}, {"documents", std::vector<std::string>(1025, "d")}}, "documents", "at most");
  expect_400(s, "/v1/rerank", {{"query", "q"}, {"documents", {"d"}}, {"top_n", 0}}, "top_n");
  expect_400(s, "/v1/score", {{"text_1", {"a", "b"}}, {"text_2", {"c", "d", "e"}}}, "text_2");
  expect_400(s, "/v1/score", {{"text_1", "a"}}, "text_2");
  expect_400(s, "/v1/embeddings", {{"input", "a"}}, "model", "task embed");
  EXPECT_TRUE(s.registry->engine(kTiny.string())->idle());
  Served gen(spec_of(kTiny));
  expect_400(gen, "/v1/score", {{"text_1", "a"}, {"text_2", "b"}}, "model", "task rerank");
}

// The CPU default for an embedder or a reranker (backend/cpu/activations.hpp's model_activations): under auto
// its products round the activations to bf16 and its KV cache holds bf16, decided at load; a generation model
// keeps f32 (its KV pool's element says so), and an explicit level is kept for every task. Against the f32
// references of tests/data/embed (tiny random models, 16 and 32 wide, whose rounding averages out less than
// a real model's) every vector stays within cosine 0.9998 and every rerank score within 5e-3 (measured on an
// AVX-512 BF16 CPU: 0.99996 and 1.9e-3; bench/embed/README.md), and differs from them (the rounding happened).
class Restore {  // the test binary's level (cpu_exact_default.cpp: f32) back at the end
 public:
  Restore() : before_(backend::cpu::cpu_activations()) {}
  ~Restore() { backend::cpu::set_cpu_activations(before_); }

 private:
  backend::cpu::Activations before_;
};

std::uint64_t kv_bytes_per_block(const fs::path& dir, std::optional<std::string> task, std::optional<std::string> pooling) {
  engine::LoadOptions o;
  o.model_dir = dir;
  o.max_context = 256;
  o.task = std::move(task);
  o.pooling = std::move(pooling);
  return engine::open_runner(o)->kv_pool().bytes_per_block;
}

double cosine(const std::vector<float>& a, const json& b) { return test_support::cosine(a, floats(b)); }

TEST(EmbeddingsActivations, AnEncoderRoundsToBf16UnderAutoAndStaysCloseToTheReferences) {
  const Restore restore;
  using backend::cpu::Activations;
  EXPECT_EQ(backend::cpu::model_activations(Activations::automatic, true, false), Activations::int8);
  EXPECT_EQ(backend::cpu::model_activations(Activations::automatic, false, false), Activations::automatic);
  EXPECT_EQ(backend::cpu::model_activations(Activations::automatic, false, true), Activations::int8);
  for (const Activations a : {Activations::f32, Activations::bf16, Activations::int8}) {
    EXPECT_EQ(backend::cpu::model_activations(a, true, false), a);
    EXPECT_EQ(backend::cpu::model_activations(a, false, true), a);
  }
  backend::cpu::set_cpu_activations(Activations::automatic);
  const std::uint64_t generate = kv_bytes_per_block(kTiny, std::nullopt, std::nullopt);
  EXPECT_EQ(kv_bytes_per_block(kTiny, "embed", "last") * 2, generate);
  EXPECT_EQ(kv_bytes_per_block(kTiny, "rerank", std::nullopt) * 2, generate);
  backend::cpu::set_cpu_activations(Activations::f32);
  EXPECT_EQ(kv_bytes_per_block(kTiny, "embed", "last"), generate);

  backend::cpu::set_cpu_activations(Activations::automatic);  // read at each load below
  double min_cosine = 1, max_diff = 0, max_score_diff = 0;
  {  // qwen3_embed-a, last-token pooling: sentence-transformers' vectors
    test_support::TempDir tmp{"neuron-embed-auto"};
    const fs::path dir = make_embed_dir(tmp);
    const json golden = read_json(kEmbedData / "qwen3_embed-a" / "embed_golden.json");
    Served s(spec_of(dir));
    const json r = s.ok("/v1/embeddings", {{"input", golden_texts(golden)}});
    for (std::size_t i = 0; i < golden["inputs"].size(); ++i) {
      min_cosine = std::min(min_cosine, cosine(floats(r["data"][i]["embedding"]), golden["inputs"][i]["embedding"]));
      max_diff = std::max(max_diff, max_abs_diff(floats(r["data"][i]["embedding"]), golden["inputs"][i]["embedding"]));
    }
  }
  const json pooled = read_json(kEmbedData / "pooled_golden.json");
  for (const std::string pooling : {"mean", "last"}) {  // qwen3-tiny-a as an embedder: transformers' rows
    Served s(spec_of(kTiny, "embed", pooling), /*max_batch_tokens=*/64);
    json texts = json::array();
    for (const json& in : pooled["inputs"]) texts.push_back(in["text"]);
    const json r = s.ok("/v1/embeddings", {{"input", texts}});
    for (std::size_t i = 0; i < texts.size(); ++i) {
      min_cosine = std::min(min_cosine, cosine(floats(r["data"][i]["embedding"]), pooled["inputs"][i][pooling]));
      max_diff = std::max(max_diff, max_abs_diff(floats(r["data"][i]["embedding"]), pooled["inputs"][i][pooling]));
    }
  }
  {  // qwen3-tiny-a as a reranker: transformers' yes/no probabilities
    const json golden = read_json(kEmbedData / "rerank_golden.json");
    Served s(spec_of(kTiny, "rerank"), /*max_batch_tokens=*/64);
    for (const json& p : golden["pairs"]) {
      json body = {{"text_1", p["query"]}, {"text_2", p["document"]}};
      if (!p["instruction"].is_null()) body["instruction"] = p["instruction"];
      const json sc = s.ok("/v1/score", body);
      max_score_diff = std::max(max_score_diff, std::abs(sc["data"][0]["score"].get<double>() - p["score"].get<double>()));
    }
  }
  std::cout << "auto on an encoder vs the f32 references: min cosine " << min_cosine << ", max |diff| " << max_diff
            << ", max rerank score |diff| " << max_score_diff << "\n";
  EXPECT_GT(min_cosine, 0.9998);
  EXPECT_GT(max_diff, 1e-5);  // f32 agrees to ~1e-6: something was rounded
  EXPECT_LT(max_score_diff, 5e-3);
  EXPECT_GT(max_score_diff, 0.0);
}

}  // namespace
}  // namespace neuron::server
