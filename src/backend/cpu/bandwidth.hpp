#pragma once
// The host's memory bandwidth, measured now, for `neuron bench` to divide by.
// Buffers are far larger than the last-level cache, so the figures are DRAM's.
#include <cstddef>

namespace neuron::backend::cpu {

// memcpy across all OpenMP threads, counted as the CUDA probe counts a copy:
// S bytes copied move 2 S bytes (read + write). Median of several runs, GB/s (1e9 B/s).
double measure_copy_bandwidth_gbs(std::size_t bytes = std::size_t{512} << 20);

// Read-only streaming (what batch-1 decode does with the weights), all threads, GB/s.
double measure_read_bandwidth_gbs(std::size_t bytes = std::size_t{1} << 30);

}  // namespace neuron::backend::cpu
