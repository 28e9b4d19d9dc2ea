#include "model/config_fields.hpp"

#include <limits>

#include "util/error.hpp"

namespace neuron::model::fields {

using nlohmann::json;

void bad(const std::string& msg) { fail(errc::bad_model, msg); }

// A present, non-null field; null counts as absent, as transformers treats it.
const json* field(const json& j, const char* name) {
  auto it = j.find(name);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::int64_t to_int(const json& v, const std::string& name) {
  if (v.is_number_unsigned()) {
    auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) bad("config field '" + name + "' is too large");
    return static_cast<std::int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<std::int64_t>();
  bad("config field '" + name + "' must be an integer");
}

std::int64_t dim_field(const json& j, const char* name, std::int64_t max, std::optional<std::int64_t> fallback) {
  const json* v = field(j, name);
  if (!v) {
    if (fallback) return *fallback;
    bad("config field '" + std::string(name) + "' is missing");
  }
  std::int64_t n = to_int(*v, name);
  if (n <= 0 || n > max)
    bad("config field '" + std::string(name) + "' = " + std::to_string(n) + " is outside [1, " + std::to_string(max) + "]");
  return n;
}

double number_field(const json& j, const char* name, double fallback) {
  const json* v = field(j, name);
  if (!v) return fallback;
  if (!v->is_number()) bad("config field '" + std::string(name) + "' must be a number");
  return v->get<double>();
}

bool bool_field(const json& j, const char* name, bool fallback) {
  const json* v = field(j, name);
  if (!v) return fallback;
  if (!v->is_boolean()) bad("config field '" + std::string(name) + "' must be true or false");
  return v->get<bool>();
}

void reject_if_true(const json& j, const char* name, const char* what) {
  if (bool_field(j, name, false))
    fail(errc::unsupported_arch, std::string("config field '") + name + "' is true: " + what + " are not implemented");
}

}  // namespace neuron::model::fields
