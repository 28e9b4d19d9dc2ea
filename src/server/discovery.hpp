#pragma once
// GET /discovery: what this host offers — host name, CPUs, memory from
// /proc/meminfo, and the CUDA devices with their memory when this build has
// CUDA and a driver (an empty list otherwise, never an error).
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace neuron::server {

struct MemInfo {
  std::uint64_t total_bytes = 0;
  std::uint64_t available_bytes = 0;
};

// Parses /proc/meminfo text ("MemTotal:  16318480 kB"); missing fields stay 0.
MemInfo parse_meminfo(std::string_view text);

nlohmann::json discover();

}  // namespace neuron::server
