#pragma once
// Where a model runs: "cpu", or "cuda" / "cuda:N".
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace neuron::backend {

struct Device {
  enum class Kind { cpu, cuda };
  Kind kind = Kind::cpu;
  int index = 0;  // CUDA ordinal; 0 for the CPU

  static Device parse(std::string_view text);  // throws Error{invalid_argument}
  std::string str() const;                      // "cpu", "cuda:0"
  bool is_cuda() const noexcept { return kind == Kind::cuda; }
  bool operator==(const Device&) const = default;
};

// True when this build has CUDA and a device is present (for tests that skip without one).
bool cuda_available() noexcept;
int cuda_device_count() noexcept;

// A CUDA device's fixed facts (no context is made to read them).
struct CudaDeviceInfo {
  int index = 0;
  std::string name;
  std::uint64_t total_bytes = 0;
  std::string compute_capability;  // "9.0"
};
std::vector<CudaDeviceInfo> cuda_devices();  // empty without CUDA or a device; read once, then cached
// Why cuda_devices() is empty ("this build has no CUDA support", "no CUDA device
// or driver: ..."); empty when there are devices.
std::string cuda_unavailable_reason();
std::optional<std::string> cuda_runtime_version();  // "12.4"; nullopt without CUDA
std::optional<std::string> cuda_driver_version();   // the newest CUDA the driver supports, "12.8"
// Used and free bytes of a device, from the driver (cudaMemGetInfo). That call
// needs a context on the device, so only ask for devices this process already
// holds one on (a model runs there); nullopt without CUDA or on error.
struct CudaMemoryUse {
  std::uint64_t used_bytes = 0, free_bytes = 0;
};
std::optional<CudaMemoryUse> cuda_memory_use(int index);

}  // namespace neuron::backend
