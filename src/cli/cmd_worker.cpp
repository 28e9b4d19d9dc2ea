// `neuron worker --rank R --tp-size N --device cpu|cuda:D`: one TP rank,
// started by a leader's WorkerPool, speaking the line protocol of
// tp/messages.hpp on stdin/stdout. Logs go to stderr only: stdout is the
// protocol, so the process moves it to a private descriptor at start and
// points fd 1 at stderr, where a stray printf from any library lands harmlessly.
#include <fcntl.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "backend/device.hpp"
#include "cli/command.hpp"
#include "tp/child_process.hpp"
#include "tp/worker.hpp"
#include "util/error.hpp"

namespace {

using namespace neuron;

cli::Run setup_worker(CLI::App& sub) {
  struct Args {
    int rank = 1;
    int tp_size = 2;
    std::string device = "cpu";
    long long step_timeout_ms = 30000;
    std::string fault;
  };
  auto args = std::make_shared<Args>();
  sub.add_option("--rank", args->rank, "this worker's rank (1..tp-size-1; the leader is 0)")->required();
  sub.add_option("--tp-size", args->tp_size, "ranks in the group, leader included")->required();
  sub.add_option("--device", args->device, "cpu or cuda:D")->capture_default_str();
  sub.add_option("--step-timeout-ms", args->step_timeout_ms, "bound on every collective (unless init says otherwise)")
      ->capture_default_str();
  // Test hook only (see tp::FaultPlan): make this worker misbehave mid-generation.
  sub.add_option("--fault", args->fault, "TEST HOOK: garbage|hang|exit-after=K")->group("");

  return [args]() -> int {
    tp::die_with_parent();
    // The protocol's stdout, kept away from everything that writes to fd 1.
    const int protocol_out = ::fcntl(1, F_DUPFD_CLOEXEC, 3);
    if (protocol_out < 0 || ::dup2(2, 1) < 0) fail(errc::io, "worker: cannot set up its protocol descriptor");
    std::signal(SIGPIPE, SIG_IGN);
    auto logger = std::make_shared<spdlog::logger>(
        "rank" + std::to_string(args->rank), std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
    spdlog::set_default_logger(logger);

    if (args->tp_size < 2 || args->rank < 1 || args->rank >= args->tp_size)
      fail(errc::invalid_argument, "worker: --rank must be in [1, --tp-size) and --tp-size at least 2");
    if (args->step_timeout_ms < 1) fail(errc::invalid_argument, "worker: --step-timeout-ms must be positive");
    tp::WorkerOptions options;
    options.rank = args->rank;
    options.world = args->tp_size;
    options.device = backend::Device::parse(args->device);
    options.collective_timeout = std::chrono::milliseconds(args->step_timeout_ms);
    options.fault = tp::FaultPlan::parse(args->fault);
    tp::Worker worker(options);
    spdlog::debug("worker rank {} of {} on {} serving", options.rank, options.world, options.device.str());
    const int rc = tp::serve(worker, 0, protocol_out);
    ::close(protocol_out);
    return rc;
  };
}

NEURON_COMMAND(worker, "Serve as one rank of a tensor-parallel group (started by the leader)", setup_worker);

}  // namespace
