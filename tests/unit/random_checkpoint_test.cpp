// Random-weight checkpoints: they load back through the real reader with the
// Hugging Face names and shapes, sharded or not, deterministically per seed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "model/random_checkpoint.hpp"
#include "util/error.hpp"
#include "support/temp_dir.hpp"

namespace neuron::model {
namespace {

namespace fs = std::filesystem;

using test_support::TempDir;

// Small, awkward shape: head_dim != hidden / heads, GQA 3:1, untied.
ModelConfig small_config(bool tied = false) {
  ModelConfig c;
  c.vocab_size = 97;
  c.hidden_size = 24;
  c.intermediate_size = 40;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 6;
  c.num_key_value_heads = 2;
  c.head_dim = 10;
  c.max_position_embeddings = 256;
  c.tie_word_embeddings = tied;
  c.bos_token_id = 1;
  c.eos_token_ids = {2, 3};
  return c;
}

std::vector<std::int64_t> expected_shape(const std::string& name, const ModelConfig& c) {
  const std::int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim,
                     ff = c.intermediate_size;
  auto ends = [&](const char* s) { return name.size() >= std::strlen(s) && name.compare(name.size() - std::strlen(s), std::string::npos, s) == 0; };
  if (name == "model.embed_tokens.weight" || name == "lm_head.weight") return {c.vocab_size, h};
  if (ends("q_norm.weight") || ends("k_norm.weight")) return {c.head_dim};
  if (ends("layernorm.weight") || name == "model.norm.weight") return {h};
  if (ends("q_proj.weight")) return {q, h};
  if (ends("k_proj.weight") || ends("v_proj.weight")) return {kv, h};
  if (ends("o_proj.weight")) return {h, q};
  if (ends("gate_proj.weight") || ends("up_proj.weight")) return {ff, h};
  if (ends("down_proj.weight")) return {h, ff};
  ADD_FAILURE() << "unexpected tensor " << name;
  return {};
}

TEST(RandomCheckpoint, SingleFileLoadsWithHuggingFaceNamesAndShapes) {
  TempDir dir;
  const ModelConfig cfg = small_config();
  auto files = write_random_checkpoint(dir.path(), cfg, {.seed = 7});
  ASSERT_EQ(files, std::vector<fs::path>{dir.path() / "model.safetensors"});
  EXPECT_FALSE(fs::exists(dir.path() / "model.safetensors.index.json"));

  ModelConfigs loaded = load_model_configs(dir.path());
  ModelConfig want = cfg;
  want.torch_dtype = "bfloat16";
  EXPECT_EQ(loaded.model, want);
  EXPECT_EQ(loaded.generation.eos_token_ids, (std::vector<std::int32_t>{2, 3}));

  io::Checkpoint ck = io::Checkpoint::open_dir(dir.path());
  EXPECT_EQ(ck.tensor_count(), 1 + 11 * 3 + 1 + 1u);
  for (std::int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    for (const char* s : {"input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                          "self_attn.o_proj", "self_attn.q_norm", "self_attn.k_norm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"})
      EXPECT_NE(ck.find(p + s + ".weight"), nullptr) << p + s;
  }
  for (const auto& name : ck.names()) {
    const auto& t = ck.tensor(name);
    EXPECT_EQ(t.dtype(), DType::bf16) << name;
    EXPECT_EQ(t.shape(), expected_shape(name, cfg)) << name;
  }
  EXPECT_NE(ck.find("lm_head.weight"), nullptr);
}

TEST(RandomCheckpoint, ValuesAreTameAndNormsAreNotOnes) {
  TempDir dir;
  const ModelConfig cfg = small_config();
  write_random_checkpoint(dir.path(), cfg, {.seed = 3, .dtype = DType::f32});
  io::Checkpoint ck = io::Checkpoint::open_dir(dir.path());
  for (const auto& name : ck.names()) {
    SCOPED_TRACE(name);
    const auto v = ck.tensor(name).to_f32();
    const bool norm = name.find("norm") != std::string::npos;
    double lo = 1e9, hi = -1e9, mean = 0;
    for (float x : v) {
      lo = std::min<double>(lo, x);
      hi = std::max<double>(hi, x);
      mean += x;
    }
    mean /= static_cast<double>(v.size());
    if (norm) {
      EXPECT_GE(lo, 0.8);
      EXPECT_LE(hi, 1.2);
      EXPECT_GT(hi - lo, 0.05);  // a forward that ignores the norm weight must differ
    } else {
      const auto& shape = ck.tensor(name).shape();
      const double bound = name.find("embed") != std::string::npos || name == "lm_head.weight"
                               ? 2.0 * std::sqrt(3.0 / static_cast<double>(cfg.hidden_size))
                               : 1.0 / std::sqrt(static_cast<double>(shape.back()));
      EXPECT_LE(std::max(-lo, hi), bound * 1.0001);
      EXPECT_GT(hi - lo, bound);  // actually spread over the range
      EXPECT_LT(std::abs(mean), bound / 4);
    }
  }
  // The embedding is not the lm_head: untied means independent draws.
  EXPECT_NE(ck.tensor("model.embed_tokens.weight").to_f32(), ck.tensor("lm_head.weight").to_f32());
}

TEST(RandomCheckpoint, ShardedIndexHoldsTheSameTensorsAsOneFile) {
  TempDir one, three;
  const ModelConfig cfg = small_config();
  write_random_checkpoint(one.path(), cfg, {.seed = 11});
  auto files = write_random_checkpoint(three.path(), cfg, {.seed = 11, .shards = 3});
  ASSERT_EQ(files.size(), 3u);
  EXPECT_EQ(files[0].filename(), "model-00001-of-00003.safetensors");
  EXPECT_EQ(files[2].filename(), "model-00003-of-00003.safetensors");
  EXPECT_FALSE(fs::exists(three.path() / "model.safetensors"));

  std::ifstream in(three.path() / "model.safetensors.index.json");
  auto index = nlohmann::json::parse(in);
  std::uint64_t total = 0;
  io::Checkpoint a = io::Checkpoint::open_dir(one.path());
  for (const auto& n : a.names()) total += static_cast<std::uint64_t>(a.tensor(n).numel()) * 2;
  EXPECT_EQ(index["metadata"]["total_size"], total);
  EXPECT_EQ(index["weight_map"].size(), a.tensor_count());

  io::Checkpoint b = io::Checkpoint::open_dir(three.path());
  EXPECT_EQ(b.files(), files);
  ASSERT_EQ(a.names(), b.names());
  for (const auto& n : a.names()) EXPECT_EQ(a.tensor(n).to_bf16(), b.tensor(n).to_bf16()) << n;
  // Each shard really holds part of the model, and the index points at the right one.
  for (const auto& f : files) {
    io::SafetensorsFile sf(f);
    EXPECT_FALSE(sf.tensors().empty()) << f;
    for (const auto& [name, view] : sf.tensors()) EXPECT_EQ(index["weight_map"][name], f.filename().string());
  }
}

TEST(RandomCheckpoint, DeterministicPerSeed) {
  TempDir a, b, c;
  const ModelConfig cfg = small_config(/*tied=*/true);
  write_random_checkpoint(a.path(), cfg, {.seed = 5});
  write_random_checkpoint(b.path(), cfg, {.seed = 5});
  write_random_checkpoint(c.path(), cfg, {.seed = 6});
  io::Checkpoint ca = io::Checkpoint::open_dir(a.path()), cb = io::Checkpoint::open_dir(b.path()),
                 cc = io::Checkpoint::open_dir(c.path());
  EXPECT_EQ(ca.find("lm_head.weight"), nullptr);  // tied
  for (const auto& n : ca.names()) {
    EXPECT_EQ(ca.tensor(n).to_bf16(), cb.tensor(n).to_bf16()) << n;
    EXPECT_NE(ca.tensor(n).to_bf16(), cc.tensor(n).to_bf16()) << n;
  }
  // Stored values are the documented stream, rounded to the dtype.
  const io::TensorSpec spec{"model.layers.1.mlp.up_proj.weight", DType::bf16, {cfg.intermediate_size, cfg.hidden_size}};
  const auto want = random_tensor_values(spec, cfg, 5);
  const auto got = ca.tensor(spec.name).to_bf16();
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], f32_to_bf16(want[i]));
}

TEST(RandomCheckpoint, RewritingReplacesEarlierLayout) {
  TempDir dir;
  const ModelConfig cfg = small_config();
  write_random_checkpoint(dir.path(), cfg, {.seed = 1, .shards = 2});
  ASSERT_TRUE(fs::exists(dir.path() / "model.safetensors.index.json"));
  write_random_checkpoint(dir.path(), cfg, {.seed = 1, .shards = 1});
  EXPECT_FALSE(fs::exists(dir.path() / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(dir.path() / "model-00001-of-00002.safetensors"));
  EXPECT_EQ(io::checkpoint_files(dir.path()), std::vector<fs::path>{dir.path() / "model.safetensors"});
}

TEST(RandomCheckpoint, RefusesInvalidConfigsAndShardCounts) {
  TempDir dir;
  ModelConfig bad = small_config();
  bad.num_key_value_heads = 4;  // 6 heads are not a multiple of 4
  try {
    write_random_checkpoint(dir.path(), bad);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("num_key_value_heads"), std::string::npos) << e.what();
  }
  for (int shards : {0, -1, 1000}) {
    try {
      write_random_checkpoint(dir.path(), small_config(), {.shards = shards});
      FAIL() << shards;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), errc::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("shards"), std::string::npos) << e.what();
    }
  }
}

TEST(GenModelCli, WritesALoadableShardedModelWithTokenizer) {
  TempDir dir;
  const std::string cmd = std::string(NEURON_BINARY) + " gen-model --out " + dir.path().string() +
                          " --hidden 32 --intermediate 64 --layers 2 --heads 4 --kv-heads 2 --head-dim 16 --vocab 151936 --untied"
                          " --shards 2 --seed 9 --copy-tokenizer-from " + NEURON_REPO_ROOT + "/models/qwen3-tiny-a > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  ModelConfigs m = load_model_configs(dir.path());
  EXPECT_EQ(m.model.hidden_size, 32);
  EXPECT_EQ(m.model.head_dim, 16);
  EXPECT_FALSE(m.model.tie_word_embeddings);
  EXPECT_TRUE(fs::exists(dir.path() / "tokenizer.json"));
  EXPECT_TRUE(fs::exists(dir.path() / "tokenizer_config.json"));
  io::Checkpoint ck = io::Checkpoint::open_dir(dir.path());
  EXPECT_EQ(ck.files().size(), 2u);
  EXPECT_EQ(ck.tensor("lm_head.weight").shape(), (std::vector<std::int64_t>{151936, 32}));
  // A missing shape flag is a clear error, not a default model.
  const std::string missing = std::string(NEURON_BINARY) + " gen-model --out " + dir.path().string() + "/x --hidden 32 2>/dev/null";
  EXPECT_NE(std::system(missing.c_str()), 0);
  EXPECT_FALSE(fs::exists(dir.path() / "x" / "config.json"));
}

}  // namespace
}  // namespace neuron::model
