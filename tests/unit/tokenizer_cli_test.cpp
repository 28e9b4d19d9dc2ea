// `neuron tokenize` as a user runs it: the real binary, the bundled model.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <string>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

namespace {

struct Result {
  int status;
  std::string out;
};

// Runs `args` (already shell-quoted) through the neuron binary; stdout only.
Result run_neuron(const std::string& args) {
  const std::string cmd = std::string("'") + NEURON_BINARY + "' " + args + " 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, ""};
  std::string out;
  std::array<char, 4096> buf;
  std::size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

const std::string kModel = std::string("--model '") + NEURON_REPO_ROOT + "/models/qwen3-tiny-a'";

TEST(TokenizerCli, JsonOutput) {
  const Result r = run_neuron("tokenize " + kModel + " --text 'Hello, world!' --json");
  ASSERT_EQ(r.status, 0);
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tokens"], nlohmann::json({9707, 11, 1879, 0}));
  EXPECT_EQ(j["count"], 4);
}

TEST(TokenizerCli, PlainOutputMatchesSpecialTokens) {
  const Result r = run_neuron("tokenize " + kModel + " --text '<|im_start|>user'");
  ASSERT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "151644 872\n");
}

TEST(TokenizerCli, MissingModelDirectoryFails) {
  const Result r = run_neuron("tokenize --model /nonexistent/model --text hi");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "");
}

TEST(TokenizerCli, MissingTextFails) {
  EXPECT_EQ(run_neuron("tokenize " + kModel).status, 1);
}

}  // namespace
