#pragma once
// A thread that watches the leader's worker processes while the leader is
// busy elsewhere: blocked in its own part of a step (a collective waiting on
// a peer that died never returns by itself) or reading another worker's reply.
//
// It wakes on a child's pidfd, which becomes readable the moment the child
// exits (without pidfds, on the child's stdout hanging up), and on an armed
// deadline. Either way it calls `on_trouble` (the pool aborts its
// communicator, so the leader's collective returns with an error at once);
// an exit also makes event_fd() readable for good, so a poll() over the
// reply pipes wakes too. It never reaps and never reads: the ChildProcess
// owner does, and must destroy the watcher before it kills, reaps or
// destroys any watched child (the watcher polls their descriptors).
#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "tp/unique_fd.hpp"

namespace neuron::tp {

class ChildWatcher {
 public:
  using Clock = std::chrono::steady_clock;
  struct Child {
    pid_t pid = -1;
    int pidfd = -1;      // -1: watch stdout_fd for a hang-up instead
    int stdout_fd = -1;  // polled for POLLHUP only; never read here
  };

  // Starts the thread. `on_trouble` runs on it (after a child exits, or an
  // armed deadline passes) and must not block for long. Throws Error{io}.
  ChildWatcher(std::vector<Child> children, std::function<void()> on_trouble);
  ~ChildWatcher();  // stops and joins the thread
  ChildWatcher(const ChildWatcher&) = delete;
  ChildWatcher& operator=(const ChildWatcher&) = delete;

  // Until disarm() or the next arm(): once `deadline` passes, call on_trouble.
  void arm(Clock::time_point deadline);
  void disarm();
  // The armed deadline passed since the last arm().
  bool deadline_passed() const;
  // The child (index into the constructor's list) seen to exit first, if any.
  std::optional<std::size_t> first_exited() const;
  // Readable from the first exit on (never drained).
  int event_fd() const noexcept { return exited_event_.get(); }

 private:
  void loop();
  void wake() noexcept;

  std::vector<Child> children_;
  std::function<void()> on_trouble_;
  UniqueFd wake_;           // eventfd: arm/disarm/stop
  UniqueFd exited_event_;   // eventfd: set once a child exited
  mutable std::mutex mu_;
  bool stop_ = false;
  std::optional<Clock::time_point> deadline_;
  bool deadline_passed_ = false;
  std::optional<std::size_t> first_exited_;
  std::thread thread_;  // last: starts after the members it uses exist
};

}  // namespace neuron::tp
