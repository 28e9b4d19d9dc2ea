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

}  // namespace neuron::backend
