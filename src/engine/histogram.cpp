#include "engine/histogram.hpp"

#include <algorithm>
#include <cmath>

#include "util/error.hpp"

namespace neuron::engine {

std::uint64_t HistogramSnapshot::cumulative(std::size_t i) const noexcept {
  std::uint64_t total = 0;
  for (std::size_t b = 0; b <= i && b < counts.size(); ++b) total += counts[b];
  return total;
}

void HistogramSnapshot::merge(const HistogramSnapshot& other) {
  if (counts.empty()) {
    *this = other;
    return;
  }
  NEURON_ASSERT(other.upper_bounds == upper_bounds);
  for (std::size_t b = 0; b < counts.size(); ++b) counts[b] += other.counts[b];
  sum += other.sum;
  count += other.count;
}

Histogram::Histogram(std::vector<double> upper_bounds) {
  NEURON_ASSERT(std::is_sorted(upper_bounds.begin(), upper_bounds.end()));
  NEURON_ASSERT(std::all_of(upper_bounds.begin(), upper_bounds.end(), [](double b) { return std::isfinite(b); }));
  data_.counts.assign(upper_bounds.size() + 1, 0);
  data_.upper_bounds = std::move(upper_bounds);
}

std::vector<double> Histogram::latency_seconds_bounds() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

void Histogram::observe(double value) {
  if (std::isnan(value)) return;
  std::lock_guard lock(mu_);
  // First bucket whose bound is >= value (Prometheus buckets are inclusive).
  const auto it = std::lower_bound(data_.upper_bounds.begin(), data_.upper_bounds.end(), value);
  data_.counts[static_cast<std::size_t>(it - data_.upper_bounds.begin())] += 1;
  data_.sum += value;
  data_.count += 1;
}

HistogramSnapshot Histogram::snapshot() const {
  std::lock_guard lock(mu_);
  return data_;
}

}  // namespace neuron::engine
