// The leader's WorkerPool against real worker processes: spawn, ping, join
// the Gloo group, sanity all-reduce, shutdown, and what happens when a worker
// dies or stops answering between steps.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tp/worker_pool.hpp"
#include "util/error.hpp"
#include "support/process.hpp"

namespace {

using namespace neuron;
using namespace neuron::tp;
using namespace std::chrono_literals;

PoolOptions pool_options(int world, std::chrono::milliseconds timeout = 5000ms) {
  PoolOptions o;
  o.world = world;
  o.worker_binary = NEURON_BINARY;
  o.step_timeout = timeout;
  return o;
}

using test_support::gone;

class PoolWorld : public ::testing::TestWithParam<int> {};

TEST_P(PoolWorld, PingsInitsAndSanityChecksThenReapsEveryWorker) {
  const int world = GetParam();
  std::vector<pid_t> pids;
  {
    WorkerPool pool(pool_options(world));
    pids = pool.worker_pids();
    ASSERT_EQ(static_cast<int>(pids.size()), world - 1);
    const auto pongs = pool.ping();
    for (int r = 1; r < world; ++r) {
      EXPECT_EQ(pongs[r - 1].rank, r);
      EXPECT_EQ(pongs[r - 1].world_size, world);
      EXPECT_FALSE(pongs[r - 1].cuda_device.has_value());
    }
    auto comm = pool.init_communicator(dist::CommKind::gloo);
    EXPECT_EQ(comm->size(), world);
    EXPECT_EQ(comm->rank(), 0);
    EXPECT_EQ(pool.sanity_check(), static_cast<float>(world));
    EXPECT_EQ(pool.sanity_check(), static_cast<float>(world));  // the group stays usable
    pool.shutdown();
    for (pid_t p : pids) EXPECT_TRUE(gone(p)) << "pid " << p;
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, PoolWorld, ::testing::Values(2, 3, 4));

TEST(WorkerPool, ReportedErrorsKeepThePoolUsable) {
  WorkerPool pool(pool_options(2));
  // No model "m" on the worker: a clean, consistent error, not a group failure.
  try {
    StepRequest step{.model_id = "m", .batch = {}};
    const std::int32_t token[] = {1}, block[] = {0};
    step.batch.add(token, 0, block, backend::LogitsWanted::last);
    pool.round(step, "step_ok", nullptr, 5000ms);
    FAIL() << "a step of an unknown model succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::not_found);
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(pool.failed());
  EXPECT_EQ(pool.ping().size(), 1u);
}

TEST(WorkerPool, KilledWorkerFailsTheNextRoundNamingItsRankAndAllAreReaped) {
  WorkerPool pool(pool_options(3, 2000ms));
  const auto pids = pool.worker_pids();
  ASSERT_EQ(::kill(pids[1], SIGKILL), 0);  // rank 2
  const auto t0 = std::chrono::steady_clock::now();
  try {
    pool.ping();
    FAIL() << "ping with a dead worker succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::worker_failed);
    EXPECT_NE(std::string(e.what()).find("rank 2"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 4s);
  EXPECT_TRUE(pool.failed());
  for (pid_t p : pids) EXPECT_TRUE(gone(p)) << "pid " << p;
  // A failed pool refuses everything at once.
  const auto t1 = std::chrono::steady_clock::now();
  try {
    pool.ping();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::worker_failed);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t1, 100ms);
}

TEST(WorkerPool, StoppedWorkerMissesTheDeadlineAndIsKilled) {
  WorkerPool pool(pool_options(2, 1000ms));
  const auto pids = pool.worker_pids();
  ASSERT_EQ(::kill(pids[0], SIGSTOP), 0);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    pool.ping();
    FAIL() << "ping with a stopped worker succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::worker_failed);
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no reply"), std::string::npos) << e.what();
  }
  const auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_GE(took, 900ms);
  EXPECT_LT(took, 3s);
  EXPECT_TRUE(gone(pids[0]));
}

TEST(WorkerPool, MissingWorkerBinaryIsAClearError) {
  auto o = pool_options(2);
  o.worker_binary = "/nonexistent/neuron";
  try {
    WorkerPool pool(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::not_found);
  }
}

TEST(WorkerPool, WorkerThatIsNotANeuronFailsStartup) {
  auto o = pool_options(2, 1000ms);
  o.worker_binary = "/bin/true";  // exits at once without answering
  try {
    WorkerPool pool(o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::worker_failed);
    EXPECT_NE(std::string(e.what()).find("rank 1"), std::string::npos) << e.what();
  }
}

std::pair<int, std::string> run_cli(const std::string& args) {
  const std::string cmd = std::string(NEURON_BINARY) + " " + args + " 2>/dev/null";
  std::unique_ptr<FILE, int (*)(FILE*)> p(::popen(cmd.c_str(), "r"), ::pclose);
  std::string out;
  std::array<char, 256> buf{};
  while (std::fgets(buf.data(), buf.size(), p.get())) out += buf.data();
  const int status = ::pclose(p.release());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

TEST(TpSmokeCli, ReportsOkAndTheObservedSum) {
  for (int n : {2, 4}) {
    const auto [rc, out] = run_cli("tp-smoke --tp-size " + std::to_string(n) + " --device cpu");
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("status=ok tp_size=" + std::to_string(n) + " observed_sum=" + std::to_string(n)),
              std::string::npos)
        << out;
  }
}

TEST(TpSmokeCli, RejectsABadSize) {
  const auto [rc, out] = run_cli("tp-smoke --tp-size 1 --device cpu");
  EXPECT_NE(rc, 0);
  EXPECT_EQ(out.find("status=ok"), std::string::npos);
}

// Children of every thread of `pid` (workers are forked by the leader's spawner thread).
std::vector<pid_t> children_of(pid_t pid) {
  std::vector<pid_t> out;
  const std::filesystem::path tasks = "/proc/" + std::to_string(pid) + "/task";
  std::error_code ec;
  for (const auto& t : std::filesystem::directory_iterator(tasks, ec)) {
    std::ifstream f(t.path() / "children");
    for (pid_t c; f >> c;) out.push_back(c);
  }
  return out;
}

// Gone, or a zombie nobody reaped yet (a container's init may not): either way not running.
bool dead(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return true;
  const auto close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'Z';
}

TEST(WorkerPool, WorkersDieWithTheirLeader) {
  // A leader busy generating at TP=2; SIGKILL gives it no chance to clean up.
  auto leader = ChildProcess::spawn({NEURON_BINARY, "generate", "--model",
                                     std::string(NEURON_REPO_ROOT) + "/models/qwen3-tiny-a", "--prompt-ids", "1,2,3",
                                     "--max-tokens", "4000", "--max-context", "4096", "--temperature", "0",
                                     "--ignore-eos", "--tensor-parallel", "2"});
  std::vector<pid_t> workers;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (workers.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(50ms);
    workers = children_of(leader.pid());
  }
  ASSERT_EQ(workers.size(), 1u) << "the leader never started its worker";
  std::this_thread::sleep_for(300ms);  // let generation get going
  leader.kill();
  const auto until = std::chrono::steady_clock::now() + 3s;
  while (!dead(workers[0]) && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(20ms);
  EXPECT_TRUE(dead(workers[0])) << "worker pid " << workers[0] << " outlived its leader";
}

TEST(GenerateCli, TensorParallelPrintsTheSameTokensOnCleanStdout) {
  const std::string base = "generate --model " + std::string(NEURON_REPO_ROOT) +
                           "/models/qwen3-tiny-a --prompt-ids 1,2,3,4 --max-tokens 24 --temperature 0";
  const auto [rc1, single] = run_cli(base);
  ASSERT_EQ(rc1, 0) << single;
  ASSERT_FALSE(single.empty());
  for (int n : {2, 4}) {
    const auto [rc, out] = run_cli(base + " --tensor-parallel " + std::to_string(n));
    EXPECT_EQ(rc, 0) << out;
    EXPECT_EQ(out, single) << "TP=" << n << " (stdout must hold only the ids; logs go to stderr)";
  }
  const auto [rc3, bad] = run_cli(base + " --tensor-parallel 3");
  EXPECT_NE(rc3, 0);
}

}  // namespace
