#include "quant/ggml_type.hpp"

#include <array>
#include <cctype>

#include "util/error.hpp"

namespace neuron::quant {

namespace {

struct Entry {
  GgmlType type;
  GgmlTypeTraits traits;
};

// Sizes from ggml.c's type_traits table.
constexpr std::array<Entry, 16> kTable{{
    {GgmlType::f32, {"F32", 1, 4, true}},
    {GgmlType::f16, {"F16", 1, 2, true}},
    {GgmlType::q4_0, {"Q4_0", 32, 18, true}},
    {GgmlType::q4_1, {"Q4_1", 32, 20, false}},
    {GgmlType::q5_0, {"Q5_0", 32, 22, false}},
    {GgmlType::q5_1, {"Q5_1", 32, 24, false}},
    {GgmlType::q8_0, {"Q8_0", 32, 34, true}},
    {GgmlType::q8_1, {"Q8_1", 32, 36, false}},
    {GgmlType::q2_k, {"Q2_K", 256, 84, false}},
    {GgmlType::q3_k, {"Q3_K", 256, 110, false}},
    {GgmlType::q4_k, {"Q4_K", 256, 144, true}},
    {GgmlType::q5_k, {"Q5_K", 256, 176, true}},
    {GgmlType::q6_k, {"Q6_K", 256, 210, true}},
    {GgmlType::q8_k, {"Q8_K", 256, 292, false}},
    {GgmlType::bf16, {"BF16", 1, 2, true}},
    {GgmlType::fp8_e4m3, {"FP8", 1, 1, false}},  // its row scales live beside the rows
}};

}  // namespace

std::optional<GgmlTypeTraits> ggml_type_traits(std::uint32_t id) noexcept {
  if (id == static_cast<std::uint32_t>(GgmlType::fp8_e4m3)) return std::nullopt;
  for (const Entry& e : kTable)
    if (static_cast<std::uint32_t>(e.type) == id) return e.traits;
  return std::nullopt;
}

GgmlTypeTraits traits(GgmlType t) noexcept {
  for (const Entry& e : kTable)
    if (e.type == t) return e.traits;
  assert_fail("listed ggml type", __FILE__, __LINE__);
}

std::string_view ggml_type_name(GgmlType t) noexcept { return traits(t).name; }

std::optional<GgmlType> parse_ggml_type(std::string_view name) noexcept {
  for (const Entry& e : kTable) {
    if (e.traits.name.size() != name.size()) continue;
    bool same = true;
    for (std::size_t i = 0; i < name.size() && same; ++i)
      same = std::toupper(static_cast<unsigned char>(name[i])) == static_cast<unsigned char>(e.traits.name[i]);
    if (same) return e.type;
  }
  return std::nullopt;
}

}  // namespace neuron::quant
