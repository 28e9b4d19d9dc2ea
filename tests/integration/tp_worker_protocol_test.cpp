// A real `neuron worker` process driven line by line over its pipes, as the
// leader (or any other implementation of the protocol) would.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <string>

#include "tp/child_process.hpp"
#include "tp/line_channel.hpp"
#include "tp/messages.hpp"

namespace {

using namespace neuron;
using namespace neuron::tp;
using namespace std::chrono_literals;

class WorkerProcess : public ::testing::Test {
 protected:
  void SetUp() override {
    signal(SIGPIPE, SIG_IGN);
    proc_ = ChildProcess::spawn({NEURON_BINARY, "worker", "--rank", "1", "--tp-size", "2", "--device", "cpu"});
    reader_ = std::make_unique<LineReader>(proc_.stdout_fd(), kMaxLineBytes);
  }

  // Sends one raw line and returns the one reply line.
  std::string ask(const std::string& line) {
    EXPECT_TRUE(write_line(proc_.stdin_fd(), line, std::chrono::steady_clock::now() + 5s));
    auto got = reader_->read_line(std::chrono::steady_clock::now() + 10s);
    EXPECT_EQ(got.status, LineReader::Status::line);
    return got.line;
  }

  std::string error_kind(const std::string& line) {
    const Response r = parse_response(ask(line));
    const auto* e = std::get_if<ErrorResponse>(&r);
    if (!e) return "not an error: " + to_line(r);
    return e->kind;
  }

  ChildProcess proc_;
  std::unique_ptr<LineReader> reader_;
};

TEST_F(WorkerProcess, AnswersPingWithItsRankAndNullCudaDeviceOnCpu) {
  EXPECT_EQ(ask(R"({"op":"ping"})"), R"({"op":"pong","rank":1,"world_size":2,"cuda_device":null})");
}

TEST_F(WorkerProcess, UnknownOpGetsUnknownOpAndTheWorkerKeepsServing) {
  EXPECT_EQ(error_kind(R"({"op":"teleport"})"), "unknown_op");
  EXPECT_EQ(ask(R"({"op":"ping"})"), R"({"op":"pong","rank":1,"world_size":2,"cuda_device":null})");
}

TEST_F(WorkerProcess, MalformedLinesGetBadRequestAndTheWorkerKeepsServing) {
  EXPECT_EQ(error_kind("this is not json"), "bad_request");
  EXPECT_EQ(error_kind(R"({"op":"init"})"), "bad_request");
  EXPECT_EQ(error_kind(R"({"op":"step","model_id":"m","tokens":"1,2","seqs":[],"block_ids":[]})"), "bad_request");
  EXPECT_EQ(error_kind(R"({"op":"step","model_id":"m","tokens":[1],"seqs":[[0,1,0,0,-1,1]],"block_ids":[]})"),
            "bad_request");
  EXPECT_EQ(error_kind(R"({"op":"step","model_id":"m","tokens":[1],"seqs":[[0,1,0,5,1,1]],"block_ids":[0]})"),
            "bad_request");
  EXPECT_EQ(error_kind(R"(["op","ping"])"), "bad_request");
  EXPECT_EQ(error_kind(""), "bad_request");
  EXPECT_EQ(ask(R"({"op":"ping"})"), R"({"op":"pong","rank":1,"world_size":2,"cuda_device":null})");
}

TEST_F(WorkerProcess, RequestsNeedingStateFailCleanly) {
  EXPECT_EQ(error_kind(R"({"op":"nccl_sanity_check"})"), "invalid_argument");  // before init
  EXPECT_EQ(error_kind(R"({"op":"step","model_id":"nope","tokens":[1],"seqs":[[0,1,0,0,1,1]],"block_ids":[0]})"),
            "not_found");
  EXPECT_EQ(error_kind(R"({"op":"unload_model","model_id":"nope"})"), "not_found");
  EXPECT_EQ(error_kind(R"({"op":"init","comm_id":"carrier-pigeon"})"), "invalid_argument");
}

TEST_F(WorkerProcess, RemovedOpsAreUnknown) {
  EXPECT_EQ(error_kind(R"({"op":"generate_step","model_id":"m","tokens":[1],"offset":0})"), "unknown_op");
  EXPECT_EQ(error_kind(R"({"op":"clear_kv_cache","model_id":"m"})"), "unknown_op");
}

TEST_F(WorkerProcess, ShutdownAnswersByeAndExitsZero) {
  EXPECT_EQ(ask(R"({"op":"shutdown"})"), R"({"op":"bye"})");
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (proc_.running() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(proc_.running());
  EXPECT_EQ(proc_.exit_description(), "exit 0");
}

TEST_F(WorkerProcess, ExitsOnEndOfInput) {
  proc_.close_stdin();
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (proc_.running() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(proc_.running());
  EXPECT_EQ(proc_.exit_description(), "exit 0");
}

TEST_F(WorkerProcess, NothingButProtocolLinesOnStdout) {
  // Several requests, several answers, each a parseable response: logs went to stderr.
  for (int i = 0; i < 3; ++i) EXPECT_NO_THROW(parse_response(ask(R"({"op":"ping"})")));
  EXPECT_NO_THROW(parse_response(ask(R"({"op":"nope"})")));
  EXPECT_EQ(ask(R"({"op":"shutdown"})"), R"({"op":"bye"})");
  auto after = reader_->read_line(std::chrono::steady_clock::now() + 5s);
  EXPECT_EQ(after.status, LineReader::Status::eof);
}

TEST(WorkerCli, RejectsRankOutsideTheGroup) {
  auto p = ChildProcess::spawn({NEURON_BINARY, "worker", "--rank", "2", "--tp-size", "2"});
  p.close_stdin();
  const auto deadline = std::chrono::steady_clock::now() + 5s;
  while (p.running() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(p.running());
  EXPECT_NE(p.exit_description(), "exit 0");
}

}  // namespace
