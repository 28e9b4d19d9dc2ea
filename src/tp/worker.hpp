#pragma once
// The TP worker: rank R of N in its own process, serving the leader's
// requests (messages.hpp) one line at a time. It holds the rank's
// communicator and its loaded shards keyed by model id. A request that fails
// is answered with error{kind, message} and the worker keeps serving;
// `shutdown` is answered with `bye` and ends the loop, as does EOF on input
// (the leader is gone).
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "backend/device.hpp"
#include "backend/model_runner.hpp"
#include "dist/timed_communicator.hpp"
#include "tp/messages.hpp"

namespace neuron::tp {

// Test hook: makes a worker misbehave at its (after+1)-th step, so
// the leader's failure handling can be tested against a real process.
//   garbage: runs the step (staying in lockstep), then answers a non-JSON line
//   hang:    stops answering before the step (as if SIGSTOPped)
//   exit:    exits before the step without answering (as if killed)
// Parsed from `neuron worker --fault kind-after=K`; never used in production.
struct FaultPlan {
  enum class Kind { none, garbage, hang, exit };
  Kind kind = Kind::none;
  int after = 0;
  static FaultPlan parse(const std::string& text);  // "garbage-after=3"; throws invalid_argument
};

struct WorkerOptions {
  int rank = 1;
  int world = 2;
  backend::Device device;
  std::chrono::milliseconds collective_timeout{30000};  // unless init carries timeout_ms
  FaultPlan fault;
};

class Worker {
 public:
  explicit Worker(WorkerOptions options);

  // Handles one request; failures become ErrorResponse. Never throws.
  Response handle(const Request& request) noexcept;
  bool done() const noexcept { return done_; }
  // The fault hook asked for the answer just produced to be replaced by garbage.
  bool take_garble() noexcept { return std::exchange(garble_next_answer_, false); }

 private:
  Response dispatch(const Request& request);

  WorkerOptions options_;
  std::shared_ptr<dist::TimedCommunicator> comm_;                  // after init
  std::map<std::string, std::unique_ptr<backend::ModelRunner>> shards_;  // by model id
  int steps_ = 0;
  bool done_ = false;
  bool garble_next_answer_ = false;
};

// Serves requests from `in_fd` until shutdown or EOF, one response line per
// request line on `out_fd` (malformed lines get bad_request, over-long lines
// are skipped and answered bad_request). Returns the process exit code.
int serve(Worker& worker, int in_fd, int out_fd);

}  // namespace neuron::tp
