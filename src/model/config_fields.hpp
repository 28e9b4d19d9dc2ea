#pragma once
// Readers of config.json fields shared by config.cpp and the families
// (model/arch/*.cpp): null counts as absent, as transformers treats it; every
// failure is Error{bad_model} naming the field.
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace neuron::model::fields {

// Bounds that no real checkpoint comes near but that keep every product of
// two dimensions far from int64 overflow, so later size arithmetic is safe.
inline constexpr std::int64_t kMaxDim = std::int64_t{1} << 20;
inline constexpr std::int64_t kMaxLayers = 1024;
inline constexpr std::int64_t kMaxPositions = std::int64_t{1} << 24;

[[noreturn]] void bad(const std::string& msg);
// A present, non-null field, or null.
const nlohmann::json* field(const nlohmann::json& j, const char* name);
std::int64_t to_int(const nlohmann::json& v, const std::string& name);
// An integer in [1, max]; a missing field takes `fallback`, else is an error.
std::int64_t dim_field(const nlohmann::json& j, const char* name, std::int64_t max,
                       std::optional<std::int64_t> fallback = {});
double number_field(const nlohmann::json& j, const char* name, double fallback);
bool bool_field(const nlohmann::json& j, const char* name, bool fallback);
// Error{unsupported_arch} when the field is true ("<what> are not implemented").
void reject_if_true(const nlohmann::json& j, const char* name, const char* what);

}  // namespace neuron::model::fields
