// libFuzzer target: arbitrary bytes as a safetensors file. Either the header
// is refused with neuron::Error, or every tensor it describes can be read in
// full (and sliced) without leaving the buffer; ASan checks the latter.
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "io/safetensors.hpp"
#include "util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // A private copy so ASan sees the exact bounds of the "file".
  std::vector<std::byte> file(size);
  for (std::size_t i = 0; i < size; ++i) file[i] = static_cast<std::byte>(data[i]);
  try {
    const auto tensors = neuron::io::parse_safetensors(std::span<const std::byte>(file), "fuzz");
    for (const auto& [name, view] : tensors) {
      volatile float sink = 0;
      for (float v : view.to_f32()) sink = sink + v;
      if (view.rank() == 2 && view.dim(0) > 0 && view.dim(1) > 0) {
        const auto r = view.rows(view.dim(0) / 2, view.dim(0));
        const auto c = view.cols(view.dim(1) / 2, view.dim(1));
        for (float v : r.to_f32()) sink = sink + v;
        for (std::uint16_t v : c.to_bf16()) sink = sink + static_cast<float>(v);
      }
    }
  } catch (const neuron::Error&) {
  }
  return 0;
}
