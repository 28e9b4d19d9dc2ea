#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/model_runner.hpp"
#include "dist/communicator.hpp"
#include "engine/engine.hpp"
#include "engine/generator.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "model/shard.hpp"
#include "tokenizer/tokenizer.hpp"
#include "util/error.hpp"
#include "support/engine_drain.hpp"

namespace neuron::engine {
namespace {

using namespace std::chrono_literals;

using test_support::kTinyModel;

std::unique_ptr<backend::ModelRunner> open_tiny_runner(std::int32_t max_context = 512) {
  const model::ModelConfigs configs = model::load_model_configs(kTinyModel);
  const io::Checkpoint checkpoint = io::Checkpoint::open_dir(kTinyModel);
  backend::RunnerOptions options;
  options.max_context = max_context;
  options.kv_block_size = 4;  // small blocks, so short test prompts share whole blocks
  options.kv_blocks = 1024;
  return backend::make_runner(configs.model, &checkpoint, model::ShardPlan::make(configs.model, 0, 1), backend::Device{},
                              std::make_shared<dist::LocalCommunicator>(), options);
}

using test_support::tiny_tokenizer;

// A runner that delegates to a real one and throws `kind` on the step call
// number `fail_at` (0-based), as a dead TP worker or a CUDA fault would.
class FailingRunner final : public backend::ModelRunner {
 public:
  FailingRunner(std::unique_ptr<backend::ModelRunner> inner, int fail_at, std::string kind)
      : inner_(std::move(inner)), fail_at_(fail_at), kind_(std::move(kind)) {}
  void run_step(const backend::Batch& batch, std::span<float> logits, std::span<std::int32_t>, std::span<float>) override {
    if (calls_++ == fail_at_) fail(kind_, "injected failure on step " + std::to_string(fail_at_));
    inner_->step(batch, logits);
  }
  backend::KvPoolShape kv_pool() const noexcept override { return inner_->kv_pool(); }
  const model::ModelConfig& config() const noexcept override { return inner_->config(); }
  std::int32_t max_context() const noexcept override { return inner_->max_context(); }
  backend::MemoryStats memory() const override { return inner_->memory(); }

 private:
  std::unique_ptr<backend::ModelRunner> inner_;
  int fail_at_;
  int calls_ = 0;
  std::string kind_;
};

// decode() refuses ids past the tokenizer's vocabulary (the embedding's padding
// rows, which a tiny random model can pick); the engine gives them no text.
std::string decode_known(const std::vector<std::int32_t>& ids) {
  std::vector<std::int32_t> known;
  for (std::int32_t id : ids) {
    if (tiny_tokenizer()->is_known(id)) known.push_back(id);
  }
  return tiny_tokenizer()->decode(known, /*skip_special_tokens=*/true);
}

using test_support::drain;
using test_support::Outcome;

CompletionRequest greedy_request(std::vector<std::int32_t> prompt, std::int32_t max_tokens) {
  CompletionRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  r.ignore_eos = true;
  return r;
}

class EngineTest : public ::testing::Test {
 protected:
  std::unique_ptr<Engine> make_engine(EngineOptions options = {}, std::unique_ptr<backend::ModelRunner> runner = nullptr,
                                      model::ModelConfigs configs = model::load_model_configs(kTinyModel)) {
    if (!runner) runner = open_tiny_runner();
    return std::make_unique<Engine>("tiny", std::move(runner), tiny_tokenizer(), std::move(configs), options);
  }
  std::vector<std::int32_t> prompt() const { return tiny_tokenizer()->encode("The capital of France is"); }
};

TEST_F(EngineTest, GreedyOutputEqualsGenerate) {
  auto runner = open_tiny_runner();
  GenerateRequest reference;
  reference.prompt = prompt();
  reference.max_tokens = 40;
  reference.sampling.temperature = 0.0f;
  reference.ignore_eos = true;
  const GenerateResult expected = generate(*runner, reference);
  ASSERT_EQ(expected.tokens.size(), 40u);

  auto engine = make_engine();
  Outcome got = drain(*engine->submit(greedy_request(prompt(), 40)));
  ASSERT_EQ(got.last.kind, Event::Kind::done) << got.last.error_message;
  EXPECT_EQ(got.last.tokens, expected.tokens);
  EXPECT_EQ(got.last.finish_reason, "length");
  EXPECT_EQ(got.last.usage.prompt_tokens, static_cast<std::int32_t>(prompt().size()));
  EXPECT_EQ(got.last.usage.completion_tokens, 40);
  EXPECT_GT(got.last.time_to_first_token_ms, 0.0);
  // The deltas' text is the whole decode, and their ids a prefix of the output.
  EXPECT_EQ(got.text, decode_known(expected.tokens));
  ASSERT_LE(got.delta_tokens.size(), expected.tokens.size());
  EXPECT_TRUE(std::equal(got.delta_tokens.begin(), got.delta_tokens.end(), expected.tokens.begin()));
}

TEST_F(EngineTest, LaterRequestsReuseTheCachedPrefixAndMatch) {
  auto engine = make_engine();
  const Outcome first = drain(*engine->submit(greedy_request(prompt(), 16)));
  // The same prompt again, and one that extends the first request's whole sequence.
  const Outcome again = drain(*engine->submit(greedy_request(prompt(), 16)));
  std::vector<std::int32_t> longer = prompt();
  longer.insert(longer.end(), first.last.tokens.begin(), first.last.tokens.begin() + 8);
  const Outcome extended = drain(*engine->submit(greedy_request(longer, 8)));
  EXPECT_EQ(again.last.tokens, first.last.tokens);
  EXPECT_EQ(std::vector<std::int32_t>(first.last.tokens.begin() + 8, first.last.tokens.end()), extended.last.tokens);
  const EngineStats stats = engine->stats();
  // Whole blocks of 4 positions (open_tiny_runner) of each prompt but its last token come from the cache.
  const auto whole = [](std::size_t n) { return (n - 1) / 4 * 4; };
  EXPECT_EQ(again.last.usage.cached_tokens, static_cast<std::int32_t>(whole(prompt().size())));
  EXPECT_EQ(extended.last.usage.cached_tokens, static_cast<std::int32_t>(whole(longer.size())));
  EXPECT_EQ(stats.prompt_tokens_cached, whole(prompt().size()) + whole(longer.size()));
  EXPECT_EQ(stats.requests_done, 3u);
  EXPECT_EQ(stats.generated_tokens, 40u);

  // A fresh engine (cold cache) gives the extended request the same tokens.
  auto cold = make_engine();
  EXPECT_EQ(drain(*cold->submit(greedy_request(longer, 8))).last.tokens, extended.last.tokens);
}

TEST_F(EngineTest, SeededSamplingIsReproducible) {
  // Without prefix caching: a second run that reuses the first one's KV computes its last prompt
  // token as a one-token product (decode kernel), within 1e-5 of the prefill's but not bit-equal,
  // and a temperature draw near a boundary may then differ (with the avx512_bf16 decode kernel
  // the probe picks on some CPUs, it did). The sampler's own determinism is what this checks.
  EngineOptions options;
  options.prefix_caching = false;
  auto engine = make_engine(options);
  CompletionRequest r = greedy_request(prompt(), 24);
  r.sampling.temperature = 0.9f;
  r.sampling.top_p = 0.95f;
  r.sampling.seed = 1234;
  const auto a = drain(*engine->submit(r)).last.tokens;
  const auto b = drain(*engine->submit(r)).last.tokens;
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 24u);
}

TEST_F(EngineTest, FullQueueIsOverloaded) {
  // One running sequence (max_num_seqs) and one waiting (queue_depth): a third is refused.
  auto engine = make_engine(EngineOptions{.queue_depth = 1, .max_num_seqs = 1});
  auto running = engine->submit(greedy_request(prompt(), 400));
  auto waiting = engine->submit(greedy_request(prompt(), 400));
  try {
    engine->submit(greedy_request(prompt(), 4));
    FAIL() << "a third request fits a queue of depth 1";
  } catch (const Error& e) {
    EXPECT_STREQ(e.kind().c_str(), errc::overloaded);
  }
  running->cancel();
  waiting->cancel();
  EXPECT_EQ(drain(*running).last.finish_reason, "cancelled");
  EXPECT_EQ(drain(*waiting).last.finish_reason, "cancelled");
  // Once drained, the queue admits again.
  EXPECT_EQ(drain(*engine->submit(greedy_request(prompt(), 2))).last.finish_reason, "length");
}

TEST_F(EngineTest, CancellationStopsGeneration) {
  auto engine = make_engine();
  auto channel = engine->submit(greedy_request(prompt(), 450));
  std::optional<Event> first = channel->next(60s);
  ASSERT_TRUE(first.has_value());
  channel->cancel();
  Outcome rest = drain(*channel);
  ASSERT_EQ(rest.last.kind, Event::Kind::done);
  EXPECT_EQ(rest.last.finish_reason, "cancelled");
  EXPECT_LT(rest.last.usage.completion_tokens, 450);
  EXPECT_EQ(engine->stats().requests_cancelled, 1u);
  EXPECT_TRUE(engine->idle());
}

TEST_F(EngineTest, ContextExceededNamesTheNumbers) {
  auto engine = make_engine();
  const std::int32_t ctx = engine->max_context();
  ASSERT_EQ(ctx, 512);
  const auto p = prompt();
  try {
    engine->submit(greedy_request(p, ctx - static_cast<std::int32_t>(p.size()) + 1));
    FAIL() << "prompt + max_tokens past the context was accepted";
  } catch (const Error& e) {
    EXPECT_STREQ(e.kind().c_str(), errc::context_length_exceeded);
    EXPECT_NE(std::string(e.what()).find("512"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(std::to_string(p.size())), std::string::npos) << e.what();
  }
  // Exactly at the limit is fine and ends with "length".
  Outcome full = drain(*engine->submit(greedy_request(p, ctx - static_cast<std::int32_t>(p.size()))));
  EXPECT_EQ(full.last.finish_reason, "length");
  EXPECT_EQ(full.last.usage.completion_tokens, ctx - static_cast<std::int32_t>(p.size()));
}

TEST_F(EngineTest, InvalidRequestsAreRefusedUpFront) {
  auto engine = make_engine();
  auto expect_invalid = [&](CompletionRequest r, const char* what) {
    try {
      engine->submit(std::move(r));
      ADD_FAILURE() << what << " was accepted";
    } catch (const Error& e) {
      EXPECT_STREQ(e.kind().c_str(), errc::invalid_argument) << what;
    }
  };
  expect_invalid(greedy_request({}, 4), "an empty prompt");
  expect_invalid(greedy_request({1, 2, -1}, 4), "a negative token id");
  expect_invalid(greedy_request({1, 151936}, 4), "a token id past the vocabulary");
  expect_invalid(greedy_request({1, 2}, 0), "max_tokens 0");
  CompletionRequest bad_sampling = greedy_request({1, 2}, 4);
  bad_sampling.sampling.top_p = 1.5f;
  expect_invalid(bad_sampling, "top_p 1.5");
  CompletionRequest long_stop = greedy_request({1, 2}, 4);
  long_stop.stop = {std::string(100000, 'x')};
  expect_invalid(long_stop, "a 100 kB stop string");
  CompletionRequest many_stops = greedy_request({1, 2}, 4);
  many_stops.stop.assign(100, "x");
  expect_invalid(many_stops, "100 stop strings");
  EXPECT_TRUE(engine->idle());
}

TEST_F(EngineTest, StopStringAcrossTokensEndsWithStopAndIsNotEmitted) {
  auto engine = make_engine();
  const Outcome full = drain(*engine->submit(greedy_request(prompt(), 40)));
  // A stop string made of two consecutive tokens' text straddles a token boundary.
  tokenizer::StreamDecoder decoder(*tiny_tokenizer(), true);
  std::vector<std::string> pieces;
  for (std::int32_t t : full.last.tokens) pieces.push_back(tiny_tokenizer()->is_known(t) ? decoder.push(t) : "");
  std::string stop;
  for (std::size_t i = 4; i + 1 < pieces.size() && stop.empty(); ++i) {
    if (!pieces[i].empty() && !pieces[i + 1].empty()) stop = pieces[i] + pieces[i + 1];
  }
  ASSERT_FALSE(stop.empty()) << "no two consecutive non-empty pieces in: " << full.text;
  const std::string expected = full.text.substr(0, full.text.find(stop));

  CompletionRequest r = greedy_request(prompt(), 40);
  r.stop = {"never appears \x01", stop};
  const Outcome got = drain(*engine->submit(r));
  ASSERT_EQ(got.last.kind, Event::Kind::done);
  EXPECT_EQ(got.last.finish_reason, "stop");
  EXPECT_EQ(got.text, expected);
  EXPECT_LT(got.last.usage.completion_tokens, 40);
  for (const Event& d : got.deltas) EXPECT_EQ(d.text.find(stop), std::string::npos);
}

TEST_F(EngineTest, EosEndsWithStopUnlessIgnored) {
  auto engine = make_engine();
  const auto tokens = drain(*engine->submit(greedy_request(prompt(), 12))).last.tokens;
  // Declare the 6th greedy token an EOS id: the request must stop before it.
  model::ModelConfigs configs = model::load_model_configs(kTinyModel);
  configs.generation.eos_token_ids.push_back(tokens[5]);
  auto eos_engine = make_engine({}, nullptr, configs);
  CompletionRequest r = greedy_request(prompt(), 12);
  r.ignore_eos = false;
  const Outcome stopped = drain(*eos_engine->submit(r));
  EXPECT_EQ(stopped.last.finish_reason, "stop");
  const auto first = std::find(tokens.begin(), tokens.end(), tokens[5]);
  EXPECT_EQ(stopped.last.tokens, std::vector<std::int32_t>(tokens.begin(), first));
  EXPECT_EQ(stopped.last.usage.completion_tokens, static_cast<std::int32_t>(first - tokens.begin()));

  r.ignore_eos = true;
  EXPECT_EQ(drain(*eos_engine->submit(r)).last.tokens, tokens);
}

TEST_F(EngineTest, ReasoningSplitRoutesThinkBody) {
  // The tiny model will not write <think> by itself; a prompt that ends inside
  // <think> makes every generated character reasoning.
  auto engine = make_engine();
  CompletionRequest r = greedy_request(prompt(), 20);
  const Outcome plain = drain(*engine->submit(r));
  r.split_reasoning = true;
  r.prompt_in_reasoning = true;
  const Outcome split = drain(*engine->submit(r));
  EXPECT_EQ(split.last.tokens, plain.last.tokens);
  const auto close = plain.text.find("</think>");
  if (close == std::string::npos) {
    EXPECT_EQ(split.reasoning, plain.text);
    EXPECT_EQ(split.text, "");
  } else {
    EXPECT_EQ(split.reasoning, plain.text.substr(0, close));
  }
}

TEST_F(EngineTest, RunnerFailureMarksTheEngineFailed) {
  // Forward 0 is the prefill, so the failure lands mid-generation.
  auto engine = make_engine({}, std::make_unique<FailingRunner>(open_tiny_runner(), 3, errc::worker_failed));
  const Outcome got = drain(*engine->submit(greedy_request(prompt(), 10)));
  ASSERT_EQ(got.last.kind, Event::Kind::error);
  EXPECT_EQ(got.last.error_kind, errc::worker_failed);
  const EngineStats stats = engine->stats();
  EXPECT_TRUE(stats.failed);
  EXPECT_NE(stats.failure.find("injected"), std::string::npos);
  EXPECT_EQ(stats.requests_failed, 1u);
  try {
    engine->submit(greedy_request(prompt(), 2));
    FAIL() << "a failed engine accepted a request";
  } catch (const Error& e) {
    EXPECT_STREQ(e.kind().c_str(), errc::model_failed);
  }
}

TEST_F(EngineTest, OrdinaryRunnerErrorFailsOnlyThatRequest) {
  auto engine = make_engine({}, std::make_unique<FailingRunner>(open_tiny_runner(), 2, errc::out_of_memory));
  const Outcome bad = drain(*engine->submit(greedy_request(prompt(), 10)));
  ASSERT_EQ(bad.last.kind, Event::Kind::error);
  EXPECT_EQ(bad.last.error_kind, errc::out_of_memory);
  EXPECT_FALSE(engine->stats().failed);
  // The next request recomputes the cache it can no longer trust and matches a clean engine.
  const Outcome good = drain(*engine->submit(greedy_request(prompt(), 10)));
  ASSERT_EQ(good.last.kind, Event::Kind::done);
  auto clean = make_engine();
  EXPECT_EQ(good.last.tokens, drain(*clean->submit(greedy_request(prompt(), 10))).last.tokens);
}

TEST_F(EngineTest, ShutdownEndsQueuedAndRunningRequests) {
  auto engine = make_engine();
  auto a = engine->submit(greedy_request(prompt(), 450));
  auto b = engine->submit(greedy_request(prompt(), 450));
  ASSERT_TRUE(a->next(60s).has_value());  // a is running
  engine->shutdown();
  EXPECT_EQ(drain(*a).last.error_kind, errc::shutting_down);
  EXPECT_EQ(drain(*b).last.error_kind, errc::shutting_down);
  try {
    engine->submit(greedy_request(prompt(), 2));
    FAIL() << "a shut-down engine accepted a request";
  } catch (const Error& e) {
    EXPECT_STREQ(e.kind().c_str(), errc::shutting_down);
  }
  engine->shutdown();  // idempotent
}

TEST_F(EngineTest, StatsRecordLatencies) {
  auto engine = make_engine();
  drain(*engine->submit(greedy_request(prompt(), 8)));
  const EngineStats stats = engine->stats();
  EXPECT_EQ(stats.time_to_first_token.count, 1u);
  EXPECT_EQ(stats.inter_token_latency.count, 7u);
  EXPECT_EQ(stats.prompt_tokens, prompt().size());
  EXPECT_EQ(stats.queue_depth, 0u);
  EXPECT_EQ(stats.running, 0u);
}

// Every choice's events, by index, until all n have ended.
std::vector<Outcome> drain_choices(Channel& channel, std::int32_t n, std::chrono::milliseconds timeout = 60s) {
  std::vector<Outcome> out(static_cast<std::size_t>(n));
  std::int32_t ended = 0;
  while (ended < n) {
    std::optional<Event> e = channel.next(timeout);
    if (!e) throw std::runtime_error("no event within the timeout");
    if (e->choice < 0 || e->choice >= n) throw std::runtime_error("an event for choice " + std::to_string(e->choice));
    Outcome& o = out[static_cast<std::size_t>(e->choice)];
    if (e->kind == Event::Kind::delta) {
      EXPECT_FALSE(o.last.kind != Event::Kind::delta) << "a delta after its choice ended";
      o.text += e->text;
      o.reasoning += e->reasoning;
      o.delta_tokens.insert(o.delta_tokens.end(), e->tokens.begin(), e->tokens.end());
      o.deltas.push_back(*e);
      continue;
    }
    o.last = std::move(*e);
    ++ended;
  }
  return out;
}

std::vector<std::int32_t> long_prompt() {
  return tiny_tokenizer()->encode("In a quiet village by the sea there lived an old fisherman who told stories every evening to anyone who would listen");
}

TEST_F(EngineTest, ChoicesShareOnePrefillOfThePrompt) {
  const std::vector<std::int32_t> p = long_prompt();
  const auto P = static_cast<std::int64_t>(p.size());
  ASSERT_GT(P, 12);
  constexpr std::int32_t kN = 3, kMax = 6;
  auto alone = make_engine();
  const Outcome single = drain(*alone->submit(greedy_request(p, kMax)));

  auto engine = make_engine();
  CompletionRequest r = greedy_request(p, kMax);
  r.n = kN;
  const std::vector<Outcome> got = drain_choices(*engine->submit(r), kN);
  // The test runner's blocks hold 4 positions; a sibling reuses every full block
  // of the first P - 1 tokens (its last prompt token is always computed).
  const std::int32_t shared = static_cast<std::int32_t>((P - 1) / 4 * 4);
  for (std::int32_t c = 0; c < kN; ++c) {
    const Outcome& o = got[static_cast<std::size_t>(c)];
    ASSERT_EQ(o.last.kind, Event::Kind::done) << o.last.error_message;
    EXPECT_EQ(o.last.choice, c);
    EXPECT_EQ(o.last.tokens, single.last.tokens) << "greedy choices are equal; choice " << c;
    EXPECT_EQ(o.last.usage.cached_tokens, c == 0 ? 0 : shared) << "choice " << c;
  }
  const EngineStats st = engine->stats();
  EXPECT_EQ(st.prompt_tokens_cached, static_cast<std::uint64_t>((kN - 1) * shared));
  // The prompt ran once in full; each sibling ran only what its shared blocks did not hold.
  EXPECT_EQ(st.step_tokens, static_cast<std::uint64_t>(P + (kN - 1) * (P - shared) + kN * (kMax - 1)));

  // Without the prefix cache every choice prefills the whole prompt.
  auto uncached = make_engine(EngineOptions{.prefix_caching = false});
  drain_choices(*uncached->submit(r), kN);
  EXPECT_EQ(uncached->stats().step_tokens, static_cast<std::uint64_t>(kN * P + kN * (kMax - 1)));
}

TEST_F(EngineTest, ChoiceIDrawsFromSeedPlusI) {
  auto sampled = [](std::uint64_t seed, std::int32_t n) {
    CompletionRequest r = greedy_request(long_prompt(), 10);
    r.sampling.temperature = 1.0f;
    r.sampling.seed = seed;
    r.n = n;
    return r;
  };
  auto engine = make_engine();
  const std::vector<Outcome> two = drain_choices(*engine->submit(sampled(41, 2)), 2);
  const Outcome a = drain(*engine->submit(sampled(41, 1)));
  const Outcome b = drain(*engine->submit(sampled(42, 1)));
  EXPECT_EQ(two[0].last.tokens, a.last.tokens);
  EXPECT_EQ(two[1].last.tokens, b.last.tokens);
  EXPECT_NE(two[0].last.tokens, two[1].last.tokens) << "different seeds, different draws (10 tokens at temperature 1)";
}

TEST_F(EngineTest, CancellingARequestEndsEveryChoice) {
  auto engine = make_engine();
  CompletionRequest r = greedy_request(long_prompt(), 400);
  r.n = 4;
  auto channel = engine->submit(r);
  ASSERT_TRUE(channel->next(60s).has_value());
  channel->cancel();
  const std::vector<Outcome> got = drain_choices(*channel, 4);
  for (const Outcome& o : got) {
    ASSERT_EQ(o.last.kind, Event::Kind::done);
    EXPECT_EQ(o.last.finish_reason, "cancelled");
    EXPECT_LT(o.last.usage.completion_tokens, 400);
  }
  EXPECT_TRUE(engine->idle());
}

TEST_F(EngineTest, RefusesChoicesAndLogprobsOutOfRange) {
  auto engine = make_engine();
  for (std::int32_t n : {0, kMaxChoices + 1}) {
    CompletionRequest r = greedy_request(prompt(), 4);
    r.n = n;
    EXPECT_THROW(engine->submit(r), Error) << n;
  }
  for (std::int32_t top : {-2, model::kMaxTopLogprobs + 1}) {
    CompletionRequest r = greedy_request(prompt(), 4);
    r.top_logprobs = top;
    EXPECT_THROW(engine->submit(r), Error) << top;
  }
  auto small = make_engine(EngineOptions{.queue_depth = 1, .max_num_seqs = 2});
  CompletionRequest r = greedy_request(prompt(), 4);
  r.n = 4;
  EXPECT_THROW(small->submit(r), Error) << "more choices than the model can ever hold";
}

TEST_F(EngineTest, LogprobsRideWithTheirTokens) {
  auto engine = make_engine();
  CompletionRequest r = greedy_request(prompt(), 12);
  r.top_logprobs = 3;
  const Outcome got = drain(*engine->submit(r));
  ASSERT_EQ(got.last.kind, Event::Kind::done);
  std::size_t with = 0;
  for (const Event& d : got.deltas) {
    ASSERT_EQ(d.logprobs.size(), d.tokens.size());
    for (std::size_t i = 0; i < d.tokens.size(); ++i) {
      const model::TokenLogprobs& lp = d.logprobs[i];
      ASSERT_EQ(lp.top.size(), 3u);
      EXPECT_EQ(lp.top[0].token, d.tokens[i]) << "greedy: the sampled token is the most likely";
      EXPECT_FLOAT_EQ(lp.logprob, lp.top[0].logprob);
      EXPECT_LE(lp.logprob, 0.0f);
      EXPECT_GE(lp.top[0].logprob, lp.top[1].logprob);
      ++with;
    }
  }
  EXPECT_GT(with, 0u);
  // Without the request for them, nothing is computed or sent.
  const Outcome plain = drain(*engine->submit(greedy_request(prompt(), 12)));
  for (const Event& d : plain.deltas) EXPECT_TRUE(d.logprobs.empty());
  EXPECT_EQ(plain.last.tokens, got.last.tokens) << "asking for logprobs changes nothing else";
}

TEST_F(EngineTest, LogprobsAreOfTheRawLogitsNotThePenalisedOnes) {
  // A strong repetition penalty changes which token is drawn, not what the
  // model's distribution said: the reported top entries of a step equal the
  // unpenalised run's for the same history.
  auto engine = make_engine();
  CompletionRequest plain = greedy_request(prompt(), 1);
  plain.top_logprobs = 5;
  CompletionRequest penalised = plain;
  penalised.sampling.repetition_penalty = 5.0f;
  const Outcome a = drain(*engine->submit(plain));
  const Outcome b = drain(*engine->submit(penalised));
  ASSERT_FALSE(a.deltas.empty());
  ASSERT_FALSE(b.deltas.empty());
  const model::TokenLogprobs& la = a.deltas[0].logprobs.at(0);
  const model::TokenLogprobs& lb = b.deltas[0].logprobs.at(0);
  for (std::size_t i = 0; i < la.top.size(); ++i) {
    EXPECT_EQ(la.top[i].token, lb.top[i].token);
    EXPECT_NEAR(la.top[i].logprob, lb.top[i].logprob, 1e-5);
  }
}

TEST_F(EngineTest, ConcurrentClientsGetTheAnswersTheyGetAlone) {
  // Prompts that share prefixes with each other exercise the cache reuse between requests.
  const std::vector<std::string> texts = {"The capital of France is", "The capital of Spain is", "The capital",
                                          "Once upon a time", "Once upon a time there was", "1 2 3 4 5",
                                          "The capital of France is Paris and", "Hello"};
  std::vector<std::vector<std::int32_t>> alone;
  {
    auto engine = make_engine();
    for (const auto& t : texts) alone.push_back(drain(*engine->submit(greedy_request(tiny_tokenizer()->encode(t), 12))).last.tokens);
  }
  auto engine = make_engine(EngineOptions{.queue_depth = 64});
  constexpr int kClients = 16;
  std::vector<std::vector<std::int32_t>> got(kClients);
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      const auto& text = texts[static_cast<std::size_t>(c) % texts.size()];
      got[static_cast<std::size_t>(c)] = drain(*engine->submit(greedy_request(tiny_tokenizer()->encode(text), 12))).last.tokens;
    });
  }
  for (auto& t : clients) t.join();
  for (int c = 0; c < kClients; ++c) {
    EXPECT_EQ(got[static_cast<std::size_t>(c)], alone[static_cast<std::size_t>(c) % texts.size()]) << "client " << c;
  }
  EXPECT_EQ(engine->stats().requests_done, static_cast<std::uint64_t>(kClients));
}

// A Gated DeltaNet hybrid (tests/data/families/qwen3_5-a, transformers' greedy tokens in golden.json) through
// the engine: concurrent requests with chunked prefill (a 841-token prompt over 96-token steps), fewer state slots
// than requests, a KV pool too small for every request at once (preemption recomputes from scratch), and repeated
// prompts that must not reuse a prefix without state snapshots (cached_tokens 0): every request gets the reference's
// tokens. (With snapshots: tests/unit/hybrid_prefix_test.cpp, and the next test.)
TEST_F(EngineTest, HybridRequestsGetTheReferenceTokensUnderBatchingAndPreemption) {
  const std::filesystem::path dir = std::filesystem::path(NEURON_TEST_DATA) / "families" / "qwen3_5-a";
  model::ModelConfigs configs = model::load_model_configs(dir);
  const io::Checkpoint checkpoint = io::Checkpoint::open_dir(dir);
  backend::RunnerOptions options;
  options.max_context = 1024;
  options.kv_block_size = 4;
  options.kv_blocks = 216;  // 864 positions: a long request (853) leaves room for almost nothing else
  options.state_slots = 3;
  options.state_snapshots = 0;
  auto runner = backend::make_runner(configs.model, &checkpoint, model::ShardPlan::make(configs.model, 0, 1),
                                     backend::Device{}, std::make_shared<dist::LocalCommunicator>(), options);
  ASSERT_EQ(runner->kv_pool().state_slots, 3);
  ASSERT_EQ(runner->kv_pool().state_snapshots, 0);
  std::ifstream in(dir / "golden.json");
  const auto golden = nlohmann::json::parse(in);
  std::vector<std::vector<std::int32_t>> prompts, expected;
  for (const auto& p : golden.at("prompts")) {
    prompts.push_back(p.at("prompt_ids").get<std::vector<std::int32_t>>());
    auto g = p.at("greedy_ids").get<std::vector<std::int32_t>>();
    g.resize(12);
    expected.push_back(std::move(g));
  }
  ASSERT_EQ(prompts.size(), 4u);
  auto engine = make_engine(EngineOptions{.queue_depth = 64, .max_num_seqs = 8, .max_batch_tokens = 96},
                            std::move(runner), configs);
  // All queued at once (submit does not wait), so the long prompts meet the others in the pool whatever the timing.
  constexpr int kClients = 8;
  std::vector<std::shared_ptr<Channel>> channels;
  for (int c = 0; c < kClients; ++c) channels.push_back(engine->submit(greedy_request(prompts[c % 4], 12)));
  std::vector<Outcome> got;
  for (const auto& channel : channels) got.push_back(drain(*channel));
  for (int c = 0; c < kClients; ++c) {
    ASSERT_EQ(got[c].last.kind, Event::Kind::done) << "client " << c << ": " << got[c].last.error_message;
    EXPECT_EQ(got[c].last.tokens, expected[c % 4]) << "client " << c;
    EXPECT_EQ(got[c].last.usage.cached_tokens, 0) << "client " << c;
  }
  const EngineStats stats = engine->stats();
  EXPECT_EQ(stats.prompt_tokens_cached, 0u);
  EXPECT_GT(stats.preemptions, 0u);
  // Choices of one request: no prefix to share, so they all start at once and each computes the prompt.
  CompletionRequest r = greedy_request(prompts[0], 12);
  r.n = 3;
  const std::uint64_t before = engine->stats().step_tokens;
  for (const Outcome& o : drain_choices(*engine->submit(r), 3)) {
    ASSERT_EQ(o.last.kind, Event::Kind::done) << o.last.error_message;
    EXPECT_EQ(o.last.tokens, expected[0]) << "choice " << o.last.choice;
    EXPECT_EQ(o.last.usage.cached_tokens, 0);
  }
  EXPECT_EQ(engine->stats().step_tokens - before, 3 * (prompts[0].size() + 11));
}

// With state snapshots (the default) a hybrid's second turn resumes from its first: usage and the engine's counters
// report the reused prompt tokens, and the tokens are those of the same prompt with prefix caching off.
TEST_F(EngineTest, HybridSecondTurnReusesTheFirstAndReportsItsCachedTokens) {
  const std::filesystem::path dir = std::filesystem::path(NEURON_TEST_DATA) / "families" / "qwen3_5-a";
  model::ModelConfigs configs = model::load_model_configs(dir);
  auto open = [&] {
    const io::Checkpoint checkpoint = io::Checkpoint::open_dir(dir);
    return backend::make_runner(configs.model, &checkpoint, model::ShardPlan::make(configs.model, 0, 1),
                                backend::Device{}, std::make_shared<dist::LocalCommunicator>(),
                                {.max_context = 1024, .kv_block_size = 4, .kv_blocks = 256, .state_slots = 3});
  };
  std::ifstream in(dir / "golden.json");
  const auto golden = nlohmann::json::parse(in);
  const auto chat = golden.at("prompts").at(0).at("prompt_ids").get<std::vector<std::int32_t>>();
  const auto fox = golden.at("prompts").at(1).at("prompt_ids").get<std::vector<std::int32_t>>();
  auto reference = golden.at("prompts").at(0).at("greedy_ids").get<std::vector<std::int32_t>>();
  reference.resize(12);
  auto engine = make_engine(EngineOptions{.max_batch_tokens = 64}, open(), configs);
  const Outcome turn1 = drain(*engine->submit(greedy_request(chat, 12)));
  ASSERT_EQ(turn1.last.kind, Event::Kind::done) << turn1.last.error_message;
  EXPECT_EQ(turn1.last.tokens, reference);
  EXPECT_EQ(turn1.last.usage.cached_tokens, 0);
  std::vector<std::int32_t> prompt2(chat);  // 15 + 12 + 4: turn 1 computed 26 positions, snapshot at 24
  prompt2.insert(prompt2.end(), turn1.last.tokens.begin(), turn1.last.tokens.end());
  prompt2.insert(prompt2.end(), fox.begin(), fox.end());
  const Outcome turn2 = drain(*engine->submit(greedy_request(prompt2, 8)));
  ASSERT_EQ(turn2.last.kind, Event::Kind::done) << turn2.last.error_message;
  EXPECT_EQ(turn2.last.usage.cached_tokens, 24);
  EXPECT_EQ(engine->stats().prompt_tokens_cached, 24u);
  auto cold = make_engine(EngineOptions{.max_batch_tokens = 64, .prefix_caching = false}, open(), configs);
  EXPECT_EQ(turn2.last.tokens, drain(*cold->submit(greedy_request(prompt2, 8))).last.tokens);

  // Choices of one request share the prompt again: choice 0 computes its 19 tokens (a snapshot at 16), the
  // others resume there and compute 3 each.
  std::vector<std::int32_t> prompt3(fox);
  prompt3.insert(prompt3.end(), chat.begin(), chat.end());
  CompletionRequest r = greedy_request(prompt3, 12);
  r.n = 3;
  const auto alone = drain(*cold->submit(greedy_request(prompt3, 12))).last.tokens;
  const std::uint64_t before = engine->stats().step_tokens;
  for (const Outcome& o : drain_choices(*engine->submit(r), 3)) {
    ASSERT_EQ(o.last.kind, Event::Kind::done) << o.last.error_message;
    EXPECT_EQ(o.last.tokens, alone) << "choice " << o.last.choice;
    EXPECT_EQ(o.last.usage.cached_tokens, o.last.choice == 0 ? 0 : 16) << "choice " << o.last.choice;
  }
  EXPECT_EQ(engine->stats().step_tokens - before, 19 + 2 * 3 + 3 * 11);
}

}  // namespace
}  // namespace neuron::engine
