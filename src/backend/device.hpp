#pragma once
// Where a model runs: "cpu", or "cuda" / "cuda:N".
#include <string>
#include <string_view>

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

}  // namespace neuron::backend
