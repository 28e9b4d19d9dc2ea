// The test processes' cleanup of libomp's registrations (support/openmp_registrations.hpp): a global
// environment removes those of gone processes when each test process ends, so the sanitizer runs, whose
// tests kill TP workers and daemons, leave nothing in /dev/shm.
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>

#include "support/openmp_registrations.hpp"
#include "support/temp_dir.hpp"

namespace {

class ForgetDeadOpenmpRegistrations : public ::testing::Environment {
 public:
  void TearDown() override { neuron::test_support::forget_dead_openmp_registrations(); }
};

[[maybe_unused]] ::testing::Environment* const forget_openmp_registrations_env =
    ::testing::AddGlobalTestEnvironment(new ForgetDeadOpenmpRegistrations);

}  // namespace

TEST(OpenmpRegistrations, ThoseOfGoneProcessesAreRemovedTheRestKept) {
  namespace ts = neuron::test_support;
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);  // reaped: gone
  const ts::TempDir dir("neuron-kmp");
  const std::string prefix(ts::kOpenmpRegistrationPrefix);
  const auto dead = dir.write(prefix + std::to_string(child) + "_0", "x");
  const auto mine = dir.write(prefix + std::to_string(::getpid()) + "_0", "x");  // running
  const auto odd = dir.write(prefix + "x_0", "x");
  const auto other = dir.write("unrelated_" + std::to_string(child) + "_0", "x");
  EXPECT_EQ(ts::forget_dead_openmp_registrations(dir.path()), 1);
  EXPECT_FALSE(std::filesystem::exists(dead));
  EXPECT_TRUE(std::filesystem::exists(mine));
  EXPECT_TRUE(std::filesystem::exists(odd));
  EXPECT_TRUE(std::filesystem::exists(other));
  EXPECT_EQ(ts::forget_dead_openmp_registrations(dir.path() / "missing"), 0);
}
