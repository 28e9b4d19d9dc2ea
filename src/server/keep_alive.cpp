#include "server/keep_alive.hpp"

#include <charconv>
#include <cmath>
#include <string>

#include "util/error.hpp"

namespace neuron::server {
namespace {

constexpr double kMaxMs = 2.0e12;  // ~63 years: anything longer is "never" spelled oddly, and refused

std::chrono::milliseconds from_ms(double ms, std::string_view text) {
  if (!std::isfinite(ms) || std::fabs(ms) > kMaxMs)
    fail(errc::invalid_argument, "keep_alive '" + std::string(text) + "' is out of range");
  if (ms < 0) return std::chrono::milliseconds(-1);
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::llround(ms)));
}

}  // namespace

std::chrono::milliseconds parse_keep_alive(std::string_view text) {
  auto bad = [&]() -> std::chrono::milliseconds {
    fail(errc::invalid_argument, "keep_alive '" + std::string(text) +
                                     "' is not a duration (\"5m\", \"30s\", \"1h\", \"250ms\", seconds as a number, 0, or negative for never)");
  };
  if (text.empty() || text.size() > 64) bad();
  std::string_view rest = text;
  bool negative = false;
  if (rest.front() == '-' || rest.front() == '+') {
    negative = rest.front() == '-';
    rest.remove_prefix(1);
  }
  double total_ms = 0;
  bool any = false;
  while (!rest.empty()) {
    double value = 0;
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), value, std::chars_format::fixed);
    if (ec != std::errc{} || end == rest.data() || !(value >= 0)) bad();
    rest.remove_prefix(static_cast<std::size_t>(end - rest.data()));
    double unit_ms = 0;
    if (rest.empty()) {
      if (any) bad();  // "5m30" has no unit on its last part
      unit_ms = 1000;  // a bare number: seconds
    } else if (rest.starts_with("ms")) {
      unit_ms = 1, rest.remove_prefix(2);
    } else if (rest.front() == 'h') {
      unit_ms = 3600e3, rest.remove_prefix(1);
    } else if (rest.front() == 'm') {
      unit_ms = 60e3, rest.remove_prefix(1);
    } else if (rest.front() == 's') {
      unit_ms = 1e3, rest.remove_prefix(1);
    } else {
      bad();
    }
    total_ms += value * unit_ms;
    any = true;
  }
  if (!any) bad();
  return from_ms(negative ? -total_ms : total_ms, text);
}

std::chrono::milliseconds parse_keep_alive_json(const nlohmann::json& value) {
  if (value.is_string()) return parse_keep_alive(std::string_view(value.get_ref<const std::string&>()));
  if (value.is_number()) return from_ms(value.get<double>() * 1000.0, value.dump());
  fail(errc::invalid_argument, "keep_alive must be a duration string or a number of seconds, got " + value.dump());
}

}  // namespace neuron::server
