#pragma once
// The leader's side of a tensor-parallel group: N-1 `neuron worker`
// processes (ranks 1..N-1) on pipes, driven in lockstep with the leader's
// own rank-0 work.
//
// Every operation is one *round*: send the request to every worker, run the
// leader's own part, then read exactly one reply from every worker, even when
// the own part failed, so no stale reply is ever left on a pipe. Reads wait
// with a deadline measured from the end of the leader's own part (the ranks
// run in lockstep, so a healthy worker answers right after).
//
// A worker that dies, misses the deadline or answers garbage fails the
// round with Error{worker_failed, "rank R: ..."}: the pool aborts the
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
#include <optional>
#include <string>
#include <vector>

#include "backend/device.hpp"
#include "dist/communicator.hpp"
#include "dist/factory.hpp"
#include "tp/child_process.hpp"
#include "tp/line_channel.hpp"
#include "tp/messages.hpp"
#include "util/error.hpp"

namespace neuron::tp {

struct PoolOptions {
  int world = 2;                              // ranks including the leader
  std::vector<backend::Device> devices;       // per rank (size world); empty: every rank on the CPU
  std::filesystem::path worker_binary;        // the neuron executable; empty: /proc/self/exe
  std::chrono::milliseconds step_timeout{30000};  // replies to steps, pings, init; bounds collectives too
  std::chrono::milliseconds load_timeout{600000};  // replies to load_dense_shard
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

  // One round of `request` with `own` as rank 0's part; returns the workers'
  // replies (index r-1 for rank r), each already checked to be `expected_op`.
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
  // Abort the communicator, kill and reap every worker, remember why; returns the error to throw.
  Error fail_pool(const std::string& why) noexcept;
  void check_usable() const;

  PoolOptions options_;
  std::vector<backend::Device> devices_;  // per rank
  std::vector<Slot> workers_;             // ranks 1..world-1
  std::shared_ptr<dist::Communicator> comm_;
  std::string failure_;
  bool shut_down_ = false;
  RoundTiming last_round_;
};

// Error kinds after which the ranks' state is unknown (a collective may have
// run on some ranks and not others): the group cannot be trusted again.
bool poisons_group(std::string_view error_kind) noexcept;

}  // namespace neuron::tp
