#pragma once
// What the tests read of a child process from outside: whether it is gone,
// and its resident memory.
#include <signal.h>
#include <sys/types.h>

#include <cerrno>
#include <fstream>
#include <string>

namespace neuron::test_support {

// True when `pid` is neither running nor a zombie waiting for us.
inline bool gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

// The process's resident set (VmRSS) in KiB, -1 when it cannot be read.
inline long rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  return -1;
}

}  // namespace neuron::test_support
