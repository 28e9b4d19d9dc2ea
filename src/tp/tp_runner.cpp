#include "tp/tp_runner.hpp"

#include <set>

#include <spdlog/spdlog.h>

#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "model/shard.hpp"
#include "util/error.hpp"

namespace neuron::tp {

namespace {

double ms(std::chrono::nanoseconds ns) { return std::chrono::duration<double, std::milli>(ns).count(); }

// NCCL needs a distinct GPU per rank; anything else meets over Gloo in host memory.
dist::CommKind comm_kind_for(const std::vector<backend::Device>& devices) {
  std::set<int> gpus;
  for (const auto& d : devices) {
    if (!d.is_cuda()) return dist::CommKind::gloo;
    gpus.insert(d.index);
  }
  return gpus.size() == devices.size() ? dist::CommKind::nccl : dist::CommKind::gloo;
}

}  // namespace

std::unique_ptr<TpRunner> TpRunner::load(const model::ModelConfig& cfg,
                                         const std::vector<std::filesystem::path>& checkpoint_files,
                                         const TpRunnerOptions& options) {
  // Refuse an impossible split before any process starts.
  const model::ShardPlan plan0 = model::ShardPlan::make(cfg, 0, options.world, options.expert_parallel);
  if (options.world < 2) fail(errc::bad_tensor_parallel, "TpRunner needs tensor_parallel >= 2");

  PoolOptions po;
  po.world = options.world;
  po.devices = options.devices.empty() ? std::vector<backend::Device>(options.world) : options.devices;
  po.worker_binary = options.worker_binary;
  po.step_timeout = options.step_timeout;
  po.load_timeout = options.load_timeout;
  po.worker_args = options.worker_args;

  std::unique_ptr<TpRunner> runner(new TpRunner());
  runner->model_id_ = options.model_id;
  runner->pool_ = std::make_unique<WorkerPool>(po);
  WorkerPool& pool = *runner->pool_;
  runner->comm_ = std::make_shared<dist::TimedCommunicator>(pool.init_communicator(comm_kind_for(po.devices)));
  pool.sanity_check();

  LoadDenseShardRequest req;
  req.model_id = options.model_id;
  req.config_json = cfg.to_json();
  req.expert_parallel = options.expert_parallel;
  for (const auto& f : checkpoint_files) req.safetensors_paths.push_back(std::filesystem::absolute(f).string());
  // Resolved once here and sent to every rank, so all ranks build the same pool.
  backend::RunnerOptions ro;
  ro.max_context = model::resolve_max_context(cfg, options.max_context, backend::default_max_context(po.devices[0]));
  ro.kv_block_size = options.kv_block_size == 0 ? backend::kDefaultKvBlockSize : options.kv_block_size;
  ro.kv_blocks = options.kv_blocks == 0 && ro.kv_block_size > 0
                     ? (ro.max_context + ro.kv_block_size - 1) / ro.kv_block_size
                     : options.kv_blocks;  // a negative value is the runners' to refuse
  req.max_context = ro.max_context;
  req.kv_block_size = ro.kv_block_size;
  req.kv_blocks = ro.kv_blocks;
  ro.quantize = options.quantize;
  if (cfg.linear.hybrid()) {  // resolved here too: every rank the same state pools
    if (options.state_slots < 0)
      fail(errc::invalid_argument, "state_slots " + std::to_string(options.state_slots) + " is negative");
    ro.state_slots = options.state_slots > 0 ? options.state_slots : backend::kDefaultStateSlots;
    ro.state_snapshots = backend::resolve_state_snapshots(options.state_snapshots, ro.state_slots);
    req.state_slots = ro.state_slots;
    req.state_snapshots = ro.state_snapshots;
  }
  if (options.quantize) req.quant = std::string(quant::ggml_type_name(*options.quantize));
  pool.round(req, "load_dense_shard_ok",
             [&] {
               const auto checkpoint = io::Checkpoint::open_files(checkpoint_files);
               runner->own_ = backend::make_runner(cfg, &checkpoint, plan0, pool.device_of(0), runner->comm_, ro);
             },
             pool.load_timeout());
  spdlog::info("tp: \"{}\" loaded on {} ranks over {}", options.model_id, options.world, runner->comm_->backend_name());
  return runner;
}

TpRunner::~TpRunner() {
  // Workers free their shards when they exit; the leader's goes with own_.
  if (pool_) pool_->shutdown();
}

void TpRunner::run_step(const backend::Batch& batch, std::span<float> logits, std::span<std::int32_t> picks,
                        std::span<float> hidden) {
  const auto comm0 = comm_->busy_ns();
  pool_->round(StepRequest{.model_id = model_id_, .batch = batch}, "step_ok", [&] { own_->step(batch, logits, picks, hidden); },
               pool_->step_timeout());
  const RoundTiming& t = pool_->last_round();
  stats_.steps += 1;
  stats_.send_ms += ms(t.send);
  stats_.own_forward_ms += ms(t.own);
  stats_.own_comm_ms += ms(std::chrono::nanoseconds(comm_->busy_ns() - comm0));
  stats_.wait_ms += ms(t.wait);
  stats_.worker_forward_ms += t.worker_forward_us_max / 1000.0;
  stats_.worker_comm_ms += t.worker_comm_us_max / 1000.0;
}

void TpRunner::run_save_state(std::int32_t slot, std::int32_t snapshot) {
  pool_->round(CopyStateRequest{.model_id = model_id_, .save = true, .slot = slot, .snapshot = snapshot},
               "copy_state_ok", [&] { own_->save_state(slot, snapshot); }, pool_->step_timeout());
}

void TpRunner::run_restore_state(std::int32_t snapshot, std::int32_t slot) {
  pool_->round(CopyStateRequest{.model_id = model_id_, .save = false, .slot = slot, .snapshot = snapshot},
               "copy_state_ok", [&] { own_->restore_state(snapshot, slot); }, pool_->step_timeout());
}

}  // namespace neuron::tp
