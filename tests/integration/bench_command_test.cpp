// `neuron bench` (cli/cmd_bench.cpp) as a user runs it: random weights of a
// config, one JSON object out.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "support/model_paths.hpp"

namespace neuron {
namespace {

// Runs the command line and returns its last line of output parsed; fails the test on a non-zero exit.
nlohmann::json bench_json(const std::string& args) {
  const std::string cmd = std::string(NEURON_BINARY) + " bench --dummy-weights --device cpu --json " + args + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  if (!pipe) return {};
  std::string out;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe)) out += buf;
  EXPECT_EQ(pclose(pipe), 0) << out;
  const std::size_t end = out.find_last_not_of('\n');
  if (end == std::string::npos) return {};
  const std::size_t start = out.rfind('\n', end);
  return nlohmann::json::parse(out.substr(start == std::string::npos ? 0 : start + 1, end + 1), nullptr, false);
}

// A hybrid batch holds one recurrent-state slot a sequence and no snapshot slots (the bench reuses no
// prefix): with the daemon's default of two snapshots a slot, 64 streams of the 27B shape asked 193 slots
// of 151 MB and ran an 80 GB card out of memory.
TEST(BenchCommand, AHybridBatchTakesOneStateSlotASequenceAndNoSnapshots) {
  const std::string config = (test_support::family_dir("qwen3_5-a") / "config.json").string();
  const nlohmann::json j = bench_json("--config " + config + " --batch 3 --prompt-len 4 --gen 2");
  ASSERT_TRUE(j.is_object()) << j;
  EXPECT_EQ(j.at("batch"), 3);
  EXPECT_EQ(j.at("state_slots"), 3);
  EXPECT_EQ(j.at("state_snapshots"), 0);
  EXPECT_GT(j.at("state_bytes").get<std::uint64_t>(), 0u);
  ASSERT_EQ(j.at("runs").size(), 1u);
  EXPECT_GT(j.at("runs")[0].at("decode_tok_s").get<double>(), 0.0);
}

// A dense model has no recurrent state.
TEST(BenchCommand, ADenseModelReportsNoStateSlots) {
  const std::string config = (test_support::family_dir("llama-a") / "config.json").string();
  const nlohmann::json j = bench_json("--config " + config + " --batch 2 --prompt-len 4 --gen 2");
  ASSERT_TRUE(j.is_object()) << j;
  EXPECT_EQ(j.at("state_slots"), 0);
  EXPECT_EQ(j.at("state_bytes"), 0);
}

}  // namespace
}  // namespace neuron
