// The CPU runner's batched step over its paged KV pool: many sequences in one
// step (prefills of mixed lengths, chunked prefills, decodes) must compute
// exactly what each sequence computes alone, whatever blocks hold it; a batch
// check_batch refuses must leave the pool as it was.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/batch.hpp"
#include "backend/model_runner.hpp"
#include "backend/single_sequence.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "model/random_checkpoint.hpp"
#include "model/sampler.hpp"
#include "model/shard.hpp"
#include "support/batch_driver.hpp"
#include "util/error.hpp"

namespace neuron {
namespace {

namespace fs = std::filesystem;
using backend::Batch;
using backend::LogitsWanted;
using test_support::SeqPlan;
using test_support::SeqTrace;

constexpr int kDecodeSteps = 16;
constexpr double kTolerance = 1e-4;  // max |batched - solo| / max |solo| per logits row

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return std::string(e.kind()) + ": " + e.what();
  }
  return "no error";
}

struct Shape {
  const char* name;
  bool fixture;  // the bundled qwen3-tiny-a; else a generated checkpoint of another shape
};
void PrintTo(const Shape& s, std::ostream* os) { *os << s.name; }

// A generated model unlike the fixture: untied, 6 query heads over 2 KV heads, head_dim 20 != hidden / heads.
model::ModelConfig generated_config() {
  model::ModelConfig c = model::preset_config("qwen3-0.6b");
  c.vocab_size = 300;
  c.hidden_size = 48;
  c.intermediate_size = 80;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 6;
  c.num_key_value_heads = 2;
  c.head_dim = 20;
  c.tie_word_embeddings = false;
  c.eos_token_ids = {1};
  c.bos_token_id = 0;
  return c;
}

class CpuBatch : public ::testing::TestWithParam<Shape> {
 protected:
  void SetUp() override {
    if (GetParam().fixture) {
      dir_ = fs::path(NEURON_REPO_ROOT) / "models" / "qwen3-tiny-a";
    } else {
      dir_ = fs::temp_directory_path() / ("neuron-cpu-batch-" + std::to_string(::getpid()));
      model::write_random_checkpoint(dir_, generated_config(), {.seed = 5});
      generated_ = true;
    }
    cfg_ = model::load_model_configs(dir_).model;
    ckpt_ = std::make_unique<io::Checkpoint>(io::Checkpoint::open_dir(dir_));
    solo_ = open(0, 0);
  }
  void TearDown() override {
    ckpt_.reset();
    std::error_code ec;
    if (generated_) fs::remove_all(dir_, ec);
  }

  std::unique_ptr<backend::ModelRunner> open(std::int32_t block_size, std::int32_t blocks) const {
    backend::RunnerOptions o;
    o.max_context = 256;
    o.kv_block_size = block_size;
    o.kv_blocks = blocks;
    return backend::make_runner(cfg_, ckpt_.get(), model::ShardPlan::make(cfg_, 0, 1), backend::Device{}, nullptr, o);
  }

  std::vector<SeqPlan> plans(const std::vector<std::size_t>& lengths) const {
    std::vector<SeqPlan> out;
    for (std::size_t i = 0; i < lengths.size(); ++i)
      out.push_back({.prompt = test_support::random_prompt(lengths[i], cfg_.vocab_size, static_cast<std::uint32_t>(97 + i)),
                     .chunks = {},
                     .start_step = 0});
    return out;
  }

  // Every sequence's batched trace against its solo run: same greedy tokens, logits within kTolerance.
  void expect_matches_solo(const std::vector<SeqPlan>& plans, const std::vector<SeqTrace>& got, const std::string& what) {
    ASSERT_EQ(got.size(), plans.size());
    for (std::size_t i = 0; i < plans.size(); ++i) {
      const SeqTrace want = test_support::run_solo(*solo_, plans[i].prompt, kDecodeSteps);
      EXPECT_EQ(got[i].tokens, want.tokens) << what << ": sequence " << i;
      ASSERT_EQ(got[i].logits.size(), want.logits.size()) << what << ": sequence " << i;
      double worst = 0;
      for (std::size_t k = 0; k < want.logits.size(); ++k)
        worst = std::max(worst, test_support::relative_error(got[i].logits[k], want.logits[k]));
      EXPECT_LE(worst, kTolerance) << what << ": sequence " << i << " (prompt " << plans[i].prompt.size() << ")";
    }
  }

  fs::path dir_;
  bool generated_ = false;
  model::ModelConfig cfg_;
  std::unique_ptr<io::Checkpoint> ckpt_;
  std::unique_ptr<backend::ModelRunner> solo_;  // the reference: one sequence at a time
};

// Prompt lengths around the block size (16), the attention's 64-query tile, and a single token.
const std::vector<std::size_t> kLengths{33, 1, 70, 16, 5, 64, 17, 100};

TEST_P(CpuBatch, SequencesPrefilledAndDecodedTogetherEqualEachAlone) {
  auto runner = open(0, 128);
  for (std::size_t n : {1u, 3u, 8u}) {
    const auto p = plans(std::vector<std::size_t>(kLengths.begin(), kLengths.begin() + static_cast<std::ptrdiff_t>(n)));
    const auto got = test_support::run_batched(*runner, p, kDecodeSteps, test_support::block_order(128));
    expect_matches_solo(p, got, std::to_string(n) + " sequences");
  }
}

TEST_P(CpuBatch, ScatteredBlockTablesGiveTheSameResults) {
  // Shuffled ids: almost no two neighbouring entries of a table are neighbouring blocks.
  for (std::int32_t block_size : {16, 5}) {
    const std::int32_t blocks = 8 * ((100 + kDecodeSteps) / block_size + 2);
    auto runner = open(block_size, blocks);
    const auto p = plans(kLengths);
    const auto got = test_support::run_batched(*runner, p, kDecodeSteps, test_support::block_order(blocks, 1234));
    expect_matches_solo(p, got, "block size " + std::to_string(block_size) + ", shuffled");
  }
}

TEST_P(CpuBatch, ChunkedPrefillAmongDecodesEqualsOneShotPrefill) {
  auto runner = open(0, 96);
  auto p = plans({90, 12, 40, 7});
  p[0].chunks = {16, 30, 1, 43};  // over four steps, while the others decode
  p[1].start_step = 0;
  p[2].chunks = {39, 1};
  p[2].start_step = 2;
  p[3].start_step = 3;
  const auto got = test_support::run_batched(*runner, p, kDecodeSteps, test_support::block_order(96, 77));
  expect_matches_solo(p, got, "chunked");
}

TEST_P(CpuBatch, AllLogitsRowsFollowSequenceOrder) {
  auto runner = open(0, 32);
  const auto a = test_support::random_prompt(20, cfg_.vocab_size, 1), b = test_support::random_prompt(9, cfg_.vocab_size, 2);
  const auto c = test_support::random_prompt(3, cfg_.vocab_size, 3);
  const auto vocab = static_cast<std::size_t>(cfg_.vocab_size);
  Batch batch;
  const std::vector<std::int32_t> ta{4, 9}, tb{0}, tc{7};
  batch.add(a, 0, ta, LogitsWanted::all);
  batch.add(b, 0, tb, LogitsWanted::none);
  batch.add(c, 0, tc, LogitsWanted::last);
  ASSERT_EQ(batch.logit_rows(), 21);
  std::vector<float> logits(21 * vocab);
  runner->step(batch, logits);

  std::vector<float> want_a(20 * vocab), want_c(vocab);
  backend::SingleSequence(*solo_).forward(a, 0, want_a);
  backend::SingleSequence(*solo_).forward(c, 0, want_c);
  for (std::size_t r = 0; r < 20; ++r)
    EXPECT_LE(test_support::relative_error(std::span(logits).subspan(r * vocab, vocab),
                                           std::span(want_a).subspan(r * vocab, vocab)),
              kTolerance)
        << "row " << r;
  EXPECT_LE(test_support::relative_error(std::span(logits).subspan(20 * vocab, vocab), want_c), kTolerance);
}

TEST_P(CpuBatch, ArgmaxSequencesGetTheGreedyPickOfTheirRow) {
  // The CPU runner picks nowhere itself: ModelRunner::step runs `argmax` sequences as `last` ones and picks.
  auto runner = open(0, 32);
  ASSERT_FALSE(runner->picks_on_device());
  const auto a = test_support::random_prompt(20, cfg_.vocab_size, 1), b = test_support::random_prompt(9, cfg_.vocab_size, 2);
  const auto c = test_support::random_prompt(3, cfg_.vocab_size, 3);
  const auto vocab = static_cast<std::size_t>(cfg_.vocab_size);
  const std::vector<std::int32_t> ta{4, 9}, tb{0}, tc{7};
  auto make = [&](LogitsWanted wa, LogitsWanted wc) {
    Batch batch;
    batch.add(a, 0, ta, wa);
    batch.add(b, 0, tb, LogitsWanted::none);
    batch.add(c, 0, tc, wc);
    return batch;
  };
  std::vector<float> rows(2 * vocab);
  runner->step(make(LogitsWanted::last, LogitsWanted::last), rows);
  const std::span<const float> row_a(rows.data(), vocab), row_c(rows.data() + vocab, vocab);

  const Batch mixed = make(LogitsWanted::argmax, LogitsWanted::last);
  ASSERT_EQ(mixed.logit_rows(), 1);
  ASSERT_EQ(mixed.pick_rows(), 1);
  std::vector<float> one(vocab);
  std::vector<std::int32_t> picks(1, -1);
  runner->step(mixed, one, picks);
  EXPECT_EQ(picks[0], model::greedy_pick(row_a));
  EXPECT_EQ(one, std::vector<float>(row_c.begin(), row_c.end())) << "the `last` row is the same computation";

  std::vector<std::int32_t> both(2, -1);
  runner->step(make(LogitsWanted::argmax, LogitsWanted::argmax), {}, both);
  EXPECT_EQ(both, (std::vector<std::int32_t>{model::greedy_pick(row_a), model::greedy_pick(row_c)}));

  // Wrong sizes are refused before anything runs.
  std::vector<std::int32_t> three(3);
  EXPECT_NE(error_of([&] { runner->step(mixed, one, three); }).find("picks buffer"), std::string::npos);
  std::vector<float> two_rows(2 * vocab);
  EXPECT_NE(error_of([&] { runner->step(mixed, two_rows, picks); }).find("logits buffer"), std::string::npos);
}

TEST_P(CpuBatch, RefusedBatchesLeaveThePoolUntouched) {
  auto runner = open(0, 16);
  const auto vocab = static_cast<std::size_t>(cfg_.vocab_size);
  // Sequence A lives in blocks {3, 8}; every refused batch below would first overwrite them if it ran at all.
  const auto a = test_support::random_prompt(20, cfg_.vocab_size, 42);
  const std::vector<std::int32_t> a_blocks{3, 8};
  std::vector<float> logits(vocab);
  Batch batch;
  batch.add(a, 0, a_blocks, LogitsWanted::last);
  runner->step(batch, logits);

  const auto other = test_support::random_prompt(20, cfg_.vocab_size, 43);
  const std::vector<std::int32_t> bad_token{1, static_cast<std::int32_t>(cfg_.vocab_size)}, one{5};
  const std::vector<std::int32_t> b0{0}, b3{3}, b8{8}, b38{3, 8}, b83{8, 3}, b80{8, 0}, b88{8, 8}, b383{3, 8, 3}, b_out{16};
  struct Refused {
    const char* what;
    std::function<void(Batch&)> build;
    std::size_t logit_rows;  // the logits span passed
    const char* kind;
    const char* says;
  };
  const std::vector<Refused> cases{
      {"token outside the vocabulary", [&](Batch& b) {
         b.add(other, 0, b83, LogitsWanted::last);
         b.add(bad_token, 0, b0, LogitsWanted::last);
       }, 2, errc::invalid_argument, "outside the vocabulary"},
      {"two sequences write one block", [&](Batch& b) {
         b.add(other, 0, b83, LogitsWanted::last);
         b.add(one, 0, b3, LogitsWanted::last);
       }, 2, errc::invalid_argument, "also writes"},
      {"a sequence reads a block another writes", [&](Batch& b) {
         b.add(other, 0, b38, LogitsWanted::last);  // writes blocks 3 and 8
         b.add(one, 16, b80, LogitsWanted::last);   // reads block 8, writes block 0
       }, 2, errc::invalid_argument, "writes in the same step"},
      {"a sequence writes a block another reads", [&](Batch& b) {
         b.add(one, 16, b83, LogitsWanted::last);  // reads block 8, writes block 3
         b.add(one, 0, b8, LogitsWanted::last);    // writes block 8
       }, 2, errc::invalid_argument, "writes in the same step"},
      {"one table repeats a written block", [&](Batch& b) {
         b.add(other, 0, b88, LogitsWanted::last);  // positions 0 and 16 would share block 8's slot 0
       }, 1, errc::invalid_argument, "table entries"},
      {"one table reads a block it writes through another entry", [&](Batch& b) {
         b.add(one, 32, b383, LogitsWanted::last);
       }, 1, errc::invalid_argument, "through table entry 0"},
      {"short block table", [&](Batch& b) {
         b.add(other, 0, b38, LogitsWanted::last);
         b.add(one, 16, b0, LogitsWanted::last);
       }, 2, errc::invalid_argument, "need 2"},
      {"block id outside the pool", [&](Batch& b) {
         b.add(other, 0, b38, LogitsWanted::last);
         b.add(one, 0, b_out, LogitsWanted::last);
       }, 2, errc::invalid_argument, "outside the pool"},
      {"wrong logits size", [&](Batch& b) { b.add(other, 0, b38, LogitsWanted::last); }, 2, errc::invalid_argument,
       "logits buffer"},
  };
  for (const Refused& c : cases) {
    Batch b;
    c.build(b);
    std::vector<float> out(c.logit_rows * vocab);
    const std::string err = error_of([&] { runner->step(b, out); });
    EXPECT_EQ(err.rfind(c.kind, 0), 0u) << c.what << ": " << err;
    EXPECT_NE(err.find(c.says), std::string::npos) << c.what << ": " << err;
  }
  // A continues as if nothing had happened.
  SeqTrace got;
  got.logits.push_back(logits);
  got.tokens.push_back(test_support::argmax(logits));
  for (int k = 0; k < 4; ++k) {
    batch.clear();
    const std::int32_t next[] = {got.tokens.back()};
    batch.add(next, 20 + k, a_blocks, LogitsWanted::last);
    runner->step(batch, logits);
    got.logits.push_back(logits);
    got.tokens.push_back(test_support::argmax(logits));
  }
  const SeqTrace want = test_support::run_solo(*solo_, a, 4);
  EXPECT_EQ(got.tokens, want.tokens);
  for (std::size_t k = 0; k < want.logits.size(); ++k)
    EXPECT_LE(test_support::relative_error(got.logits[k], want.logits[k]), kTolerance) << "step " << k;
}

INSTANTIATE_TEST_SUITE_P(Models, CpuBatch, ::testing::Values(Shape{"fixture", true}, Shape{"generated", false}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace neuron
