#pragma once
// The leader's side of a tensor-parallel group: N-1 `neuron worker`
// processes (ranks 1..N-1) on pipes, driven in lockstep with the leader's
// own rank-0 work.
//
// Every operation is one *round*: send the request to every worker, run the
// leader's own part, then read one reply from every worker, even when the own
// part failed, so no stale reply is ever left on a pipe. A round has one
// deadline, `timeout` after it starts, that bounds all of it: the own part
// too, since a ChildWatcher aborts the leader's communicator when the
// deadline passes (the leader's collective returns with an error instead of
// waiting out its own timeout).
//
// The same watcher sees a worker exit the moment it happens (its pidfd), in
// any phase: it aborts the communicator at once, and the round stops waiting
// and fails naming that worker, "rank R (pid P) exited: killed by signal 9",
// well within a second. A worker that misses the deadline is named with the
// deadline; one that is stopped (SIGSTOP) is named as stopped, and a live one
// merely blocked in a collective with it is not blamed.
//
// A worker that dies, misses the deadline or answers garbage fails the
// round with Error{worker_failed, "rank R (pid P) ..."}: the pool aborts the
// leader's communicator, SIGKILLs and reaps every worker, and stays failed
// (every later call throws at once). An error a rank *reports* fails the
// round with that rank's error kind; it fails the pool too when the kind
// says the group's state is unknown (a collective broke).
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backend/device.hpp"
#include "dist/communicator.hpp"
#include "dist/factory.hpp"
#include "tp/child_process.hpp"
#include "tp/child_watcher.hpp"
#include "tp/line_channel.hpp"
#include "tp/messages.hpp"
#include "util/error.hpp"

namespace neuron::tp {

struct PoolOptions {
  int world = 2;                              // ranks including the leader
  std::vector<backend::Device> devices;       // per rank (size world); empty: every rank on the CPU
  std::filesystem::path worker_binary;        // the neuron executable; empty: /proc/self/exe
  std::chrono::milliseconds step_timeout{30000};  // a step, ping or init round, own part included; bounds collectives too
  std::chrono::milliseconds load_timeout{600000};  // a load_dense_shard round
  std::chrono::milliseconds shutdown_grace{2000};  // after which a worker that has not exited is SIGKILLed
  // Extra arguments for rank r's command line (index r; test hooks such as --fault).
  std::vector<std::vector<std::string>> worker_args;
};

// Where a round's time went on the leader (bench/TP.md).
struct RoundTiming {
  std::chrono::nanoseconds send{0};      // writing the request to every worker
  std::chrono::nanoseconds own{0};       // the leader's own part
  std::chrono::nanoseconds wait{0};      // after the own part, until every reply was read
  std::int64_t worker_forward_us_max = 0;  // step: slowest worker's forward
  std::int64_t worker_comm_us_max = 0;     // step: its time inside collectives
};

class WorkerPool {
 public:
  // Spawns ranks 1..world-1 and pings each (checking its rank and world size).
  // Throws Error{worker_failed} (a worker did not come up), Error{io}.
  explicit WorkerPool(PoolOptions options);
  ~WorkerPool();  // shutdown()
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int world() const noexcept { return options_.world; }
  const backend::Device& device_of(int rank) const { return devices_.at(rank); }
  std::vector<pid_t> worker_pids() const;

  std::vector<PongResponse> ping();
  // Makes a comm_id of `kind`, sends init to every worker, joins as rank 0
  // (blocking until all ranks meet), reads the init_oks. The pool keeps a
  // share of the communicator to abort it on failure.
  std::shared_ptr<dist::Communicator> init_communicator(dist::CommKind kind);
  // All-reduces 1 on every rank; throws Error{comm} unless every rank observed world().
  float sanity_check();

  // One round of `request` with `own` as rank 0's part, all of it within
  // `timeout`; returns the workers' replies (index r-1 for rank r), each
  // already checked to be `expected_op`.
  std::vector<Response> round(const Request& request, std::string_view expected_op, const std::function<void()>& own,
                              std::chrono::milliseconds timeout);
  std::chrono::milliseconds step_timeout() const noexcept { return options_.step_timeout; }
  std::chrono::milliseconds load_timeout() const noexcept { return options_.load_timeout; }
  const RoundTiming& last_round() const noexcept { return last_round_; }

  // Asks every worker to exit (shutdown -> bye), then reaps them, SIGKILLing
  // any still running after the grace period. Idempotent; never throws.
  void shutdown() noexcept;

  bool failed() const noexcept { return !failure_.empty(); }
  const std::string& failure() const noexcept { return failure_; }

 private:
  struct Slot {
    int rank = 0;
    ChildProcess process;
    std::unique_ptr<LineReader> reader;  // over process.stdout_fd()
  };
  // Stop watching, abort the communicator, kill and reap every worker, remember why; returns the error to throw.
  Error fail_pool(const std::string& why) noexcept;
  void check_usable() const;
  void abort_communicator() noexcept;
  // "rank R (pid P) exited: killed by signal 9" (waits briefly for the exit status of a closed pipe's writer).
  std::string exit_story(Slot& w);

  PoolOptions options_;
  std::vector<backend::Device> devices_;  // per rank
  std::vector<Slot> workers_;             // ranks 1..world-1
  std::mutex comm_mu_;                    // comm_ is aborted from the watcher's thread
  std::shared_ptr<dist::Communicator> comm_;
  std::unique_ptr<ChildWatcher> watcher_;  // over workers_; destroyed before any worker is killed or reaped
  std::string failure_;
  bool shut_down_ = false;
  RoundTiming last_round_;
};

// Error kinds after which the ranks' state is unknown (a collective may have
// run on some ranks and not others): the group cannot be trusted again.
bool poisons_group(std::string_view error_kind) noexcept;

}  // namespace neuron::tp
