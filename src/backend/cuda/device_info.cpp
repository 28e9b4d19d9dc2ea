// Device discovery and the copy-bandwidth probe that `neuron bench` divides by.
#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_runner.hpp"
#include "backend/cuda/device_buffer.hpp"
#include "util/error.hpp"

namespace neuron::backend::cuda {

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver / no device: not an error for the caller
    return 0;
  }
  return n;
}

std::uint64_t device_total_memory(int device) {
  if (device < 0 || device >= device_count())
    throw Error(errc::invalid_argument, "device_total_memory: no CUDA device " + std::to_string(device));
  cudaDeviceProp prop{};
  NEURON_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  return prop.totalGlobalMem;
}

std::optional<CudaDeviceInfo> device_info(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    (void)cudaGetLastError();
    return std::nullopt;
  }
  return CudaDeviceInfo{device, prop.name, static_cast<std::uint64_t>(prop.totalGlobalMem),
                        std::to_string(prop.major) + "." + std::to_string(prop.minor)};
}

std::string device_count_error() {
  int n = 0;
  const cudaError_t err = cudaGetDeviceCount(&n);
  if (err == cudaSuccess) return n > 0 ? std::string{} : "no device";
  (void)cudaGetLastError();
  return cudaGetErrorString(err);
}

namespace {
std::optional<std::string> version_string(int v) {
  if (v <= 0) return std::nullopt;
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}
}  // namespace

std::optional<std::string> runtime_version() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) {
    (void)cudaGetLastError();
    return std::nullopt;
  }
  return version_string(v);
}

std::optional<std::string> driver_version() {
  int v = 0;
  if (cudaDriverGetVersion(&v) != cudaSuccess) {
    (void)cudaGetLastError();
    return std::nullopt;
  }
  return version_string(v);
}

std::optional<CudaMemoryUse> memory_use(int device) {
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) {
    (void)cudaGetLastError();
    return std::nullopt;
  }
  std::size_t free = 0, total = 0;
  const bool ok = cudaMemGetInfo(&free, &total) == cudaSuccess;
  if (!ok) (void)cudaGetLastError();
  (void)cudaSetDevice(previous);
  if (!ok) return std::nullopt;
  return CudaMemoryUse{static_cast<std::uint64_t>(total - free), static_cast<std::uint64_t>(free)};
}

// Convention (METHOD.md, and DESIGN.md's 4301 GB/s): a copy of S bytes moves
// 2*S bytes through HBM (S read + S written). The median of 20 timed 1 GiB
// copies after warm-up, so one slow copy does not move the figure.
double measure_copy_bandwidth_gbs(int device) {
  if (device < 0 || device >= device_count())
    throw Error(errc::invalid_argument, "measure_copy_bandwidth_gbs: no CUDA device " + std::to_string(device));
  DeviceGuard guard(device);
  constexpr std::size_t bytes = std::size_t{1} << 30;
  DeviceBuffer src(bytes), dst(bytes);
  Stream stream;
  NEURON_CUDA_CHECK(cudaMemsetAsync(src.data(), 0x5a, bytes, stream.get()));
  for (int i = 0; i < 3; ++i)
    NEURON_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, stream.get()));
  Event start(cudaEventDefault), stop(cudaEventDefault);
  std::vector<float> ms;
  for (int i = 0; i < 20; ++i) {
    NEURON_CUDA_CHECK(cudaEventRecord(start.get(), stream.get()));
    NEURON_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), bytes, cudaMemcpyDeviceToDevice, stream.get()));
    NEURON_CUDA_CHECK(cudaEventRecord(stop.get(), stream.get()));
    NEURON_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    float t = 0;
    NEURON_CUDA_CHECK(cudaEventElapsedTime(&t, start.get(), stop.get()));
    ms.push_back(t);
  }
  std::nth_element(ms.begin(), ms.begin() + ms.size() / 2, ms.end());
  const double seconds = ms[ms.size() / 2] * 1e-3;
  return 2.0 * static_cast<double>(bytes) / seconds / 1e9;
}

}  // namespace neuron::backend::cuda
