#include "engine/model_loader.hpp"

#include <algorithm>
#include <limits>

#include "backend/cpu/activations.hpp"
#include "dist/communicator.hpp"
#include "engine/model_task.hpp"
#include "io/gguf.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "model/shard.hpp"
#include "model/shard_weights.hpp"
#include "quant/quantize.hpp"
#include "tp/tp_runner.hpp"
#include "util/error.hpp"
#include "util/meminfo.hpp"

namespace neuron::engine {

std::vector<backend::Device> rank_devices(const LoadOptions& options) {
  const int n = options.tensor_parallel;
  std::vector<backend::Device> out(n, options.device);
  if (options.devices.empty()) return out;
  if (!options.device.is_cuda())
    fail(errc::invalid_argument, "devices lists CUDA ordinals but the device is " + options.device.str());
  if (options.devices.size() != 1 && static_cast<int>(options.devices.size()) != n)
    fail(errc::invalid_argument, "devices has " + std::to_string(options.devices.size()) +
                                     " entries; give one per rank (" + std::to_string(n) + ") or one shared");
  for (int r = 0; r < n; ++r) {
    const int ordinal = options.devices.size() == 1 ? options.devices[0] : options.devices[r];
    if (ordinal < 0) fail(errc::invalid_argument, "devices: negative CUDA ordinal " + std::to_string(ordinal));
    out[r] = backend::Device{backend::Device::Kind::cuda, ordinal};
  }
  return out;
}

namespace {

// The bytes a rank will hold its weights in on `device`, an upper bound for
// the budgets made before loading: bf16, less what quantize-at-load saves on
// the projections; for a GGUF at most the file (its tensors stay packed) plus,
// on CUDA, the embedding table dequantized to bf16.
std::uint64_t rank_weight_bytes(const model::ModelConfig& cfg, const model::ShardPlan& shard,
                                const backend::Device& device, const LoadOptions& options) {
  const std::uint64_t bf16 = static_cast<std::uint64_t>(model::weight_elements(cfg, shard)) * 2;
  if (options.quantize) {
    const auto projections = static_cast<std::uint64_t>(model::projection_elements(cfg, shard));
    const quant::GgmlType t = *options.quantize;
    // Bytes per 256 elements (FP8's row scales are noise here).
    const std::uint64_t per_256 = quant::row_bytes(t, 256);
    return bf16 - 2 * projections + (projections * per_256 + 255) / 256;
  }
  if (io::is_gguf_path(options.model_dir)) {
    std::error_code ec;
    const auto file = std::filesystem::file_size(options.model_dir, ec);
    if (ec) return bf16;
    const std::uint64_t table = device.is_cuda() ? static_cast<std::uint64_t>(cfg.vocab_size * cfg.hidden_size) * 2 : 0;
    return std::min(bf16, static_cast<std::uint64_t>(file) + table);
  }
  return bf16;
}

}  // namespace

StateSlots plan_state_slots(std::uint64_t per_slot, std::uint64_t room, std::optional<std::int32_t> requested) {
  NEURON_ASSERT(per_slot > 0);
  StateSlots out{backend::kDefaultStateSlots, 0};
  for (std::int32_t slots = kCudaStateSlots; slots >= backend::kDefaultStateSlots; slots /= 2)
    if (per_slot * static_cast<std::uint64_t>(slots) <= room / 2) {
      out.slots = slots;
      break;
    }
  if (requested) {
    out.snapshots = backend::resolve_state_snapshots(requested, out.slots);  // refuses a negative count
    return out;
  }
  const std::uint64_t taken = per_slot * static_cast<std::uint64_t>(out.slots);
  const std::uint64_t fit = room > taken ? (room - taken) / 4 / per_slot : 0;
  out.snapshots = static_cast<std::int32_t>(
      std::min<std::uint64_t>(fit, static_cast<std::uint64_t>(backend::resolve_state_snapshots(std::nullopt, out.slots))));
  return out;
}

LoadPlan plan_load(const LoadOptions& options, const model::ModelConfig& cfg) {
  const int n = options.tensor_parallel;
  if (n < 1 || n > kMaxTensorParallel)
    fail(errc::bad_tensor_parallel,
         "tensor_parallel must be in [1, " + std::to_string(kMaxTensorParallel) + "], got " + std::to_string(n));
  LoadPlan plan;
  plan.devices = rank_devices(options);
  backend::RunnerOptions& ro = plan.runner;
  ro.kv_block_size = options.kv_block_size > 0 ? options.kv_block_size : backend::kDefaultKvBlockSize;
  ro.state_slots = cfg.linear.hybrid() ? backend::kDefaultStateSlots : 0;
  ro.state_snapshots = cfg.linear.hybrid() ? backend::resolve_state_snapshots(options.state_snapshots, ro.state_slots) : 0;
  ro.quantize = options.quantize;
  // An embedder or reranker on one rank, or quantized weights: its CPU products (and so its KV pool's
  // element, planned below) take their own level (backend/cpu/activations.hpp's model_activations).
  ro.encode_only = n == 1 && resolve_task(options.model_dir, options.task, options.pooling, options.model_id).task !=
                                 ModelTask::generate;
  const backend::cpu::ActivationsScope level(backend::cpu::model_activations(
      backend::cpu::cpu_activations(), ro.encode_only,
      backend::cpu::quantized_weights(options.model_dir, options.quantize.has_value())));
  // Every rank's plan, so a bad split fails here, before a process starts.
  std::vector<model::ShardPlan> shards;
  std::vector<backend::KvBudget> budgets;  // each rank's, with its weights as it will hold them
  for (int r = 0; r < n; ++r) {
    shards.push_back(model::ShardPlan::make(cfg, r, n, options.expert_parallel));
    const backend::Device& device = plan.devices[static_cast<std::size_t>(r)];
    budgets.push_back(options.kv_budget);
    budgets.back().weight_bytes = rank_weight_bytes(cfg, shards.back(), device, options);
    budgets.back().ranks_on_device =
        device.is_cuda() ? static_cast<int>(std::count(plan.devices.begin(), plan.devices.end(), device)) : 1;
  }
  // A hybrid on a GPU serves up to kCudaStateSlots sequences at once where memory allows (plan_state_slots).
  if (cfg.linear.hybrid() && plan.devices.front().is_cuda()) {
    const std::uint64_t per_slot = backend::state_bytes_per_slot(cfg, shards.front());
    const std::uint64_t room =
        static_cast<std::uint64_t>(backend::kv_budget_positions(cfg, shards.front(), plan.devices.front(),
                                                                budgets.front(), ro.kv_block_size)) /
        static_cast<std::uint64_t>(ro.kv_block_size) *
        backend::kv_bytes_per_block(cfg, shards.front(), plan.devices.front(), ro.kv_block_size);
    const StateSlots states = plan_state_slots(per_slot, room, options.state_snapshots);
    ro.state_slots = states.slots;
    ro.state_snapshots = states.snapshots;
  }
  // What a device holds besides the KV blocks: the weights, and a hybrid's state slots and snapshots.
  for (int r = 0; r < n; ++r)
    budgets[static_cast<std::size_t>(r)].weight_bytes +=
        backend::state_bytes_per_slot(cfg, shards[static_cast<std::size_t>(r)]) *
        static_cast<std::uint64_t>(ro.state_slots + *ro.state_snapshots);
  // The default context: the model's own, bounded by the longest sequence every rank's KV budget holds
  // (at least one block, so a budget too small for anything fails below with out_of_memory).
  std::int64_t memory_bound = std::numeric_limits<std::int32_t>::max();
  for (int r = 0; r < n; ++r)
    memory_bound = std::min(memory_bound, backend::kv_budget_positions(cfg, shards[static_cast<std::size_t>(r)],
                                                                       plan.devices[static_cast<std::size_t>(r)],
                                                                       budgets[static_cast<std::size_t>(r)],
                                                                       ro.kv_block_size));
  memory_bound = std::max<std::int64_t>(memory_bound, ro.kv_block_size);
  ro.max_context = model::resolve_max_context(cfg, options.max_context, static_cast<std::int32_t>(memory_bound));
  for (int r = 0; r < n; ++r) {
    const std::int32_t blocks = backend::plan_kv_blocks(cfg, shards[static_cast<std::size_t>(r)],
                                                        plan.devices[static_cast<std::size_t>(r)],
                                                        budgets[static_cast<std::size_t>(r)], ro.kv_block_size,
                                                        ro.max_context);
    ro.kv_blocks = r == 0 ? blocks : std::min(ro.kv_blocks, blocks);
  }
  for (int r = 0; r < n; ++r) {
    const auto& shard = shards[static_cast<std::size_t>(r)];
    const auto& device = plan.devices[static_cast<std::size_t>(r)];
    plan.rank_bytes.push_back(budgets[static_cast<std::size_t>(r)].weight_bytes +
                              backend::kv_bytes_per_block(cfg, shard, device, ro.kv_block_size) *
                                  static_cast<std::uint64_t>(ro.kv_blocks));
  }
  return plan;
}

std::optional<quant::GgmlType> quantize_for(const std::filesystem::path& model, const std::string& quant, bool named_file) {
  if (quant.empty() || quant == "none" || quant == "bf16") return std::nullopt;
  if (io::is_gguf_path(model)) {
    if (named_file)
      fail(errc::invalid_argument, "quant '" + quant + "' does not apply to " + model.string() +
                                       ", which is one GGUF file (its tensors are used as stored)");
    return std::nullopt;
  }
  const auto t = quant::parse_ggml_type(quant);
  if (!t || !quant::quantizable_at_load(*t))
    fail(errc::unsupported_arch, "quant '" + quant + "' cannot be applied at load to " + model.string() +
                                     " (a safetensors model): use none, bf16, q8_0, q4_k, q6_k or fp8 (CUDA)");
  return t;
}

void check_host_memory(const LoadPlan& plan) {
  std::uint64_t needed = 0;
  for (std::size_t r = 0; r < plan.devices.size(); ++r)
    if (!plan.devices[r].is_cuda()) needed += plan.rank_bytes[r];
  if (needed == 0) return;
  const MemInfo mem = read_meminfo();
  if (mem.available_bytes == 0) return;  // no /proc/meminfo: nothing to check against
  if (needed > mem.available_bytes) {
    auto mib = [](std::uint64_t b) { return std::to_string(b >> 20) + " MiB"; };
    fail(errc::out_of_memory, "the model needs " + mib(needed) + " of host memory (weights and KV cache), but " +
                                  mib(mem.available_bytes) + " are available; lower max_context or --kv-cache-bytes, or unload a model");
  }
}

std::unique_ptr<backend::ModelRunner> open_runner(const LoadOptions& options) {
  const auto configs = model::load_model_configs(options.model_dir);
  model::ModelConfig cfg = configs.model;
  const TaskSetup setup = resolve_task(options.model_dir, options.task, options.pooling, options.model_id);
  if (setup.task == ModelTask::embed && !cfg.tie_word_embeddings &&
      !io::Checkpoint::open_files(io::checkpoint_files(options.model_dir)).find("lm_head.weight"))
    cfg.tie_word_embeddings = true;  // no LM head to load: an embedder reads only the final norm's rows
  const int n = options.tensor_parallel;
  const LoadPlan plan = plan_load(options, cfg);
  const auto& devices = plan.devices;
  const backend::RunnerOptions& ro = plan.runner;
  const auto files = io::checkpoint_files(options.model_dir);

  if (n == 1) {
    const auto checkpoint = io::Checkpoint::open_files(files);
    return backend::make_runner(cfg, &checkpoint, model::ShardPlan::make(cfg, 0, 1, options.expert_parallel), devices[0],
                                std::make_shared<dist::LocalCommunicator>(), ro);
  }
  tp::TpRunnerOptions to;
  to.model_id = options.model_id;
  if (to.model_id.empty()) {
    const auto dir = options.model_dir.lexically_normal();
    to.model_id = (dir.has_filename() ? dir.filename() : dir.parent_path().filename()).string();
  }
  to.world = n;
  to.expert_parallel = options.expert_parallel;
  to.devices = devices;
  to.max_context = ro.max_context;
  to.kv_block_size = ro.kv_block_size;
  to.kv_blocks = ro.kv_blocks;
  to.quantize = ro.quantize;
  to.state_slots = ro.state_slots;
  to.state_snapshots = ro.state_snapshots;
  to.step_timeout = options.step_timeout;
  to.load_timeout = options.load_timeout;
  to.worker_binary = options.worker_binary;
  to.worker_args = options.worker_args;
  return tp::TpRunner::load(cfg, files, to);
}

}  // namespace neuron::engine
