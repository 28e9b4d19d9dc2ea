#include "loadgen/stats.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "util/error.hpp"

namespace neuron::loadgen {

double percentile(std::vector<double> values, double p) {
  if (values.empty()) fail(errc::invalid_argument, "percentile of no values");
  if (!(p >= 0 && p <= 100)) fail(errc::invalid_argument, "percentile " + std::to_string(p) + " is outside [0, 100]");
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(rank));
  const std::size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (rank - static_cast<double>(lo)) * (values[hi] - values[lo]);
}

Distribution distribution(const std::vector<double>& values) {
  Distribution d;
  d.count = values.size();
  if (values.empty()) return d;
  d.mean = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  d.p50 = percentile(values, 50);
  d.p90 = percentile(values, 90);
  d.p99 = percentile(values, 99);
  d.max = *std::max_element(values.begin(), values.end());
  return d;
}

LevelSummary summarize(int concurrency, double wall_s, const std::vector<RequestRecord>& records) {
  LevelSummary s;
  s.concurrency = concurrency;
  s.wall_s = wall_s;
  s.requests = records.size();
  std::vector<double> ttft, tpot, latency;
  double prompt_sum = 0;
  std::size_t prompt_n = 0, from_usage = 0;
  for (const auto& r : records) {
    if (r.reconnected) ++s.reconnects;
    if (!r.ok) {
      ++s.errors;
      ++s.error_counts[r.error.empty() ? "unknown" : r.error];
      continue;
    }
    ++s.ok;
    s.output_tokens += r.output_tokens;
    ttft.push_back(r.ttft_ms);
    latency.push_back(r.latency_ms);
    if (r.output_tokens >= 2) tpot.push_back(r.tpot_ms);
    if (r.prompt_tokens >= 0) {
      prompt_sum += static_cast<double>(r.prompt_tokens);
      ++prompt_n;
    }
    if (r.tokens_from_usage) ++from_usage;
  }
  if (wall_s > 0) {
    s.output_tok_s = static_cast<double>(s.output_tokens) / wall_s;
    s.requests_per_s = static_cast<double>(s.ok) / wall_s;
  }
  if (prompt_n > 0) s.mean_prompt_tokens = prompt_sum / static_cast<double>(prompt_n);
  s.tokens_from = s.ok == 0 ? "" : from_usage == s.ok ? "usage" : from_usage == 0 ? "chunks" : "mixed";
  s.ttft_ms = distribution(ttft);
  s.tpot_ms = distribution(tpot);
  s.latency_ms = distribution(latency);
  return s;
}

namespace {

nlohmann::ordered_json to_json(const Distribution& d) {
  return {{"count", d.count}, {"mean", d.mean}, {"p50", d.p50}, {"p90", d.p90}, {"p99", d.p99}, {"max", d.max}};
}

}  // namespace

nlohmann::ordered_json to_json(const LevelSummary& s) {
  nlohmann::ordered_json errors = nlohmann::ordered_json::object();
  for (const auto& [reason, n] : s.error_counts) errors[reason] = n;
  return {{"concurrency", s.concurrency},
          {"requests", s.requests},
          {"ok", s.ok},
          {"errors", s.errors},
          {"error_counts", errors},
          {"reconnects", s.reconnects},
          {"wall_s", s.wall_s},
          {"output_tokens", s.output_tokens},
          {"output_tok_s", s.output_tok_s},
          {"requests_per_s", s.requests_per_s},
          {"mean_prompt_tokens", s.mean_prompt_tokens},
          {"tokens_from", s.tokens_from},
          {"ttft_ms", to_json(s.ttft_ms)},
          {"tpot_ms", to_json(s.tpot_ms)},
          {"latency_ms", to_json(s.latency_ms)}};
}

std::string table_header() {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%5s %6s %5s %8s %10s %9s %9s %9s %9s %9s %9s", "conc", "reqs", "errs", "wall_s",
                "out_tok/s", "ttft_p50", "ttft_p99", "tpot_p50", "tpot_p99", "lat_p50", "lat_p99");
  return std::string(buf) + "\n" + std::string(std::char_traits<char>::length(buf), '-');
}

std::string table_row(const LevelSummary& s) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%5d %6zu %5zu %8.2f %10.1f %9.1f %9.1f %9.2f %9.2f %9.1f %9.1f", s.concurrency,
                s.requests, s.errors, s.wall_s, s.output_tok_s, s.ttft_ms.p50, s.ttft_ms.p99, s.tpot_ms.p50,
                s.tpot_ms.p99, s.latency_ms.p50, s.latency_ms.p99);
  return buf;
}

}  // namespace neuron::loadgen
