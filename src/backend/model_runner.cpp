#include "backend/model_runner.hpp"

#include <algorithm>
#include <string>

#include "backend/cpu/attention.hpp"
#include "backend/cpu/cpu_runner.hpp"
#include "model/sampler.hpp"
#include "model/shard_weights.hpp"
#include "quant/quantize.hpp"
#include "util/byte_size.hpp"
#include "util/error.hpp"

#ifdef NEURON_HAVE_CUDA
#include "backend/cuda/cuda_runner.hpp"
#endif

namespace neuron::backend {

namespace {
// Held back on a GPU beyond weights and KV: activations, cuBLAS workspace, graphs, the CUDA context.
#ifdef NEURON_HAVE_CUDA
constexpr std::uint64_t kCudaActivationReserve = 2ull << 30;
constexpr double kDefaultDeviceFraction = 0.9;
#endif
constexpr std::uint64_t kMaxKvBlocks = 1u << 20;
}  // namespace

HostFloats ModelRunner::alloc_logits(std::size_t count) const {
  return HostFloats(new float[count], HostFloatsDeleter{[](float* p) { delete[] p; }});
}

void ModelRunner::step(const Batch& batch, std::span<float> logits, std::span<std::int32_t> picks,
                       std::span<float> hidden) {
  if (picks.empty() || picks_on_device()) {
    run_step(batch, logits, picks, hidden);
    return;
  }
  if (picks.size() != static_cast<std::size_t>(batch.pick_rows()))
    fail(errc::invalid_argument, "step: picks buffer holds " + std::to_string(picks.size()) + " ids; the batch has " +
                                     std::to_string(batch.pick_rows()) + " argmax sequences");
  const auto vocab = static_cast<std::size_t>(config().vocab_size);
  if (logits.size() != static_cast<std::size_t>(batch.logit_rows()) * vocab)
    fail(errc::invalid_argument, "step: logits buffer holds " + std::to_string(logits.size()) + " floats; the batch wants " +
                                     std::to_string(batch.logit_rows()) + " rows");
  Batch& b = host_pick_batch_;
  b = batch;
  for (SequenceStep& s : b.seqs)
    if (s.logits == LogitsWanted::argmax) s.logits = LogitsWanted::last;
  host_rows_.resize(static_cast<std::size_t>(b.logit_rows()) * vocab);
  run_step(b, host_rows_, {}, hidden);
  // Rows come sequence by sequence: hand the asked-for ones on, pick the others.
  std::size_t row = 0, out = 0, pick = 0;
  for (const SequenceStep& s : batch.seqs) {
    const std::size_t rows = s.logits == LogitsWanted::argmax ? 1 : static_cast<std::size_t>(logit_rows_of(s));
    const std::span<const float> src(host_rows_.data() + row * vocab, rows * vocab);
    if (s.logits == LogitsWanted::argmax) {
      picks[pick++] = model::greedy_pick(src);
    } else if (rows > 0) {
      std::copy(src.begin(), src.end(), logits.begin() + static_cast<std::ptrdiff_t>(out * vocab));
      out += rows;
    }
    row += rows;
  }
}

std::int32_t default_max_context(const Device& device) noexcept { return device.is_cuda() ? 8192 : 4096; }

std::uint64_t kv_bytes_per_block(const model::ModelConfig& cfg, const model::ShardPlan& plan, const Device& device,
                                 std::int32_t block_size) {
  // CUDA keeps K/V in bf16, the CPU in its pools' element.
  const std::uint64_t element = device.is_cuda() ? 2 : cpu::KvPool::element_bytes(cpu::kv_element());
  return kv_bytes_per_block(cfg, plan, element, block_size);
}

std::uint64_t kv_bytes_per_block(const model::ModelConfig& cfg, const model::ShardPlan& plan,
                                 std::uint64_t element_bytes, std::int32_t block_size) {
  return static_cast<std::uint64_t>(model::kv_elements_per_position(cfg, plan)) * element_bytes *
         static_cast<std::uint64_t>(block_size);
}

std::int32_t resolve_state_snapshots(std::optional<std::int32_t> requested, std::int32_t state_slots) {
  if (!requested) return kDefaultSnapshotsPerSlot * state_slots;
  if (*requested < 0) fail(errc::invalid_argument, "state_snapshots " + std::to_string(*requested) + " is negative");
  return *requested;
}

namespace {
void check_state_indices(const KvPoolShape& pool, std::int32_t slot, std::int32_t snapshot, const char* what) {
  if (slot < 0 || slot >= pool.state_slots)
    fail(errc::invalid_argument, std::string(what) + ": state slot " + std::to_string(slot) + " is outside [0, " +
                                     std::to_string(pool.state_slots) + ")");
  if (snapshot < 0 || snapshot >= pool.state_snapshots)
    fail(errc::invalid_argument, std::string(what) + ": snapshot " + std::to_string(snapshot) + " is outside [0, " +
                                     std::to_string(pool.state_snapshots) + ")");
}
}  // namespace

void ModelRunner::save_state(std::int32_t slot, std::int32_t snapshot) {
  check_state_indices(kv_pool(), slot, snapshot, "save_state");
  run_save_state(slot, snapshot);
}

void ModelRunner::restore_state(std::int32_t snapshot, std::int32_t slot) {
  check_state_indices(kv_pool(), slot, snapshot, "restore_state");
  run_restore_state(snapshot, slot);
}

void ModelRunner::run_save_state(std::int32_t, std::int32_t) {
  NEURON_ASSERT(!"a runner that reports state snapshots implements run_save_state");
}

void ModelRunner::run_restore_state(std::int32_t, std::int32_t) {
  NEURON_ASSERT(!"a runner that reports state snapshots implements run_restore_state");
}

std::uint64_t state_bytes_per_slot(const model::ModelConfig& cfg, const model::ShardPlan& plan) {
  const model::LinearAttentionConfig& c = cfg.linear;
  std::uint64_t layers = 0;
  for (std::int64_t l = 0; l < cfg.num_hidden_layers; ++l) layers += c.linear_layer(l) ? 1 : 0;
  if (layers == 0) return 0;
  const auto conv = static_cast<std::uint64_t>(model::linear_conv_channels(cfg, plan) * (c.conv_kernel - 1));
  const auto delta = static_cast<std::uint64_t>(plan.linear_value_heads * c.key_head_dim * c.value_head_dim);
  return layers * (conv + delta) * sizeof(float);
}

namespace {
// The KV budget in bytes for rank plan.rank on `device`, and how it was arrived at (for errors).
std::pair<std::uint64_t, std::string> kv_budget_bytes(const model::ModelConfig& cfg, const model::ShardPlan& plan,
                                                      const Device& device, const KvBudget& budget) {
  std::uint64_t bytes = budget.bytes;
  std::string from = "the KV budget of " + util::gib(bytes);
  if (bytes == 0 && device.is_cuda()) {
#ifdef NEURON_HAVE_CUDA
    const double fraction = budget.device_fraction > 0 ? budget.device_fraction : kDefaultDeviceFraction;
    const int sharing = std::max(budget.ranks_on_device, 1);
    const std::uint64_t total = cuda::device_total_memory(device.index);
    const auto usable = static_cast<std::uint64_t>(static_cast<double>(total) * fraction / sharing);
    const std::uint64_t weights = budget.weight_bytes > 0
                                      ? budget.weight_bytes
                                      : static_cast<std::uint64_t>(model::weight_elements(cfg, plan)) * 2;
    const std::uint64_t taken = weights + kCudaActivationReserve;
    bytes = usable > taken ? usable - taken : 0;
    from = std::to_string(fraction) + " of " + device.str() + "'s " + util::gib(total) +
           (sharing > 1 ? " shared by " + std::to_string(sharing) + " ranks" : std::string()) + " less " + util::gib(weights) +
           " of weights and " + util::gib(kCudaActivationReserve) + " for activations";
#else
    fail(errc::invalid_argument, "device " + device.str() + ": this build has no CUDA support");
#endif
  } else if (bytes == 0) {
    bytes = kDefaultCpuKvBytes;
    from = "the default CPU KV budget of " + util::gib(bytes);
  }
  return {bytes, std::move(from)};
}
}  // namespace

std::int64_t kv_budget_positions(const model::ModelConfig& cfg, const model::ShardPlan& plan, const Device& device,
                                 const KvBudget& budget, std::int32_t block_size) {
  NEURON_ASSERT(block_size > 0);
  const std::uint64_t per_block = kv_bytes_per_block(cfg, plan, device, block_size);
  const std::uint64_t blocks = std::min<std::uint64_t>(kv_budget_bytes(cfg, plan, device, budget).first / per_block, kMaxKvBlocks);
  return static_cast<std::int64_t>(blocks) * block_size;
}

std::int32_t plan_kv_blocks(const model::ModelConfig& cfg, const model::ShardPlan& plan, const Device& device,
                            const KvBudget& budget, std::int32_t block_size, std::int32_t max_context) {
  NEURON_ASSERT(block_size > 0 && max_context > 0);
  const std::uint64_t per_block = kv_bytes_per_block(cfg, plan, device, block_size);
  const std::uint64_t one_sequence = per_block * static_cast<std::uint64_t>((max_context + block_size - 1) / block_size);
  const auto [bytes, from] = kv_budget_bytes(cfg, plan, device, budget);
  if (bytes < one_sequence)
    fail(errc::out_of_memory, "the KV cache needs " + util::gib(one_sequence) + " for one sequence of " +
                                  std::to_string(max_context) + " positions, but " + from + " leaves " + util::gib(bytes) +
                                  "; lower max_context or raise the KV budget");
  const std::uint64_t blocks = bytes / per_block;
  // More blocks than 16M positions would only grow the engine's bookkeeping.
  return static_cast<std::int32_t>(std::min<std::uint64_t>(blocks, kMaxKvBlocks));
}

std::unique_ptr<ModelRunner> make_runner(const model::ModelConfig& cfg, const io::Checkpoint* checkpoint,
                                         const model::ShardPlan& plan, const Device& device,
                                         std::shared_ptr<dist::Communicator> comm, const RunnerOptions& options) {
  if (options.quantize && !quant::quantizable_at_load(*options.quantize))
    fail(errc::unsupported_arch, "quantize at load supports q8_0, q4_k, q6_k and fp8 (CUDA), not " +
                                     std::string(quant::ggml_type_name(*options.quantize)));
  if (options.quantize == quant::GgmlType::fp8_e4m3 && !device.is_cuda())
    fail(errc::unsupported_arch, "quant 'fp8' runs on CUDA devices (compute capability 9.0); on " + device.str() +
                                     " use q8_0, q4_k or q6_k");
  if (!device.is_cuda()) return cpu::make_cpu_runner(cfg, checkpoint, plan, std::move(comm), options);
#ifdef NEURON_HAVE_CUDA
  return cuda::make_cuda_runner(cfg, checkpoint, plan, device, std::move(comm), options);
#else
  fail(errc::invalid_argument, "device " + device.str() + ": this build has no CUDA support");
#endif
}

}  // namespace neuron::backend
