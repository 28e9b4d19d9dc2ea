// One rank's shard of a Qwen3 model on one CUDA device (DESIGN.md sections 3, 4, 7).
//
// Data flow of a step of n tokens (x is the f32 residual stream, everything
// else bf16 unless noted; row-parallel outputs are f32 so the all-reduce and
// the residual add lose nothing):
//   x = embed[tokens]
//   per layer: h = rmsnorm(x += delta)          (delta: previous down output)
//              qkv = h Wqkv^T  -> q/k norm, RoPE -> q, K/V cache
//              a = attention(q, cache)          (flash prefill, split-KV decode)
//              delta = a Wo^T (f32), all-reduce; h = rmsnorm(x += delta)
//              act = silu(gate) * up of h Wgu^T; delta = act Wdown^T (f32), all-reduce
//   h = final_norm(x += delta); logits = h Wlm^T (f32)
// Batch-1 decode runs on the hand-written GEMV and, on one rank, as a CUDA
// graph captured once (positions and the token are read from device memory).
//
// Tuning switches, read once at construction (for the benchmarks in bench/):
//   NEURON_CUDA_GEMV=0    batch-1 projections on cuBLAS instead of the GEMV kernel
//   NEURON_CUDA_GRAPHS=0  launch the decode step eagerly instead of replaying a graph
//   NEURON_CUDA_PDL=0     no programmatic dependent launch between kernels
//   NEURON_CUDA_FUSED_ROPE=0  decode runs q/k norm + RoPE as its own kernel
//   NEURON_CUDA_FUSED_DECODE=1  one rank: norms inside the projections, residual adds in their epilogues
#include "backend/cuda/cuda_runner.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "backend/cuda/blas.hpp"
#include "backend/cuda/device_buffer.hpp"
#include "backend/cuda/kernels.hpp"
#include "dist/communicator.hpp"
#include "io/safetensors.hpp"
#include "model/shard_weights.hpp"
#include "util/error.hpp"

namespace neuron::backend::cuda {
namespace {

using kernels::bf16_t;

constexpr std::int32_t kDefaultMaxContext = 8192;
constexpr std::int32_t kMaxPrefillChunk = 4096;  // rows per pass; longer prompts run in chunks
constexpr std::int32_t kLogitRows = 64;          // rows per LM-head pass when every position's logits are asked
constexpr std::size_t kStagingBytes = std::size_t{64} << 20;

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

bool is_norm(const std::string& name) { return name.find("norm") != std::string::npos; }

// Copies host weights to the device through two pinned staging buffers: the
// CPU converts chunk i + 1 (bf16 from the mmap) while chunk i is in flight.
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
      view.rows(r0, r1).to_bf16(std::span<std::uint16_t>(staging_[b].data<std::uint16_t>(), count));
      NEURON_CUDA_CHECK(cudaMemcpyAsync(dst + r0 * cols, staging_[b].data(), count * 2, cudaMemcpyHostToDevice,
                                        copy_stream_.get()));
      NEURON_CUDA_CHECK(cudaEventRecord(done_[b].get(), copy_stream_.get()));
      bytes_ += count * 2;
    }
  }
  void finish() { copy_stream_.synchronize(); }
  std::uint64_t bytes() const noexcept { return bytes_; }

 private:
  Stream copy_stream_;
  std::array<PinnedBuffer, 2> staging_;  // [kStagingBytes] bytes each, bf16 chunks in flight
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

class CudaRunner final : public ModelRunner {
 public:
  CudaRunner(const model::Qwen3Config& cfg, const io::Checkpoint* checkpoint, const model::ShardPlan& plan,
             const Device& device, std::shared_ptr<dist::Communicator> comm, const RunnerOptions& options);
  ~CudaRunner() override;

  void forward(std::span<const std::int32_t> tokens, std::int32_t offset, std::span<float> logits) override;
  void clear_kv_cache() override;
  const model::Qwen3Config& config() const noexcept override { return cfg_; }
  std::int32_t max_context() const noexcept override { return max_ctx_; }
  MemoryStats memory() const override;

 private:
  struct Layer {
    DeviceBuffer input_norm;  // [hidden] bf16
    DeviceBuffer qkv;         // [(hq + 2 hkv) * hd, hidden] bf16: the rank's q, k, v rows stacked
    DeviceBuffer q_norm;      // [hd] bf16
    DeviceBuffer k_norm;      // [hd] bf16
    DeviceBuffer o;           // [hidden, hq * hd] bf16: the rank's input columns
    DeviceBuffer post_norm;   // [hidden] bf16
    DeviceBuffer gate_up;     // [2 * ff, hidden] bf16: gate rows then up rows of the rank's slice
    DeviceBuffer down;        // [hidden, ff] bf16: the rank's input columns
    DeviceBuffer k_cache;     // [hkv, max_ctx, hd] bf16
    DeviceBuffer v_cache;     // [hkv, max_ctx, hd] bf16
  };

  void load_weights(const io::Checkpoint* checkpoint);
  void place(const model::SliceSpec& spec, const io::Checkpoint* checkpoint, std::optional<Uploader>& up, bf16_t* dst);
  // Runs n tokens whose ids and start position already sit in meta_ on the device.
  void run_layers(int n);
  void lm_head(const bf16_t* h_rows, int rows, float* out);
  template <class Y>
  void linear(const bf16_t* x, int n, const DeviceBuffer& w, int rows, int cols, Y* y);
  void all_reduce(float* data, std::size_t count);
  void decode_step(bool want_logits);

  const bf16_t* w(const DeviceBuffer& b) const { return b.data<bf16_t>(); }

  model::Qwen3Config cfg_;
  model::ShardPlan plan_;
  Device device_;
  std::shared_ptr<dist::Communicator> comm_;
  std::int32_t max_ctx_ = 0;
  int hidden_ = 0, hq_ = 0, hkv_ = 0, hd_ = 0, ff_ = 0, vocab_ = 0, qkv_rows_ = 0;
  int chunk_ = 0, decode_splits_ = 1;
  float eps_ = 1e-6f, scale_ = 1.f;
  bool use_gemv_ = true, use_graphs_ = true, fuse_decode_rope_ = true, fused_decode_ = false;
  DeviceGuard guard_;
  Stream stream_;
  Blas blas_;

  DeviceBuffer embed_;       // [vocab, hidden] bf16
  DeviceBuffer final_norm_;  // [hidden] bf16
  DeviceBuffer lm_head_;     // [vocab, hidden] bf16; empty when tied to embed_
  DeviceBuffer inv_freq_;    // [hd / 2] f32: rope_theta^(-2j / hd)
  std::vector<Layer> layers_;
  std::uint64_t weight_bytes_ = 0, kv_bytes_ = 0;

  DeviceBuffer meta_;      // [1 + chunk] i32: start position, then the step's token ids
  PinnedBuffer meta_host_; // [1 + chunk] i32 staging for meta_
  DeviceBuffer x_;         // [chunk, hidden] f32 residual stream
  DeviceBuffer h_;         // [chunk, hidden] bf16 normalised activations
  DeviceBuffer qkv_;       // [chunk, qkv_rows] bf16
  DeviceBuffer q_;         // [chunk, hq * hd] bf16 after norm + RoPE
  DeviceBuffer attn_;      // [chunk, hq * hd] bf16
  DeviceBuffer delta_;     // [chunk, hidden] f32 row-parallel partial sums
  DeviceBuffer gate_up_;   // [chunk, 2 * ff] bf16
  DeviceBuffer act_;       // [chunk, ff] bf16
  DeviceBuffer decode_scratch_;  // [hq * splits * (hd + 2)] f32 split-KV partial softmax states
  DeviceBuffer logits_;    // [kLogitRows, vocab] f32
  PinnedBuffer reduce_host_;  // [chunk, hidden] f32 staging for a host (Gloo) all-reduce
  std::array<GraphExec, 2> decode_graph_;  // [without, with] the LM head
};

CudaRunner::CudaRunner(const model::Qwen3Config& cfg, const io::Checkpoint* checkpoint, const model::ShardPlan& plan,
                       const Device& device, std::shared_ptr<dist::Communicator> comm, const RunnerOptions& options)
    : cfg_(cfg),
      plan_(plan),
      device_(device),
      comm_(std::move(comm)),
      guard_(device.index),
      stream_(),
      blas_(stream_.get()) {
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
  hidden_ = static_cast<int>(cfg.hidden_size);
  hq_ = static_cast<int>(plan.q_heads);
  hkv_ = static_cast<int>(plan.kv_heads);
  hd_ = static_cast<int>(cfg.head_dim);
  ff_ = static_cast<int>(plan.ff_size);
  vocab_ = static_cast<int>(cfg.vocab_size);
  qkv_rows_ = (hq_ + 2 * hkv_) * hd_;
  eps_ = static_cast<float>(cfg.rms_norm_eps);
  scale_ = 1.f / std::sqrt(static_cast<float>(hd_));
  const std::int64_t model_max = cfg.max_position_embeddings > 0 ? cfg.max_position_embeddings : kDefaultMaxContext;
  max_ctx_ = static_cast<std::int32_t>(options.max_context > 0 ? std::min<std::int64_t>(options.max_context, model_max)
                                                               : std::min<std::int64_t>(kDefaultMaxContext, model_max));
  chunk_ = std::min(max_ctx_, kMaxPrefillChunk);
  use_gemv_ = env_flag("NEURON_CUDA_GEMV", true);
  kernels::set_programmatic_launch(env_flag("NEURON_CUDA_PDL", true));
  fuse_decode_rope_ = env_flag("NEURON_CUDA_FUSED_ROPE", true);
  fused_decode_ = env_flag("NEURON_CUDA_FUSED_DECODE", false) && comm_->size() == 1 && use_gemv_ &&
                  fuse_decode_rope_ && kernels::gemv_swiglu_supported(ff_) && (hq_ * hd_) % 8 == 0;
  // A host communicator cannot run inside a graph; NCCL could, but one rank is what graphs are measured on.
  use_graphs_ = env_flag("NEURON_CUDA_GRAPHS", true) && comm_->size() == 1;

  cudaDeviceProp prop{};
  NEURON_CUDA_CHECK(cudaGetDeviceProperties(&prop, device.index));
  // About four blocks per SM for the split-KV decode attention.
  decode_splits_ = std::clamp((4 * prop.multiProcessorCount + hq_ - 1) / hq_, 1, 64);

  const auto t0 = std::chrono::steady_clock::now();
  load_weights(checkpoint);

  const auto n = static_cast<std::size_t>(chunk_);
  meta_ = DeviceBuffer(4 * (n + 1));
  meta_host_ = PinnedBuffer(4 * (n + 1));
  x_ = DeviceBuffer(4 * n * hidden_);
  h_ = DeviceBuffer(2 * n * hidden_);
  qkv_ = DeviceBuffer(2 * n * qkv_rows_);
  q_ = DeviceBuffer(2 * n * hq_ * hd_);
  attn_ = DeviceBuffer(2 * n * hq_ * hd_);
  delta_ = DeviceBuffer(4 * n * hidden_);
  gate_up_ = DeviceBuffer(2 * n * 2 * ff_);
  act_ = DeviceBuffer(2 * n * ff_);
  decode_scratch_ = DeviceBuffer(4 * kernels::decode_scratch_floats(hq_, hd_, decode_splits_));
  NEURON_CUDA_CHECK(cudaMemset(decode_scratch_.data(), 0, decode_scratch_.bytes()));
  logits_ = DeviceBuffer(4 * static_cast<std::size_t>(kLogitRows) * vocab_);
  if (comm_->size() > 1 && comm_->location() == dist::MemoryLocation::host)
    reduce_host_ = PinnedBuffer(4 * n * hidden_);
  clear_kv_cache();
  stream_.synchronize();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("cuda runner {} rank {}/{}: {:.2f} GB weights, {:.2f} GB KV cache ({} positions) ready in {:.2f} s",
               device.str(), plan.rank, plan.world, weight_bytes_ / 1e9, kv_bytes_ / 1e9, max_ctx_, seconds);
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
  if (is_norm(spec.name)) {
    // Norm weights of 1 and projections with std 0.02 keep activations in a realistic range.
    kernels::fill_bf16(dst, static_cast<std::size_t>(spec.numel()), 1.f, stream_.get());
  } else {
    kernels::fill_random_bf16(dst, spec.rows(), spec.cols(), spec.row_begin, col0, full_cols, fnv1a(spec.name),
                              0.0346f, stream_.get());
  }
}

void CudaRunner::load_weights(const io::Checkpoint* checkpoint) {
  if (checkpoint) model::reject_unsupported_tensors(*checkpoint);
  const model::ShardSpecs specs = model::shard_specs(cfg_, plan_);
  std::optional<Uploader> up;  // pinned staging only when there is a checkpoint to read
  auto alloc = [&](const std::vector<const model::SliceSpec*>& parts) {
    std::size_t count = 0;
    for (const auto* p : parts) count += static_cast<std::size_t>(p->numel());
    DeviceBuffer buf(2 * count);
    bf16_t* dst = buf.data<bf16_t>();
    for (const auto* p : parts) {
      place(*p, checkpoint, up, dst);
      dst += p->numel();
    }
    weight_bytes_ += buf.bytes();
    return buf;
  };
  embed_ = alloc({&specs.embed});
  final_norm_ = alloc({&specs.final_norm});
  if (!cfg_.tie_word_embeddings) lm_head_ = alloc({&specs.lm_head});

  std::vector<float> inv(static_cast<std::size_t>(hd_ / 2));
  for (int j = 0; j < hd_ / 2; ++j)
    inv[j] = static_cast<float>(1.0 / std::pow(cfg_.rope_theta, 2.0 * j / static_cast<double>(hd_)));
  inv_freq_ = DeviceBuffer(4 * inv.size());
  NEURON_CUDA_CHECK(cudaMemcpy(inv_freq_.data(), inv.data(), 4 * inv.size(), cudaMemcpyHostToDevice));

  const std::size_t cache_bytes = 2 * static_cast<std::size_t>(hkv_) * max_ctx_ * hd_;
  layers_.reserve(specs.layers.size());
  for (const model::LayerSpecs& s : specs.layers) {
    Layer l;
    l.input_norm = alloc({&s.input_norm});
    l.qkv = alloc({&s.q_proj, &s.k_proj, &s.v_proj});
    l.q_norm = alloc({&s.q_norm});
    l.k_norm = alloc({&s.k_norm});
    l.o = alloc({&s.o_proj});
    l.post_norm = alloc({&s.post_norm});
    l.gate_up = alloc({&s.gate_proj, &s.up_proj});
    l.down = alloc({&s.down_proj});
    l.k_cache = DeviceBuffer(cache_bytes);
    l.v_cache = DeviceBuffer(cache_bytes);
    kv_bytes_ += 2 * cache_bytes;
    layers_.push_back(std::move(l));
  }
  if (up) up->finish();
}

void CudaRunner::clear_kv_cache() {
  DeviceGuard g(device_.index);
  // Zeros, not garbage: attention tiles read (and mask) positions past the
  // written ones, and 0 * NaN would poison a product.
  for (Layer& l : layers_) {
    NEURON_CUDA_CHECK(cudaMemsetAsync(l.k_cache.data(), 0, l.k_cache.bytes(), stream_.get()));
    NEURON_CUDA_CHECK(cudaMemsetAsync(l.v_cache.data(), 0, l.v_cache.bytes(), stream_.get()));
  }
  stream_.synchronize();
}

MemoryStats CudaRunner::memory() const { return MemoryStats{weight_bytes_, kv_bytes_, device_.str()}; }

template <class Y>
void CudaRunner::linear(const bf16_t* x, int n, const DeviceBuffer& wt, int rows, int cols, Y* y) {
  if (n == 1 && use_gemv_)
    kernels::gemv(w(wt), x, rows, cols, y, stream_.get());
  else
    blas_.linear(x, n, w(wt), rows, cols, y);
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

void CudaRunner::run_layers(int n) {
  cudaStream_t s = stream_.get();
  const std::int32_t* offset = meta_.data<std::int32_t>();
  const std::int32_t* tokens = offset + 1;
  float* x = x_.data<float>();
  bf16_t* h = h_.data<bf16_t>();
  float* delta = delta_.data<float>();
  kernels::embed(tokens, n, w(embed_), hidden_, vocab_, x, s);
  if (n == 1 && fused_decode_) {
    // One rank, one token: 5 kernels a layer. The norms run inside the
    // projections that consume them, and the row-parallel projections add
    // straight into the residual stream (no all-reduce to wait for).
    for (Layer& l : layers_) {
      kernels::gemv_rmsnorm(w(l.qkv), x, w(l.input_norm), eps_, qkv_rows_, hidden_, qkv_.data<bf16_t>(), s);
      kernels::attention_decode_fused(qkv_.data<bf16_t>(), w(l.q_norm), w(l.k_norm), inv_freq_.data<float>(), eps_,
                                      l.k_cache.data<bf16_t>(), l.v_cache.data<bf16_t>(), hq_, hkv_, hd_, max_ctx_,
                                      offset, scale_, decode_splits_, decode_scratch_.data<float>(),
                                      attn_.data<bf16_t>(), s);
      kernels::gemv_accumulate(w(l.o), attn_.data<bf16_t>(), hidden_, hq_ * hd_, x, s);
      kernels::gemv_rmsnorm(w(l.gate_up), x, w(l.post_norm), eps_, 2 * ff_, hidden_, gate_up_.data<bf16_t>(), s);
      kernels::gemv_swiglu(w(l.down), gate_up_.data<bf16_t>(), hidden_, ff_, x, true, s);
    }
    kernels::add_rmsnorm(x, nullptr, w(final_norm_), h, 1, hidden_, eps_, s);
    return;
  }
  const float* pending = nullptr;  // the previous down projection, added at the next norm
  for (Layer& l : layers_) {
    kernels::add_rmsnorm(x, pending, w(l.input_norm), h, n, hidden_, eps_, s);
    linear(h, n, l.qkv, qkv_rows_, hidden_, qkv_.data<bf16_t>());
    if (n == 1 && fuse_decode_rope_) {
      kernels::attention_decode_fused(qkv_.data<bf16_t>(), w(l.q_norm), w(l.k_norm), inv_freq_.data<float>(), eps_,
                                      l.k_cache.data<bf16_t>(), l.v_cache.data<bf16_t>(), hq_, hkv_, hd_, max_ctx_,
                                      offset, scale_, decode_splits_, decode_scratch_.data<float>(),
                                      attn_.data<bf16_t>(), s);
    } else {
      kernels::qk_norm_rope(qkv_.data<bf16_t>(), n, hq_, hkv_, hd_, w(l.q_norm), w(l.k_norm),
                            inv_freq_.data<float>(), offset, eps_, q_.data<bf16_t>(), l.k_cache.data<bf16_t>(),
                            l.v_cache.data<bf16_t>(), max_ctx_, s);
      if (n == 1)
        kernels::attention_decode(q_.data<bf16_t>(), l.k_cache.data<bf16_t>(), l.v_cache.data<bf16_t>(), hq_, hkv_,
                                  hd_, max_ctx_, offset, scale_, decode_splits_, decode_scratch_.data<float>(),
                                  attn_.data<bf16_t>(), s);
      else
        kernels::attention_prefill(q_.data<bf16_t>(), l.k_cache.data<bf16_t>(), l.v_cache.data<bf16_t>(), n, hq_,
                                   hkv_, hd_, max_ctx_, offset, scale_, attn_.data<bf16_t>(), s);
    }
    linear(attn_.data<bf16_t>(), n, l.o, hidden_, hq_ * hd_, delta);
    all_reduce(delta, static_cast<std::size_t>(n) * hidden_);
    kernels::add_rmsnorm(x, delta, w(l.post_norm), h, n, hidden_, eps_, s);
    linear(h, n, l.gate_up, 2 * ff_, hidden_, gate_up_.data<bf16_t>());
    if (n == 1 && use_gemv_ && kernels::gemv_swiglu_supported(ff_)) {
      kernels::gemv_swiglu(w(l.down), gate_up_.data<bf16_t>(), hidden_, ff_, delta, false, s);
    } else {
      kernels::swiglu(gate_up_.data<bf16_t>(), n, ff_, act_.data<bf16_t>(), s);
      linear(act_.data<bf16_t>(), n, l.down, hidden_, ff_, delta);
    }
    all_reduce(delta, static_cast<std::size_t>(n) * hidden_);
    pending = delta;
  }
  kernels::add_rmsnorm(x, pending, w(final_norm_), h, n, hidden_, eps_, s);
}

void CudaRunner::lm_head(const bf16_t* h_rows, int rows, float* out) {
  const DeviceBuffer& head = cfg_.tie_word_embeddings ? embed_ : lm_head_;
  linear(h_rows, rows, head, vocab_, hidden_, out);
}

void CudaRunner::decode_step(bool want_logits) {
  cudaStream_t s = stream_.get();
  auto body = [&] {
    run_layers(1);
    if (want_logits) lm_head(h_.data<bf16_t>(), 1, logits_.data<float>());
  };
  if (!use_graphs_) {
    body();
    return;
  }
  GraphExec& g = decode_graph_[want_logits ? 1 : 0];
  if (!g) {
    NEURON_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    try {
      body();
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

void CudaRunner::forward(std::span<const std::int32_t> tokens, std::int32_t offset, std::span<float> logits) {
  const auto n = static_cast<std::int64_t>(tokens.size());
  const auto v = static_cast<std::size_t>(vocab_);
  if (n == 0) throw Error(errc::invalid_argument, "forward: no tokens");
  if (offset < 0) throw Error(errc::invalid_argument, "forward: negative offset " + std::to_string(offset));
  if (offset + n > max_ctx_)
    throw Error(errc::context_length_exceeded, "forward: positions up to " + std::to_string(offset + n) +
                                                   " exceed the context of " + std::to_string(max_ctx_));
  for (std::int64_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab_)
      throw Error(errc::invalid_argument, "forward: token id " + std::to_string(tokens[i]) + " at index " +
                                              std::to_string(i) + " is outside the vocabulary of " +
                                              std::to_string(vocab_));
  const bool all_rows = logits.size() == static_cast<std::size_t>(n) * v && n > 1;
  if (!logits.empty() && logits.size() != v && !all_rows)
    throw Error(errc::invalid_argument, "forward: logits span of " + std::to_string(logits.size()) +
                                            " floats is neither [vocab] nor [n, vocab]");
  DeviceGuard g(device_.index);
  cudaStream_t s = stream_.get();
  std::int32_t* meta = meta_host_.data<std::int32_t>();

  for (std::int64_t c0 = 0; c0 < n; c0 += chunk_) {
    const int cn = static_cast<int>(std::min<std::int64_t>(chunk_, n - c0));
    const bool last_chunk = c0 + cn == n;
    meta[0] = offset + static_cast<std::int32_t>(c0);
    std::memcpy(meta + 1, tokens.data() + c0, 4 * static_cast<std::size_t>(cn));
    NEURON_CUDA_CHECK(cudaMemcpyAsync(meta_.data(), meta, 4 * (1 + static_cast<std::size_t>(cn)),
                                      cudaMemcpyHostToDevice, s));
    if (cn == 1 && !all_rows) {
      decode_step(last_chunk && !logits.empty());
    } else {
      run_layers(cn);
      if (all_rows) {
        for (int r0 = 0; r0 < cn; r0 += kLogitRows) {
          const int rows = std::min(kLogitRows, cn - r0);
          lm_head(h_.data<bf16_t>() + static_cast<std::size_t>(r0) * hidden_, rows, logits_.data<float>());
          NEURON_CUDA_CHECK(cudaMemcpyAsync(logits.data() + (c0 + r0) * v, logits_.data(), 4 * rows * v,
                                            cudaMemcpyDeviceToHost, s));
          stream_.synchronize();  // logits_ is reused by the next pass
        }
      } else if (last_chunk && !logits.empty()) {
        lm_head(h_.data<bf16_t>() + static_cast<std::size_t>(cn - 1) * hidden_, 1, logits_.data<float>());
      }
    }
    // The next chunk overwrites meta_host_, which an async copy may still read.
    stream_.synchronize();
  }
  if (logits.size() == v) {
    NEURON_CUDA_CHECK(cudaMemcpyAsync(logits.data(), logits_.data(), 4 * v, cudaMemcpyDeviceToHost, s));
  }
  stream_.synchronize();
}

}  // namespace

std::unique_ptr<ModelRunner> make_cuda_runner(const model::Qwen3Config& cfg, const io::Checkpoint* checkpoint,
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
