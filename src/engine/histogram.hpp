#pragma once
// A fixed-bucket histogram of latencies, safe to observe from the engine
// thread while HTTP threads take snapshots for /metrics. Buckets are fixed at
// construction so every snapshot renders as a Prometheus histogram directly.
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

namespace neuron::engine {

struct HistogramSnapshot {
  std::vector<double> upper_bounds;   // ascending, finite; an implicit +Inf bucket follows
  std::vector<std::uint64_t> counts;  // [upper_bounds.size() + 1] per bucket (not cumulative); last = above every bound
  double sum = 0;
  std::uint64_t count = 0;

  // Observations <= upper_bounds[i] (Prometheus' `le` buckets); i == size() is +Inf.
  std::uint64_t cumulative(std::size_t i) const noexcept;
  // Adds another snapshot with the same bounds (e.g. summing over models).
  void merge(const HistogramSnapshot& other);
};

class Histogram {
 public:
  // `upper_bounds` must be ascending and finite (NEURON_ASSERT: a programming error).
  explicit Histogram(std::vector<double> upper_bounds);
  // Seconds from 0.5 ms to 60 s: covers both per-token latency and time to first token.
  static std::vector<double> latency_seconds_bounds();

  void observe(double value);
  HistogramSnapshot snapshot() const;

 private:
  mutable std::mutex mu_;
  HistogramSnapshot data_;
};

}  // namespace neuron::engine
