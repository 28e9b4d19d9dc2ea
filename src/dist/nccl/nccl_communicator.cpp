#include "dist/nccl/nccl_communicator.hpp"

#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <thread>

#include "util/error.hpp"

namespace neuron::dist::nccl {

namespace {

using Clock = std::chrono::steady_clock;

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(errc::cuda, std::string(what) + ": " + cudaGetErrorString(e));
}

void check_nccl(ncclResult_t r, const char* what) {
  if (r != ncclSuccess && r != ncclInProgress) fail(errc::comm, std::string(what) + ": " + ncclGetErrorString(r));
}

ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::f32: return ncclFloat;
    case DType::bf16: return ncclBfloat16;
    case DType::f16: return ncclFloat16;
  }
  return ncclFloat;
}

ncclComm_t as_comm(void* p) { return static_cast<ncclComm_t>(p); }
cudaStream_t as_stream(void* p) { return static_cast<cudaStream_t>(p); }

bool is_device_pointer(const void* p) {
  cudaPointerAttributes attr{};
  if (cudaPointerGetAttributes(&attr, p) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error of an unknown host pointer
    return false;
  }
  return attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged;
}

// A device buffer for staging host data, freed on scope exit.
struct DeviceBuffer {
  void* ptr = nullptr;
  explicit DeviceBuffer(std::size_t bytes) { check_cuda(cudaMalloc(&ptr, bytes), "cudaMalloc (nccl staging)"); }
  ~DeviceBuffer() {
    if (ptr) cudaFree(ptr);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

}  // namespace

std::string new_unique_id_hex() {
  ncclUniqueId id;
  check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  static constexpr char digits[] = "0123456789abcdef";
  std::string hex;
  for (std::size_t i = 0; i < sizeof id.internal; ++i) {
    const auto b = static_cast<unsigned char>(id.internal[i]);
    hex += digits[b >> 4];
    hex += digits[b & 0xf];
  }
  return hex;
}

NcclCommunicator::NcclCommunicator(const std::string& hex, int rank, int world, int cuda_device,
                                   std::chrono::milliseconds timeout)
    : rank_(rank), world_(world), device_(cuda_device), timeout_(timeout) {
  ncclUniqueId id;
  if (hex.size() != 2 * sizeof id.internal)
    fail(errc::invalid_argument, "nccl comm_id must be " + std::to_string(2 * sizeof id.internal) + " hex digits, got " +
                                     std::to_string(hex.size()));
  auto nibble = [&](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    fail(errc::invalid_argument, "nccl comm_id holds a non-hex character");
  };
  for (std::size_t i = 0; i < sizeof id.internal; ++i)
    id.internal[i] = static_cast<char>(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));

  check_cuda(cudaSetDevice(cuda_device), "cudaSetDevice");
  cudaStream_t s = nullptr;
  check_cuda(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");
  stream_ = s;

  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // so that a peer that never joins cannot hang this rank
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, world, id, rank, &config);
  comm_ = comm;
  try {
    check_nccl(r, "ncclCommInitRankConfig");
    const auto deadline = Clock::now() + timeout;
    for (;;) {
      ncclResult_t state = ncclSuccess;
      check_nccl(ncclCommGetAsyncError(comm, &state), "ncclCommGetAsyncError");
      if (state == ncclSuccess) break;
      if (state != ncclInProgress) fail(errc::comm, std::string("nccl init: ") + ncclGetErrorString(state));
      if (Clock::now() > deadline)
        fail(errc::comm, "nccl init of rank " + std::to_string(rank) + " of " + std::to_string(world) +
                             ": peers did not join within " + std::to_string(timeout.count()) + " ms");
      std::this_thread::sleep_for(std::chrono::milliseconds{1});
    }
  } catch (...) {
    if (comm) ncclCommAbort(comm);
    comm_ = nullptr;
    cudaStreamDestroy(s);
    stream_ = nullptr;
    throw;
  }
}

NcclCommunicator::~NcclCommunicator() {
  std::lock_guard lock(mu_);
  if (comm_) {
    if (aborted_)
      ncclCommAbort(as_comm(comm_));
    else
      ncclCommDestroy(as_comm(comm_));
  }
  if (stream_) cudaStreamDestroy(as_stream(stream_));
}

void NcclCommunicator::check_usable(const char* op) const {
  std::lock_guard lock(mu_);
  if (aborted_ || !comm_)
    fail(errc::comm, std::string("nccl ") + op + " on rank " + std::to_string(rank_) +
                         ": the communicator was aborted after a failure");
}

void NcclCommunicator::abort() noexcept {
  std::lock_guard lock(mu_);
  if (aborted_ || !comm_) return;
  aborted_ = true;
  // Unblocks kernels spinning on a dead peer; the handle is released in the destructor.
  ncclCommAbort(as_comm(comm_));
  comm_ = nullptr;
}

void NcclCommunicator::wait(void* stream, const char* op) {
  const auto deadline = Clock::now() + timeout_;
  for (;;) {
    const cudaError_t q = cudaStreamQuery(as_stream(stream));
    if (q == cudaSuccess) return;
    if (q != cudaErrorNotReady) check_cuda(q, op);
    ncclResult_t state = ncclSuccess;
    {
      std::lock_guard lock(mu_);
      if (!comm_) fail(errc::comm, std::string("nccl ") + op + ": aborted while waiting");
      ncclCommGetAsyncError(as_comm(comm_), &state);
    }
    if (state != ncclSuccess && state != ncclInProgress) {
      abort();
      fail(errc::comm, std::string("nccl ") + op + " on rank " + std::to_string(rank_) + ": " + ncclGetErrorString(state));
    }
    if (Clock::now() > deadline) {
      abort();
      fail(errc::comm, std::string("nccl ") + op + " on rank " + std::to_string(rank_) + ": peers did not take part within " +
                           std::to_string(timeout_.count()) + " ms");
    }
    std::this_thread::yield();
  }
}

void NcclCommunicator::all_reduce_sum(void* data, std::size_t count, DType dtype, void* stream) {
  check_usable("all_reduce");
  if (count == 0) return;
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  cudaStream_t s = stream ? as_stream(stream) : as_stream(stream_);
  if (is_device_pointer(data)) {
    check_nccl(ncclAllReduce(data, data, count, nccl_type(dtype), ncclSum, as_comm(comm_), s), "ncclAllReduce");
    return;
  }
  const std::size_t bytes = count * dtype_size(dtype);
  DeviceBuffer staged(bytes);
  check_cuda(cudaMemcpyAsync(staged.ptr, data, bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync (h2d)");
  check_nccl(ncclAllReduce(staged.ptr, staged.ptr, count, nccl_type(dtype), ncclSum, as_comm(comm_), s), "ncclAllReduce");
  check_cuda(cudaMemcpyAsync(data, staged.ptr, bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync (d2h)");
  wait(s, "all_reduce");
}

void NcclCommunicator::all_gather(const void* in, void* out, std::size_t count, DType dtype, void* stream) {
  check_usable("all_gather");
  if (count == 0) return;
  check_cuda(cudaSetDevice(device_), "cudaSetDevice");
  cudaStream_t s = stream ? as_stream(stream) : as_stream(stream_);
  if (is_device_pointer(in) && is_device_pointer(out)) {
    check_nccl(ncclAllGather(in, out, count, nccl_type(dtype), as_comm(comm_), s), "ncclAllGather");
    return;
  }
  const std::size_t bytes = count * dtype_size(dtype);
  DeviceBuffer staged_in(bytes), staged_out(bytes * static_cast<std::size_t>(world_));
  check_cuda(cudaMemcpyAsync(staged_in.ptr, in, bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync (h2d)");
  check_nccl(ncclAllGather(staged_in.ptr, staged_out.ptr, count, nccl_type(dtype), as_comm(comm_), s), "ncclAllGather");
  check_cuda(cudaMemcpyAsync(out, staged_out.ptr, bytes * static_cast<std::size_t>(world_), cudaMemcpyDeviceToHost, s),
             "cudaMemcpyAsync (d2h)");
  wait(s, "all_gather");
}

void NcclCommunicator::barrier() {
  float one = 1.0f;
  all_reduce_sum(&one, 1, DType::f32, nullptr);  // host pointer: staged and waited for
}

}  // namespace neuron::dist::nccl
