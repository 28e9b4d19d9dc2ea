#pragma once
// Byte counts as people read them in messages and logs.
#include <cstdint>
#include <string>

namespace neuron::util {

// "1.50 GiB": bytes in binary gigabytes, two decimals.
std::string gib(std::uint64_t bytes);

}  // namespace neuron::util
