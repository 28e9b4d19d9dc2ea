// The test binary's CPU products stay exact: NEURON_CPU_ACTIVATIONS=f32
// unless the environment names a level. The library's default (auto) rounds
// the activations of products with quantized weights to int8; the tests'
// comparisons with the dequantized reference and with transformers' f32
// tokens need f32. Set before main, so before the first cpu_activations()
// reads it; the processes the tests start (TP workers, the CLI) inherit it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string_view>

#include "backend/cpu/activations.hpp"

namespace neuron::backend::cpu {
namespace {

const bool kExact = ::setenv("NEURON_CPU_ACTIVATIONS", "f32", 0) == 0;

TEST(CpuActivations, AutoRoundsOnlyQuantizedProducts) {
  ASSERT_TRUE(kExact);
  EXPECT_EQ(parse_activations("auto"), Activations::automatic);
  EXPECT_EQ(activations_name(Activations::automatic), "auto");
  EXPECT_FALSE(parse_activations("int4").has_value());
  EXPECT_TRUE(int8_quant_products(Activations::automatic));
  EXPECT_FALSE(bf16_float_products(Activations::automatic));
  EXPECT_TRUE(int8_quant_products(Activations::int8));
  EXPECT_TRUE(bf16_float_products(Activations::int8));
  EXPECT_FALSE(int8_quant_products(Activations::bf16));
  EXPECT_TRUE(bf16_float_products(Activations::bf16));
  EXPECT_FALSE(int8_quant_products(Activations::f32));
  EXPECT_FALSE(bf16_float_products(Activations::f32));
}

}  // namespace
}  // namespace neuron::backend::cpu
