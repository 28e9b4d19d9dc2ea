// `neuron tp-smoke --tp-size N --device cpu|cuda`: the TP plumbing without a
// model. Spawns N-1 workers, pings them, joins the communicator (Gloo on the
// CPU or on one shared GPU, NCCL when every rank has its own GPU), all-reduces
// 1 on every rank, shuts down. Prints `status=ok tp_size=N observed_sum=N`.
#include <cstdio>

#include "backend/device.hpp"
#include "cli/command.hpp"
#include "dist/factory.hpp"
#include "tp/worker_pool.hpp"
#include "util/error.hpp"

namespace {

using namespace neuron;

cli::Run setup_tp_smoke(CLI::App& sub) {
  struct Args {
    int tp_size = 2;
    std::string device = "cpu";
    long long step_timeout_ms = 30000;
    std::string worker_binary;
  };
  auto args = std::make_shared<Args>();
  sub.add_option("--tp-size", args->tp_size, "ranks, leader included (2..16)")->required();
  sub.add_option("--device", args->device, "cpu or cuda")->capture_default_str();
  sub.add_option("--step-timeout-ms", args->step_timeout_ms, "deadline for every reply")->capture_default_str();
  sub.add_option("--worker-binary", args->worker_binary, "neuron executable for the workers (default: this one)");

  return [args]() -> int {
    if (args->tp_size < 2 || args->tp_size > 16)
      fail(errc::bad_tensor_parallel, "--tp-size must be in [2, 16], got " + std::to_string(args->tp_size));
    const backend::Device device = backend::Device::parse(args->device);
    tp::PoolOptions options;
    options.world = args->tp_size;
    options.worker_binary = args->worker_binary;
    options.step_timeout = std::chrono::milliseconds(args->step_timeout_ms);
    dist::CommKind kind = dist::CommKind::gloo;
    for (int r = 0; r < args->tp_size; ++r) options.devices.push_back(device);
    if (device.is_cuda()) {
      const int gpus = backend::cuda_device_count();
      if (gpus < 1) fail(errc::cuda, "--device cuda but no CUDA device is visible");
      if (gpus >= args->tp_size) {
        // One GPU per rank: NCCL. Otherwise every rank shares the one given, host-staged through Gloo.
        kind = dist::CommKind::nccl;
        for (int r = 0; r < args->tp_size; ++r) options.devices[r] = backend::Device{backend::Device::Kind::cuda, r};
      }
    }
    tp::WorkerPool pool(options);
    pool.init_communicator(kind);
    const float observed = pool.sanity_check();
    pool.shutdown();
    std::printf("status=ok tp_size=%d observed_sum=%g backend=%s\n", args->tp_size, observed,
                kind == dist::CommKind::nccl ? "nccl" : "gloo");
    return 0;
  };
}

// Registered by hand: NEURON_COMMAND's name is an identifier and cannot hold the dash.
const bool tp_smoke_registered = cli::register_command(
    {"tp-smoke", "Check tensor-parallel plumbing: spawn, ping, init, all-reduce, shutdown", setup_tp_smoke});

}  // namespace
