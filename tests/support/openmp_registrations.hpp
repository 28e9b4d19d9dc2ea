#pragma once
// libomp (clang's OpenMP runtime, which the sanitizer builds link) registers each process that starts it as
// /dev/shm/__KMP_REGISTERED_LIB_<pid>_<uid> and removes the file when the process exits normally. A child
// that ends otherwise (a TP worker or a daemon a test kills, a worker leaving by _exit) leaves its file behind:
// the tests remove those of processes that are gone (openmp_registrations_test.cpp runs this after every
// test process).
#include <sys/types.h>

#include <charconv>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "support/process.hpp"

namespace neuron::test_support {

inline constexpr std::string_view kOpenmpRegistrationPrefix = "__KMP_REGISTERED_LIB_";

// Removes the registrations in `dir` whose process is gone (a running one keeps its file, and so does a zombie
// not yet reaped); returns how many were removed.
inline int forget_dead_openmp_registrations(const std::filesystem::path& dir = "/dev/shm") {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> stale;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(kOpenmpRegistrationPrefix)) continue;
    const char* first = name.data() + kOpenmpRegistrationPrefix.size();
    pid_t pid = 0;
    const auto [end_of_pid, err] = std::from_chars(first, name.data() + name.size(), pid);
    if (err != std::errc{} || end_of_pid == first || pid <= 0 || *end_of_pid != '_') continue;
    if (gone(pid)) stale.push_back(it->path());
  }
  int removed = 0;
  for (const fs::path& p : stale) removed += fs::remove(p, ec) ? 1 : 0;
  return removed;
}

}  // namespace neuron::test_support
