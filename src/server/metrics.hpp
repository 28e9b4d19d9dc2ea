#pragma once
// A small Prometheus registry: labelled counters, gauges and histograms,
// rendered in the text exposition format (version 0.0.4) for GET /metrics.
// Thread-safe; HTTP threads update it while a scrape renders it.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace neuron::server {

using Labels = std::vector<std::pair<std::string, std::string>>;  // in exposition order

class Metrics {
 public:
  // Families are declared once, before use; using an undeclared name is a bug.
  void declare_counter(const std::string& name, const std::string& help);
  void declare_gauge(const std::string& name, const std::string& help);
  void declare_histogram(const std::string& name, const std::string& help, std::vector<double> upper_bounds);

  void inc(const std::string& name, const Labels& labels = {}, double by = 1);
  void set(const std::string& name, const Labels& labels, double value);
  void observe(const std::string& name, double value, const Labels& labels = {});
  // Drops every series of a gauge family (e.g. per-model gauges refreshed at scrape time).
  void clear(const std::string& name);

  double value(const std::string& name, const Labels& labels = {}) const;  // counter/gauge; 0 if absent
  std::uint64_t count(const std::string& name, const Labels& labels = {}) const;  // histogram observations

  std::string render() const;

 private:
  enum class Type { counter, gauge, histogram };
  struct Series {
    double value = 0;                 // counter / gauge
    std::vector<std::uint64_t> buckets;  // histogram, per upper bound (non-cumulative)
    double sum = 0;
    std::uint64_t count = 0;
  };
  struct Family {
    Type type;
    std::string help;
    std::vector<double> bounds;
    std::map<Labels, Series> series;
  };
  Family& family(const std::string& name, Type type);
  const Family* find(const std::string& name) const;

  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
};

// Escapes a label value for the exposition format (\\, \", \n).
std::string escape_label_value(const std::string& v);

}  // namespace neuron::server
