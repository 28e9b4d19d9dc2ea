// The engine's own logic (text routing, stop handling, cache bookkeeping)
// against a runner whose "model" follows a script, so the generated text is
// chosen by the test: real Qwen3 tokens such as <think> and <|im_end|> that a
// tiny random model would never produce. The real-model tests are in
// engine_test.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "model/config.hpp"
#include "tokenizer/tokenizer.hpp"
#include "util/error.hpp"

namespace neuron::engine {
namespace {

using namespace std::chrono_literals;

const std::filesystem::path kTinyModel = std::filesystem::path(NEURON_REPO_ROOT) / "models" / "qwen3-tiny-a";

std::shared_ptr<const tokenizer::Tokenizer> tiny_tokenizer() {
  static const auto tok =
      std::make_shared<const tokenizer::Tokenizer>(tokenizer::Tokenizer::from_file(kTinyModel / "tokenizer.json"));
  return tok;
}

// Emits `script[i]` as the i-th generated token (one-hot logits), whatever the
// prompt, and checks the cache contract of ModelRunner::forward the way a real
// runner relies on it: positions before `offset` must have been fed.
class ScriptedRunner final : public backend::ModelRunner {
 public:
  struct Call {
    std::int32_t offset;
    std::size_t count;
  };
  struct Log {
    std::mutex mu;
    std::vector<Call> calls;
    std::size_t prompt_len = 0;  // tokens of the current request's prompt (set by the test)
  };

  ScriptedRunner(std::vector<std::int32_t> script, std::shared_ptr<Log> log, std::int32_t max_context = 256)
      : script_(std::move(script)), log_(std::move(log)), max_context_(max_context) {
    config_ = model::load_model_configs(kTinyModel).model;
  }

  void forward(std::span<const std::int32_t> tokens, std::int32_t offset, std::span<float> logits) override {
    if (offset < 0 || static_cast<std::size_t>(offset) > cache_.size()) {
      fail(errc::internal, "forward at offset " + std::to_string(offset) + " but only " +
                               std::to_string(cache_.size()) + " positions are cached");
    }
    if (offset + static_cast<std::int64_t>(tokens.size()) > max_context_) fail(errc::context_length_exceeded, "past the context");
    cache_.resize(static_cast<std::size_t>(offset));
    cache_.insert(cache_.end(), tokens.begin(), tokens.end());
    std::size_t prompt_len;
    {
      std::lock_guard lock(log_->mu);
      log_->calls.push_back({offset, tokens.size()});
      prompt_len = log_->prompt_len;
    }
    const std::size_t generated = cache_.size() - prompt_len;  // tokens after the prompt fed so far
    std::fill(logits.begin(), logits.end(), 0.0f);
    const std::int32_t next = generated < script_.size() ? script_[generated] : 0;
    logits[static_cast<std::size_t>(next)] = 10.0f;
  }
  void clear_kv_cache() override { cache_.clear(); }
  const model::Qwen3Config& config() const noexcept override { return config_; }
  std::int32_t max_context() const noexcept override { return max_context_; }
  backend::MemoryStats memory() const override { return {0, 0, "cpu"}; }

 private:
  std::vector<std::int32_t> script_;
  std::shared_ptr<Log> log_;
  std::int32_t max_context_;
  model::Qwen3Config config_;
  std::vector<std::int32_t> cache_;
};

struct Outcome {
  std::string text, reasoning;
  std::size_t deltas = 0;
  Event last;
};

Outcome drain(Channel& channel) {
  Outcome out;
  for (;;) {
    std::optional<Event> e = channel.next(30s);
    if (!e) throw std::runtime_error("no event within 30 s");
    if (e->kind != Event::Kind::delta) {
      out.last = std::move(*e);
      return out;
    }
    out.text += e->text;
    out.reasoning += e->reasoning;
    out.deltas += 1;
  }
}

std::vector<std::int32_t> encode(const std::string& s) { return tiny_tokenizer()->encode(s); }

std::vector<std::int32_t> concat(std::vector<std::int32_t> a, const std::vector<std::int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::int32_t im_end() { return *tiny_tokenizer()->token_to_id("<|im_end|>"); }

struct Harness {
  std::shared_ptr<ScriptedRunner::Log> log = std::make_shared<ScriptedRunner::Log>();
  std::unique_ptr<Engine> engine;

  explicit Harness(std::vector<std::int32_t> script, std::int32_t max_context = 256, EngineOptions options = {}) {
    engine = std::make_unique<Engine>("scripted", std::make_unique<ScriptedRunner>(std::move(script), log, max_context),
                                      tiny_tokenizer(), model::load_model_configs(kTinyModel), options);
  }
  Outcome run(CompletionRequest r) {
    {
      std::lock_guard lock(log->mu);
      log->prompt_len = r.prompt.size();
    }
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

TEST(EngineScripted, SecondRequestResumesFromTheSharedPrefix) {
  Harness h(encode(" and so on and so forth"));
  const std::vector<std::int32_t> prompt = {10, 11, 12, 13, 14, 15};
  h.run(request(prompt, 3));
  {
    std::lock_guard lock(h.log->mu);
    ASSERT_FALSE(h.log->calls.empty());
    EXPECT_EQ(h.log->calls.front().offset, 0);
    EXPECT_EQ(h.log->calls.front().count, prompt.size());
    h.log->calls.clear();
  }
  // Same prompt: only its last token is fed again (its logits pick the first token).
  h.run(request(prompt, 3));
  {
    std::lock_guard lock(h.log->mu);
    EXPECT_EQ(h.log->calls.front().offset, 5);
    EXPECT_EQ(h.log->calls.front().count, 1u);
    h.log->calls.clear();
  }
  // A prompt diverging at position 2 resumes there.
  h.run(request({10, 11, 99, 13}, 2));
  {
    std::lock_guard lock(h.log->mu);
    EXPECT_EQ(h.log->calls.front().offset, 2);
    EXPECT_EQ(h.log->calls.front().count, 2u);
  }
  EXPECT_EQ(h.engine->stats().prompt_tokens_reused, 5u + 2u);
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

}  // namespace
}  // namespace neuron::engine
