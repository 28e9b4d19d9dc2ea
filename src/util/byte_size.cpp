#include "util/byte_size.hpp"

#include <cstdio>

namespace neuron::util {

std::string gib(std::uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / static_cast<double>(1ull << 30));
  return text;
}

}  // namespace neuron::util
