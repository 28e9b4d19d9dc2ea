#include "server/metrics.hpp"

#include <cmath>
#include <cstdio>

#include "util/error.hpp"

namespace neuron::server {
namespace {

std::string format_number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string label_text(const Labels& labels, const std::string& extra_key = {}, const std::string& extra_value = {}) {
  if (labels.empty() && extra_key.empty()) return {};
  std::string out = "{";
  bool first = true;
  for (const auto& [k, v] : labels) {
    if (!first) out += ",";
    first = false;
    out += k + "=\"" + escape_label_value(v) + "\"";
  }
  if (!extra_key.empty()) {
    if (!first) out += ",";
    out += extra_key + "=\"" + extra_value + "\"";
  }
  return out + "}";
}

}  // namespace

std::string escape_label_value(const std::string& v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

void Metrics::declare_counter(const std::string& name, const std::string& help) {
  std::lock_guard lock(mu_);
  families_[name] = Family{Type::counter, help, {}, {}};
}

void Metrics::declare_gauge(const std::string& name, const std::string& help) {
  std::lock_guard lock(mu_);
  families_[name] = Family{Type::gauge, help, {}, {}};
}

void Metrics::declare_histogram(const std::string& name, const std::string& help, std::vector<double> upper_bounds) {
  std::lock_guard lock(mu_);
  families_[name] = Family{Type::histogram, help, std::move(upper_bounds), {}};
}

Metrics::Family& Metrics::family(const std::string& name, Type type) {
  auto it = families_.find(name);
  NEURON_ASSERT(it != families_.end() && it->second.type == type);
  return it->second;
}

const Metrics::Family* Metrics::find(const std::string& name) const {
  auto it = families_.find(name);
  return it == families_.end() ? nullptr : &it->second;
}

void Metrics::inc(const std::string& name, const Labels& labels, double by) {
  std::lock_guard lock(mu_);
  family(name, Type::counter).series[labels].value += by;
}

void Metrics::set(const std::string& name, const Labels& labels, double value) {
  std::lock_guard lock(mu_);
  family(name, Type::gauge).series[labels].value = value;
}

void Metrics::observe(const std::string& name, double value, const Labels& labels) {
  std::lock_guard lock(mu_);
  Family& f = family(name, Type::histogram);
  Series& s = f.series[labels];
  if (s.buckets.empty()) s.buckets.assign(f.bounds.size(), 0);
  for (std::size_t i = 0; i < f.bounds.size(); ++i) {
    if (value <= f.bounds[i]) {
      ++s.buckets[i];
      break;
    }
  }
  s.sum += value;
  ++s.count;
}

void Metrics::clear(const std::string& name) {
  std::lock_guard lock(mu_);
  family(name, Type::gauge).series.clear();
}

double Metrics::value(const std::string& name, const Labels& labels) const {
  std::lock_guard lock(mu_);
  const Family* f = find(name);
  if (!f) return 0;
  auto it = f->series.find(labels);
  return it == f->series.end() ? 0 : it->second.value;
}

std::uint64_t Metrics::count(const std::string& name, const Labels& labels) const {
  std::lock_guard lock(mu_);
  const Family* f = find(name);
  if (!f) return 0;
  auto it = f->series.find(labels);
  return it == f->series.end() ? 0 : it->second.count;
}

std::string Metrics::render() const {
  std::lock_guard lock(mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    const char* type = f.type == Type::counter ? "counter" : f.type == Type::gauge ? "gauge" : "histogram";
    out += "# HELP " + name + " " + f.help + "\n";
    out += "# TYPE " + name + " " + type + "\n";
    if (f.type != Type::histogram) {
      for (const auto& [labels, s] : f.series) out += name + label_text(labels) + " " + format_number(s.value) + "\n";
      continue;
    }
    for (const auto& [labels, s] : f.series) {
      std::uint64_t cumulative = 0;
      for (std::size_t i = 0; i < f.bounds.size(); ++i) {
        cumulative += s.buckets[i];
        out += name + "_bucket" + label_text(labels, "le", format_number(f.bounds[i])) + " " + std::to_string(cumulative) + "\n";
      }
      out += name + "_bucket" + label_text(labels, "le", "+Inf") + " " + std::to_string(s.count) + "\n";
      out += name + "_sum" + label_text(labels) + " " + format_number(s.sum) + "\n";
      out += name + "_count" + label_text(labels) + " " + std::to_string(s.count) + "\n";
    }
  }
  return out;
}

}  // namespace neuron::server
