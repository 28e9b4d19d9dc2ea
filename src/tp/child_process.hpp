#pragma once
// A child process with its stdin and stdout on pipes to this process: how
// the leader runs `neuron worker`.
//
// Workers must not outlive the leader. The child asks the kernel for SIGKILL
// when its parent dies (die_with_parent: PR_SET_PDEATHSIG, first thing in
// `neuron worker`) and sees EOF on stdin when the leader's end closes.
// PDEATHSIG fires when the *thread* that started the child exits, not the
// process, so every child is started on one process-lifetime spawner thread:
// a worker spawned from a short-lived loader thread survives it. Children
// start by posix_spawn, which runs none of this process's code in the child
// (a fork of a multi-threaded process can deadlock before its exec).
// Every descriptor is close-on-exec, so a worker never holds another
// worker's pipe open (which would hide that worker's EOF).
#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "tp/unique_fd.hpp"

namespace neuron::tp {

// In a process started by ChildProcess::spawn (a no-op otherwise): asks for
// SIGKILL when the starting thread dies, and exits at once (126) when the
// leader is already gone. Call it first thing.
void die_with_parent();

class ChildProcess {
 public:
  // Starts argv[0] with arguments argv[1..]; stderr is inherited. Throws Error{io}.
  static ChildProcess spawn(const std::vector<std::string>& argv);

  ChildProcess() = default;
  ChildProcess(ChildProcess&&) noexcept;
  ChildProcess& operator=(ChildProcess&&) noexcept;
  ~ChildProcess();  // kills and reaps a child still running

  pid_t pid() const noexcept { return pid_; }
  int stdin_fd() const noexcept { return stdin_.get(); }    // write end, non-blocking
  int stdout_fd() const noexcept { return stdout_.get(); }  // read end
  // Readable once the child has exited (polling it reaps nothing); -1 where
  // the kernel or a seccomp filter refuses pidfd_open.
  int pidfd() const noexcept { return pidfd_.get(); }

  // True while the child has not exited (reaps it if it has).
  bool running() noexcept;
  // Stopped by a signal (SIGSTOP, SIGTSTP) or a tracer, per /proc/<pid>/stat.
  bool stopped() const noexcept;
  // Closes our end of its stdin (the child sees EOF).
  void close_stdin() noexcept { stdin_.reset(); }
  // Waits up to `grace` for the child to exit by itself, then SIGKILLs it;
  // always reaps. Idempotent. Returns the wait status description ("exit 0",
  // "killed by signal 9").
  std::string stop(std::chrono::milliseconds grace) noexcept;
  // SIGKILL now and reap.
  void kill() noexcept { stop(std::chrono::milliseconds{0}); }
  const std::string& exit_description() const noexcept { return exit_; }

 private:
  pid_t pid_ = -1;
  bool reaped_ = false;
  std::string exit_;
  UniqueFd stdin_;
  UniqueFd stdout_;
  UniqueFd pidfd_;
};

}  // namespace neuron::tp
