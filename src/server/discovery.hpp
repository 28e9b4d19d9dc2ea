#pragma once
// GET /discovery's host facts (the helexa node contract, DESIGN.md section 5):
// hostname, OS and kernel, CUDA runtime and driver versions (null without
// CUDA), the CUDA devices (from backend/device.hpp; an empty list and
// cuda_unavailable_reason when there are none, never an error), the harnesses
// this node runs, plus CPUs and memory from /proc as extra fields. The Api
// adds what depends on the loaded models (max_prompt_tokens).
#include <nlohmann/json.hpp>

#include "util/meminfo.hpp"

namespace neuron::server {

nlohmann::json discover();

}  // namespace neuron::server
