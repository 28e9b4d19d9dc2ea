#include "server/request_fields.hpp"

#include <cmath>

#include "server/api_error.hpp"

namespace neuron::server {
namespace {

using ojson = nlohmann::ordered_json;

std::string range_text(double lo, double hi) {
  auto fmt = [](double v) {
    ojson j = v;
    if (v == std::floor(v) && std::fabs(v) < 1e15) j = static_cast<std::int64_t>(v);
    return j.dump();
  };
  return fmt(lo) + " and " + fmt(hi);
}

}  // namespace

const ojson* field(const ojson& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string required_string(const ojson& obj, const char* key, const std::string& where) {
  auto v = string_in(obj, key, where + "." + key);
  if (!v) throw FieldError(where + "." + key, "'" + where + "." + key + "' is required");
  return *v;
}

std::string indexed(const std::string& where, std::size_t i) { return where + "[" + std::to_string(i) + "]"; }

std::optional<float> number_in(const ojson& obj, const char* key, double lo, double hi) {
  const ojson* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) throw FieldError(key, std::string("'") + key + "' must be a number");
  double d = v->get<double>();
  if (!(d >= lo && d <= hi))
    throw FieldError(key, std::string("'") + key + "' must be between " + range_text(lo, hi) + ", got " + v->dump());
  return static_cast<float>(d);
}

std::optional<std::int64_t> integer_in(const ojson& obj, const char* key, std::int64_t lo, std::int64_t hi) {
  const ojson* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) throw FieldError(key, std::string("'") + key + "' must be an integer");
  bool too_big = v->is_number_unsigned() && v->get<std::uint64_t>() > static_cast<std::uint64_t>(hi);
  std::int64_t i = too_big ? hi : v->get<std::int64_t>();
  if (too_big || i < lo || i > hi)
    throw FieldError(key, std::string("'") + key + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                              ", got " + v->dump());
  return i;
}

std::optional<bool> boolean(const ojson& obj, const char* key) {
  const ojson* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) throw FieldError(key, std::string("'") + key + "' must be a boolean");
  return v->get<bool>();
}

[[noreturn]] void unsupported(const std::string& param, const std::string& what) {
  throw FieldError(param, what + " is not supported by neuron", http_errc::unsupported);
}

[[noreturn]] void non_text_content(const std::string& param, const std::string& type) {
  if (type == "image_url" || type == "input_image" || type == "image")
    throw FieldError(param,
                     "content part type '" + type +
                         "' is image input, and neuron serves every model text-only (the vision tower of a vision "
                         "checkpoint is not loaded): send text parts only",
                     http_errc::unsupported);
  unsupported(param, "content part type '" + type + "'");
}

std::optional<std::string> string_in(const ojson& obj, const char* key, const std::string& param) {
  const ojson* v = field(obj, key);
  if (!v) return std::nullopt;
  const std::string& name = param.empty() ? std::string(key) : param;
  if (!v->is_string()) throw FieldError(name, "'" + name + "' must be a string");
  return v->get<std::string>();
}

}  // namespace neuron::server
