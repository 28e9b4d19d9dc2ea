// libFuzzer target: arbitrary bytes through util/json_parse.hpp, the one
// parser every outside input goes through, at the daemon's limit and at a
// small one. Bad input must end in neuron::Error (never nlohmann's own
// exceptions, never a stack overflow on deep nesting); a document it accepts
// must be no deeper than the limit and survive a dump/parse round trip.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "util/error.hpp"
#include "util/json_parse.hpp"

namespace {

// Bounded by the limit the parser enforced, so recursion is safe here.
template <class Json>
int depth_of(const Json& j) {
  if (!j.is_structured()) return 0;
  int inner = 0;
  for (const auto& v : j) inner = std::max(inner, depth_of(v));
  return inner + 1;
}

template <class Json>
void check(std::string_view text, int limit) {
  Json j;
  try {
    j = neuron::parse_json<Json>(text, "fuzz input", neuron::errc::invalid_argument, limit);
  } catch (const neuron::Error& e) {
    if (e.kind() != neuron::errc::invalid_argument) __builtin_trap();
    return;
  }
  if (depth_of(j) > limit) __builtin_trap();
  const std::string again = j.dump(-1, ' ', false, Json::error_handler_t::strict);
  if (neuron::parse_json<Json>(again, "round trip", neuron::errc::invalid_argument, limit) != j) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  check<nlohmann::json>(text, neuron::kMaxJsonDepth);
  check<nlohmann::ordered_json>(text, neuron::kMaxJsonDepth);
  check<nlohmann::json>(text, 3);
  return 0;
}
