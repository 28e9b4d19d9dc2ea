// libFuzzer target: arbitrary text as config.json and generation_config.json.
// Bad input must end in neuron::Error; an accepted config must survive the
// to_json round trip that the TP wire protocol relies on.
#include <cstddef>
#include <cstdint>
#include <string>

#include "model/config.hpp"
#include "util/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto cfg = neuron::model::ModelConfig::parse(text);
    if (!(neuron::model::ModelConfig::parse(cfg.to_json()) == cfg)) __builtin_trap();
  } catch (const neuron::Error&) {
  }
  try {
    (void)neuron::model::GenerationDefaults::parse(text);
  } catch (const neuron::Error&) {
  }
  return 0;
}
