// Per-step overhead of tensor parallelism on the CPU (bench/TP.md).
//
//   tp_bench <model_dir> <neuron_binary> [steps=200] [sizes=1,2,4]
//
// For each TP size: loads the model (engine::open_runner), prefills an
// 8-token prompt, then times `steps` greedy decode steps and prints steps/s
// with the leader's breakdown from TpRunner::stats(): sending the request,
// rank 0's forward (and the part inside collectives), and waiting for the
// workers' replies after it. Then the bare costs: an RPC round trip (ping)
// and an RPC round with one 1-float all-reduce (the sanity check).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dist/factory.hpp"

#include "backend/single_sequence.hpp"
#include "engine/model_loader.hpp"
#include "tp/tp_runner.hpp"
#include "tp/worker_pool.hpp"

using namespace neuron;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

void bench_decode(const std::string& dir, const std::string& binary, int tp, int steps) {
  engine::LoadOptions o;
  o.model_dir = dir;
  o.model_id = "bench";
  o.tensor_parallel = tp;
  o.max_context = std::max(64, steps + 16);
  o.worker_binary = binary;
  auto runner = engine::open_runner(o);
  std::vector<float> logits(static_cast<std::size_t>(runner->config().vocab_size));
  std::vector<std::int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  backend::SingleSequence seq(*runner);
  seq.forward(prompt, 0, logits);
  std::int32_t offset = 8;
  auto step = [&] {
    const std::int32_t next = static_cast<std::int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    const std::int32_t one[] = {next};
    seq.forward(one, offset++, logits);
  };
  for (int i = 0; i < 8; ++i) step();  // warm-up
  auto* tpr = dynamic_cast<tp::TpRunner*>(runner.get());
  const tp::TpStepStats before = tpr ? tpr->stats() : tp::TpStepStats{};
  const auto t0 = Clock::now();
  for (int i = 0; i < steps; ++i) step();
  const double total = ms_since(t0);
  std::printf("tp=%d steps=%d  %.1f steps/s  %.3f ms/step", tp, steps, steps * 1000.0 / total, total / steps);
  if (tpr) {
    const tp::TpStepStats s = tpr->stats();
    const double n = static_cast<double>(s.steps - before.steps);
    std::printf("  | send %.3f  rank0 forward %.3f (in collectives %.3f)  wait replies %.3f  | slowest worker: forward %.3f (in collectives %.3f) ms/step",
                (s.send_ms - before.send_ms) / n, (s.own_forward_ms - before.own_forward_ms) / n,
                (s.own_comm_ms - before.own_comm_ms) / n, (s.wait_ms - before.wait_ms) / n,
                (s.worker_forward_ms - before.worker_forward_ms) / n, (s.worker_comm_ms - before.worker_comm_ms) / n);
  }
  std::printf("\n");
}

void bench_rpc(const std::string& binary, int tp, int rounds) {
  tp::PoolOptions po;
  po.world = tp;
  po.worker_binary = binary;
  tp::WorkerPool pool(po);
  pool.init_communicator(dist::CommKind::gloo);
  for (int i = 0; i < 20; ++i) pool.ping();
  auto t0 = Clock::now();
  for (int i = 0; i < rounds; ++i) pool.ping();
  const double ping = ms_since(t0) / rounds;
  for (int i = 0; i < 20; ++i) pool.sanity_check();
  t0 = Clock::now();
  for (int i = 0; i < rounds; ++i) pool.sanity_check();
  const double sanity = ms_since(t0) / rounds;
  std::printf("tp=%d  ping round %.3f ms  ping+all_reduce(1 float) round %.3f ms\n", tp, ping, sanity);
}

// Gloo all-reduce between threads of this process: the collective alone, no RPC, no model.
void bench_gloo(int tp, std::size_t floats, int rounds) {
  const std::string id = dist::new_comm_id(dist::CommKind::gloo);
  std::vector<std::thread> ranks;
  double per_op_ms = 0;
  for (int r = 0; r < tp; ++r)
    ranks.emplace_back([&, r] {
      auto comm = dist::make_communicator(id, r, tp, {});
      std::vector<float> buf(floats, 1.0f);
      for (int i = 0; i < 50; ++i) comm->all_reduce_sum(buf.data(), buf.size(), DType::f32);
      const auto t0 = Clock::now();
      for (int i = 0; i < rounds; ++i) comm->all_reduce_sum(buf.data(), buf.size(), DType::f32);
      if (r == 0) per_op_ms = ms_since(t0) / rounds;
    });
  for (auto& t : ranks) t.join();
  std::printf("tp=%d  gloo all_reduce of %zu floats between threads: %.3f ms\n", tp, floats, per_op_ms);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s <model_dir> <neuron_binary> [steps=200] [sizes=1,2,4]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1], binary = argv[2];
  const int steps = argc > 3 ? std::atoi(argv[3]) : 200;
  std::vector<int> sizes;
  std::stringstream ss(argc > 4 ? argv[4] : "1,2,4");
  for (std::string item; std::getline(ss, item, ',');) sizes.push_back(std::atoi(item.c_str()));
  try {
    for (int tp : sizes) bench_decode(dir, binary, tp, steps);
    for (int tp : sizes)
      if (tp > 1) bench_rpc(binary, tp, 500);
    for (int tp : sizes)
      if (tp > 1) {
        bench_gloo(tp, 1, 500);
        bench_gloo(tp, 1024, 500);
      }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tp_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
