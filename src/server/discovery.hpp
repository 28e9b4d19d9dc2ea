#pragma once
// GET /discovery's host facts (the helexa node contract, DESIGN.md section 5):
// hostname, OS and kernel, CUDA runtime and driver versions (null without
// CUDA), the CUDA devices (from backend/device.hpp; an empty list when there
// are none, never an error), the harnesses a load may name (kHarnesses), plus
// CPUs and memory from /proc as extra fields. cuda_unavailable_reason only
// when an NVIDIA kernel driver is loaded (`nvidia_driver`, its version file,
// exists) and still no device is usable, a driver/library problem (the gateway
// reads it as "CUDA loads fail here"); a host without an NVIDIA driver is a
// CPU host, not that. The Api adds max_prompt_tokens.
#include <cstdint>
#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "util/meminfo.hpp"

namespace neuron::server {

nlohmann::json discover(const std::filesystem::path& nvidia_driver = "/proc/driver/nvidia/version");

// The longest prompt the models in `roots` take by their config.json
// (max_position_embeddings, or text_config's, less the token to generate),
// for folders `root/name` and `root/org/name`; 0 when there are none. Read
// from the files, nothing loaded: /discovery's max_prompt_tokens before any load.
std::int64_t max_prompt_tokens_under(const std::vector<std::filesystem::path>& roots);

}  // namespace neuron::server
