#include "backend/device.hpp"

#include <charconv>
#include <string>

#include "util/error.hpp"

#ifdef NEURON_HAVE_CUDA
#include "backend/cuda/cuda_runner.hpp"
#endif

namespace neuron::backend {

Device Device::parse(std::string_view text) {
  auto bad = [&] {
    fail(errc::invalid_argument, "device '" + std::string(text) + "' is not 'cpu', 'cuda' or 'cuda:N'");
  };
  if (text == "cpu") return Device{};
  if (text == "cuda") return Device{Kind::cuda, 0};
  if (!text.starts_with("cuda:")) bad();
  const std::string_view num = text.substr(5);
  int index = -1;
  const auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), index);
  if (num.empty() || ec != std::errc{} || end != num.data() + num.size() || index < 0) bad();
  return Device{Kind::cuda, index};
}

std::string Device::str() const { return kind == Kind::cpu ? "cpu" : "cuda:" + std::to_string(index); }

int cuda_device_count() noexcept {
#ifdef NEURON_HAVE_CUDA
  return cuda::device_count();
#else
  return 0;
#endif
}

bool cuda_available() noexcept { return cuda_device_count() > 0; }

// Fixed for the process's life (devices do not come and go under a running
// driver), so /health and /discovery polls ask the driver once.
std::vector<CudaDeviceInfo> cuda_devices() {
  static const std::vector<CudaDeviceInfo> devices = [] {
    std::vector<CudaDeviceInfo> out;
#ifdef NEURON_HAVE_CUDA
    for (int i = 0, n = cuda_device_count(); i < n; ++i) {
      if (auto d = cuda::device_info(i)) out.push_back(std::move(*d));
    }
#endif
    return out;
  }();
  return devices;
}

std::string cuda_unavailable_reason() {
  static const std::string reason = [] {
#ifdef NEURON_HAVE_CUDA
    if (cuda_device_count() > 0) return std::string{};
    return "no CUDA device or driver: " + cuda::device_count_error();
#else
    return std::string("this build has no CUDA support");
#endif
  }();
  return reason;
}

std::optional<std::string> cuda_runtime_version() {
#ifdef NEURON_HAVE_CUDA
  return cuda::runtime_version();
#else
  return std::nullopt;
#endif
}

std::optional<std::string> cuda_driver_version() {
#ifdef NEURON_HAVE_CUDA
  return cuda::driver_version();
#else
  return std::nullopt;
#endif
}

std::optional<CudaMemoryUse> cuda_memory_use(int index) {
#ifdef NEURON_HAVE_CUDA
  if (index < 0 || index >= cuda_device_count()) return std::nullopt;
  return cuda::memory_use(index);
#else
  (void)index;
  return std::nullopt;
#endif
}

}  // namespace neuron::backend
