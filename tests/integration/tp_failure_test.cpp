// A TP worker that dies, stops answering or answers garbage in the middle of
// generation must end the step with Error{worker_failed} naming its rank,
// within the step deadline, with every worker process reaped and the runner
// failed for good (later calls refuse at once instead of hanging).
#include <gtest/gtest.h>

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <thread>

#include "backend/single_sequence.hpp"
#include "engine/model_loader.hpp"
#include "model/random_checkpoint.hpp"
#include "tp/tp_runner.hpp"
#include "util/error.hpp"
#include "support/process.hpp"

namespace {

using namespace neuron;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kDeadline = 4000ms;  // bounds a whole step; a loaded 2-core CI box needs the room

using test_support::gone;

class TpFailure : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::filesystem::temp_directory_path() / ("neuron-tp-failure-" + std::to_string(::getpid()));
    model::ModelConfig c;
    c.vocab_size = 256;
    c.hidden_size = 32;
    c.intermediate_size = 96;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 12;  // splits 2, 3 and 4 ways
    c.num_key_value_heads = 12;
    c.head_dim = 8;
    c.max_position_embeddings = 512;
    c.eos_token_ids = {1};
    model::write_random_checkpoint(dir_, c, {.seed = 5});
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::unique_ptr<tp::TpRunner> open(int world, int faulty_rank = 0, const std::string& fault = {},
                                     std::chrono::milliseconds deadline = kDeadline) {
    engine::LoadOptions o;
    o.model_dir = dir_;
    o.model_id = "failing";
    o.tensor_parallel = world;
    o.max_context = 128;
    o.step_timeout = deadline;
    o.worker_binary = NEURON_BINARY;
    if (!fault.empty()) {
      o.worker_args.resize(world);
      o.worker_args[faulty_rank] = {"--fault", fault};
    }
    auto runner = engine::open_runner(o);
    auto* tp = dynamic_cast<tp::TpRunner*>(runner.get());
    EXPECT_NE(tp, nullptr);
    runner.release();
    return std::unique_ptr<tp::TpRunner>(tp);
  }

  // Decodes until a step throws (or `max_steps` pass); returns the error and how long the failing step took.
  struct Outcome {
    std::optional<Error> error;
    Clock::duration failing_step{};
    int steps_ok = 0;
  };
  static Outcome generate_until_failure(tp::TpRunner& runner, int max_steps, std::atomic<int>* progress = nullptr) {
    Outcome out;
    std::vector<float> logits(256);
    std::int32_t token = 7;
    backend::SingleSequence seq(runner);
    for (int s = 0; s < max_steps; ++s) {
      const std::int32_t one[] = {token};
      const auto t0 = Clock::now();
      try {
        seq.forward(one, s % 100, logits);  // positions wrap: earlier ones are overwritten
      } catch (const Error& e) {
        out.failing_step = Clock::now() - t0;
        out.error = e;
        return out;
      }
      token = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      ++out.steps_ok;
      if (progress) progress->store(out.steps_ok);
    }
    return out;
  }

  static void expect_failed_and_reaped(tp::TpRunner& runner, const std::vector<pid_t>& pids) {
    EXPECT_TRUE(runner.failed());
    for (pid_t p : pids) EXPECT_TRUE(gone(p)) << "worker pid " << p << " still exists";
    // The runner refuses further work at once.
    std::vector<float> logits(256);
    const std::int32_t one[] = {3};
    const auto t0 = Clock::now();
    try {
      backend::SingleSequence(runner).forward(one, 0, logits);
      ADD_FAILURE() << "a failed runner ran a step";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), errc::worker_failed);
    }
    EXPECT_LT(Clock::now() - t0, 200ms);
  }

  static void expect_worker_failed(const Outcome& o, int rank, const std::string& phrase) {
    ASSERT_TRUE(o.error.has_value()) << "no step failed";
    EXPECT_EQ(o.error->kind(), errc::worker_failed) << o.error->what();
    const std::string what = o.error->what();
    EXPECT_NE(what.find("rank " + std::to_string(rank)), std::string::npos) << what;
    EXPECT_NE(what.find(phrase), std::string::npos) << what;
  }

  // Decodes on this thread while `signal` hits worker `rank` once a few steps
  // ran; returns the outcome and the time from the signal to the failed step.
  struct Hit {
    Outcome outcome;
    Clock::duration signal_to_error{};
    pid_t pid = -1;
  };
  static Hit hit_mid_generation(tp::TpRunner& runner, int rank, int signal) {
    Hit hit;
    hit.pid = runner.worker_pids().at(static_cast<std::size_t>(rank - 1));
    std::atomic<Clock::rep> sent_at{0};
    std::atomic<int> progress{0};
    std::thread hitter([&] {
      int p = 0;
      while ((p = progress.load()) >= 0 && p < 3) std::this_thread::sleep_for(1ms);
      if (p < 0) return;  // generation ended first: the pid may be reaped (and reused) by now
      std::this_thread::sleep_for(20ms);  // mid-step, most likely
      sent_at = Clock::now().time_since_epoch().count();
      ::kill(hit.pid, signal);
    });
    hit.outcome = generate_until_failure(runner, 1'000'000, &progress);
    const auto ended = Clock::now();
    if (progress.exchange(-1) < 3) ADD_FAILURE() << "generation ended before the signal";
    hitter.join();
    hit.signal_to_error = ended - Clock::time_point(Clock::duration(sent_at.load()));
    return hit;
  }

  static double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

  inline static std::filesystem::path dir_;
};

TEST_F(TpFailure, WorkerThatExitsMidGenerationFailsTheStepNamingItsRank) {
  auto runner = open(2, 1, "exit-after=5");
  const auto pids = runner->worker_pids();
  const auto o = generate_until_failure(*runner, 50);
  EXPECT_EQ(o.steps_ok, 5);
  expect_worker_failed(o, 1, "exited");
  EXPECT_LT(o.failing_step, kDeadline + 1s);
  expect_failed_and_reaped(*runner, pids);
}

TEST_F(TpFailure, WorkerThatAnswersGarbageFailsTheStepNamingItsRank) {
  auto runner = open(3, 2, "garbage-after=4");
  const auto pids = runner->worker_pids();
  const auto o = generate_until_failure(*runner, 50);
  EXPECT_EQ(o.steps_ok, 4);
  expect_worker_failed(o, 2, "garbage");
  EXPECT_LT(o.failing_step, kDeadline + 1s);
  expect_failed_and_reaped(*runner, pids);
}

TEST_F(TpFailure, WorkerThatStopsAnsweringFailsTheStepWithinTheDeadline) {
  auto runner = open(2, 1, "hang-after=3");
  const auto pids = runner->worker_pids();
  const auto o = generate_until_failure(*runner, 50);
  EXPECT_EQ(o.steps_ok, 3);
  expect_worker_failed(o, 1, "no reply");
  // Rank 0 waits at most the collective timeout inside its forward, then a quarter deadline for the reply.
  EXPECT_LT(o.failing_step, 2 * kDeadline);
  expect_failed_and_reaped(*runner, pids);
}

TEST_F(TpFailure, WorkerKilledWithSigkillMidGeneration) {
  auto runner = open(3);
  const auto pids = runner->worker_pids();
  std::thread killer([&] {
    std::this_thread::sleep_for(300ms);
    ::kill(pids[0], SIGKILL);  // rank 1, while steps are running
  });
  const auto o = generate_until_failure(*runner, 1'000'000);
  killer.join();
  EXPECT_GT(o.steps_ok, 0);
  expect_worker_failed(o, 1, "rank 1");
  EXPECT_LT(o.failing_step, kDeadline + 1s);
  expect_failed_and_reaped(*runner, pids);
}

TEST_F(TpFailure, WorkerStoppedWithSigstopMidGeneration) {
  auto runner = open(3);
  const auto pids = runner->worker_pids();
  std::thread stopper([&] {
    std::this_thread::sleep_for(300ms);
    ::kill(pids[1], SIGSTOP);  // rank 2
  });
  const auto o = generate_until_failure(*runner, 1'000'000);
  stopper.join();
  EXPECT_GT(o.steps_ok, 0);
  expect_worker_failed(o, 2, "no reply");
  EXPECT_LT(o.failing_step, 2 * kDeadline);
  expect_failed_and_reaped(*runner, pids);
}

// A long step deadline, so only noticing the exit itself can pass the 1 s bound:
// waiting on a collective's timeout or a reply's deadline takes 7.5 s.
TEST_F(TpFailure, SigkillOfAnyRankOfFourIsNamedWithinOneSecond) {
  constexpr auto kLongDeadline = 7500ms;
  for (int rank = 1; rank <= 3; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    auto runner = open(4, 0, {}, kLongDeadline);
    const auto pids = runner->worker_pids();
    const Hit hit = hit_mid_generation(*runner, rank, SIGKILL);
    EXPECT_GT(hit.outcome.steps_ok, 0);
    const std::string named = "rank " + std::to_string(rank) + " (pid " + std::to_string(hit.pid) + ") exited: killed by signal 9";
    expect_worker_failed(hit.outcome, rank, named);
    EXPECT_LT(hit.signal_to_error, 1s) << "noticed " << ms(hit.signal_to_error) << " ms after the SIGKILL";
    std::printf("[ measure  ] SIGKILL of rank %d of 4: step failed %.1f ms after the signal\n", rank, ms(hit.signal_to_error));
    expect_failed_and_reaped(*runner, pids);
  }
}

// A stopped worker cannot be told from a slow one before the deadline; after
// it, it is named as stopped, with the deadline the round really had.
TEST_F(TpFailure, SigstopOfARankOfFourIsNamedWithTheRealDeadline) {
  constexpr auto kStepDeadline = 3000ms;
  auto runner = open(4, 0, {}, kStepDeadline);
  const auto pids = runner->worker_pids();
  const Hit hit = hit_mid_generation(*runner, 2, SIGSTOP);
  EXPECT_GT(hit.outcome.steps_ok, 0);
  expect_worker_failed(hit.outcome, 2, "within the 3000 ms deadline");
  expect_worker_failed(hit.outcome, 2, "rank 2 (pid " + std::to_string(hit.pid) + ") is stopped");
  EXPECT_LT(hit.outcome.failing_step, kStepDeadline + 1s) << ms(hit.outcome.failing_step) << " ms";
  EXPECT_LT(hit.signal_to_error, kStepDeadline + 1s) << ms(hit.signal_to_error) << " ms";
  std::printf("[ measure  ] SIGSTOP of rank 2 of 4 (deadline 3000 ms): step failed %.1f ms after the signal\n",
              ms(hit.signal_to_error));
  expect_failed_and_reaped(*runner, pids);  // SIGKILL ends a stopped process too
}

TEST_F(TpFailure, DestroyingAHealthyRunnerReapsItsWorkers) {
  std::vector<pid_t> pids;
  {
    auto runner = open(4);
    pids = runner->worker_pids();
    ASSERT_EQ(pids.size(), 3u);
    const auto o = generate_until_failure(*runner, 3);
    EXPECT_FALSE(o.error.has_value());
  }
  for (pid_t p : pids) EXPECT_TRUE(gone(p)) << "worker pid " << p << " outlived its runner";
}

}  // namespace
