// config.json / generation_config.json parsing: what neuron accepts, and
// that everything it cannot run is refused with the offending field named.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "model/config.hpp"
#include "util/error.hpp"

namespace neuron::model {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kTinyDir = fs::path(NEURON_REPO_ROOT) / "models" / "qwen3-tiny-a";

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

json tiny_json() { return json::parse(read(kTinyDir / "config.json")); }

// Parses `j` and expects an Error of `kind` whose message mentions `needle`.
void expect_rejected(const json& j, const std::string& kind, const std::string& needle) {
  try {
    ModelConfig::parse(j.dump());
    FAIL() << "accepted: " << j.dump();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message '" << e.what() << "' lacks '" << needle << "'";
  }
}

TEST(Config, ParsesBundledTinyModel) {
  ModelConfig c = ModelConfig::parse(read(kTinyDir / "config.json"));
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.intermediate_size, 96);
  EXPECT_EQ(c.num_hidden_layers, 2);
  EXPECT_EQ(c.num_attention_heads, 4);
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_EQ(c.head_dim, 16);  // != hidden / heads (8): must come from the file
  EXPECT_DOUBLE_EQ(c.rope.theta, 1e6);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_EQ(c.eos_token_ids, std::vector<std::int32_t>{151645});
  EXPECT_EQ(c.torch_dtype, "bfloat16");
}

TEST(Config, ToJsonRoundTrips) {
  ModelConfig c = ModelConfig::parse(read(kTinyDir / "config.json"));
  EXPECT_EQ(ModelConfig::parse(c.to_json()), c);
  c.eos_token_ids = {1, 2, 3};
  c.bos_token_id.reset();
  c.tie_word_embeddings = false;
  c.rope.theta = 123456.789;
  c.rms_norm_eps = 1e-5;
  EXPECT_EQ(ModelConfig::parse(c.to_json()), c);
  c.eos_token_ids.clear();
  EXPECT_EQ(ModelConfig::parse(c.to_json()), c);
}

TEST(Config, DefaultsForAbsentOptionalFields) {
  json j = tiny_json();
  for (const char* k : {"head_dim", "tie_word_embeddings", "rope_theta", "rms_norm_eps", "max_position_embeddings",
                        "bos_token_id", "eos_token_id", "torch_dtype", "hidden_act", "attention_bias", "rope_scaling"})
    j.erase(k);
  ModelConfig c = ModelConfig::parse(j.dump());
  EXPECT_EQ(c.head_dim, 8);  // hidden / heads
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.rope.theta, 10000.0);  // transformers' default
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_FALSE(c.bos_token_id.has_value());
  EXPECT_TRUE(c.eos_token_ids.empty());
}

TEST(Config, EosMayBeAList) {
  json j = tiny_json();
  j["eos_token_id"] = {151645, 151643};
  EXPECT_EQ(ModelConfig::parse(j.dump()).eos_token_ids, (std::vector<std::int32_t>{151645, 151643}));
  j["eos_token_id"] = {151645, "x"};
  expect_rejected(j, errc::bad_model, "eos_token_id");
  j["eos_token_id"] = -1;
  expect_rejected(j, errc::bad_model, "eos_token_id");
}

TEST(Config, PlainRopeParametersAccepted) {
  json j = tiny_json();
  j["rope_scaling"] = {{"rope_type", "default"}};
  EXPECT_NO_THROW(ModelConfig::parse(j.dump()));
  j.erase("rope_scaling");
  j.erase("rope_theta");
  j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 5e5}};
  EXPECT_DOUBLE_EQ(ModelConfig::parse(j.dump()).rope.theta, 5e5);
}

TEST(Config, RejectsUnimplementedFeaturesNamingTheField) {
  struct Case {
    const char* field;
    json value;
  };
  const Case cases[] = {
      {"model_type", "gemma3"},
      {"attention_bias", true},
      {"mlp_bias", true},
      {"use_sliding_window", true},
      {"rope_scaling", {{"rope_type", "yarn"}, {"factor", 4.0}}},
      {"rope_scaling", {{"type", "linear"}, {"factor", 2.0}}},
      {"rope_parameters", {{"rope_type", "longrope"}}},
      {"hidden_act", "gelu"},
      {"layer_types", {"full_attention", "sliding_attention"}},
      {"quantization_config", {{"quant_method", "awq"}}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.field);
    json j = tiny_json();
    j[c.field] = c.value;
    expect_rejected(j, errc::unsupported_arch, c.field);
  }
}

TEST(Config, UnknownModelTypeNamesTheSupportedOnes) {
  json j = tiny_json();
  j["model_type"] = "mistral";
  expect_rejected(j, errc::unsupported_arch, "supported: qwen3, llama, qwen3_moe");
}

// Llama 3.x as released checkpoints write it (rope_theta and rope_scaling at the top level) and as
// transformers 5 does (rope_parameters): the same config either way.
TEST(Config, LlamaReadsBothRopeForms) {
  json released = {{"model_type", "llama"}, {"vocab_size", 128256}, {"hidden_size", 2048},
                   {"intermediate_size", 8192}, {"num_hidden_layers", 16}, {"num_attention_heads", 32},
                   {"num_key_value_heads", 8}, {"head_dim", 64}, {"rms_norm_eps", 1e-5},
                   {"max_position_embeddings", 131072}, {"tie_word_embeddings", true}, {"rope_theta", 500000.0},
                   {"rope_scaling", {{"rope_type", "llama3"}, {"factor", 32.0}, {"low_freq_factor", 1.0},
                                     {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}}},
                   {"attention_bias", false}, {"mlp_bias", false}};
  const ModelConfig a = ModelConfig::parse(released.dump());
  EXPECT_EQ(a.model_type, "llama");
  EXPECT_FALSE(a.qk_norm);
  EXPECT_EQ(a.rope.type, RopeType::llama3);
  EXPECT_DOUBLE_EQ(a.rope.theta, 500000.0);
  EXPECT_DOUBLE_EQ(a.rope.factor, 32.0);
  EXPECT_EQ(a.rope.original_max_position_embeddings, 8192);
  json v5 = released;
  v5.erase("rope_theta");
  v5.erase("rope_scaling");
  v5["rope_parameters"] = released["rope_scaling"];
  v5["rope_parameters"]["rope_theta"] = 500000.0;
  EXPECT_EQ(ModelConfig::parse(v5.dump()), a);
  EXPECT_EQ(ModelConfig::parse(a.to_json()), a);
  json missing = released;
  missing["rope_scaling"].erase("low_freq_factor");
  expect_rejected(missing, errc::bad_model, "rope_scaling.low_freq_factor");
  json inverted = released;
  inverted["rope_scaling"]["high_freq_factor"] = 0.5;
  expect_rejected(inverted, errc::bad_model, "high_freq_factor");
}

json qwen3_moe_json() {
  return {{"model_type", "qwen3_moe"}, {"vocab_size", 151936}, {"hidden_size", 2048},
          {"intermediate_size", 6144}, {"num_hidden_layers", 48}, {"num_attention_heads", 32},
          {"num_key_value_heads", 4}, {"head_dim", 128}, {"num_experts", 128}, {"num_experts_per_tok", 8},
          {"moe_intermediate_size", 768}, {"norm_topk_prob", true}, {"decoder_sparse_step", 1},
          {"mlp_only_layers", json::array()}, {"rope_theta", 1e6}, {"max_position_embeddings", 40960}};
}

// Qwen3-30B-A3B's released config (num_experts, head_dim 128 where hidden / heads is 64) and transformers 5's
// spelling (num_local_experts, rope_parameters).
TEST(Config, Qwen3MoeReadsBothForms) {
  const ModelConfig a = ModelConfig::parse(qwen3_moe_json().dump());
  EXPECT_EQ(a.model_type, "qwen3_moe");
  EXPECT_TRUE(a.qk_norm);
  EXPECT_EQ(a.head_dim, 128);
  EXPECT_EQ(a.moe.num_experts, 128);
  EXPECT_EQ(a.moe.experts_per_token, 8);
  EXPECT_EQ(a.moe.intermediate_size, 768);
  EXPECT_TRUE(a.moe.norm_topk_prob);
  EXPECT_TRUE(a.moe.sparse_layer(0));
  EXPECT_EQ(ModelConfig::parse(a.to_json()), a);
  json v5 = qwen3_moe_json();
  v5.erase("num_experts");
  v5["num_local_experts"] = 128;
  v5.erase("rope_theta");
  v5["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
  EXPECT_EQ(ModelConfig::parse(v5.dump()), a);
  json sparse = qwen3_moe_json();
  sparse["decoder_sparse_step"] = 2;
  sparse["mlp_only_layers"] = {3};
  const ModelConfig b = ModelConfig::parse(sparse.dump());
  EXPECT_FALSE(b.moe.sparse_layer(0));
  EXPECT_TRUE(b.moe.sparse_layer(1));
  EXPECT_FALSE(b.moe.sparse_layer(3));
  EXPECT_TRUE(b.moe.sparse_layer(5));
}

TEST(Config, ImpossibleMoeConfigsNameTheField) {
  json j = qwen3_moe_json();
  j["num_experts_per_tok"] = 129;
  expect_rejected(j, errc::unsupported_arch, "num_experts_per_tok");
  j = qwen3_moe_json();
  j["num_experts"] = 0;
  expect_rejected(j, errc::unsupported_arch, "num_experts");
  j = qwen3_moe_json();
  j.erase("num_experts");
  expect_rejected(j, errc::bad_model, "num_experts");
  j = qwen3_moe_json();
  j["mlp_only_layers"] = {48};
  expect_rejected(j, errc::bad_model, "mlp_only_layers");
  j = qwen3_moe_json();
  j.erase("moe_intermediate_size");
  expect_rejected(j, errc::bad_model, "moe_intermediate_size");
}

json families_config(const std::string& name) {
  return json::parse(read(fs::path(NEURON_TEST_DATA) / "families" / name / "config.json"));
}

// The hybrids as transformers 5.17 saves them (tests/data/families): Qwen3-Next flat, Qwen3.5 under text_config.
TEST(Config, HybridsReadTheirLinearAttentionFields) {
  const ModelConfig next = ModelConfig::parse(families_config("qwen3_next-a").dump());
  EXPECT_EQ(next.model_type, "qwen3_next");
  EXPECT_TRUE(next.linear.hybrid());
  EXPECT_EQ(next.linear.num_key_heads, 2);
  EXPECT_EQ(next.linear.num_value_heads, 4);
  EXPECT_EQ(next.linear.key_head_dim, 16);
  EXPECT_EQ(next.linear.value_head_dim, 16);
  EXPECT_EQ(next.linear.conv_kernel, 4);
  EXPECT_EQ(next.linear.conv_dim(), 2 * 32 + 64);
  EXPECT_TRUE(next.linear.linear_layer(0) && next.linear.linear_layer(2) && !next.linear.linear_layer(3));
  EXPECT_EQ(next.kv_layers(), 1);
  EXPECT_EQ(next.kv_layer_index(3), 0);
  EXPECT_EQ(next.kv_layer_index(1), -1);
  EXPECT_TRUE(next.attention_output_gate && next.zero_centred_norms && next.qk_norm);
  EXPECT_DOUBLE_EQ(next.rope.partial_rotary_factor, 0.25);
  EXPECT_EQ(next.rope.rotary_dim(next.head_dim), 4);
  EXPECT_DOUBLE_EQ(next.rope.theta, 1e7);
  EXPECT_EQ(next.moe.num_experts, 8);
  EXPECT_EQ(next.moe.shared_expert_intermediate_size, 16);
  EXPECT_TRUE(next.moe.norm_topk_prob);
  EXPECT_EQ(ModelConfig::parse(next.to_json()), next);

  const ModelConfig dense = ModelConfig::parse(families_config("qwen3_5-a").dump());
  EXPECT_EQ(dense.model_type, "qwen3_5");
  EXPECT_EQ(dense.hidden_size, 16);  // from text_config
  EXPECT_EQ(dense.intermediate_size, 48);
  EXPECT_EQ(dense.moe.num_experts, 0);
  EXPECT_EQ(dense.linear.layer_types, next.linear.layer_types);
  EXPECT_EQ(ModelConfig::parse(dense.to_json()), dense);

  const ModelConfig moe = ModelConfig::parse(families_config("qwen3_5_moe-a").dump());
  EXPECT_EQ(moe.model_type, "qwen3_5_moe");
  EXPECT_EQ(moe.intermediate_size, 0);  // no dense layer, no dense size
  EXPECT_TRUE(moe.moe.sparse_layer(0) && moe.moe.sparse_layer(3));
  EXPECT_TRUE(moe.moe.norm_topk_prob);
  EXPECT_EQ(ModelConfig::parse(moe.to_json()), moe);

  // Released Qwen3-Next configs: no layer_types (every 4th layer full attention) and no partial factor (0.25).
  json released = families_config("qwen3_next-a");
  released.erase("layer_types");
  released.erase("partial_rotary_factor");
  released["rope_parameters"].erase("partial_rotary_factor");
  released["num_hidden_layers"] = 8;
  const ModelConfig r = ModelConfig::parse(released.dump());
  EXPECT_DOUBLE_EQ(r.rope.partial_rotary_factor, 0.25);
  EXPECT_EQ(r.kv_layers(), 2);
  EXPECT_FALSE(r.linear.linear_layer(7));
  EXPECT_TRUE(r.linear.linear_layer(6));
}

TEST(Config, BadHybridConfigsNameTheField) {
  json j = families_config("qwen3_next-a");
  j["layer_types"][1] = "mamba";
  expect_rejected(j, errc::unsupported_arch, "layer_types");
  j = families_config("qwen3_next-a");
  j["layer_types"].push_back("full_attention");
  expect_rejected(j, errc::bad_model, "layer_types");
  j = families_config("qwen3_next-a");
  j["linear_num_value_heads"] = 3;
  expect_rejected(j, errc::bad_model, "linear_num_value_heads");
  j = families_config("qwen3_next-a");
  j["linear_key_head_dim"] = 0;
  expect_rejected(j, errc::bad_model, "linear_key_head_dim");
  j = families_config("qwen3_next-a");
  j.erase("linear_num_key_heads");
  expect_rejected(j, errc::bad_model, "linear_num_key_heads");
  j = families_config("qwen3_next-a");
  j["partial_rotary_factor"] = 0.1;  // 16 * 0.1 = 1 lane: nothing to rotate
  j["rope_parameters"].erase("partial_rotary_factor");
  expect_rejected(j, errc::bad_model, "partial_rotary_factor");
  j = families_config("qwen3_5-a");
  j["text_config"]["num_attention_heads"] = 3;
  expect_rejected(j, errc::bad_model, "num_attention_heads");
  j = families_config("qwen3_5-a");
  j["text_config"]["linear_conv_kernel_dim"] = 0;
  expect_rejected(j, errc::bad_model, "linear_conv_kernel_dim");
  j = families_config("qwen3_next-a");
  j["layer_types"][3] = "linear_attention";  // no layer left with a KV cache
  expect_rejected(j, errc::unsupported_arch, "layer_types");
  // Linear attention in a family that has none.
  j = tiny_json();
  j["layer_types"] = json::array();
  for (int l = 0; l < j["num_hidden_layers"].get<int>(); ++l) j["layer_types"].push_back("linear_attention");
  expect_rejected(j, errc::unsupported_arch, "layer_types");
}

TEST(Config, RejectsMissingSizes) {
  for (const char* f : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                        "num_key_value_heads", "model_type"}) {
    SCOPED_TRACE(f);
    json j = tiny_json();
    j.erase(f);
    expect_rejected(j, errc::bad_model, f);
  }
}

TEST(Config, RejectsBadValuesNamingTheField) {
  struct Case {
    const char* field;
    json value;
  };
  const Case cases[] = {
      {"hidden_size", 0},
      {"hidden_size", -32},
      {"hidden_size", 1 << 21},
      {"vocab_size", 1ll << 40},
      {"vocab_size", 18446744073709551615ull},
      {"num_hidden_layers", 5000},
      {"num_key_value_heads", 3},  // 4 heads are not a multiple of 3
      {"num_key_value_heads", 8},  // more KV heads than query heads
      {"head_dim", 0},
      {"head_dim", 15},  // RoPE needs an even head_dim
      {"intermediate_size", 96.5},
      {"hidden_size", "32"},
      {"num_attention_heads", true},
      {"tie_word_embeddings", "yes"},
      {"rope_theta", "big"},
      {"rope_theta", -1},
      {"rms_norm_eps", 0},
      {"rms_norm_eps", 2},
      {"max_position_embeddings", 0},
      {"bos_token_id", 1.5},
      {"torch_dtype", 16},
      {"model_type", 3},
      {"attention_bias", "false"},
      {"rope_scaling", "yarn"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.field) + " = " + c.value.dump());
    json j = tiny_json();
    j[c.field] = c.value;
    expect_rejected(j, errc::bad_model, c.field);
  }
}

TEST(Config, HeadDimWithoutDivisibleHiddenIsRejected) {
  json j = tiny_json();
  j.erase("head_dim");
  j["hidden_size"] = 30;  // 30 / 4 heads
  expect_rejected(j, errc::bad_model, "head_dim");
}

TEST(Config, RejectsMalformedJson) {
  for (const char* text : {"", "{", "[1,2]", "null", "{\"model_type\": \"qwen3\",}", "\"qwen3\""}) {
    SCOPED_TRACE(text);
    try {
      ModelConfig::parse(text);
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), errc::bad_model);
      EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos) << e.what();
    }
  }
}

TEST(GenerationDefaults, ParsesQwenStyleFile) {
  auto g = GenerationDefaults::parse(R"({"bos_token_id": 151643, "do_sample": true, "eos_token_id": [151645, 151643],
      "pad_token_id": 151643, "temperature": 0.6, "top_k": 20, "top_p": 0.95, "transformers_version": "4.51.0"})");
  EXPECT_EQ(g.eos_token_ids, (std::vector<std::int32_t>{151645, 151643}));
  EXPECT_FLOAT_EQ(*g.temperature, 0.6f);
  EXPECT_FLOAT_EQ(*g.top_p, 0.95f);
  EXPECT_EQ(*g.top_k, 20);
  EXPECT_FALSE(g.min_p.has_value());
  EXPECT_FALSE(g.repetition_penalty.has_value());
}

TEST(GenerationDefaults, EmptyObjectLeavesEverythingUnset) {
  auto g = GenerationDefaults::parse("{}");
  EXPECT_TRUE(g.eos_token_ids.empty());
  EXPECT_FALSE(g.temperature || g.top_p || g.min_p || g.repetition_penalty || g.top_k);
  EXPECT_EQ(GenerationDefaults::parse(R"({"eos_token_id": 7})").eos_token_ids, std::vector<std::int32_t>{7});
}

TEST(GenerationDefaults, RejectsBadFields) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"temperature": "hot"})", "temperature"}, {R"({"temperature": -1})", "temperature"},
      {R"({"top_p": 1.5})", "top_p"},               {R"({"top_k": 2.5})", "top_k"},
      {R"({"top_k": -1})", "top_k"},                {R"({"min_p": -0.1})", "min_p"},
      {R"({"repetition_penalty": 0})", "repetition_penalty"}, {R"({"eos_token_id": "2"})", "eos_token_id"},
      {"[]", "generation_config.json"},
  };
  for (const auto& [text, field] : cases) {
    SCOPED_TRACE(text);
    try {
      GenerationDefaults::parse(text);
      FAIL();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), errc::bad_model);
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  }
}

TEST(LoadModelConfigs, MergesEosIdsOfBothFiles) {
  ModelConfigs m = load_model_configs(kTinyDir);
  EXPECT_EQ(m.model.hidden_size, 32);
  EXPECT_EQ(m.generation.eos_token_ids, (std::vector<std::int32_t>{151645, 151643}));
  auto stops = m.stop_ids();
  std::sort(stops.begin(), stops.end());
  EXPECT_EQ(stops, (std::vector<std::int32_t>{151643, 151645}));
  EXPECT_NE(std::find(m.model.eos_token_ids.begin(), m.model.eos_token_ids.end(), 151643), m.model.eos_token_ids.end());
}

TEST(LoadModelConfigs, MissingDirectoryAndBadFilesAreNamed) {
  const fs::path dir = fs::temp_directory_path() / ("neuron-config-test-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  try {
    load_model_configs(dir);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::not_found);
    EXPECT_NE(std::string(e.what()).find("config.json"), std::string::npos);
  }
  fs::copy_file(kTinyDir / "config.json", dir / "config.json");
  EXPECT_NO_THROW(load_model_configs(dir));  // generation_config.json is optional
  std::ofstream(dir / "generation_config.json") << R"({"top_p": "x"})";
  try {
    load_model_configs(dir);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::bad_model);
    EXPECT_NE(std::string(e.what()).find("generation_config.json"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(PresetConfig, RealQwen3Shapes) {
  ModelConfig s = preset_config("qwen3-0.6b");
  EXPECT_EQ(s.hidden_size, 1024);
  EXPECT_EQ(s.intermediate_size, 3072);
  EXPECT_EQ(s.num_hidden_layers, 28);
  EXPECT_EQ(s.num_attention_heads, 16);
  EXPECT_EQ(s.num_key_value_heads, 8);
  EXPECT_EQ(s.head_dim, 128);
  EXPECT_EQ(s.vocab_size, 151936);
  EXPECT_TRUE(s.tie_word_embeddings);
  ModelConfig m = preset_config("qwen3-8b");
  EXPECT_EQ(m.hidden_size, 4096);
  EXPECT_EQ(m.intermediate_size, 12288);
  EXPECT_EQ(m.num_hidden_layers, 36);
  EXPECT_EQ(m.num_attention_heads, 32);
  EXPECT_FALSE(m.tie_word_embeddings);
  ModelConfig l = preset_config("qwen3-32b");
  EXPECT_EQ(l.hidden_size, 5120);
  EXPECT_EQ(l.intermediate_size, 25600);
  EXPECT_EQ(l.num_hidden_layers, 64);
  EXPECT_EQ(l.num_attention_heads, 64);
  EXPECT_EQ(l.num_key_value_heads, 8);
  for (const auto& p : {s, m, l}) EXPECT_EQ(ModelConfig::parse(p.to_json()), p);  // presets are valid configs
  try {
    preset_config("qwen3-9000b");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("qwen3-9000b"), std::string::npos);
  }
}

}  // namespace
}  // namespace neuron::model
