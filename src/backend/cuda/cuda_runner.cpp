// One rank's shard of a model of any family on one CUDA device (DESIGN.md sections 3, 4, 7): the
// family orders the blocks (model::Family::layer); this file implements them (attention, mlp, moe).
//
// Data flow of a step of T tokens from S sequences (x is the f32 residual
// stream, everything else bf16 unless noted; row-parallel outputs are f32 so
// the all-reduce and the residual add lose nothing):
//   x = embed[tokens]
//   per layer: h = rmsnorm(x += delta)          (delta: previous down output)
//              qkv = h Wqkv^T  -> q/k norm, RoPE at each token's position -> q, K/V into its pool slot
//              a = attention(q, pool)           (paged: split-K decode for 1-token sequences,
//                                                flash prefill for the others; one batch may mix both)
//              delta = a Wo^T (f32), all-reduce; h = rmsnorm(x += delta)
//              act = silu(gate) * up of h Wgu^T; delta = act Wdown^T (f32), all-reduce
//   h = final_norm(x += delta); logits = h[rows asked for] Wlm^T (f32); hidden rows: h[rows asked for] as f32
// The KV pool is one allocation: per layer K and V, each [blocks + 1, hkv,
// block_size, hd] bf16; block `kv_blocks` is a scratch block no sequence owns,
// where the padding sequences of a CUDA graph write.
// A step's varying inputs (tokens, positions, slots, per-sequence starts,
// lengths and block-table offsets, work lists, block tables) go up in one
// copy of a packed staging buffer (StepLayout). One-token projections run on
// the hand-written GEMV; more rows on cuBLAS. Decode-only batches of up to
// 256 sequences replay a CUDA graph captured per padded batch size (the
// ladder below), lazily on first use, on one rank.
//
// Tuning switches, read once at construction (for the benchmarks in bench/):
//   NEURON_CUDA_GEMV=0    batch-1 projections on cuBLAS instead of the GEMV kernel
//   NEURON_CUDA_GRAPHS=0  launch decode steps eagerly instead of replaying graphs
//   NEURON_CUDA_PDL=0     no programmatic dependent launch between kernels
//   NEURON_CUDA_FUSED_ROPE=0  decode-only steps run q/k norm + RoPE as their own kernel
//   NEURON_CUDA_FUSED_DECODE=1  one rank, one token: norms inside the projections, residual adds in their epilogues
//                         (bf16 weights only)
//   NEURON_CUDA_FP8_OUTER_SCALES=0  FP8 prefill: scale plain cuBLASLt products instead of cuBLASLt's own
//                         per-row scaling (read by Linear)
#include "backend/cuda/cuda_runner.hpp"

#include <omp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <bit>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/device_buffer.hpp"
#include "backend/cuda/fp8_kernels.hpp"
#include "backend/cuda/gated_delta.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/linear.hpp"
#include "backend/cuda/quant_kernels.hpp"
#include "backend/cuda/quant_mma_gemv.hpp"
#include "backend/packed_weights.hpp"
#include "backend/cuda/step_inputs.hpp"
#include "tensor/dtype.hpp"
#include "dist/communicator.hpp"
#include "io/safetensors.hpp"
#include "model/arch/block_ops.hpp"
#include "model/arch/family.hpp"
#include "model/moe_routing.hpp"
#include "backend/cuda/moe_kernels.hpp"
#include "model/rope.hpp"
#include "model/shard_weights.hpp"
#include "quant/ggml_type.hpp"
#include "util/error.hpp"

namespace neuron::backend::cuda {
namespace {

using kernels::bf16_t;

constexpr int kMaxPassTokens = 4096;  // rows per pass; a step with more tokens runs in passes
constexpr std::array<int, 14> kGraphLadder = {1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 160, 192, 224, 256};
constexpr int kMaxGraphBatch = kGraphLadder.back();
constexpr int kLogitRows = kMaxGraphBatch;  // rows per LM-head pass (a graph's whole batch)
constexpr int kMoeEagerDeviceTokens = 64;    // an eager pass's most tokens on the device MoE path (CudaRunner::moe)
constexpr int kMaxDecodeSplits = kernels::kDecodeMaxSplits;
constexpr int kSplitBuckets = 7;  // graphs' decode splits: 1, 2, 4, ..., kMaxDecodeSplits
constexpr std::size_t kStagingBytes = std::size_t{64} << 20;
// Decode attention's splits (decode_splits): one per kernels::kDecodeMinSplitKeys
// positions, at most kDecodeSplitsPerSequence and about two blocks per SM. A
// block streams its positions in pipelined passes, and every extra split adds
// a partial state to the last block's merge and blocks beside the next
// projection's prefetching ones: the best end-to-end counts measured on the
// H200 (Qwen3-8B shape, one sequence) were 4-8 at 128-256 positions and 32 at
// 2048 and at 8192 (bench/QUANT.md).
constexpr int kDecodeSplitsPerSequence = 32;
static_assert(kDecodeSplitsPerSequence <= kernels::kDecodeMaxSplits);

bool env_flag(const char* name, bool fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  return std::string(v) != "0";
}

std::uint64_t fnv1a(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// Runs fill(begin, end) over [0, n) split across the OpenMP threads, at least
// `min_part` of n a part (a smaller n runs on this thread): a checkpoint read
// from the page cache is bound by one core's copies and page faults, not by
// the PCIe copy behind it. The first exception a part throws is rethrown here.
template <class Fill>
void fill_parallel(std::int64_t n, std::int64_t min_part, const Fill& fill) {
  const int parts = static_cast<int>(std::clamp<std::int64_t>(n / std::max<std::int64_t>(1, min_part), 1, omp_get_max_threads()));
  if (parts <= 1) {
    fill(std::int64_t{0}, n);
    return;
  }
  std::exception_ptr failed;
#pragma omp parallel for num_threads(parts) schedule(static)
  for (int t = 0; t < parts; ++t) {
    try {
      fill(n * t / parts, n * (t + 1) / parts);
    } catch (...) {
#pragma omp critical(neuron_upload_fill)
      if (!failed) failed = std::current_exception();
    }
  }
  if (failed) std::rethrow_exception(failed);
}

// Copies host weights to the device through two pinned staging buffers: the
// CPU threads convert chunk i + 1 (bf16 from the mmap) while chunk i is in
// flight.
class Uploader {
 public:
  Uploader() : copy_stream_(), staging_{PinnedBuffer(kStagingBytes), PinnedBuffer(kStagingBytes)} {}

  void upload(const io::TensorView& view, bf16_t* dst) {
    const std::int64_t rows = view.dim(0);
    const std::int64_t cols = view.rank() == 2 ? view.dim(1) : 1;
    const std::int64_t per_chunk = std::max<std::int64_t>(1, static_cast<std::int64_t>(kStagingBytes / 2) / cols);
    NEURON_ASSERT(static_cast<std::size_t>(cols) * 2 <= kStagingBytes);
    for (std::int64_t r0 = 0; r0 < rows; r0 += per_chunk) {
      const std::int64_t r1 = std::min(rows, r0 + per_chunk);
      const int b = next_;
      next_ ^= 1;
      NEURON_CUDA_CHECK(cudaEventSynchronize(done_[b].get()));  // the copy that last used this buffer
      const std::size_t count = static_cast<std::size_t>((r1 - r0) * cols);
      std::uint16_t* stage = staging_[b].data<std::uint16_t>();  // [r1 - r0, cols] bf16
      fill_parallel(r1 - r0, std::max<std::int64_t>(1, kFillPartBytes / (2 * cols)),
                    [&](std::int64_t a, std::int64_t e) {
                      view.rows(r0 + a, r0 + e)
                          .to_bf16(std::span<std::uint16_t>(stage + a * cols, static_cast<std::size_t>((e - a) * cols)));
                    });
      NEURON_CUDA_CHECK(cudaMemcpyAsync(dst + r0 * cols, stage, count * 2, cudaMemcpyHostToDevice, copy_stream_.get()));
      NEURON_CUDA_CHECK(cudaEventRecord(done_[b].get(), copy_stream_.get()));
      bytes_ += count * 2;
    }
  }
  // Raw bytes (packed blocks) to dst through the same staging buffers.
  void upload_bytes(std::span<const std::byte> src, std::byte* dst) {
    for (std::size_t at = 0; at < src.size(); at += kStagingBytes) {
      const std::size_t count = std::min(kStagingBytes, src.size() - at);
      const int b = next_;
      next_ ^= 1;
      NEURON_CUDA_CHECK(cudaEventSynchronize(done_[b].get()));
      std::byte* stage = staging_[b].data<std::byte>();  // [count] bytes
      fill_parallel(static_cast<std::int64_t>(count), kFillPartBytes, [&](std::int64_t a, std::int64_t e) {
        std::memcpy(stage + a, src.data() + at + a, static_cast<std::size_t>(e - a));
      });
      NEURON_CUDA_CHECK(cudaMemcpyAsync(dst + at, stage, count, cudaMemcpyHostToDevice, copy_stream_.get()));
      NEURON_CUDA_CHECK(cudaEventRecord(done_[b].get(), copy_stream_.get()));
      bytes_ += count;
    }
  }
  // Rows of packed blocks to dst, row r (row_bytes) at view.row_data(r), through
  // the same staging buffers: no host copy of the whole matrix first.
  void upload_rows(const io::TensorView& view, std::int64_t rows, std::size_t row_bytes, std::byte* dst) {
    NEURON_ASSERT(row_bytes > 0 && row_bytes <= kStagingBytes);
    const auto per_chunk = static_cast<std::int64_t>(kStagingBytes / row_bytes);
    for (std::int64_t r0 = 0; r0 < rows; r0 += per_chunk) {
      const std::int64_t r1 = std::min(rows, r0 + per_chunk);
      const int b = next_;
      next_ ^= 1;
      NEURON_CUDA_CHECK(cudaEventSynchronize(done_[b].get()));
      std::byte* stage = staging_[b].data<std::byte>();  // [r1 - r0, row_bytes] packed rows
      fill_parallel(r1 - r0, std::max<std::int64_t>(1, kFillPartBytes / static_cast<std::int64_t>(row_bytes)),
                    [&](std::int64_t a, std::int64_t e) {
                      for (std::int64_t r = a; r < e; ++r)
                        std::memcpy(stage + r * row_bytes, view.row_data(r0 + r), row_bytes);
                    });
      const std::size_t count = static_cast<std::size_t>(r1 - r0) * row_bytes;
      NEURON_CUDA_CHECK(cudaMemcpyAsync(dst + r0 * row_bytes, stage, count, cudaMemcpyHostToDevice, copy_stream_.get()));
      NEURON_CUDA_CHECK(cudaEventRecord(done_[b].get(), copy_stream_.get()));
      bytes_ += count;
    }
  }
  void finish() { copy_stream_.synchronize(); }
  std::uint64_t bytes() const noexcept { return bytes_; }

 private:
  // The least a thread fills (smaller chunks take fewer threads; one below it).
  static constexpr std::int64_t kFillPartBytes = std::int64_t{256} << 10;
  Stream copy_stream_;
  std::array<PinnedBuffer, 2> staging_;  // [kStagingBytes] bytes each, chunks in flight
  std::array<Event, 2> done_;
  int next_ = 0;
  std::uint64_t bytes_ = 0;
};

class GraphExec {
 public:
  GraphExec() = default;
  ~GraphExec() { reset(); }
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  void reset() noexcept {
    if (exec_) cudaGraphExecDestroy(exec_);
    exec_ = nullptr;
  }
  void adopt(cudaGraph_t graph) {
    reset();
    const cudaError_t st = cudaGraphInstantiate(&exec_, graph, 0);
    cudaGraphDestroy(graph);
    if (st != cudaSuccess) {
      exec_ = nullptr;
      throw_cuda_error(st, "cudaGraphInstantiate", __FILE__, __LINE__);
    }
  }
  explicit operator bool() const noexcept { return exec_ != nullptr; }
  void launch(cudaStream_t s) const { NEURON_CUDA_CHECK(cudaGraphLaunch(exec_, s)); }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

class CudaRunner final : public ModelRunner, private model::BlockOps {
 public:
  CudaRunner(const model::ModelConfig& cfg, const io::Checkpoint* checkpoint, const model::ShardPlan& plan,
             const Device& device, std::shared_ptr<dist::Communicator> comm, const RunnerOptions& options);
  ~CudaRunner() override;

  bool picks_on_device() const noexcept override { return true; }
  HostFloats alloc_logits(std::size_t count) const override;
  const model::ModelConfig& config() const noexcept override { return cfg_; }
  std::int32_t max_context() const noexcept override { return max_ctx_; }
  KvPoolShape kv_pool() const noexcept override {
    KvPoolShape k{block_size_, kv_blocks_, bytes_per_block_};
    k.state_slots = state_slots_;
    k.bytes_per_state_slot = 4 * slot_floats_;
    k.state_snapshots = state_snapshots_;
    return k;
  }
  MemoryStats memory() const override;

 protected:
  void run_step(const Batch& batch, std::span<float> logits, std::span<std::int32_t> picks,
                std::span<float> hidden) override;
  // A hybrid's state copies between a slot and a snapshot slot, in stream order (no step reads them in between).
  void run_save_state(std::int32_t slot, std::int32_t snapshot) override { copy_state(slot, state_slots_ + snapshot); }
  void run_restore_state(std::int32_t snapshot, std::int32_t slot) override { copy_state(state_slots_ + snapshot, slot); }

 private:
  struct Layer {
    DeviceBuffer input_norm;  // [hidden] bf16
    DeviceMatrix qkv;         // [(hq + 2 hkv) * hd, hidden]: the rank's q, k, v rows stacked
    DeviceBuffer q_norm;      // [hd] bf16; empty without q/k norm
    DeviceBuffer k_norm;      // [hd] bf16; empty without q/k norm
    DeviceMatrix o;           // [hidden, hq * hd]: the rank's input columns
    DeviceBuffer post_norm;   // [hidden] bf16
    DeviceMatrix gate_up;     // [2 * ff, hidden]: gate rows then up rows of the rank's slice; empty for MoE
    DeviceMatrix down;        // [hidden, ff]: the rank's input columns; empty for MoE
    DeviceMatrix router;      // [E, hidden]: a MoE layer's router (bf16, or as a GGUF stores it)
    struct Expert {
      DeviceMatrix gate_up;   // [2 * moe_ff, hidden]
      DeviceMatrix down;      // [hidden, moe_ff]
    };
    std::vector<Expert> experts;  // [L] a MoE layer's experts of this rank: expert moe_experts().begin + i is [i]
    // A hybrid MoE's shared expert (empty otherwise): x gets sigmoid(n . shared_gate) * shared_expert(n).
    DeviceMatrix shared_gate_up;  // [2 * Fs, hidden]
    DeviceMatrix shared_down;     // [hidden, Fs]
    DeviceMatrix shared_gate;     // [1, hidden]
    // Gated DeltaNet linear attention (hybrids; then qkv, q_norm, k_norm and o are empty). Local heads:
    // Hk, Hv (ShardPlan::linear_*), C = 2 Hk dk + Hv dv conv channels.
    struct Linear {
      DeviceMatrix in_proj;    // [C + Hv dv + 2 Hv, hidden]: q, k, v (the conv's channels), z, b, a rows
      DeviceBuffer conv;       // [C, K] f32 taps
      DeviceBuffer neg_a;      // [Hv] f32 -exp(A_log)
      DeviceBuffer dt_bias;    // [Hv] f32
      DeviceBuffer gated_norm; // [dv] bf16 (a plain scale)
      DeviceMatrix out;        // [hidden, Hv dv]
      kernels::LinearState state;  // where its conv and delta-rule state sit in states_
    };
    std::optional<Linear> linear;
    // The device MoE path (moe_on_device_): [2, L] device pointers to each local expert's gate_up, then each
    // one's down (bf16, or packed blocks of the types below, the same for every expert of the layer).
    DeviceBuffer expert_ptrs;
    DeviceBuffer expert_memory;  // every expert's gate_up then down, each 256-byte aligned (load_experts)
    quant::GgmlType expert_gate_up_type = quant::GgmlType::bf16, expert_down_type = quant::GgmlType::bf16;
  };

  void load_weights(const io::Checkpoint* checkpoint);
  // A small tensor as f32 on the host: from the checkpoint, else model::fill_dummy's stand-in values.
  std::vector<float> host_f32(const model::SliceSpec& spec, const io::Checkpoint* checkpoint) const;
  // An RMSNorm weight as the bf16 scale the kernels multiply by (model::to_norm_scale adds a zero-centred one's 1).
  DeviceBuffer norm(const model::SliceSpec& spec, const io::Checkpoint* checkpoint);
  DeviceBuffer upload_f32(const std::vector<float>& v);
  DeviceBuffer upload_bf16(const std::vector<float>& v);
  Layer::Linear load_linear(const model::LinearAttentionSpecs& la, const io::Checkpoint* checkpoint,
                            std::optional<Uploader>& up);
  // Lays out states_ (every linear layer's conv and delta state per slot) for `slots` + `snapshots` + 1 scratch.
  void setup_states(std::int32_t slots, std::int32_t snapshots);
  void copy_state(std::int32_t from, std::int32_t to);
  void place(const model::SliceSpec& spec, const io::Checkpoint* checkpoint, std::optional<Uploader>& up, bf16_t* dst);
  // How a matrix is held: always bf16 (the embedding, read by row), as the
  // checkpoint stores it (a GGUF's blocks, else bf16), also quantized at load
  // (the projections), or the LM head: as stored, or fp8 when that is the
  // quantize-at-load type (it is 15% of an 8B decode step's bytes; the GGUF
  // types leave it bf16, as the CPU does).
  enum class Hold { bf16, as_stored, quantizable, lm_head };
  // A matrix's layout before its memory: its parts (one per run of a type) and the slices their rows come from.
  struct MatrixPlan {
    struct Slice {
      const model::SliceSpec* spec = nullptr;
      std::optional<io::TensorView> view;  // when there is a checkpoint
      bool quantize = false;               // quantize-at-load (from the view, or the stand-in weights)
    };
    DeviceMatrix m;                           // parts, rows and cols; no memory yet
    std::vector<std::vector<Slice>> by_part;  // [part] its slices
    std::size_t bytes = 0;                    // the device memory it takes
  };
  MatrixPlan plan_matrix(std::span<const model::SliceSpec* const> specs, const io::Checkpoint* checkpoint, Hold hold);
  // The plan's rows uploaded to `dst` (plan.bytes of device memory that outlives the matrix, 256-byte aligned).
  DeviceMatrix fill_matrix(MatrixPlan plan, std::byte* dst, const io::Checkpoint* checkpoint,
                           std::optional<Uploader>& up);
  // A matrix of stacked slices in memory of its own.
  DeviceMatrix matrix(std::initializer_list<const model::SliceSpec*> specs, const io::Checkpoint* checkpoint,
                      std::optional<Uploader>& up, Hold hold);
  DeviceMatrix matrix_of(std::span<const model::SliceSpec* const> specs, const io::Checkpoint* checkpoint,
                         std::optional<Uploader>& up, Hold hold);
  // A MoE layer's experts (gate_up, down each), all in one allocation, l.expert_memory: cudaMalloc takes whole
  // 2 MiB pages, and an allocation a matrix cost the Qwen3.5-35B-A3B shape's Q8_0 experts (2.125 and 1.0625 MiB)
  // ~28 GiB more than their bytes (bench/cuda, 2026-12-07).
  void load_experts(Layer& l, const model::MoeSpecs& moe, const io::Checkpoint* checkpoint, std::optional<Uploader>& up);
  kernels::PagedKv kv(std::size_t layer) const;
  int decode_splits(int items, int max_len) const;
  // decode_splits rounded down to a power of two: a graph's grid, captured once per bucket.
  int graph_splits(int items, int max_len) const;
  // Packs a pass (padded to kGraphLadder[graph] when graph >= 0) and copies it to step_in_.
  PassPlan upload_pass(std::span<const PassSeq> seqs, int graph);
  void reserve_step_inputs(std::size_t ints);
  // Runs a pass whose inputs already sit in step_in_, its decode attention in `splits` ranges: the
  // family's layers (model::Family::layer) over the blocks below, then the final norm into h_.
  void run_layers(const PassPlan& p, int splits);
  // The blocks (model/arch/block_ops.hpp) over the pass in `pass_`. Each leaves its row-parallel output in
  // delta_ as `pending_`, added to x by the next norm; fused decode adds into x directly.
  void attention(std::int64_t layer) override;
  void mlp(std::int64_t layer) override;
  void moe(std::int64_t layer) override;
  // The experts this rank holds of the E the router scores (ShardPlan::expert_begin, experts: L of them, all E
  // unless the plan is expert parallel). The other ranks' add nothing here; moe's all-reduce sums the ranks.
  kernels::MoeExperts moe_experts() const {
    return {static_cast<int>(cfg_.moe.num_experts), static_cast<int>(plan_.expert_begin),
            static_cast<int>(plan_.experts)};
  }
  // Picks the device MoE path when each layer's experts are all bf16 or all of one block type its kernels
  // take, of widths they take (NEURON_CUDA_MOE_DEVICE=0: never), and fills its pointer tables and buffers.
  void setup_moe_on_device();
  void moe_on_host(const Layer& layer, int n);
  // The device path over rows [row0, row0 + n) of the pass (n k <= the route buffers' pairs).
  void moe_on_device(const Layer& layer, int row0, int n);
  // Whether a layer's experts are block-quantized of types and widths the grouped tensor-core kernels take
  // (quant_mma_gemv.hpp): then an eager pass of any length runs on the device, moe_chunk_tokens_ at a time.
  bool moe_prefill_on_device(const Layer& layer) const;
  void linear_attention(std::int64_t layer) override;
  // delta += sigmoid(h . shared_gate) * shared_expert(h) over the pass's n rows of h_ (a no-op without one).
  void shared_expert(const Layer& layer, int n);
  kernels::DecodeRope decode_rope(const Layer& layer) const;
  void lm_head(const bf16_t* h_rows, int rows, float* out);
  template <class Y>
  void linear(const bf16_t* x, int n, const DeviceMatrix& w, Y* y) {
    (*linear_)(x, n, w, y);
  }
  void all_reduce(float* data, std::size_t count);
  // Runs one pass and writes its logits rows to `out` ([rows, vocab]), its picks to `picks` ([picks]) and its
  // final-norm hidden rows to `hidden` ([hidden rows, hidden] f32, from h_'s bf16).
  void run_pass(std::span<const PassSeq> seqs, std::span<float> out, std::span<std::int32_t> picks,
                std::span<float> hidden);
  // Copies the pass's hidden rows out of h_ into `out` (waits for the stream).
  void copy_hidden_rows(std::span<const PassSeq> seqs, std::span<float> out);
  void replay_graph(int graph, int split_bucket, const PassPlan& p, int splits, bool want_logits);
  // Greedy picks of `n` rows of logits_ (row ids on the device, or rows [first, first + n) when null) into
  // picks_dev_[at, at + n).
  void pick(const std::int32_t* dev_rows, int first, int n, int at);

  const bf16_t* w(const DeviceBuffer& b) const { return b.data<bf16_t>(); }
  const bf16_t* w(const DeviceMatrix& m) const { return m.bf16(); }

  model::ModelConfig cfg_;
  const model::Family& family_;
  model::ShardPlan plan_;
  Device device_;
  std::shared_ptr<dist::Communicator> comm_;
  std::int32_t max_ctx_ = 0;
  std::int32_t block_size_ = 0, kv_blocks_ = 0, max_blocks_per_seq_ = 0;
  std::uint64_t bytes_per_block_ = 0;
  int hidden_ = 0, hq_ = 0, hkv_ = 0, hd_ = 0, ff_ = 0, moe_ff_ = 0, vocab_ = 0, qkv_rows_ = 0;
  int shared_ff_ = 0;                   // a hybrid MoE's shared expert's (local) intermediate size; 0: none
  bool gated_attention_ = false;        // q_proj yields each head's query and output gate (hybrids)
  int rotary_dim_ = 0;                  // lanes of a head RoPE rotates (hd_ unless partial_rotary_factor)
  kernels::LinearShape lin_;            // this rank's linear-attention shape (hybrids; zero otherwise)
  int lin_width_ = 0;                   // in_proj rows: C + Hv dv + 2 Hv
  std::int32_t state_slots_ = 0, state_snapshots_ = 0;  // recurrent-state slots and snapshots (hybrids)
  std::size_t slot_floats_ = 0;         // f32 per slot: every linear layer's conv and delta state
  int sm_count_ = 1;  // the device's multiprocessors (decode attention's split count)
  float eps_ = 1e-6f, scale_ = 1.f;
  bool use_gemv_ = true, use_graphs_ = true, fuse_decode_rope_ = true, fused_decode_ = false;
  std::optional<quant::GgmlType> quantize_;  // quantize-at-load type of the projections
  DeviceGuard guard_;
  Stream stream_;
  std::optional<Linear> linear_;  // the projections' products (made once the weights say whether to dequantize)

  DeviceMatrix embed_;       // [vocab, hidden] bf16 (a quantized GGUF embedding is dequantized)
  DeviceBuffer final_norm_;  // [hidden] bf16
  DeviceMatrix lm_head_;     // [vocab, hidden]; empty when tied to embed_
  DeviceBuffer inv_freq_;    // [hd / 2] f32: rope_theta^(-2j / hd)
  std::vector<Layer> layers_;
  std::uint64_t weight_bytes_ = 0;
  DeviceBuffer kv_pool_;     // [kv layers, 2 (K, V), kv_blocks + 1, hkv, block_size, hd] bf16 (full-attention layers)
  DeviceBuffer states_;      // [state_slots + state_snapshots + 1 scratch, slot_floats_] f32 (hybrids)

  std::size_t step_capacity_ = 0;  // i32 elements of step_in_ and step_host_
  DeviceBuffer step_in_;     // [step_capacity_] i32: a pass's packed inputs (StepLayout)
  PinnedBuffer step_host_;   // [step_capacity_] i32 staging for step_in_
  DeviceBuffer x_;           // [kMaxPassTokens, hidden] f32 residual stream
  DeviceBuffer h_;           // [kMaxPassTokens, hidden] bf16 normalised activations
  DeviceBuffer qkv_;         // [kMaxPassTokens, qkv_rows] bf16
  DeviceBuffer q_;           // [kMaxPassTokens, hq * hd] bf16 after norm + RoPE
  DeviceBuffer attn_;        // [kMaxPassTokens, hq * hd] bf16
  DeviceBuffer delta_;       // [kMaxPassTokens, hidden] f32 row-parallel partial sums
  DeviceBuffer gate_up_;     // [kMaxPassTokens, 2 * ff] bf16
  DeviceBuffer act_;         // [kMaxPassTokens, ff] bf16
  DeviceBuffer gate_;        // [kMaxPassTokens, hq * hd] bf16 gated attention's output gates (hybrids)
  DeviceBuffer lin_in_;      // [kMaxPassTokens, lin_width_] f32 linear attention's in-projection
  DeviceBuffer lin_conv_;    // [kMaxPassTokens, C] f32 its conv output (q, k normed)
  DeviceBuffer lin_chunk_;   // [kMaxPassTokens, Hv (dk + dv + 65) rounded up to 4] f32 the chunked delta rule's scratch (prompts)
  DeviceBuffer lin_out_;     // [kMaxPassTokens, Hv dv] bf16 its gated-normed output
  DeviceBuffer shared_out_;  // [kMaxPassTokens, hidden] f32 a shared expert's output
  DeviceBuffer shared_logit_;  // [kMaxPassTokens] f32 its gate's logits
  // MoE layers (empty when dense; E experts, k of them per token, L of them this rank's: moe_experts()).
  DeviceBuffer router_logits_;  // [kMaxPassTokens, E] f32
  PinnedBuffer router_host_;    // [kMaxPassTokens, E] f32: the logits routed on the host (model::MoeRouter)
  PinnedBuffer moe_host_;       // [2, kMaxPassTokens * k] 4-byte: the chosen local experts' token rows (i32), then
                                // weights (f32), each [pairs of local experts]
  DeviceBuffer moe_dev_;        // the same on the device
  DeviceBuffer expert_h_;       // [kMaxPassTokens, hidden] bf16: one expert's tokens' normed inputs
  DeviceBuffer expert_out_;     // [kMaxPassTokens, hidden] f32: its outputs
  model::MoeRouter router_;
  // The device MoE path (moe_kernels.hpp): passes of up to kMaxGraphBatch tokens over bf16 experts or
  // block-quantized ones of the types kernels::quant_moe_supported takes, and longer eager passes over
  // quantized experts the tensor-core kernels take (moe_prefill_on_device), in chunks of moe_chunk_tokens_.
  bool moe_on_device_ = false;
  int moe_chunk_tokens_ = 0;    // the most tokens one device MoE launch sequence takes (pairs / k)
  DeviceBuffer moe_route_buf_;  // the buffers of moe_route_ for moe_chunk_tokens_ tokens
  kernels::MoeRoute moe_route_;
  DeviceBuffer moe_act_;        // [pairs, moe_ff] bf16 by slot
  DeviceBuffer moe_out_;        // [pairs, hidden] f32 by slot
  DeviceBuffer decode_scratch_;   // [decode_scratch_floats of the largest split pass] f32 partial softmax states
  DeviceBuffer decode_counters_;  // [decode_counters of the largest split pass] u32, zero between calls
  DeviceBuffer head_rows_;   // [kLogitRows, hidden] bf16 gathered LM-head input rows
  DeviceBuffer logits_;      // [kLogitRows, vocab] f32
  DeviceBuffer picks_dev_;   // [kMaxPassTokens] i32 greedy picks of a pass
  PinnedBuffer reduce_host_; // [kMaxPassTokens, hidden] f32 staging for a host (Gloo) all-reduce
  // [ladder size][log2 of the decode splits][without, with the LM head]: decode graphs by padded batch
  // size and attention grid.
  std::array<std::array<std::array<GraphExec, 2>, kSplitBuckets>, kGraphLadder.size()> graphs_;
  std::vector<std::vector<PassSeq>> passes_;  // the step cut into passes (reused across steps)
  // The pass run_layers runs (its blocks read it).
  struct PassState {
    const PassPlan* plan = nullptr;
    int max_seq_tokens = 1;  // the most tokens one sequence has in the pass (linear attention's conv grid)
    int splits = 1;
    bool fused = false;  // one rank, one token, fused_decode_
  };
  PassState pass_;
  const float* pending_ = nullptr;  // the previous block's row-parallel output, added at the next norm
};

CudaRunner::CudaRunner(const model::ModelConfig& cfg, const io::Checkpoint* checkpoint, const model::ShardPlan& plan,
                       const Device& device, std::shared_ptr<dist::Communicator> comm, const RunnerOptions& options)
    : cfg_(cfg),
      family_(model::family_of(cfg)),
      plan_(plan),
      device_(device),
      comm_(std::move(comm)),
      quantize_(options.quantize),
      guard_(device.index),
      stream_() {
  if (!comm_) throw Error(errc::invalid_argument, "CUDA runner: no communicator");
  if (comm_->size() != plan.world || comm_->rank() != plan.rank)
    throw Error(errc::bad_tensor_parallel, "CUDA runner: communicator is rank " + std::to_string(comm_->rank()) +
                                               " of " + std::to_string(comm_->size()) + " but the shard plan is rank " +
                                               std::to_string(plan.rank) + " of " + std::to_string(plan.world));
  if (!kernels::attention_supports_head_dim(static_cast<int>(cfg.head_dim)))
    throw Error(errc::unsupported_arch, "CUDA backend: head_dim " + std::to_string(cfg.head_dim) +
                                            " is not supported (16, 64, 128 or 256)");
  if (cfg.hidden_size % 8 != 0)
    throw Error(errc::unsupported_arch, "CUDA backend: hidden_size must be a multiple of 8");

  if (options.kv_block_size < 0 || options.kv_blocks < 0)
    throw Error(errc::invalid_argument, "CUDA runner: kv_block_size " + std::to_string(options.kv_block_size) +
                                            " and kv_blocks " + std::to_string(options.kv_blocks) +
                                            " must not be negative");
  hidden_ = static_cast<int>(cfg.hidden_size);
  hq_ = static_cast<int>(plan.q_heads);
  hkv_ = static_cast<int>(plan.kv_heads);
  hd_ = static_cast<int>(cfg.head_dim);
  ff_ = static_cast<int>(plan.ff_size);
  vocab_ = static_cast<int>(cfg.vocab_size);
  gated_attention_ = cfg.attention_output_gate;
  rotary_dim_ = static_cast<int>(cfg.rope.rotary_dim(cfg.head_dim));
  qkv_rows_ = ((gated_attention_ ? 2 : 1) * hq_ + 2 * hkv_) * hd_;
  if (cfg.linear.hybrid()) {
    lin_ = kernels::LinearShape{static_cast<int>(plan.linear_key_heads), static_cast<int>(plan.linear_value_heads),
                                static_cast<int>(cfg.linear.key_head_dim), static_cast<int>(cfg.linear.value_head_dim),
                                static_cast<int>(cfg.linear.conv_kernel)};
    if (!kernels::linear_shape_supported(lin_))
      throw Error(errc::unsupported_arch,
                  "CUDA backend: linear attention of linear_key_head_dim " + std::to_string(lin_.key_dim) +
                      " (16, 32, 64, 128 or 256), linear_value_head_dim " + std::to_string(lin_.value_dim) +
                      " and linear_conv_kernel_dim " + std::to_string(lin_.kernel) + " (2 to 8) is not supported");
    lin_width_ = lin_.channels() + lin_.value_heads * lin_.value_dim + 2 * lin_.value_heads;
  }
  eps_ = static_cast<float>(cfg.rms_norm_eps);
  scale_ = 1.f / std::sqrt(static_cast<float>(hd_));
  max_ctx_ = model::resolve_max_context(cfg, options.max_context, default_max_context(device));
  block_size_ = options.kv_block_size > 0 ? options.kv_block_size : kDefaultKvBlockSize;
  max_blocks_per_seq_ = (max_ctx_ + block_size_ - 1) / block_size_;
  kv_blocks_ = options.kv_blocks > 0 ? options.kv_blocks : max_blocks_per_seq_;
  // Slots (block * block_size + slot) travel as i32, the scratch block included.
  if ((static_cast<std::int64_t>(kv_blocks_) + 1) * block_size_ > INT_MAX)
    throw Error(errc::invalid_argument, "CUDA runner: " + std::to_string(kv_blocks_) + " KV blocks of " +
                                            std::to_string(block_size_) + " positions exceed 2^31 slots");
  bytes_per_block_ = kv_bytes_per_block(cfg, plan, device, block_size_);
  use_gemv_ = env_flag("NEURON_CUDA_GEMV", true);
  kernels::set_programmatic_launch(env_flag("NEURON_CUDA_PDL", true));
  // The decode kernel's fused norm + RoPE takes plain q rows rotated whole; gated or partly rotated heads go
  // through qk_norm_rope first.
  fuse_decode_rope_ = env_flag("NEURON_CUDA_FUSED_ROPE", true) && !gated_attention_ && rotary_dim_ == hd_;
  fused_decode_ = env_flag("NEURON_CUDA_FUSED_DECODE", false) && !quantize_ && comm_->size() == 1 && use_gemv_ &&
                  fuse_decode_rope_ && kernels::gemv_swiglu_supported(ff_) && (hq_ * hd_) % 8 == 0;
  // A host communicator cannot run inside a graph; NCCL could, but one rank is what graphs are measured on.
  use_graphs_ = env_flag("NEURON_CUDA_GRAPHS", true) && comm_->size() == 1;
  moe_ff_ = static_cast<int>(plan.moe_ff_size);
  if (cfg.moe.num_experts > 0 || cfg.linear.hybrid()) fused_decode_ = false;

  cudaDeviceProp prop{};
  NEURON_CUDA_CHECK(cudaGetDeviceProperties(&prop, device.index));
  if (quantize_ == quant::GgmlType::fp8_e4m3 && prop.major < 9)
    throw Error(errc::unsupported_arch, "quant 'fp8' needs FP8 tensor cores (compute capability 9.0); " +
                                            device.str() + " is " + std::to_string(prop.major) + "." +
                                            std::to_string(prop.minor));
  sm_count_ = prop.multiProcessorCount;

  const auto t0 = std::chrono::steady_clock::now();
  load_weights(checkpoint);
  LinearScratch scratch;
  auto note = [&](const DeviceMatrix& m) {
    for (const DeviceMatrix::Part& p : m.parts) {
      scratch.fp8 = scratch.fp8 || p.type == quant::GgmlType::fp8_e4m3;
      scratch.dequantize = scratch.dequantize || (p.type != quant::GgmlType::bf16 && p.type != quant::GgmlType::fp8_e4m3);
    }
  };
  if (!cfg_.tie_word_embeddings) note(lm_head_);
  for (const Layer& l : layers_) {
    for (const DeviceMatrix* m : {&l.qkv, &l.o, &l.gate_up, &l.down, &l.router, &l.shared_gate_up, &l.shared_down,
                                  &l.shared_gate})
      note(*m);
    if (l.linear) {
      note(l.linear->in_proj);
      note(l.linear->out);
    }
    for (const Layer::Expert& e : l.experts) {
      note(e.gate_up);
      note(e.down);
    }
  }
  if (scratch.fp8 || scratch.dequantize) fused_decode_ = false;  // its kernels read bf16 weights
  setup_moe_on_device();
  // Host-routed MoE layers synchronise inside the step: no graphs.
  if (cfg.moe.num_experts > 0 && !moe_on_device_) use_graphs_ = false;
  linear_.emplace(stream_.get(), use_gemv_, scratch, std::max(kMaxPassTokens, kLogitRows),
                  std::max({hidden_, hq_ * hd_, ff_, moe_ff_, shared_ff_, lin_.value_heads * lin_.value_dim}));
  // Zeros, not garbage, in the slots no step has written yet: cheap, and a
  // bug that reads one then yields a wrong number rather than a NaN cascade.
  kv_pool_ = DeviceBuffer(static_cast<std::size_t>(bytes_per_block_) * (static_cast<std::size_t>(kv_blocks_) + 1));
  NEURON_CUDA_CHECK(cudaMemsetAsync(kv_pool_.data(), 0, kv_pool_.bytes(), stream_.get()));

  const auto n = static_cast<std::size_t>(kMaxPassTokens);
  x_ = DeviceBuffer(4 * n * hidden_);
  h_ = DeviceBuffer(2 * n * hidden_);
  qkv_ = DeviceBuffer(2 * n * qkv_rows_);
  q_ = DeviceBuffer(2 * n * hq_ * hd_);
  attn_ = DeviceBuffer(2 * n * hq_ * hd_);
  delta_ = DeviceBuffer(4 * n * hidden_);
  const auto ff_max = static_cast<std::size_t>(std::max({ff_, moe_ff_, shared_ff_}));
  gate_up_ = DeviceBuffer(2 * n * 2 * ff_max);
  act_ = DeviceBuffer(2 * n * ff_max);
  if (gated_attention_) gate_ = DeviceBuffer(2 * n * hq_ * hd_);
  if (cfg.linear.hybrid()) {
    lin_in_ = DeviceBuffer(4 * n * static_cast<std::size_t>(lin_width_));
    lin_conv_ = DeviceBuffer(4 * n * static_cast<std::size_t>(lin_.channels()));
    if (kernels::delta_chunked_supported(lin_))
      lin_chunk_ = DeviceBuffer(4 * kernels::delta_chunk_scratch_floats(lin_, kMaxPassTokens));
    lin_out_ = DeviceBuffer(2 * n * static_cast<std::size_t>(lin_.value_heads) * lin_.value_dim);
    if (options.state_slots < 0)
      throw Error(errc::invalid_argument, "state_slots " + std::to_string(options.state_slots) + " is negative");
    const std::int32_t slots = options.state_slots > 0 ? options.state_slots : kDefaultStateSlots;
    setup_states(slots, resolve_state_snapshots(options.state_snapshots, slots));
  }
  if (shared_ff_ > 0) {
    shared_out_ = DeviceBuffer(4 * n * hidden_);
    shared_logit_ = DeviceBuffer(4 * n);
  }
  if (cfg.moe.num_experts > 0) {
    const auto experts = static_cast<std::size_t>(cfg.moe.num_experts);
    const auto routed = n * static_cast<std::size_t>(cfg.moe.experts_per_token);
    router_logits_ = DeviceBuffer(4 * n * experts);
    router_host_ = PinnedBuffer(4 * n * experts);
    moe_host_ = PinnedBuffer(8 * routed);
    moe_dev_ = DeviceBuffer(8 * routed);
    expert_h_ = DeviceBuffer(2 * n * hidden_);
    expert_out_ = DeviceBuffer(4 * n * hidden_);
  }
  // The split-K scratch of the largest split pass: splits shrink as items grow, so scan them all.
  std::size_t scratch_floats = 0, counters = 0;
  for (int items = 1; items <= kMaxPassTokens; ++items) {
    const int splits = decode_splits(items, max_ctx_);  // >= graph_splits
    if (splits == 1) break;
    scratch_floats = std::max(scratch_floats, kernels::decode_scratch_floats(items, hq_, hd_, splits));
    counters = std::max(counters, kernels::decode_counters(items, hq_, hkv_));
  }
  decode_scratch_ = DeviceBuffer(4 * std::max<std::size_t>(scratch_floats, 1));
  decode_counters_ = DeviceBuffer(4 * std::max<std::size_t>(counters, 1));
  NEURON_CUDA_CHECK(cudaMemsetAsync(decode_counters_.data(), 0, decode_counters_.bytes(), stream_.get()));
  head_rows_ = DeviceBuffer(2 * static_cast<std::size_t>(kLogitRows) * hidden_);
  logits_ = DeviceBuffer(4 * static_cast<std::size_t>(kLogitRows) * vocab_);
  picks_dev_ = DeviceBuffer(4 * n);
  if (comm_->size() > 1 && comm_->location() == dist::MemoryLocation::host)
    reduce_host_ = PinnedBuffer(4 * n * hidden_);
  // Room for the fixed part of the largest pass and a full graph batch of the longest tables; grows on demand.
  reserve_step_inputs(14 * n + static_cast<std::size_t>(kMaxGraphBatch) * max_blocks_per_seq_ + 1);
  stream_.synchronize();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info(
      "cuda runner {} rank {}/{}: {:.2f} GB weights, {:.2f} GB KV pool ({} blocks of {} positions, context {}), "
      "{:.2f} GB recurrent state ({} slots, {} snapshots) ready in {:.2f} s",
      device.str(), plan.rank, plan.world, weight_bytes_ / 1e9, kv_pool_.bytes() / 1e9, kv_blocks_, block_size_,
      max_ctx_, states_.bytes() / 1e9, state_slots_, state_snapshots_, seconds);
}

CudaRunner::~CudaRunner() {
  // Nothing may be in flight when the buffers go; errors here cannot be reported.
  cudaStreamSynchronize(stream_.get());
}

void CudaRunner::place(const model::SliceSpec& spec, const io::Checkpoint* checkpoint, std::optional<Uploader>& up,
                       bf16_t* dst) {
  if (checkpoint) {
    if (!up) up.emplace();
    up->upload(model::slice_view(*checkpoint, spec), dst);
    return;
  }
  const std::int64_t full_cols = spec.shape.size() == 2 ? spec.shape[1] : 1;
  const std::int64_t col0 = spec.shape.size() == 2 ? spec.col_begin : 0;
  // Projections with std 0.02 keep activations in a realistic range (norms are a scale of 1: norm()).
  kernels::fill_random_bf16(dst, spec.rows(), spec.cols(), spec.row_begin, col0, full_cols, fnv1a(spec.name), 0.0346f,
                            stream_.get());
}

void CudaRunner::load_weights(const io::Checkpoint* checkpoint) {
  if (checkpoint) model::reject_unsupported_tensors(*checkpoint, cfg_);
  const model::ShardSpecs specs = model::shard_specs(cfg_, plan_);
  std::optional<Uploader> up;  // pinned staging only when there is a checkpoint to read
  embed_ = matrix({&specs.embed}, checkpoint, up, Hold::bf16);
  final_norm_ = norm(specs.final_norm, checkpoint);
  if (!cfg_.tie_word_embeddings) lm_head_ = matrix({&specs.lm_head}, checkpoint, up, Hold::lm_head);

  const std::vector<float> inv = model::rope_inv_freq(cfg_);
  inv_freq_ = DeviceBuffer(4 * inv.size());
  NEURON_CUDA_CHECK(cudaMemcpy(inv_freq_.data(), inv.data(), 4 * inv.size(), cudaMemcpyHostToDevice));

  layers_.reserve(specs.layers.size());
  for (const model::LayerSpecs& s : specs.layers) {
    Layer l;
    if (const auto& a = s.attention) {
      l.input_norm = norm(a->norm, checkpoint);
      l.qkv = matrix({&a->q_proj, &a->k_proj, &a->v_proj}, checkpoint, up, Hold::quantizable);
      if (a->q_norm) l.q_norm = norm(*a->q_norm, checkpoint);
      if (a->k_norm) l.k_norm = norm(*a->k_norm, checkpoint);
      l.o = matrix({&a->o_proj}, checkpoint, up, Hold::quantizable);
    }
    if (const auto& la = s.linear) {
      l.input_norm = norm(la->norm, checkpoint);
      l.linear = load_linear(*la, checkpoint, up);
    }
    l.post_norm = norm(s.ffn_norm, checkpoint);
    if (s.mlp) {
      l.gate_up = matrix({&s.mlp->gate_proj, &s.mlp->up_proj}, checkpoint, up, Hold::quantizable);
      l.down = matrix({&s.mlp->down_proj}, checkpoint, up, Hold::quantizable);
    }
    if (s.moe) {
      l.router = matrix({&s.moe->router}, checkpoint, up, Hold::as_stored);
      NEURON_ASSERT(s.moe->expert_begin == plan_.expert_begin &&
                    static_cast<std::int64_t>(s.moe->experts.size()) == plan_.experts);
      load_experts(l, *s.moe, checkpoint, up);
      if (const auto& se = s.moe->shared_expert) {
        l.shared_gate_up = matrix({&se->gate_proj, &se->up_proj}, checkpoint, up, Hold::quantizable);
        l.shared_down = matrix({&se->down_proj}, checkpoint, up, Hold::quantizable);
        l.shared_gate = matrix({&*s.moe->shared_expert_gate}, checkpoint, up, Hold::as_stored);
        shared_ff_ = std::max(shared_ff_, l.shared_down.cols);
      }
    }
    layers_.push_back(std::move(l));
  }
  if (up) up->finish();
}

std::vector<float> CudaRunner::host_f32(const model::SliceSpec& spec, const io::Checkpoint* checkpoint) const {
  std::vector<float> f(static_cast<std::size_t>(spec.numel()));
  if (checkpoint) {
    model::slice_view(*checkpoint, spec).to_f32(f);
    return f;
  }
  std::vector<std::uint16_t> h(f.size());
  model::fill_dummy(spec, h);
  std::transform(h.begin(), h.end(), f.begin(), [](std::uint16_t v) { return bf16_to_f32(v); });
  return f;
}

DeviceBuffer CudaRunner::upload_f32(const std::vector<float>& v) {
  DeviceBuffer b(4 * v.size());
  NEURON_CUDA_CHECK(cudaMemcpy(b.data(), v.data(), b.bytes(), cudaMemcpyHostToDevice));
  weight_bytes_ += b.bytes();
  return b;
}

DeviceBuffer CudaRunner::upload_bf16(const std::vector<float>& v) {
  std::vector<std::uint16_t> h(v.size());
  std::transform(v.begin(), v.end(), h.begin(), [](float f) { return f32_to_bf16(f); });
  DeviceBuffer b(2 * h.size());
  NEURON_CUDA_CHECK(cudaMemcpy(b.data(), h.data(), b.bytes(), cudaMemcpyHostToDevice));
  weight_bytes_ += b.bytes();
  return b;
}

DeviceBuffer CudaRunner::norm(const model::SliceSpec& spec, const io::Checkpoint* checkpoint) {
  std::vector<float> w;
  if (checkpoint)
    w = host_f32(spec, checkpoint);
  else  // stand-in norms are a scale of 1 (stored as 0 when zero-centred)
    w.assign(static_cast<std::size_t>(spec.numel()), cfg_.zero_centred_norms ? 0.f : 1.f);
  model::to_norm_scale(cfg_, w);
  return upload_bf16(w);
}

CudaRunner::Layer::Linear CudaRunner::load_linear(const model::LinearAttentionSpecs& la,
                                                  const io::Checkpoint* checkpoint, std::optional<Uploader>& up) {
  Layer::Linear l;
  // One stack: q, k, v, z, then the b and a rows (2 Hv of them); quantize-at-load takes them all (the CPU
  // leaves b and a as stored).
  std::vector<const model::SliceSpec*> rows;
  for (const auto* part : {&la.qkv, &la.z, &la.b, &la.a})
    for (const model::SliceSpec& sl : *part) rows.push_back(&sl);
  l.in_proj = matrix_of(rows, checkpoint, up, Hold::quantizable);
  NEURON_ASSERT(l.in_proj.rows == lin_width_);
  std::vector<float> taps;  // [C, K]: the q, k and v channels of this rank's heads
  for (const model::SliceSpec& part : la.conv) {
    const std::vector<float> t = host_f32(part, checkpoint);
    taps.insert(taps.end(), t.begin(), t.end());
  }
  l.conv = upload_f32(taps);
  std::vector<float> a = host_f32(la.a_log, checkpoint);
  for (float& v : a) v = -std::exp(v);
  l.neg_a = upload_f32(a);
  l.dt_bias = upload_f32(host_f32(la.dt_bias, checkpoint));
  std::vector<float> g = checkpoint ? host_f32(la.gated_norm, checkpoint)
                                    : std::vector<float>(static_cast<std::size_t>(la.gated_norm.numel()), 1.f);
  l.gated_norm = upload_bf16(g);  // a plain scale, not zero-centred
  l.out = matrix({&la.out_proj}, checkpoint, up, Hold::quantizable);
  return l;
}

void CudaRunner::setup_states(std::int32_t slots, std::int32_t snapshots) {
  const std::size_t conv = static_cast<std::size_t>(lin_.channels()) * (lin_.kernel - 1);
  const std::size_t delta = static_cast<std::size_t>(lin_.value_heads) * lin_.key_dim * lin_.value_dim;
  std::size_t at = 0;
  for (Layer& l : layers_) {
    if (!l.linear) continue;
    l.linear->state.conv_offset = at;
    l.linear->state.delta_offset = at + conv;
    at += conv + delta;
  }
  slot_floats_ = at;
  state_slots_ = slots;
  state_snapshots_ = snapshots;
  // The last slot is the scratch one a graph's padding sequences write.
  states_ = DeviceBuffer(4 * slot_floats_ * (static_cast<std::size_t>(slots) + snapshots + 1));
  NEURON_CUDA_CHECK(cudaMemsetAsync(states_.data(), 0, states_.bytes(), stream_.get()));
  for (Layer& l : layers_)
    if (l.linear) {
      l.linear->state.base = states_.data<float>();
      l.linear->state.slot_floats = slot_floats_;
    }
}

void CudaRunner::copy_state(std::int32_t from, std::int32_t to) {
  DeviceGuard g(device_.index);
  const std::size_t bytes = 4 * slot_floats_;
  NEURON_CUDA_CHECK(cudaMemcpyAsync(states_.data<std::byte>() + static_cast<std::size_t>(to) * bytes,
                                    states_.data<std::byte>() + static_cast<std::size_t>(from) * bytes, bytes,
                                    cudaMemcpyDeviceToDevice, stream_.get()));
}

DeviceMatrix CudaRunner::matrix(std::initializer_list<const model::SliceSpec*> specs, const io::Checkpoint* checkpoint,
                                std::optional<Uploader>& up, Hold hold) {
  return matrix_of(std::span<const model::SliceSpec* const>(specs.begin(), specs.size()), checkpoint, up, hold);
}

namespace {
constexpr std::size_t kWeightAlign = 256;  // every matrix, part, and an FP8 part's scales, start here
std::size_t weight_align(std::size_t b) { return (b + kWeightAlign - 1) / kWeightAlign * kWeightAlign; }
}  // namespace

CudaRunner::MatrixPlan CudaRunner::plan_matrix(std::span<const model::SliceSpec* const> specs,
                                               const io::Checkpoint* checkpoint, Hold hold) {
  using quant::GgmlType;
  using Slice = MatrixPlan::Slice;
  MatrixPlan plan;
  DeviceMatrix& m = plan.m;
  m.cols = static_cast<int>(specs.front()->cols());
  std::vector<std::vector<Slice>>& by_part = plan.by_part;
  for (const model::SliceSpec* spec : specs) {
    NEURON_ASSERT(spec->cols() == m.cols);
    Slice sl;
    sl.spec = spec;
    GgmlType type = GgmlType::bf16;
    if (checkpoint) {
      sl.view = model::slice_view(*checkpoint, *spec);
      if (sl.view->quantized() && hold != Hold::bf16) type = sl.view->ggml_type();
    }
    const bool quantizable =
        hold == Hold::quantizable || (hold == Hold::lm_head && quantize_ == GgmlType::fp8_e4m3);
    if (type == GgmlType::bf16 && quantizable && quantize_) {
      check_quantizable(*spec, *quantize_);
      type = *quantize_;
      sl.quantize = true;
    }
    if (type != GgmlType::bf16 && type != GgmlType::fp8_e4m3 && !kernels::quant_supported(type))
      fail(errc::unsupported_arch, "tensor " + spec->name + " is " + std::string(quant::ggml_type_name(type)) +
                                       ", which the CUDA backend cannot compute with (Q8_0, Q4_0, Q4_K, Q5_K, Q6_K, or "
                                       "a float type)");
    if (m.parts.empty() || m.parts.back().type != type) {
      m.parts.push_back({type, 0, 0, 0});
      by_part.emplace_back();
    }
    m.parts.back().rows += static_cast<int>(spec->rows());
    m.rows += static_cast<int>(spec->rows());
    by_part.back().push_back(std::move(sl));
  }
  std::size_t end = 0;
  for (DeviceMatrix::Part& p : m.parts) {
    p.offset = weight_align(end);
    end = p.offset + static_cast<std::size_t>(p.rows) * quant::row_bytes(p.type, m.cols);
    if (p.type == GgmlType::fp8_e4m3) {
      p.scales = weight_align(end);
      end = p.scales + 4 * static_cast<std::size_t>(p.rows);
    }
  }
  plan.bytes = end;
  return plan;
}

DeviceMatrix CudaRunner::matrix_of(std::span<const model::SliceSpec* const> specs, const io::Checkpoint* checkpoint,
                                   std::optional<Uploader>& up, Hold hold) {
  MatrixPlan plan = plan_matrix(specs, checkpoint, hold);
  DeviceBuffer memory(plan.bytes);
  weight_bytes_ += memory.bytes();
  std::byte* dst = memory.data<std::byte>();
  DeviceMatrix m = fill_matrix(std::move(plan), dst, checkpoint, up);
  m.own(std::move(memory));
  return m;
}

void CudaRunner::load_experts(Layer& l, const model::MoeSpecs& moe, const io::Checkpoint* checkpoint,
                              std::optional<Uploader>& up) {
  std::vector<MatrixPlan> plans;    // [2 E_local] each expert's gate_up, then its down
  std::vector<std::size_t> offset;  // [2 E_local] where each starts in expert_memory
  std::size_t total = 0;
  for (const model::MlpSpecs& e : moe.experts) {
    const model::SliceSpec* gate_up[] = {&e.gate_proj, &e.up_proj};
    const model::SliceSpec* down[] = {&e.down_proj};
    using Specs = std::span<const model::SliceSpec* const>;
    for (Specs specs : {Specs(gate_up), Specs(down)}) {
      plans.push_back(plan_matrix(specs, checkpoint, Hold::quantizable));
      offset.push_back(weight_align(total));
      total = offset.back() + plans.back().bytes;
    }
  }
  l.expert_memory = DeviceBuffer(total);
  weight_bytes_ += l.expert_memory.bytes();
  std::byte* base = l.expert_memory.data<std::byte>();
  auto fill = [&](std::size_t i) { return fill_matrix(std::move(plans[i]), base + offset[i], checkpoint, up); };
  l.experts.reserve(moe.experts.size());
  for (std::size_t i = 0; i < plans.size(); i += 2) {
    DeviceMatrix gate_up = fill(i);
    l.experts.push_back({std::move(gate_up), fill(i + 1)});
  }
}

DeviceMatrix CudaRunner::fill_matrix(MatrixPlan plan, std::byte* dst_base, const io::Checkpoint* checkpoint,
                                     std::optional<Uploader>& up) {
  using quant::GgmlType;
  using Slice = MatrixPlan::Slice;
  DeviceMatrix m = std::move(plan.m);
  const std::vector<std::vector<Slice>>& by_part = plan.by_part;
  m.data = dst_base;

  std::vector<std::byte> host;  // [packed bytes of one slice] a packed or quantized slice on its way up
  for (std::size_t i = 0; i < m.parts.size(); ++i) {
    const DeviceMatrix::Part& p = m.parts[i];
    std::byte* dst = m.data + p.offset;
    if (p.type == GgmlType::fp8_e4m3) {
      // The part's whole rows in bf16 first (a temporary: a rank holding some
      // columns scales by the whole row, as TP=1 does), then quantized on the device.
      const model::SliceSpec& first = *by_part[i].front().spec;
      const std::int64_t full_cols = first.shape.size() == 2 ? first.shape[1] : first.cols();
      DeviceBuffer staged(2 * static_cast<std::size_t>(p.rows) * static_cast<std::size_t>(full_cols));  // [rows, full_cols] bf16
      bf16_t* at = staged.data<bf16_t>();
      for (const Slice& sl : by_part[i]) {
        NEURON_ASSERT(sl.spec->col_begin == first.col_begin);
        model::SliceSpec whole = *sl.spec;
        whole.col_begin = 0;
        whole.col_end = full_cols;
        place(whole, checkpoint, up, at);
        at += whole.numel();
      }
      if (up) up->finish();  // the copies run on the uploader's stream
      kernels::fp8_quantize_rows(staged.data<bf16_t>(), p.rows, static_cast<int>(full_cols),
                                 static_cast<int>(first.col_begin), m.cols, reinterpret_cast<std::uint8_t*>(dst),
                                 reinterpret_cast<float*>(m.data + p.scales), stream_.get());
      stream_.synchronize();  // before `staged` goes
      continue;
    }
    for (const Slice& sl : by_part[i]) {
      if (p.type == GgmlType::bf16) {
        place(*sl.spec, checkpoint, up, reinterpret_cast<bf16_t*>(dst));
        dst += 2 * static_cast<std::size_t>(sl.spec->numel());
        continue;
      }
      if (!up) up.emplace();
      const std::size_t bytes = packed_bytes(*sl.spec, p.type);
      if (sl.quantize) {
        host.resize(bytes);
        quantize_slice(checkpoint, *sl.spec, p.type, host);
        up->upload_bytes(host, dst);
      } else {
        NEURON_ASSERT(sl.view->ggml_type() == p.type);
        up->upload_rows(*sl.view, sl.spec->rows(), quant::row_bytes(p.type, sl.spec->cols()), dst);
      }
      dst += bytes;
    }
  }
  return m;
}

MemoryStats CudaRunner::memory() const {
  return MemoryStats{weight_bytes_, kv_pool_.bytes() + states_.bytes(), device_.str()};
}

kernels::PagedKv CudaRunner::kv(std::size_t layer) const {
  // One of K or V of one layer: [kv_blocks + 1, hkv, block_size, hd].
  const std::size_t plane = (static_cast<std::size_t>(kv_blocks_) + 1) * hkv_ * block_size_ * hd_;
  bf16_t* base = kv_pool_.data<bf16_t>() + 2 * layer * plane;
  return kernels::PagedKv{base, base + plane, hkv_, block_size_};
}

int CudaRunner::decode_splits(int items, int max_len) const {
  if (items <= 0) return 1;
  auto ceil_div = [](int a, int b) { return (a + b - 1) / b; };
  const int blocks = items * hkv_ * kernels::decode_head_chunks(hq_, hkv_);  // per split
  const int wanted = std::clamp(ceil_div(2 * sm_count_, blocks), 1, kDecodeSplitsPerSequence);
  return std::clamp(ceil_div(max_len, kernels::kDecodeMinSplitKeys), 1, wanted);
}

int CudaRunner::graph_splits(int items, int max_len) const {
  int bucket = 1;
  while (2 * bucket <= decode_splits(items, max_len)) bucket *= 2;
  return std::min(bucket, kMaxDecodeSplits);
}

void CudaRunner::reserve_step_inputs(std::size_t ints) {
  if (ints <= step_capacity_) return;
  stream_.synchronize();  // nothing may still read the old buffers
  const std::size_t capacity = std::max(ints, step_capacity_ + step_capacity_ / 2);
  step_in_ = DeviceBuffer(4 * capacity);
  step_host_ = PinnedBuffer(4 * capacity);
  step_capacity_ = capacity;
  for (auto& by_splits : graphs_)  // they read the old step_in_
    for (auto& pair : by_splits)
      for (GraphExec& g : pair) g.reset();
}

void CudaRunner::all_reduce(float* data, std::size_t count) {
  if (comm_->size() == 1) return;
  if (comm_->location() == dist::MemoryLocation::device) {
    comm_->all_reduce_sum(data, count, DType::f32, stream_.get());
    return;
  }
  // Ranks sharing a GPU meet on the host: stage out, sum, stage back.
  NEURON_CUDA_CHECK(cudaMemcpyAsync(reduce_host_.data(), data, 4 * count, cudaMemcpyDeviceToHost, stream_.get()));
  stream_.synchronize();
  comm_->all_reduce_sum(reduce_host_.data(), count, DType::f32, nullptr);
  NEURON_CUDA_CHECK(cudaMemcpyAsync(data, reduce_host_.data(), 4 * count, cudaMemcpyHostToDevice, stream_.get()));
}

PassPlan CudaRunner::upload_pass(std::span<const PassSeq> seqs, int graph) {
  PassPlan p = plan_pass(seqs, graph >= 0 ? kGraphLadder[static_cast<std::size_t>(graph)] : 0);
  reserve_step_inputs(static_cast<std::size_t>(p.layout.end));
  const std::span<std::int32_t> staging(step_host_.data<std::int32_t>(), static_cast<std::size_t>(p.layout.end));
  pack_pass(seqs, p, block_size_, kv_blocks_, staging, state_slots_ + state_snapshots_);
  NEURON_CUDA_CHECK(cudaMemcpyAsync(step_in_.data(), staging.data(), staging.size_bytes(), cudaMemcpyHostToDevice,
                                    stream_.get()));
  return p;
}

kernels::DecodeRope CudaRunner::decode_rope(const Layer& layer) const {
  const bf16_t* q_norm = layer.q_norm.bytes() ? w(layer.q_norm) : nullptr;
  const bf16_t* k_norm = layer.k_norm.bytes() ? w(layer.k_norm) : nullptr;
  return kernels::DecodeRope{qkv_.data<bf16_t>(), q_norm, k_norm, inv_freq_.data<float>(), eps_};
}

void CudaRunner::run_layers(const PassPlan& p, int splits) {
  const std::int32_t* in = step_in_.data<std::int32_t>();
  pass_ = PassState{&p, p.max_seq_tokens, splits, p.tokens == 1 && fused_decode_};
  pending_ = nullptr;
  kernels::embed(in + p.layout.tokens, p.tokens, w(embed_), hidden_, vocab_, x_.data<float>(), stream_.get());
  for (std::int64_t i = 0; i < cfg_.num_hidden_layers; ++i) family_.layer(*this, cfg_, i);
  kernels::add_rmsnorm(x_.data<float>(), pending_, w(final_norm_), h_.data<bf16_t>(), p.tokens, hidden_, eps_,
                       stream_.get());
  pending_ = nullptr;
}

void CudaRunner::attention(std::int64_t li) {
  const Layer& layer = layers_[static_cast<std::size_t>(li)];
  const PassPlan& p = *pass_.plan;
  cudaStream_t s = stream_.get();
  const int n = p.tokens;
  const StepLayout& l = p.layout;
  const std::int32_t* in = step_in_.data<std::int32_t>();
  const kernels::StepSeqs seqs{in + l.q_start, in + l.num_tokens, in + l.position,
                               in + l.block_offset, in + l.ctx_len, in + l.block_tables};
  const std::int32_t* items = in + l.decode_items;
  float* scratch = decode_scratch_.data<float>();
  auto* counters = decode_counters_.data<unsigned>();
  float* x = x_.data<float>();
  const auto i = static_cast<std::size_t>(cfg_.kv_layer_index(li));  // its K and V among the full-attention layers'
  if (pass_.fused) {
    // One rank, one token: the norm runs inside the projection that consumes it, and the row-parallel
    // projection adds straight into the residual stream (no all-reduce to wait for).
    kernels::gemv_rmsnorm(w(layer.qkv), x, w(layer.input_norm), eps_, qkv_rows_, hidden_, qkv_.data<bf16_t>(), s);
    kernels::attention_decode(nullptr, decode_rope(layer), kv(i), seqs, items, 1, hq_, hd_, scale_, pass_.splits,
                              scratch, counters, attn_.data<bf16_t>(), s);
    kernels::gemv_accumulate(w(layer.o), attn_.data<bf16_t>(), hidden_, hq_ * hd_, x, s);
    return;
  }
  bf16_t* h = h_.data<bf16_t>();
  float* delta = delta_.data<float>();
  kernels::add_rmsnorm(x, pending_, w(layer.input_norm), h, n, hidden_, eps_, s);
  linear(h, n, layer.qkv, qkv_.data<bf16_t>());
  if (p.decode_only && fuse_decode_rope_) {
    kernels::attention_decode(nullptr, decode_rope(layer), kv(i), seqs, items, p.n_decode, hq_, hd_, scale_,
                              pass_.splits, scratch, counters, attn_.data<bf16_t>(), s);
  } else {
    const kernels::DecodeRope rope = decode_rope(layer);
    const kernels::QkvLayout layout{rotary_dim_, gated_attention_ ? gate_.data<bf16_t>() : nullptr};
    kernels::qk_norm_rope(qkv_.data<bf16_t>(), n, hq_, hd_, rope.q_norm, rope.k_norm, inv_freq_.data<float>(),
                          in + l.positions, in + l.slots, eps_, q_.data<bf16_t>(), kv(i), s, layout);
    kernels::attention_decode(q_.data<bf16_t>(), {}, kv(i), seqs, items, p.n_decode, hq_, hd_, scale_, pass_.splits,
                              scratch, counters, attn_.data<bf16_t>(), s);
    kernels::attention_prefill(q_.data<bf16_t>(), kv(i), seqs, in + l.tiles, p.n_tiles, hq_, hd_, scale_,
                               attn_.data<bf16_t>(), s);
    if (gated_attention_)
      kernels::mul_sigmoid(attn_.data<bf16_t>(), gate_.data<bf16_t>(), static_cast<std::size_t>(n) * hq_ * hd_, s);
  }
  linear(attn_.data<bf16_t>(), n, layer.o, delta);
  all_reduce(delta, static_cast<std::size_t>(n) * hidden_);
  pending_ = delta;
}

// Gated DeltaNet (block_ops.hpp): the in-projections over every token at once, each sequence's conv and
// delta rule from its state slot (gated_delta.hpp), out_proj.
void CudaRunner::linear_attention(std::int64_t li) {
  const Layer& layer = layers_[static_cast<std::size_t>(li)];
  NEURON_ASSERT(layer.linear);
  const Layer::Linear& L = *layer.linear;
  const PassPlan& p = *pass_.plan;
  cudaStream_t s = stream_.get();
  const int n = p.tokens;
  const std::int32_t* in = step_in_.data<std::int32_t>();
  const StepLayout& l = p.layout;
  const kernels::LinearSeqs seqs{in + l.q_start, in + l.num_tokens, in + l.position, in + l.state_slot};
  bf16_t* h = h_.data<bf16_t>();
  float* delta = delta_.data<float>();
  kernels::add_rmsnorm(x_.data<float>(), pending_, w(layer.input_norm), h, n, hidden_, eps_, s);
  linear(h, n, L.in_proj, lin_in_.data<float>());
  const int C = lin_.channels(), value = lin_.value_heads * lin_.value_dim;
  kernels::delta_conv(lin_in_.data<float>(), lin_width_, L.conv.data<float>(), lin_, seqs, p.seqs, pass_.max_seq_tokens,
                      L.state, lin_conv_.data<float>(), s);
  // Prompts take the chunked form (its cost linear in the tokens, in [64, dk] products); decode steps, and the
  // graphs, the recurrent kernel.
  if (pass_.max_seq_tokens >= kernels::kDeltaChunkTokens && lin_chunk_.bytes() > 0)
    kernels::delta_rule_chunked(lin_conv_.data<float>(), lin_in_.data<float>(), lin_width_, C, C + value,
                                C + value + lin_.value_heads, L.neg_a.data<float>(), L.dt_bias.data<float>(),
                                w(L.gated_norm), eps_, lin_, seqs, p.seqs, pass_.max_seq_tokens, L.state,
                                lin_chunk_.data<float>(), lin_out_.data<bf16_t>(), s);
  else
    kernels::delta_rule(lin_conv_.data<float>(), lin_in_.data<float>(), lin_width_, C, C + value,
                        C + value + lin_.value_heads, L.neg_a.data<float>(), L.dt_bias.data<float>(),
                        w(L.gated_norm), eps_, lin_, seqs, p.seqs, L.state, lin_out_.data<bf16_t>(), s);
  linear(lin_out_.data<bf16_t>(), n, L.out, delta);
  all_reduce(delta, static_cast<std::size_t>(n) * hidden_);
  pending_ = delta;
}

void CudaRunner::shared_expert(const Layer& layer, int n) {
  if (layer.shared_gate_up.rows == 0) return;
  cudaStream_t s = stream_.get();
  const bf16_t* h = h_.data<bf16_t>();
  linear_->swiglu(h, n, layer.shared_gate_up, gate_up_.data<bf16_t>(), act_.data<bf16_t>());
  linear(act_.data<bf16_t>(), n, layer.shared_down, shared_out_.data<float>());
  linear(h, n, layer.shared_gate, shared_logit_.data<float>());
  kernels::add_sigmoid_scaled(shared_out_.data<float>(), shared_logit_.data<float>(), n, hidden_, delta_.data<float>(), s);
}

void CudaRunner::mlp(std::int64_t li) {
  const Layer& layer = layers_[static_cast<std::size_t>(li)];
  cudaStream_t s = stream_.get();
  const int n = pass_.plan->tokens;
  float* x = x_.data<float>();
  if (pass_.fused) {
    kernels::gemv_rmsnorm(w(layer.gate_up), x, w(layer.post_norm), eps_, 2 * ff_, hidden_, gate_up_.data<bf16_t>(), s);
    kernels::gemv_swiglu(w(layer.down), gate_up_.data<bf16_t>(), hidden_, ff_, x, true, s);
    return;
  }
  bf16_t* h = h_.data<bf16_t>();
  float* delta = delta_.data<float>();
  kernels::add_rmsnorm(x, pending_, w(layer.post_norm), h, n, hidden_, eps_, s);
  if (n == 1 && use_gemv_ && !layer.down.quantized() && kernels::gemv_swiglu_supported(ff_)) {
    linear(h, n, layer.gate_up, gate_up_.data<bf16_t>());
    kernels::gemv_swiglu(w(layer.down), gate_up_.data<bf16_t>(), hidden_, ff_, delta, false, s);
  } else {
    linear_->swiglu(h, n, layer.gate_up, gate_up_.data<bf16_t>(), act_.data<bf16_t>());
    linear(act_.data<bf16_t>(), n, layer.down, delta);
  }
  all_reduce(delta, static_cast<std::size_t>(n) * hidden_);
  pending_ = delta;
}

void CudaRunner::setup_moe_on_device() {
  const auto experts = static_cast<std::size_t>(plan_.experts);  // L, the rank's
  if (experts == 0 || !env_flag("NEURON_CUDA_MOE_DEVICE", true) || !kernels::moe_experts_supported(hidden_, moe_ff_) ||
      static_cast<std::size_t>(kMaxGraphBatch) * static_cast<std::size_t>(cfg_.moe.experts_per_token) >
          static_cast<std::size_t>(kernels::kMoeMaxPairs))
    return;
  // One part of one type each, the same type across the layer's experts: that type, else nothing.
  auto layer_type = [](const Layer& l, auto member) -> std::optional<quant::GgmlType> {
    std::optional<quant::GgmlType> type;
    for (const Layer::Expert& e : l.experts) {
      const DeviceMatrix& m = e.*member;
      if (m.parts.size() != 1 || (type && *type != m.parts[0].type)) return std::nullopt;
      type = m.parts[0].type;
    }
    if (type && *type != quant::GgmlType::bf16 && !kernels::quant_moe_supported(*type)) return std::nullopt;
    return type;
  };
  for (Layer& l : layers_) {
    if (l.experts.empty()) continue;
    const auto gate_up = layer_type(l, &Layer::Expert::gate_up), down = layer_type(l, &Layer::Expert::down);
    if (!gate_up || !down) return;
    l.expert_gate_up_type = *gate_up;
    l.expert_down_type = *down;
  }
  for (Layer& l : layers_) {
    if (l.experts.empty()) continue;
    std::vector<const void*> ptrs(2 * experts);  // [2, L]
    for (std::size_t e = 0; e < experts; ++e) {
      const Layer::Expert& ex = l.experts[e];
      ptrs[e] = ex.gate_up.part_data(ex.gate_up.parts[0]);
      ptrs[experts + e] = ex.down.part_data(ex.down.parts[0]);
    }
    l.expert_ptrs = DeviceBuffer(sizeof(const void*) * ptrs.size());
    NEURON_CUDA_CHECK(cudaMemcpy(l.expert_ptrs.data(), ptrs.data(), l.expert_ptrs.bytes(), cudaMemcpyHostToDevice));
  }
  // Room for a graph's batch, or for the grouping's most pairs where the prefill runs here too.
  const int k = cfg_.moe.experts_per_token;
  const bool prefill_here = std::any_of(layers_.begin(), layers_.end(), [&](const Layer& l) {
    return !l.experts.empty() && moe_prefill_on_device(l);
  });
  moe_chunk_tokens_ = prefill_here ? kernels::kMoeMaxPairs / k : kMaxGraphBatch;
  const auto pairs = static_cast<std::size_t>(moe_chunk_tokens_) * static_cast<std::size_t>(k);
  // i32/f32 words: expert, weight, slot_pair, pair_slot [pairs] each; offsets, active [L + 1] each
  moe_route_buf_ = DeviceBuffer(4 * (4 * pairs + 2 * (experts + 1)));
  auto* words = moe_route_buf_.data<std::int32_t>();
  moe_route_.expert = words;
  moe_route_.weight = reinterpret_cast<float*>(words + pairs);
  moe_route_.slot_pair = words + 2 * pairs;
  moe_route_.pair_slot = words + 3 * pairs;
  moe_route_.offsets = words + 4 * pairs;
  moe_route_.active = words + 4 * pairs + experts + 1;
  moe_act_ = DeviceBuffer(2 * pairs * static_cast<std::size_t>(moe_ff_));
  moe_out_ = DeviceBuffer(4 * pairs * static_cast<std::size_t>(hidden_));
  moe_on_device_ = true;
}

// Passes of up to kMaxGraphBatch tokens route and run on the device (moe_kernels.hpp, quant_moe_rows) when
// setup_moe_on_device took the experts, and so do longer passes over block-quantized experts the grouped
// tensor-core kernels take (moe_prefill_on_device), in chunks; other longer passes (bf16 prefill), and
// experts setup_moe_on_device did not take (FP8, mixed), route on the host. Either routes over all E experts
// and runs this rank's (moe_experts(): all of them unless expert parallel); the all-reduce sums the ranks' parts.
void CudaRunner::moe(std::int64_t li) {
  const Layer& layer = layers_[static_cast<std::size_t>(li)];
  cudaStream_t s = stream_.get();
  const int n = pass_.plan->tokens;
  bf16_t* h = h_.data<bf16_t>();
  float* delta = delta_.data<float>();
  kernels::add_rmsnorm(x_.data<float>(), pending_, w(layer.post_norm), h, n, hidden_, eps_, s);
  linear(h, n, layer.router, router_logits_.data<float>());
  // A graph's pass (captured: no host synchronisation) runs on the device up to the largest graph batch; an
  // eager one up to kMoeEagerDeviceTokens, past which the host-routed cuBLAS products are the faster
  // (bench/cuda/runs/moe-2026-12-06: 128 prompt tokens of 30B-A3B, 71 ms on the device, 42 on the host).
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  NEURON_CUDA_CHECK(cudaStreamIsCapturing(s, &capture));
  const bool captured = capture == cudaStreamCaptureStatusActive;
  const bool graph_sized = n <= kMaxGraphBatch && (captured || n <= kMoeEagerDeviceTokens);
  if (moe_on_device_ && graph_sized) {
    moe_on_device(layer, 0, n);
  } else if (moe_on_device_ && moe_prefill_on_device(layer)) {
    for (int r0 = 0; r0 < n; r0 += moe_chunk_tokens_) moe_on_device(layer, r0, std::min(moe_chunk_tokens_, n - r0));
  } else {
    moe_on_host(layer, n);
  }
  shared_expert(layer, n);
  all_reduce(delta, static_cast<std::size_t>(n) * hidden_);
  pending_ = delta;
}

bool CudaRunner::moe_prefill_on_device(const Layer& layer) const {
  const auto mma = [](quant::GgmlType type, int cols) {
    return type != quant::GgmlType::bf16 && kernels::quant_mma_gemv_supported(type, cols);
  };
  return mma(layer.expert_gate_up_type, hidden_) && mma(layer.expert_down_type, moe_ff_);
}

// Rows [row0, row0 + n) of the pass: routed and grouped on the device, the chosen experts' products over their
// tokens, and the weighted sum into those rows of delta.
void CudaRunner::moe_on_device(const Layer& layer, int row0, int n) {
  NEURON_ASSERT(n > 0 && n <= moe_chunk_tokens_);
  cudaStream_t s = stream_.get();
  const kernels::MoeExperts mine = moe_experts();
  const int experts = mine.count, k = cfg_.moe.experts_per_token;
  const auto* ptrs = layer.expert_ptrs.data<const void*>();  // [2, L]
  const auto at = static_cast<std::size_t>(row0);
  const bf16_t* h = h_.data<bf16_t>() + at * static_cast<std::size_t>(hidden_);
  float* delta = delta_.data<float>() + at * static_cast<std::size_t>(hidden_);
  kernels::moe_route_group(router_logits_.data<float>() + at * static_cast<std::size_t>(mine.total), n, mine, k,
                           cfg_.moe.norm_topk_prob, moe_route_, s);
  bf16_t* act = moe_act_.data<bf16_t>();
  if (layer.expert_gate_up_type == quant::GgmlType::bf16) {
    kernels::moe_gate_up(reinterpret_cast<const bf16_t* const*>(ptrs), h, n, k, experts, hidden_, moe_ff_, moe_route_,
                         act, s);
  } else {
    kernels::quant_moe_swiglu(layer.expert_gate_up_type, ptrs, moe_ff_, hidden_, h, n, k, experts, moe_route_, act, s);
  }
  const auto* down = reinterpret_cast<const bf16_t* const*>(ptrs + experts);
  if (layer.expert_down_type == quant::GgmlType::bf16 && kernels::moe_down_combine_supported(n, k)) {
    kernels::moe_down_combine(down, act, n, k, hidden_, moe_ff_, mine, moe_route_, delta, s);
    return;
  }
  if (layer.expert_down_type == quant::GgmlType::bf16)
    kernels::moe_down(down, act, n, k, experts, hidden_, moe_ff_, moe_route_, moe_out_.data<float>(), s);
  else
    kernels::quant_moe_rows(layer.expert_down_type, ptrs + experts, hidden_, moe_ff_, act, false, n, k, experts,
                            moe_route_, moe_out_.data<float>(), s);
  kernels::moe_combine(moe_out_.data<float>(), n, k, hidden_, mine, moe_route_, delta, s);
}

// Routed on the host (model::MoeRouter over the router's logits, all E experts), then each of this rank's
// chosen experts over its tokens gathered: SwiGLU, down projection, and its weighted rows added into delta in
// expert order. The other ranks' experts add nothing here.
void CudaRunner::moe_on_host(const Layer& layer, int n) {
  cudaStream_t s = stream_.get();
  const kernels::MoeExperts mine = moe_experts();
  NEURON_ASSERT(static_cast<int>(layer.experts.size()) == mine.count);
  bf16_t* h = h_.data<bf16_t>();
  float* delta = delta_.data<float>();
  NEURON_CUDA_CHECK(cudaMemcpyAsync(router_host_.data(), router_logits_.data(),
                                    4 * static_cast<std::size_t>(n) * static_cast<std::size_t>(mine.total),
                                    cudaMemcpyDeviceToHost, s));
  stream_.synchronize();  // also: no earlier copy still reads moe_host_
  router_.route(router_host_.data<float>(), n, cfg_.moe);
  auto tokens_of = [&](int local) -> const std::vector<model::RoutedToken>& {
    return router_.tokens_of(mine.begin + local);
  };
  std::size_t routed = 0;  // the pairs of this rank's experts
  for (int e = 0; e < mine.count; ++e) routed += tokens_of(e).size();
  NEURON_CUDA_CHECK(cudaMemsetAsync(delta, 0, 4 * static_cast<std::size_t>(n) * hidden_, s));
  if (routed == 0) return;
  auto* rows = moe_host_.data<std::int32_t>();  // [routed] token rows, then [routed] weights
  auto* weights = reinterpret_cast<float*>(rows + routed);
  std::size_t at = 0;
  for (int e = 0; e < mine.count; ++e)
    for (const model::RoutedToken& t : tokens_of(e)) {
      rows[at] = static_cast<std::int32_t>(t.token);
      weights[at++] = t.weight;
    }
  NEURON_CUDA_CHECK(cudaMemcpyAsync(moe_dev_.data(), moe_host_.data(), 8 * routed, cudaMemcpyHostToDevice, s));
  const auto* rows_dev = moe_dev_.data<std::int32_t>();
  const auto* weights_dev = reinterpret_cast<const float*>(rows_dev + routed);
  at = 0;
  for (int e = 0; e < mine.count; ++e) {
    const auto m = static_cast<int>(tokens_of(e).size());
    if (m == 0) continue;  // an expert no token chose is never read
    const Layer::Expert& ex = layer.experts[static_cast<std::size_t>(e)];
    kernels::gather_rows(h, rows_dev + at, m, hidden_, expert_h_.data<bf16_t>(), s);
    linear_->swiglu(expert_h_.data<bf16_t>(), m, ex.gate_up, gate_up_.data<bf16_t>(), act_.data<bf16_t>());
    linear(act_.data<bf16_t>(), m, ex.down, expert_out_.data<float>());
    kernels::scatter_add_rows(expert_out_.data<float>(), rows_dev + at, weights_dev + at, m, hidden_, delta, s);
    at += static_cast<std::size_t>(m);
  }
}

void CudaRunner::lm_head(const bf16_t* h_rows, int rows, float* out) {
  linear(h_rows, rows, cfg_.tie_word_embeddings ? embed_ : lm_head_, out);
}

void CudaRunner::replay_graph(int graph, int split_bucket, const PassPlan& p, int splits, bool want_logits) {
  cudaStream_t s = stream_.get();
  GraphExec& g = graphs_[static_cast<std::size_t>(graph)][static_cast<std::size_t>(split_bucket)][want_logits ? 1 : 0];
  if (!g) {
    NEURON_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    try {
      run_layers(p, splits);
      if (want_logits) lm_head(h_.data<bf16_t>(), p.tokens, logits_.data<float>());
    } catch (...) {
      cudaGraph_t broken = nullptr;
      cudaStreamEndCapture(s, &broken);  // leave the stream usable
      if (broken) cudaGraphDestroy(broken);
      throw;
    }
    cudaGraph_t graph = nullptr;
    NEURON_CUDA_CHECK(cudaStreamEndCapture(s, &graph));
    g.adopt(graph);
  }
  g.launch(s);
}

void CudaRunner::pick(const std::int32_t* dev_rows, int first, int n, int at) {
  kernels::argmax_rows(logits_.data<float>() + static_cast<std::size_t>(first) * vocab_, vocab_, dev_rows, n,
                       picks_dev_.data<std::int32_t>() + at, stream_.get());
}

void CudaRunner::copy_hidden_rows(std::span<const PassSeq> seqs, std::span<float> out) {
  const auto hid = static_cast<std::size_t>(hidden_);
  thread_local std::vector<bf16_t> staged;  // [hidden rows, hidden] bf16 copied out of h_
  staged.resize(out.size());
  std::size_t row = 0, token = 0;  // rows written; the pass's first token of the current piece
  for (const PassSeq& q : seqs) {
    const std::size_t n = q.tokens.size();
    const std::size_t take = q.logits == LogitsWanted::hidden_all ? n : q.logits == LogitsWanted::hidden_last ? 1 : 0;
    if (take > 0)
      NEURON_CUDA_CHECK(cudaMemcpyAsync(staged.data() + row * hid, h_.data<bf16_t>() + (token + n - take) * hid,
                                        2 * take * hid, cudaMemcpyDeviceToHost, stream_.get()));
    row += take;
    token += n;
  }
  NEURON_ASSERT(row * hid == out.size());
  stream_.synchronize();
  std::transform(staged.begin(), staged.end(), out.begin(), [](bf16_t v) { return bf16_to_f32(v); });
}

void CudaRunner::run_pass(std::span<const PassSeq> seqs, std::span<float> out, std::span<std::int32_t> picks,
                          std::span<float> hidden) {
  cudaStream_t s = stream_.get();
  const auto v = static_cast<std::size_t>(vocab_);
  bool decode_only = true;
  for (const PassSeq& q : seqs) decode_only = decode_only && q.tokens.size() == 1;
  int graph = -1;
  // Hidden rows come from an eager pass (a graph's LM head covers every row; hidden ones need none).
  if (decode_only && hidden.empty() && use_graphs_ && seqs.size() <= static_cast<std::size_t>(kMaxGraphBatch))
    graph = static_cast<int>(std::lower_bound(kGraphLadder.begin(), kGraphLadder.end(), static_cast<int>(seqs.size())) -
                             kGraphLadder.begin());
  const PassPlan p = upload_pass(seqs, graph);
  const auto rows = static_cast<int>(p.rows.size());
  const auto n_picks = static_cast<int>(p.picks.size());
  NEURON_ASSERT(out.size() == static_cast<std::size_t>(rows) * v && picks.size() == static_cast<std::size_t>(n_picks));
  if (graph >= 0) {
    // The graph's grid serves contexts up to its split bucket's; its LM head covers every row of the batch:
    // copy the asked-for rows, in runs, and pick the others.
    const int splits = graph_splits(p.seqs, p.max_decode_ctx);
    const int bucket = std::countr_zero(static_cast<unsigned>(splits));
    replay_graph(graph, bucket, p, splits, rows + n_picks > 0);
    for (int r = 0; r < rows;) {
      int k = 1;
      while (r + k < rows && p.rows[r + k] == p.rows[r] + k) ++k;
      NEURON_CUDA_CHECK(cudaMemcpyAsync(out.data() + static_cast<std::size_t>(r) * v,
                                        logits_.data<float>() + static_cast<std::size_t>(p.rows[r]) * v,
                                        4 * static_cast<std::size_t>(k) * v, cudaMemcpyDeviceToHost, s));
      r += k;
    }
    if (n_picks > 0) {
      pick(step_in_.data<std::int32_t>() + p.layout.pick_rows, 0, n_picks, 0);
      NEURON_CUDA_CHECK(cudaMemcpyAsync(picks.data(), picks_dev_.data(), 4 * picks.size(), cudaMemcpyDeviceToHost, s));
    }
    stream_.synchronize();
    return;
  }
  run_layers(p, decode_splits(p.n_decode, p.max_decode_ctx));
  if (!hidden.empty()) copy_hidden_rows(seqs, hidden);  // before the LM head: h_ is its input, never its output
  // The LM head reads rows then picks (head_rows), kLogitRows at a time.
  const std::int32_t* dev_rows = step_in_.data<std::int32_t>() + p.layout.head_rows;
  std::vector<std::int32_t> head(p.rows);
  head.insert(head.end(), p.picks.begin(), p.picks.end());
  const auto total = static_cast<int>(head.size());
  for (int r = 0; r < total; r += kLogitRows) {
    const int k = std::min(kLogitRows, total - r);
    const bf16_t* src = h_.data<bf16_t>() + static_cast<std::size_t>(head[r]) * hidden_;
    bool run = true;
    for (int i = 1; i < k && run; ++i) run = head[r + i] == head[r] + i;
    if (!run) {
      kernels::gather_rows(h_.data<bf16_t>(), dev_rows + r, k, hidden_, head_rows_.data<bf16_t>(), s);
      src = head_rows_.data<bf16_t>();
    }
    lm_head(src, k, logits_.data<float>());
    const int k_rows = std::clamp(rows - r, 0, k);  // the chunk's logits rows come first
    if (k_rows > 0)
      NEURON_CUDA_CHECK(cudaMemcpyAsync(out.data() + static_cast<std::size_t>(r) * v, logits_.data(),
                                        4 * static_cast<std::size_t>(k_rows) * v, cudaMemcpyDeviceToHost, s));
    if (k > k_rows) pick(nullptr, k_rows, k - k_rows, r + k_rows - rows);
    if (r + k < total) stream_.synchronize();  // logits_ is reused by the next rows
  }
  if (n_picks > 0)
    NEURON_CUDA_CHECK(cudaMemcpyAsync(picks.data(), picks_dev_.data(), 4 * picks.size(), cudaMemcpyDeviceToHost, s));
  stream_.synchronize();
}

HostFloats CudaRunner::alloc_logits(std::size_t count) const {
  // Page-locked: a device-to-host copy into pageable memory runs at a fraction of the link's speed
  // (39 MB of logits a step at batch 64 took 4.5 ms instead of about 1).
  void* p = nullptr;
  NEURON_CUDA_CHECK(cudaMallocHost(&p, count * sizeof(float)));
  return HostFloats(static_cast<float*>(p), HostFloatsDeleter{[](float* q) { (void)cudaFreeHost(q); }});
}

void CudaRunner::run_step(const Batch& batch, std::span<float> logits, std::span<std::int32_t> picks,
                          std::span<float> hidden) {
  check_batch(batch, cfg_, kv_pool(), max_ctx_, logits, picks, hidden);
  DeviceGuard g(device_.index);
  const auto v = static_cast<std::size_t>(vocab_);
  const auto hid = static_cast<std::size_t>(hidden_);
  split_passes(batch, block_size_, kMaxPassTokens, !logits.empty() || !picks.empty() || !hidden.empty(), passes_);
  std::size_t row = 0, picked = 0, hidden_row = 0;  // logits rows, picks and hidden rows written so far
  for (const std::vector<PassSeq>& pass : passes_) {
    const auto rows = static_cast<std::size_t>(pass_rows(pass));
    const auto n = static_cast<std::size_t>(pass_picks(pass));
    const auto h = static_cast<std::size_t>(pass_hidden_rows(pass));
    run_pass(pass, logits.subspan(row * v, rows * v), picks.subspan(picked, n), hidden.subspan(hidden_row * hid, h * hid));
    row += rows;
    picked += n;
    hidden_row += h;
  }
  NEURON_ASSERT(row * v == logits.size() && picked == picks.size() && hidden_row * hid == hidden.size());
}

}  // namespace

std::unique_ptr<ModelRunner> make_cuda_runner(const model::ModelConfig& cfg, const io::Checkpoint* checkpoint,
                                              const model::ShardPlan& plan, const Device& device,
                                              std::shared_ptr<dist::Communicator> comm, const RunnerOptions& options) {
  if (!device.is_cuda()) throw Error(errc::invalid_argument, "make_cuda_runner: " + device.str() + " is not a CUDA device");
  const int count = device_count();
  if (device.index < 0 || device.index >= count)
    throw Error(errc::invalid_argument, "make_cuda_runner: " + device.str() + " does not exist (" +
                                            std::to_string(count) + " CUDA devices)");
  return std::make_unique<CudaRunner>(cfg, checkpoint, plan, device, std::move(comm), options);
}

}  // namespace neuron::backend::cuda
