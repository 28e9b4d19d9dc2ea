#pragma once
// GET /discovery: what this host offers — host name, CPUs, memory from
// /proc/meminfo, and the CUDA devices with their memory when this build has
// CUDA and a driver (an empty list otherwise, never an error).
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "util/meminfo.hpp"

namespace neuron::server {

nlohmann::json discover();

}  // namespace neuron::server
