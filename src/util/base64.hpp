#pragma once
// Standard base64 (RFC 4648, with '=' padding) of a byte string.
#include <span>
#include <string>

namespace neuron {

std::string base64_encode(std::span<const unsigned char> bytes);

}  // namespace neuron
