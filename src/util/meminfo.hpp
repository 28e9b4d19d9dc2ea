#pragma once
// The host's memory as /proc/meminfo tells it.
#include <cstdint>
#include <string_view>

namespace neuron {

struct MemInfo {
  std::uint64_t total_bytes = 0;
  std::uint64_t available_bytes = 0;  // MemAvailable: what new allocations can get without swapping
};

// Parses /proc/meminfo text ("MemTotal:  16318480 kB"); missing fields stay 0.
MemInfo parse_meminfo(std::string_view text);
// This host's, now; all zero when /proc/meminfo cannot be read.
MemInfo read_meminfo();

}  // namespace neuron
