// The engine's own logic (text routing, stop handling, cache bookkeeping)
// against a runner whose "model" follows a script, so the generated text is
// chosen by the test: real Qwen3 tokens such as <think> and <|im_end|> that a
// tiny random model would never produce. The real-model tests are in
// engine_test.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <random>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backend/batch.hpp"
#include "engine/engine.hpp"
#include "model/config.hpp"
#include "tokenizer/tokenizer.hpp"
#include "util/error.hpp"
#include "support/engine_drain.hpp"

namespace neuron::engine {
namespace {

using namespace std::chrono_literals;

using test_support::kTinyModel;

using test_support::tiny_tokenizer;

// Emits `script[i]` as the i-th generated token of every sequence (one-hot
// logits), whatever the prompt, and checks the KV contract of
// ModelRunner::step the way a real runner relies on it: every position a
// sequence attends to must have been written, at that position, through the
// sequence's block table.
class ScriptedRunner final : public backend::ModelRunner {
 public:
  struct Call {
    std::int32_t offset;
    std::size_t count;
  };
  struct Log {
    std::mutex mu;
    std::vector<Call> calls;     // one per sequence per step
    std::vector<std::size_t> batch_sizes;  // sequences per step
    std::size_t prompt_len = 0;  // tokens of the requests' prompts (set by the test)
    // While closed, steps wait: lets a test queue many requests before the first step.
    std::condition_variable gate_cv;
    bool gate_open = true;
    void close_gate() {
      std::lock_guard lock(mu);
      gate_open = false;
    }
    void open_gate() {
      {
        std::lock_guard lock(mu);
        gate_open = true;
      }
      gate_cv.notify_all();
    }
  };

  ScriptedRunner(std::vector<std::int32_t> script, std::shared_ptr<Log> log, std::int32_t max_context = 256,
                 backend::KvPoolShape pool = {.block_size = 4, .num_blocks = 256, .bytes_per_block = 0})
      : script_(std::move(script)), log_(std::move(log)), max_context_(max_context), pool_(pool),
        written_(static_cast<std::size_t>(pool.block_size) * pool.num_blocks, -1) {
    config_ = model::load_model_configs(kTinyModel).model;
  }

  void run_step(const backend::Batch& batch, std::span<float> logits, std::span<std::int32_t>, std::span<float>) override {
    backend::check_batch(batch, config_, pool_, max_context_, logits);
    std::size_t prompt_len;
    {
      std::unique_lock lock(log_->mu);
      log_->gate_cv.wait(lock, [&] { return log_->gate_open; });
      for (const auto& s : batch.seqs) log_->calls.push_back({s.position, static_cast<std::size_t>(s.num_tokens)});
      log_->batch_sizes.push_back(batch.seqs.size());
      prompt_len = log_->prompt_len;
    }
    std::fill(logits.begin(), logits.end(), 0.0f);
    std::size_t row = 0;
    for (const auto& s : batch.seqs) {
      const auto table = std::span<const std::int32_t>(batch.block_ids).subspan(s.block_begin, s.num_blocks);
      for (std::int32_t p = 0; p < s.position; ++p)
        if (written_[slot(table, p)] != p)
          fail(errc::internal, "position " + std::to_string(p) + " is read before it was written");
      for (std::int32_t i = 0; i < s.num_tokens; ++i) written_[slot(table, s.position + i)] = s.position + i;
      if (s.logits == backend::LogitsWanted::none) continue;
      // Tokens after the prompt fed so far, this step's included.
      const std::size_t generated = static_cast<std::size_t>(s.position + s.num_tokens) - prompt_len;
      const std::int32_t next = generated < script_.size() ? script_[generated] : 0;
      logits[row * static_cast<std::size_t>(config_.vocab_size) + static_cast<std::size_t>(next)] = 10.0f;
      ++row;
    }
  }
  const model::ModelConfig& config() const noexcept override { return config_; }
  std::int32_t max_context() const noexcept override { return max_context_; }
  backend::KvPoolShape kv_pool() const noexcept override { return pool_; }
  backend::MemoryStats memory() const override { return {0, 0, "cpu"}; }

 private:
  std::size_t slot(std::span<const std::int32_t> table, std::int32_t p) const {
    return static_cast<std::size_t>(table[static_cast<std::size_t>(p / pool_.block_size)]) * pool_.block_size +
           static_cast<std::size_t>(p % pool_.block_size);
  }

  std::vector<std::int32_t> script_;
  std::shared_ptr<Log> log_;
  std::int32_t max_context_;
  backend::KvPoolShape pool_;
  model::ModelConfig config_;
  std::vector<std::int64_t> written_;  // [num_blocks * block_size] the position each slot holds; -1 never written
};

using test_support::drain;
using test_support::Outcome;

std::vector<std::int32_t> encode(const std::string& s) { return tiny_tokenizer()->encode(s); }

std::vector<std::int32_t> concat(std::vector<std::int32_t> a, const std::vector<std::int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::int32_t im_end() { return *tiny_tokenizer()->token_to_id("<|im_end|>"); }

struct Harness {
  std::shared_ptr<ScriptedRunner::Log> log = std::make_shared<ScriptedRunner::Log>();
  std::unique_ptr<Engine> engine;

  explicit Harness(std::vector<std::int32_t> script, std::int32_t max_context = 256, EngineOptions options = {},
                   backend::KvPoolShape pool = {.block_size = 4, .num_blocks = 256, .bytes_per_block = 0}) {
    engine = std::make_unique<Engine>("scripted",
                                      std::make_unique<ScriptedRunner>(std::move(script), log, max_context, pool),
                                      tiny_tokenizer(), model::load_model_configs(kTinyModel), options);
  }
  void set_prompt_len(std::size_t n) {
    std::lock_guard lock(log->mu);
    log->prompt_len = n;
  }
  Outcome run(CompletionRequest r) {
    set_prompt_len(r.prompt.size());
    return drain(*engine->submit(std::move(r)));
  }
};

CompletionRequest request(std::vector<std::int32_t> prompt, std::int32_t max_tokens) {
  CompletionRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.0f;
  return r;
}

TEST(EngineScripted, ThinkBlockGoesToReasoningAndEosStops) {
  const auto body = encode("<think>\nThe user greets me.\n</think>\n\nHello! How can I help?");
  Harness h(concat(body, {im_end(), 100, 101}));
  CompletionRequest r = request(encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"), 64);
  r.split_reasoning = true;
  const Outcome out = h.run(r);
  ASSERT_EQ(out.last.kind, Event::Kind::done) << out.last.error_message;
  EXPECT_EQ(out.reasoning, "\nThe user greets me.\n");
  EXPECT_EQ(out.text, "\n\nHello! How can I help?");
  EXPECT_EQ(out.last.finish_reason, "stop");
  EXPECT_EQ(out.last.tokens, body);  // the EOS is not part of the output
  EXPECT_EQ(out.last.usage.completion_tokens, static_cast<std::int32_t>(body.size()));
}

TEST(EngineScripted, PromptEndingInsideThinkStartsInReasoning) {
  const auto body = encode("Short plan.</think>Answer.");
  Harness h(concat(body, {im_end()}));
  CompletionRequest r = request(encode("<|im_start|>assistant\n<think>"), 64);
  r.split_reasoning = true;
  r.prompt_in_reasoning = true;
  const Outcome out = h.run(r);
  EXPECT_EQ(out.reasoning, "Short plan.");
  EXPECT_EQ(out.text, "Answer.");
}

TEST(EngineScripted, WithoutSplittingThinkTagsAreContent) {
  const auto body = encode("<think>x</think>y");
  Harness h(concat(body, {im_end()}));
  const Outcome out = h.run(request({1, 2, 3}, 64));
  EXPECT_EQ(out.text, "<think>x</think>y");
  EXPECT_EQ(out.reasoning, "");
}

TEST(EngineScripted, IgnoreEosKeepsGoingAndSkipsSpecialText) {
  const auto ab = encode("ab");
  Harness h(concat(ab, {im_end(), 9707}));  // 9707: "Hello"
  CompletionRequest r = request({1, 2, 3}, static_cast<std::int32_t>(ab.size()) + 2);
  r.ignore_eos = true;
  const Outcome out = h.run(r);
  EXPECT_EQ(out.last.finish_reason, "length");
  ASSERT_EQ(out.last.tokens.size(), ab.size() + 2);
  EXPECT_EQ(out.last.tokens[ab.size()], im_end());
  // <|im_end|> is special: like the reference servers, it is not part of the text.
  EXPECT_EQ(out.text, "ab" + tiny_tokenizer()->decode(std::vector<std::int32_t>{9707}));
}

TEST(EngineScripted, StopStringAcrossTokensIsCutAndNotEmitted) {
  const auto body = encode("one two three four five");
  Harness h(body);
  CompletionRequest r = request({1, 2, 3}, 64);
  r.stop = {"o th"};  // spans the tokens " two" and " three"
  const Outcome out = h.run(r);
  EXPECT_EQ(out.last.finish_reason, "stop");
  EXPECT_EQ(out.text, "one tw");
  EXPECT_LT(out.last.usage.completion_tokens, static_cast<std::int32_t>(body.size()));
}

TEST(EngineScripted, StopStringHeldBackAtTheEndIsReleasedOnLength) {
  const auto body = encode("alpha beta gamma");
  const std::string two = tiny_tokenizer()->decode(std::vector<std::int32_t>{body[0], body[1]});
  Harness h(body);
  CompletionRequest r = request({1, 2, 3}, 2);
  r.stop = {two.substr(two.size() - 2) + "!"};  // the output's last two characters could start it
  const Outcome out = h.run(r);
  EXPECT_EQ(out.last.finish_reason, "length");
  EXPECT_EQ(out.text, two);  // held back as a possible stop, then flushed at the end
}

TEST(EngineScripted, MultiByteCharactersSplitAcrossTokensArriveWhole) {
  // Byte-level tokens of an emoji: a partial character is never emitted.
  const std::string text = "ok 🦙🦙 done";
  const auto body = encode(text);
  Harness h(concat(body, {im_end()}));
  std::vector<std::string> deltas;
  {
    std::lock_guard lock(h.log->mu);
    h.log->prompt_len = 3;
  }
  auto channel = h.engine->submit(request({1, 2, 3}, 64));
  std::string all;
  for (;;) {
    auto e = channel->next(30s);
    ASSERT_TRUE(e.has_value());
    if (e->kind != Event::Kind::delta) break;
    all += e->text;
    deltas.push_back(e->text);
  }
  EXPECT_EQ(all, text);
  for (const auto& d : deltas) {
    // No delta ends in the middle of a UTF-8 sequence.
    std::size_t i = 0;
    while (i < d.size()) {
      const unsigned char c = static_cast<unsigned char>(d[i]);
      const std::size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
      ASSERT_LE(i + len, d.size()) << "partial character in delta";
      i += len;
    }
  }
}

TEST(EngineScripted, IdsPastTheTokenizerVocabularyHaveNoText) {
  // The tiny model's embedding has 151936 rows; the tokenizer knows fewer ids.
  Harness h({151935, 151935, 9707});
  CompletionRequest r = request({1, 2, 3}, 3);
  const Outcome out = h.run(r);
  ASSERT_EQ(out.last.kind, Event::Kind::done) << out.last.error_message;
  EXPECT_EQ(out.last.tokens, (std::vector<std::int32_t>{151935, 151935, 9707}));
  EXPECT_EQ(out.text, tiny_tokenizer()->decode(std::vector<std::int32_t>{9707}));
}

TEST(EngineScripted, SecondRequestReusesTheCachedFullBlocksOfItsPrefix) {
  Harness h(encode(" and so on and so forth"));  // blocks of 4 positions
  const std::vector<std::int32_t> prompt = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
  h.set_prompt_len(prompt.size());
  Outcome first = h.run(request(prompt, 3));
  EXPECT_EQ(first.last.usage.cached_tokens, 0);
  {
    std::lock_guard lock(h.log->mu);
    ASSERT_FALSE(h.log->calls.empty());
    EXPECT_EQ(h.log->calls.front().offset, 0);
    EXPECT_EQ(h.log->calls.front().count, prompt.size());
    h.log->calls.clear();
  }
  // Same prompt: its two full blocks (8 tokens) come from the cache; the last
  // block is partial, and the last token is always fed (its logits pick the first token).
  Outcome again = h.run(request(prompt, 3));
  EXPECT_EQ(again.last.usage.cached_tokens, 8);
  EXPECT_EQ(again.last.tokens, first.last.tokens);
  {
    std::lock_guard lock(h.log->mu);
    EXPECT_EQ(h.log->calls.front().offset, 8);
    EXPECT_EQ(h.log->calls.front().count, 2u);
    h.log->calls.clear();
  }
  // A prompt diverging at position 5 reuses its first block only.
  Outcome diverged = h.run(request({10, 11, 12, 13, 14, 99, 16, 17, 18, 19}, 2));
  EXPECT_EQ(diverged.last.usage.cached_tokens, 4);
  {
    std::lock_guard lock(h.log->mu);
    EXPECT_EQ(h.log->calls.front().offset, 4);
    EXPECT_EQ(h.log->calls.front().count, 6u);
  }
  const EngineStats stats = h.engine->stats();
  EXPECT_EQ(stats.prompt_tokens_cached, 8u + 4u);
  EXPECT_EQ(stats.kv_blocks_used, 0);  // every block is back in the pool
  EXPECT_GT(stats.kv_blocks_cached, 0);
}

TEST(EngineScripted, WithoutPrefixCachingEveryPromptIsComputedWhole) {
  Harness h(encode(" and so on"), 256, EngineOptions{.prefix_caching = false});
  const std::vector<std::int32_t> prompt = {10, 11, 12, 13, 14, 15, 16, 17, 18, 19};
  h.set_prompt_len(prompt.size());
  h.run(request(prompt, 2));
  const Outcome again = h.run(request(prompt, 2));
  EXPECT_EQ(again.last.usage.cached_tokens, 0);
  std::lock_guard lock(h.log->mu);
  EXPECT_EQ(h.log->calls[h.log->calls.size() - 2].offset, 0);  // the second request's prefill, then one decode
}

TEST(EngineScripted, GenerationStopsAtTheContextLimit) {
  Harness h(encode("a b c d e f g h i j k l m n o p"), /*max_context=*/12);
  const Outcome out = h.run(request({1, 2, 3, 4}, 8));  // exactly fills the context
  ASSERT_EQ(out.last.kind, Event::Kind::done) << out.last.error_message;
  EXPECT_EQ(out.last.finish_reason, "length");
  EXPECT_EQ(out.last.usage.completion_tokens, 8);
  try {
    h.engine->submit(request({1, 2, 3, 4}, 9));
    FAIL() << "12 + 1 tokens fit a context of 12";
  } catch (const Error& e) {
    EXPECT_STREQ(e.kind().c_str(), errc::context_length_exceeded);
  }
}

TEST(EngineScripted, QueuedRequestsRunInOrder) {
  Harness h(encode("x y z"), 256, EngineOptions{.queue_depth = 8});
  std::vector<std::shared_ptr<Channel>> channels;
  {
    std::lock_guard lock(h.log->mu);
    h.log->prompt_len = 3;
  }
  for (int i = 0; i < 6; ++i) channels.push_back(h.engine->submit(request({1, 2, 3}, 3)));
  const auto body = encode("x y z");
  const std::string expected = tiny_tokenizer()->decode(std::vector<std::int32_t>(body.begin(), body.begin() + 3));
  for (auto& c : channels) {
    const Outcome out = drain(*c);
    EXPECT_EQ(out.text, expected);
    EXPECT_EQ(out.last.finish_reason, "length");
  }
  EXPECT_EQ(h.engine->stats().requests_done, 6u);
  EXPECT_TRUE(h.engine->idle());
}

TEST(EngineScripted, CancelledRequestEndsCancelled) {
  Harness h(encode("x y z"), 256, EngineOptions{.queue_depth = 4});
  {
    std::lock_guard lock(h.log->mu);
    h.log->prompt_len = 3;
  }
  // Submit, cancel at once: the request ends "cancelled" whether or not it had started.
  auto c = h.engine->submit(request({1, 2, 3}, 200));
  c->cancel();
  const Outcome out = drain(*c);
  EXPECT_EQ(out.last.finish_reason, "cancelled");
  EXPECT_LT(out.last.usage.completion_tokens, 200);
  EXPECT_EQ(h.engine->stats().requests_cancelled, 1u);
}

TEST(EngineScripted, ConcurrentRequestsRunInOneBatchAndEachGetsItsOwnTokens) {
  const auto script = encode(" one two three four five six seven eight");
  Harness h(script, 256, EngineOptions{.queue_depth = 16, .max_num_seqs = 8});
  h.set_prompt_len(3);
  h.log->close_gate();
  std::vector<std::shared_ptr<Channel>> channels;
  for (int i = 0; i < 8; ++i) channels.push_back(h.engine->submit(request({1, 2, static_cast<std::int32_t>(3 + i)}, 6)));
  h.log->open_gate();
  for (auto& c : channels) {
    const Outcome out = drain(*c);
    ASSERT_EQ(out.last.kind, Event::Kind::done) << out.last.error_message;
    EXPECT_EQ(out.last.tokens, std::vector<std::int32_t>(script.begin(), script.begin() + 6));
  }
  std::size_t widest = 0;
  {
    std::lock_guard lock(h.log->mu);
    for (std::size_t n : h.log->batch_sizes) widest = std::max(widest, n);
  }
  EXPECT_EQ(widest, 8u);
  const EngineStats stats = h.engine->stats();
  EXPECT_EQ(stats.requests_done, 8u);
  EXPECT_EQ(stats.kv_blocks_used, 0);
  EXPECT_GT(stats.batch_size.count, 0u);
}

TEST(EngineScripted, MaxNumSeqsCapsTheBatchAndTheRestWaitInOrder) {
  Harness h(encode(" a b c d"), 256, EngineOptions{.queue_depth = 16, .max_num_seqs = 2});
  h.set_prompt_len(3);
  h.log->close_gate();
  std::vector<std::shared_ptr<Channel>> channels;
  for (int i = 0; i < 5; ++i) channels.push_back(h.engine->submit(request({1, 2, 3}, 4)));
  h.log->open_gate();
  for (auto& c : channels) EXPECT_EQ(drain(*c).last.kind, Event::Kind::done);
  std::lock_guard lock(h.log->mu);
  for (std::size_t n : h.log->batch_sizes) EXPECT_LE(n, 2u);
}

TEST(EngineScripted, ATinyPoolPreemptsAndStillCompletesEveryRequestWithItsTokens) {
  const auto script = encode(" the quick brown fox jumps over the lazy dog again and again");
  ASSERT_GE(script.size(), 10u);
  // 8 blocks of 4 positions; each request needs 6 + 10 - 1 = 15 positions = 4 blocks.
  Harness h(script, 256, EngineOptions{.queue_depth = 16, .max_num_seqs = 8},
            backend::KvPoolShape{.block_size = 4, .num_blocks = 8, .bytes_per_block = 0});
  h.set_prompt_len(6);
  h.log->close_gate();
  std::vector<std::shared_ptr<Channel>> channels;
  for (int i = 0; i < 6; ++i)
    channels.push_back(h.engine->submit(request({1, 2, 3, 4, 5, static_cast<std::int32_t>(6 + i)}, 10)));
  h.log->open_gate();
  for (auto& c : channels) {
    const Outcome out = drain(*c);
    ASSERT_EQ(out.last.kind, Event::Kind::done) << out.last.error_message;
    EXPECT_EQ(out.last.tokens, std::vector<std::int32_t>(script.begin(), script.begin() + 10));
  }
  const EngineStats stats = h.engine->stats();
  EXPECT_GT(stats.preemptions, 0u);
  EXPECT_EQ(stats.kv_blocks_used, 0);
  EXPECT_EQ(stats.requests_done, 6u);
  // One that could never fit the pool is refused at once.
  try {
    h.engine->submit(request({1, 2, 3, 4, 5, 6}, 40));  // 45 positions = 12 blocks > 8
    FAIL() << "a request larger than the whole KV cache was queued";
  } catch (const Error& e) {
    EXPECT_STREQ(e.kind().c_str(), errc::context_length_exceeded);
  }
}

TEST(EngineScripted, CancellingRandomRequestsUnderLoadLeaksNoBlock) {
  Harness h(encode(" x"), 256, EngineOptions{.queue_depth = 64, .max_num_seqs = 8},
            backend::KvPoolShape{.block_size = 4, .num_blocks = 40, .bytes_per_block = 0});
  h.set_prompt_len(5);
  std::vector<std::shared_ptr<Channel>> channels;
  for (int i = 0; i < 24; ++i) channels.push_back(h.engine->submit(request({1, 2, 3, 4, static_cast<std::int32_t>(i + 5)}, 100)));
  std::mt19937 rng(7);
  for (int round = 0; round < 24; ++round) {
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 2000));
    channels[rng() % channels.size()]->cancel();
  }
  int cancelled = 0;
  for (auto& c : channels) {
    const Outcome out = drain(*c);
    ASSERT_EQ(out.last.kind, Event::Kind::done) << out.last.error_message;
    cancelled += out.last.finish_reason == "cancelled" ? 1 : 0;
  }
  EXPECT_GT(cancelled, 0);
  const EngineStats stats = h.engine->stats();
  EXPECT_EQ(stats.kv_blocks_used, 0);
  EXPECT_EQ(stats.running, 0u);
  EXPECT_EQ(stats.queue_depth, 0u);
  EXPECT_TRUE(h.engine->idle());
}

TEST(EngineScripted, ARunnerFailureFailsTheRequestsInTheStepAndPoisonsTheEngine) {
  // A step that throws worker_failed: every request ends with it, later submits get model_failed.
  // The step waits until both requests are submitted: otherwise the second submit can land after
  // the first step poisoned the engine and throw model_failed itself (seen once in CI).
  class Failing final : public backend::ModelRunner {
   public:
    explicit Failing(std::shared_future<void> both_submitted) : both_submitted_(std::move(both_submitted)) {
      config_ = model::load_model_configs(kTinyModel).model;
    }
    void run_step(const backend::Batch&, std::span<float>, std::span<std::int32_t>, std::span<float>) override {
      both_submitted_.wait();
      fail(errc::worker_failed, "rank 1 died");
    }
    const model::ModelConfig& config() const noexcept override { return config_; }
    std::int32_t max_context() const noexcept override { return 64; }
    backend::KvPoolShape kv_pool() const noexcept override { return {.block_size = 4, .num_blocks = 64, .bytes_per_block = 0}; }
    backend::MemoryStats memory() const override { return {0, 0, "cpu"}; }

   private:
    std::shared_future<void> both_submitted_;
    model::ModelConfig config_;
  };
  std::promise<void> submitted;
  Engine engine("failing", std::make_unique<Failing>(submitted.get_future().share()), tiny_tokenizer(),
                model::load_model_configs(kTinyModel), {});
  auto a = engine.submit(request({1, 2, 3}, 4));
  auto b = engine.submit(request({4, 5, 6}, 4));
  submitted.set_value();
  for (auto* c : {a.get(), b.get()}) {
    const Outcome out = drain(*c);
    EXPECT_EQ(out.last.kind, Event::Kind::error);
    EXPECT_TRUE(out.last.error_kind == errc::worker_failed || out.last.error_kind == errc::model_failed)
        << out.last.error_kind;
  }
  EXPECT_TRUE(engine.stats().failed);
  try {
    engine.submit(request({1, 2, 3}, 4));
    FAIL() << "a failed engine accepted a request";
  } catch (const Error& e) {
    EXPECT_STREQ(e.kind().c_str(), errc::model_failed);
  }
}

TEST(EngineScripted, LongPromptsArePrefilledInChunksWithinTheTokenBudget) {
  const auto script = encode(" one two three four five");
  Harness h(script, 256, EngineOptions{.queue_depth = 8, .max_num_seqs = 4, .max_batch_tokens = 4});
  const std::vector<std::int32_t> prompt = {20, 21, 22, 23, 24, 25, 26, 27, 28, 29};
  h.set_prompt_len(prompt.size());
  h.log->close_gate();
  auto a = h.engine->submit(request(prompt, 5));
  auto b = h.engine->submit(request({30, 31, 32, 33, 34, 35, 36, 37, 38, 39}, 5));
  h.log->open_gate();
  for (auto* c : {a.get(), b.get()}) {
    const Outcome out = drain(*c);
    ASSERT_EQ(out.last.kind, Event::Kind::done) << out.last.error_message;
    EXPECT_EQ(out.last.tokens, std::vector<std::int32_t>(script.begin(), script.begin() + 5));
  }
  std::lock_guard lock(h.log->mu);
  std::size_t i = 0, max_step = 0;
  for (std::size_t n : h.log->batch_sizes) {
    std::size_t tokens = 0;
    for (std::size_t k = 0; k < n; ++k) tokens += h.log->calls[i + k].count;
    max_step = std::max(max_step, tokens);
    i += n;
  }
  EXPECT_LE(max_step, 4u);  // never over the budget
  EXPECT_EQ(h.log->calls.front().count, 4u);  // the first prompt's first chunk
}

}  // namespace
}  // namespace neuron::engine
