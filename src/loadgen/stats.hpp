#pragma once
// Aggregation of one concurrency level's requests: percentiles of TTFT,
// TPOT and latency, output tokens per second over the level's wall time,
// and the errors, counted and sampled (never dropped).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "loadgen/completion_stream.hpp"

namespace neuron::loadgen {

// The p-th percentile (p in [0, 100]) of `values`, interpolating linearly
// between the two nearest ranks (numpy's default). Throws
// Error{invalid_argument} for no values or p outside [0, 100].
double percentile(std::vector<double> values, double p);

struct Distribution {
  std::size_t count = 0;  // all fields 0 when count is 0
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;
};
Distribution distribution(const std::vector<double>& values);

struct LevelSummary {
  int concurrency = 0;
  double wall_s = 0;         // first request sent -> last response ended
  std::size_t requests = 0;  // sent, ok or not
  std::size_t ok = 0;
  std::size_t errors = 0;
  std::size_t reconnects = 0;  // requests resent once after the server had closed a kept-alive connection
  std::map<std::string, std::size_t> error_counts;  // reason -> count
  std::int64_t output_tokens = 0;                   // of the ok requests
  double output_tok_s = 0;                          // output_tokens / wall_s
  double requests_per_s = 0;                        // ok / wall_s
  double mean_prompt_tokens = -1;                   // as the server counted them; -1 when not reported
  std::string tokens_from;                          // "usage", "chunks" or "mixed" (ok requests)
  Distribution ttft_ms, tpot_ms, latency_ms;        // ok requests (TPOT: those with 2+ tokens)
};

// Errors are counted by reason; reasons that differ only in digits (token
// counts, byte sizes) are separate entries, so keep them few and stable.
LevelSummary summarize(int concurrency, double wall_s, const std::vector<RequestRecord>& records);

nlohmann::ordered_json to_json(const LevelSummary& s);

// A fixed-width text table: header() once, then row() per level.
std::string table_header();
std::string table_row(const LevelSummary& s);

}  // namespace neuron::loadgen
