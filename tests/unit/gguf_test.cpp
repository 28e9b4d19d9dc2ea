// The GGUF reader: files from the test writer (tests/support/gguf_writer.hpp)
// and one written by llama.cpp's gguf-py (tests/data/gguf), read back exactly;
// malformed files refused with Error{bad_model} naming the problem, never a
// crash or a huge allocation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/gguf.hpp"
#include "io/gguf_names.hpp"
#include "io/safetensors.hpp"
#include "model/arch/family.hpp"
#include "model/gguf_config.hpp"
#include "support/gguf_writer.hpp"
#include "support/temp_dir.hpp"
#include "util/error.hpp"

namespace neuron::io {
namespace {

using quant::GgmlType;
using test_support::GgufWriter;

template <typename T>
void put(std::vector<std::byte>& b, std::size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof(T));
}

// The error a parse of `bytes` throws (a test fails when none is thrown).
std::string parse_error(const std::vector<std::byte>& bytes) {
  try {
    (void)parse_gguf(bytes, "t.gguf");
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::bad_model) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "parse accepted a malformed file";
  return "";
}

GgufWriter small_file() {
  GgufWriter w;
  w.add_string("general.architecture", "qwen3");
  w.add_u32("qwen3.block_count", 2);
  w.add_strings("tokenizer.ggml.tokens", {"a", "b", "Ġc"});
  w.add_i32s("tokenizer.ggml.token_type", {1, 1, 3});
  std::vector<float> m(2 * 32);
  for (std::size_t i = 0; i < m.size(); ++i) m[i] = static_cast<float>(i) / 16 - 2;
  w.add_floats("w.f32", GgmlType::f32, {2, 32}, m);
  w.add_floats("w.q8", GgmlType::q8_0, {2, 32}, m);
  w.add_floats("n.f32", GgmlType::f32, {5}, {1, 2, 3, 4, 5});
  return w;
}

TEST(Gguf, WriterRoundTrip) {
  for (std::uint64_t alignment : {32u, 64u, 8u}) {
    const auto bytes = small_file().bytes(alignment);
    const GgufContents c = parse_gguf(bytes, "t.gguf");
    EXPECT_EQ(c.version, 3u);
    EXPECT_EQ(c.alignment, alignment);
    EXPECT_EQ(c.metadata.require_string("general.architecture"), "qwen3");
    EXPECT_EQ(c.metadata.require_integer("qwen3.block_count"), 2);
    ASSERT_NE(c.metadata.strings("tokenizer.ggml.tokens"), nullptr);
    EXPECT_EQ(*c.metadata.strings("tokenizer.ggml.tokens"), (std::vector<std::string>{"a", "b", "Ġc"}));
    EXPECT_EQ(*c.metadata.integers("tokenizer.ggml.token_type"), (std::vector<std::int64_t>{1, 1, 3}));
    ASSERT_EQ(c.tensors.size(), 3u);
    EXPECT_EQ(c.tensors[0].ne, (std::vector<std::int64_t>{32, 2}));
    const TensorView f = c.tensors[0].view();
    EXPECT_EQ(f.shape(), (std::vector<std::int64_t>{2, 32}));
    EXPECT_FLOAT_EQ(f.to_f32()[33], 33.0f / 16 - 2);
    const TensorView q = c.tensors[1].view();
    EXPECT_TRUE(q.quantized());
    EXPECT_EQ(q.ggml_type(), GgmlType::q8_0);
    const auto qv = q.to_f32();
    for (std::size_t i = 0; i < qv.size(); ++i) EXPECT_NEAR(qv[i], f.to_f32()[i], 0.02) << i;
    EXPECT_EQ(c.tensors[2].view().to_f32(), (std::vector<float>{1, 2, 3, 4, 5}));
  }
}

TEST(Gguf, MetadataGettersNameKeyAndType) {
  const auto bytes = small_file().bytes();
  const GgufContents c = parse_gguf(bytes, "t.gguf");
  EXPECT_EQ(c.metadata.integer("absent"), std::nullopt);
  try {
    (void)c.metadata.integer("general.architecture");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'general.architecture' is string, expected an integer"), std::string::npos) << e.what();
  }
  EXPECT_THROW((void)c.metadata.require_string("general.name"), Error);
  EXPECT_THROW((void)c.metadata.strings("tokenizer.ggml.token_type"), Error);
}

// A file from llama.cpp's own writer (gguf-py GGUFWriter; tests/tools/gen_quant_golden.py).
TEST(Gguf, ReadsGgufPyOutput) {
  GgufFile f(std::string(NEURON_TEST_DATA) + "/gguf/gguf_py_sample.gguf");
  const GgufMetadata& m = f.metadata();
  EXPECT_EQ(m.require_string("general.architecture"), "qwen3");
  EXPECT_EQ(m.integer("test.u8"), 200);
  EXPECT_EQ(m.integer("test.i8"), -100);
  EXPECT_EQ(m.integer("test.u16"), 60000);
  EXPECT_EQ(m.integer("test.i16"), -30000);
  EXPECT_EQ(m.integer("test.u32"), 4000000000);
  EXPECT_EQ(m.integer("test.i32"), -2000000000);
  EXPECT_EQ(m.real("test.f32"), 0.25);
  EXPECT_EQ(m.integer("test.u64"), std::int64_t{1} << 40);
  EXPECT_EQ(m.integer("test.i64"), -(std::int64_t{1} << 40));
  EXPECT_EQ(m.real("test.f64"), 1e-300);
  EXPECT_EQ(m.boolean("test.bool"), true);
  EXPECT_EQ(m.string("test.string"), "héllo");
  EXPECT_EQ(*m.strings("test.strings"), (std::vector<std::string>{"a", "", "ĠĠ"}));
  EXPECT_EQ(*m.integers("test.ints"), (std::vector<std::int64_t>{1, -2, 3}));
  ASSERT_EQ(f.tensors().size(), 3u);
  std::vector<float> x(64);
  for (int i = 0; i < 64; ++i) x[i] = (static_cast<float>(i) - 32) / 8;
  EXPECT_EQ(f.tensors()[0].view().shape(), (std::vector<std::int64_t>{2, 32}));
  EXPECT_EQ(f.tensors()[0].view().to_f32(), x);
  EXPECT_EQ(f.tensors()[1].view().shape(), (std::vector<std::int64_t>{4, 16}));
  EXPECT_EQ(f.tensors()[1].view().to_f32(), x);  // exact in f16
  const TensorView q = f.tensors()[2].view();
  EXPECT_EQ(q.ggml_type(), GgmlType::q8_0);
  // Our quantizer makes the same blocks as gguf-py's (both bit-exact with ggml's reference).
  GgufWriter w;
  w.add_floats("c", GgmlType::q8_0, {2, 32}, x);
  const auto mine = w.bytes();
  const GgufContents c = parse_gguf(mine, "mine");
  EXPECT_EQ(std::memcmp(c.tensors[0].data, f.tensors()[2].data, 68), 0);
}

TEST(Gguf, QuantizedSlicesFollowBlocks) {
  GgufWriter w;
  std::vector<float> m(4 * 64);
  for (std::size_t i = 0; i < m.size(); ++i) m[i] = std::sin(static_cast<float>(i));
  w.add_floats("q", GgmlType::q8_0, {4, 64}, m);
  const auto bytes = w.bytes();
  const GgufContents c = parse_gguf(bytes, "t");
  const TensorView v = c.tensors[0].view();
  const auto all = v.to_f32();
  const auto right = v.cols(32, 64).to_f32();
  const auto rows = v.rows(1, 3).to_f32();
  for (int r = 0; r < 4; ++r)
    for (int j = 0; j < 32; ++j) EXPECT_EQ(right[r * 32 + j], all[r * 64 + 32 + j]);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(rows[i], all[64 + i]);
  try {
    (void)v.cols(16, 64);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::bad_tensor_parallel);
    EXPECT_NE(std::string(e.what()).find("block boundary"), std::string::npos) << e.what();
  }
}

TEST(Gguf, MalformedFilesAreRefusedClearly) {
  const auto good = small_file().bytes();
  // Every truncation of a valid file that cuts into its last tensor (20
  // bytes, then 12 of padding) is an error, none a crash.
  for (std::size_t n = 0; n + 12 < good.size(); n += 3) {
    const std::vector<std::byte> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(n));
    EXPECT_THROW((void)parse_gguf(cut, "t"), Error) << n;
  }
  auto with = [&](std::size_t at, auto v) {
    auto b = good;
    put(b, at, v);
    return b;
  };
  EXPECT_NE(parse_error(with(0, std::uint32_t{0x12345678})).find("bad magic"), std::string::npos);
  EXPECT_NE(parse_error(with(4, std::uint32_t{1})).find("version 1"), std::string::npos);
  EXPECT_NE(parse_error(with(4, std::uint32_t{0x03000000})).find("big-endian"), std::string::npos);
  EXPECT_NE(parse_error(with(8, ~std::uint64_t{0})).find("tensor count"), std::string::npos);
  EXPECT_NE(parse_error(with(16, std::uint64_t{1} << 60)).find("metadata count"), std::string::npos);
  // The first key's length: huge.
  EXPECT_NE(parse_error(with(24, std::uint64_t{1} << 62)).find("string length"), std::string::npos);
}

TEST(Gguf, BadValuesAndTensorsAreNamed) {
  auto bytes_of = [](auto&& build) {
    GgufWriter w;
    build(w);
    return w.bytes();
  };
  auto raw = [](std::initializer_list<std::uint8_t> b) {
    std::vector<std::byte> v;
    for (auto x : b) v.push_back(static_cast<std::byte>(x));
    return v;
  };
  // Unknown value type 99.
  EXPECT_NE(parse_error(bytes_of([&](GgufWriter& w) { w.add_raw("k", raw({99, 0, 0, 0})); })).find("unknown value type 99"),
            std::string::npos);
  // An array of 2^40 u32 in a tiny file.
  EXPECT_NE(parse_error(bytes_of([&](GgufWriter& w) {
              w.add_raw("k", raw({9, 0, 0, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0}));
            })).find("cannot fit"),
            std::string::npos);
  // Arrays of arrays.
  EXPECT_NE(parse_error(bytes_of([&](GgufWriter& w) { w.add_raw("k", raw({9, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0})); }))
                .find("arrays of arrays"),
            std::string::npos);
  // A bool that is 2.
  EXPECT_NE(parse_error(bytes_of([&](GgufWriter& w) { w.add_raw("k", raw({7, 0, 0, 0, 2})); })).find("bool"), std::string::npos);
  // Duplicate keys and tensors.
  EXPECT_NE(parse_error(bytes_of([](GgufWriter& w) {
              w.add_u32("k", 1);
              w.add_u32("k", 2);
            })).find("appears twice"),
            std::string::npos);
  EXPECT_NE(parse_error(bytes_of([](GgufWriter& w) {
              w.add_floats("t", GgmlType::f32, {4}, {1, 2, 3, 4});
              w.add_floats("t", GgmlType::f32, {4}, {1, 2, 3, 4});
            })).find("appears twice"),
            std::string::npos);
  // Alignment not a power of two / not u32.
  EXPECT_NE(parse_error(bytes_of([](GgufWriter& w) { w.add_u32("general.alignment", 24); })).find("power of two"),
            std::string::npos);
  EXPECT_NE(parse_error(bytes_of([](GgufWriter& w) { w.add_u64("general.alignment", 32); })).find("must be a u32"),
            std::string::npos);
  // Unknown ggml type, rows not whole blocks, too many dims, a huge dimension.
  EXPECT_NE(parse_error(bytes_of([](GgufWriter& w) { w.add_tensor("t", static_cast<GgmlType>(77), {32}, {}); }))
                .find("unknown or unsupported ggml type 77"),
            std::string::npos);
  EXPECT_NE(parse_error(bytes_of([](GgufWriter& w) { w.add_tensor("t", GgmlType::q4_k, {128, 2}, std::vector<std::byte>(144)); }))
                .find("not a whole number of Q4_K blocks"),
            std::string::npos);
  EXPECT_NE(parse_error(bytes_of([](GgufWriter& w) { w.add_tensor("t", GgmlType::f32, {1, 1, 1, 1, 1}, std::vector<std::byte>(4)); }))
                .find("5 dimensions"),
            std::string::npos);
  EXPECT_NE(parse_error(bytes_of([](GgufWriter& w) { w.add_tensor("t", GgmlType::f32, {std::int64_t{1} << 41}, {}); }))
                .find("too large"),
            std::string::npos);
  // Zero elements but a huge extent: refused before any view multiplies the other dimensions.
  EXPECT_NE(parse_error(bytes_of([](GgufWriter& w) {
              w.add_tensor("t", GgmlType::f32, {0, std::int64_t{1} << 30, std::int64_t{1} << 30}, {});
            })).find("too many"),
            std::string::npos);
  {
    // An empty tensor of 2^29 empty rows converts at once (found by fuzz_gguf: it looped over the rows).
    GgufWriter w;
    w.add_tensor("e", GgmlType::f32, {0, std::int64_t{1} << 29}, {});
    const auto b = w.bytes();
    const GgufContents c = parse_gguf(b, "t");
    EXPECT_TRUE(c.tensors[0].view().to_f32().empty());
  }
  // Data past the end (the writer wrote fewer bytes than the shape needs).
  EXPECT_NE(parse_error(bytes_of([](GgufWriter& w) { w.add_tensor("t", GgmlType::f32, {64, 64}, std::vector<std::byte>(4)); }))
                .find("outside the data section"),
            std::string::npos);
  EXPECT_NE(parse_error(bytes_of([](GgufWriter& w) { w.add_tensor(std::string(64, 'x'), GgmlType::f32, {1}, std::vector<std::byte>(4)); }))
                .find("too long"),
            std::string::npos);
}

TEST(Gguf, OverlappingAndMisalignedTensorsAreRefused) {
  GgufWriter w;
  w.add_floats("a", GgmlType::f32, {16}, std::vector<float>(16, 1.0f));
  w.add_floats("b", GgmlType::f32, {16}, std::vector<float>(16, 2.0f));
  auto b = w.bytes();
  // Find b's offset field: the last 8 bytes of the tensor infos. Infos: name(8+1) n_dims(4) ne(8) type(4) offset(8).
  const std::size_t infos_end = 24 + 2 * (8 + 1 + 4 + 8 + 4 + 8);
  put(b, infos_end - 8, std::uint64_t{32});  // b starts inside a (a is 64 bytes)
  EXPECT_NE(parse_error(b).find("overlap"), std::string::npos);
  put(b, infos_end - 8, std::uint64_t{65});
  EXPECT_NE(parse_error(b).find("not a multiple of the alignment"), std::string::npos);
}

TEST(GgufNames, MapToHuggingFace) {
  EXPECT_EQ(hf_name_for_gguf("token_embd.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(hf_name_for_gguf("output.weight"), "lm_head.weight");
  EXPECT_EQ(hf_name_for_gguf("output_norm.weight"), "model.norm.weight");
  EXPECT_EQ(hf_name_for_gguf("blk.0.attn_q.weight"), "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(hf_name_for_gguf("blk.27.attn_k_norm.weight"), "model.layers.27.self_attn.k_norm.weight");
  EXPECT_EQ(hf_name_for_gguf("blk.3.ffn_down.weight"), "model.layers.3.mlp.down_proj.weight");
  EXPECT_EQ(hf_name_for_gguf("blk.3.ffn_norm.weight"), "model.layers.3.post_attention_layernorm.weight");
  EXPECT_EQ(hf_name_for_gguf("blk.1.attn_q.bias"), "model.layers.1.self_attn.q_proj.bias");
  EXPECT_EQ(hf_name_for_gguf("blk.01.attn_q.weight"), std::nullopt);
  EXPECT_EQ(hf_name_for_gguf("blk.5.ffn_gate_inp.weight"), "model.layers.5.mlp.gate.weight");
  EXPECT_EQ(hf_name_for_gguf("blk.5.ffn_gate_exps.weight"), std::nullopt) << "gguf_experts' to name";
  const auto e = gguf_experts("blk.12.ffn_down_exps.weight");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->layer, 12);
  EXPECT_EQ(e->proj, "down_proj");
  EXPECT_EQ(hf_expert_name(e->layer, 3, e->proj), "model.layers.12.mlp.experts.3.down_proj.weight");
  EXPECT_FALSE(gguf_experts("blk.12.ffn_down.weight"));
  EXPECT_FALSE(gguf_experts("blk.x.ffn_up_exps.weight"));
  EXPECT_TRUE(gguf_permutes_qk("llama"));
  EXPECT_FALSE(gguf_permutes_qk("qwen3"));
  EXPECT_EQ(hf_name_for_gguf("blk.x.attn_q.weight"), std::nullopt);
  EXPECT_EQ(hf_name_for_gguf("rope_freqs.weight"), std::nullopt);
  EXPECT_EQ(hf_name_for_gguf("blk.1.attn_q"), std::nullopt);
  // The hybrids' names (llama.cpp's qwen3next / qwen35): A_log and dt_bias lose their suffix.
  EXPECT_EQ(hf_name_for_gguf("blk.2.ssm_a"), "model.layers.2.linear_attn.A_log");
  EXPECT_EQ(hf_name_for_gguf("blk.2.ssm_dt.bias"), "model.layers.2.linear_attn.dt_bias");
  EXPECT_EQ(hf_name_for_gguf("blk.2.ssm_conv1d.weight"), "model.layers.2.linear_attn.conv1d.weight");
  EXPECT_EQ(hf_name_for_gguf("blk.2.attn_qkv.weight"), "model.layers.2.linear_attn.in_proj_qkv.weight");
  EXPECT_EQ(hf_name_for_gguf("blk.2.ssm_ba.weight"), "model.layers.2.linear_attn.in_proj_ba.weight");
  EXPECT_EQ(hf_name_for_gguf("blk.3.post_attention_norm.weight"), "model.layers.3.post_attention_layernorm.weight");
  EXPECT_EQ(hf_name_for_gguf("blk.3.ffn_gate_inp_shexp.weight"), "model.layers.3.mlp.shared_expert_gate.weight");
  EXPECT_EQ(hf_name_for_gguf("blk.3.ffn_up_shexp.weight"), "model.layers.3.mlp.shared_expert.up_proj.weight");
  EXPECT_EQ(hf_name_for_gguf("blk.2.ssm_a.weight"), std::nullopt);
  // And back, for messages (a nested text model's name too).
  EXPECT_EQ(gguf_name_for_hf("model.language_model.layers.2.linear_attn.A_log"), "blk.2.ssm_a");
  EXPECT_EQ(gguf_name_for_hf("model.layers.0.self_attn.q_proj.weight"), "blk.0.attn_q.weight");
  EXPECT_EQ(gguf_name_for_hf("model.layers.7.mlp.experts.3.down_proj.weight"), "blk.7.ffn_down_exps.weight");
  EXPECT_EQ(gguf_name_for_hf("lm_head.weight"), "output.weight");
  EXPECT_EQ(gguf_name_for_hf("model.layers.0.linear_attn.in_proj_qkvz.weight"), std::nullopt);
}

// The fixture as GGUF: its config and every tensor come back as the safetensors checkpoint has them.
TEST(GgufCheckpoint, FixtureAsBf16GgufEqualsSafetensors) {
  const std::filesystem::path dir = std::filesystem::path(NEURON_REPO_ROOT) / "models" / "qwen3-tiny-a";
  test_support::TempDir tmp("neuron-gguf");
  const auto path = tmp / "tiny-bf16.gguf";
  test_support::gguf_from_checkpoint(dir, GgmlType::bf16).write(path);
  const auto want = model::load_model_configs(dir);
  const auto got = model::load_model_configs(path);
  EXPECT_EQ(got.model, want.model);
  EXPECT_EQ(got.stop_ids(), want.stop_ids());
  EXPECT_EQ(checkpoint_files(path), std::vector<std::filesystem::path>{path});
  const auto g = Checkpoint::open_files({path});
  const auto s = Checkpoint::open_dir(dir);
  ASSERT_NE(g.gguf(), nullptr);
  EXPECT_EQ(g.names(), s.names());
  for (const auto& name : s.names()) {
    const TensorView& a = s.tensor(name);
    const TensorView& b = g.tensor(name);
    EXPECT_EQ(a.shape(), b.shape()) << name;
    EXPECT_EQ(a.to_f32(), b.to_f32()) << name;
  }
}

// Each hybrid fixture as the GGUF llama.cpp's converter writes (norms 1 + w, ssm_a = -exp(A_log), conv1d squeezed,
// Qwen3-Next's qkvz split, Qwen3.5's value heads tiled): its config, and every tensor of the text model as the
// safetensors checkpoint has it (A_log through log(-exp(x)), within an ulp; the rest exactly).
TEST(GgufCheckpoint, HybridFixturesAsBf16GgufEqualSafetensors) {
  for (const char* family : {"qwen3_next-a", "qwen3_5-a", "qwen3_5_moe-a"}) {
    const std::filesystem::path dir = std::filesystem::path(NEURON_TEST_DATA) / "families" / family;
    test_support::TempDir tmp("neuron-gguf-hybrid");
    const auto path = tmp / "m.gguf";
    test_support::gguf_from_checkpoint(dir, GgmlType::bf16).write(path);
    const auto want = model::load_model_configs(dir).model;
    const auto got = model::load_model_configs(path).model;
    EXPECT_EQ(got.linear, want.linear) << family;
    EXPECT_EQ(got.moe, want.moe) << family;
    EXPECT_EQ(got.rope, want.rope) << family;
    EXPECT_EQ(got.model_type, want.model_type);
    EXPECT_EQ(got.num_hidden_layers, want.num_hidden_layers);
    EXPECT_EQ(got.intermediate_size, want.intermediate_size) << family;
    EXPECT_EQ(got.head_dim, want.head_dim);
    EXPECT_EQ(got.num_key_value_heads, want.num_key_value_heads);
    EXPECT_TRUE(got.zero_centred_norms && got.attention_output_gate && got.qk_norm && got.tie_word_embeddings);
    const auto g = Checkpoint::open_files({path});
    const auto s = Checkpoint::open_dir(dir);
    const auto& fam = model::family_of(want);
    int compared = 0;
    for (const auto& name : s.names()) {
      if (fam.ignores_tensor(name)) continue;
      const TensorView* b = g.find(name);
      ASSERT_NE(b, nullptr) << family << " " << name;
      const TensorView& a = s.tensor(name);
      ASSERT_EQ(a.shape(), b->shape()) << family << " " << name;
      const auto x = a.to_f32(), y = b->to_f32();
      if (name.ends_with("A_log")) {
        for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(y[i], x[i], 2e-7f * std::max(1.0f, std::abs(x[i]))) << name;
      } else {
        EXPECT_EQ(x, y) << family << " " << name;
      }
      ++compared;
    }
    EXPECT_GT(compared, 40) << family;
  }
}

// Qwen3.5's out_proj stored Q8_0 with its value heads' columns tiled: 32-wide heads are whole blocks, which go back
// to their places as they are (the blocks quantizing Hugging Face's order gives); 16-wide heads split blocks, so the
// matrix comes back dequantized, in f32, each column where the converter took it from.
TEST(GgufCheckpoint, TiledColumnsOfAQuantizedOutProjGoBack) {
  test_support::TempDir tmp("neuron-gguf-tiled");
  const std::int64_t hk = 2, hv = 4, rows = 3;
  for (const std::int64_t dv : {32, 16}) {
    const std::int64_t cols = hv * dv;
    std::vector<float> hf(static_cast<std::size_t>(rows * cols));  // [rows, Hv dv] in Hugging Face's head order
    for (std::size_t i = 0; i < hf.size(); ++i) hf[i] = std::sin(0.37f * static_cast<float>(i)) * (1.0f + static_cast<float>(i % 7));
    std::vector<float> tiled(hf.size());
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::vector<float> row(hf.begin() + r * cols, hf.begin() + (r + 1) * cols);
      const auto t = test_support::tile_value_heads(row, 1, hk, hv, dv);
      std::copy(t.begin(), t.end(), tiled.begin() + r * cols);
    }
    GgufWriter w;
    w.add_string("general.architecture", "qwen35");
    w.add_u32("qwen35.ssm.group_count", hk);
    w.add_u32("qwen35.ssm.time_step_rank", hv);
    w.add_u32("qwen35.ssm.state_size", 8);
    w.add_u32("qwen35.ssm.inner_size", static_cast<std::uint32_t>(cols));
    w.add_u32("qwen35.ssm.conv_kernel", 4);
    w.add_floats("blk.0.ssm_out.weight", GgmlType::q8_0, {rows, cols}, tiled);
    const auto path = tmp / ("m" + std::to_string(dv) + ".gguf");
    w.write(path);
    const auto ckpt = Checkpoint::open_files({path});
    const TensorView& got = ckpt.tensor("model.language_model.layers.0.linear_attn.out_proj.weight");
    ASSERT_EQ(got.shape(), (std::vector<std::int64_t>{rows, cols}));
    // What the converter quantized: the tiled matrix's Q8_0 blocks.
    std::vector<std::byte> q(static_cast<std::size_t>(rows) * quant::row_bytes(GgmlType::q8_0, cols));
    for (std::int64_t r = 0; r < rows; ++r)
      GgufWriter::encode(GgmlType::q8_0, tiled.data() + r * cols, q.data() + r * quant::row_bytes(GgmlType::q8_0, cols), cols);
    const std::vector<float> stored = TensorView(GgmlType::q8_0, {rows, cols}, q.data()).to_f32();
    const std::vector<float> back = got.to_f32();
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::vector<float> row(back.begin() + r * cols, back.begin() + (r + 1) * cols);
      const auto retiled = test_support::tile_value_heads(row, 1, hk, hv, dv);
      EXPECT_TRUE(std::equal(retiled.begin(), retiled.end(), stored.begin() + r * cols)) << "dv " << dv << " row " << r;
    }
    if (dv == 32) {
      EXPECT_EQ(got.ggml_type(), GgmlType::q8_0) << "whole blocks stay quantized";
      std::vector<std::byte> hq(q.size());  // Hugging Face's order quantized: the same blocks
      for (std::int64_t r = 0; r < rows; ++r)
        GgufWriter::encode(GgmlType::q8_0, hf.data() + r * cols, hq.data() + r * quant::row_bytes(GgmlType::q8_0, cols), cols);
      EXPECT_EQ(std::memcmp(got.data(), hq.data(), hq.size()), 0);
    } else {
      EXPECT_EQ(got.ggml_type(), GgmlType::f32) << "split blocks are dequantized";
    }
  }
}

// tests/support/gguf_writer.hpp's bf16 file of each hybrid fixture against what llama.cpp's own convert_hf_to_gguf.py
// wrote for it (tests/data/gguf/<fixture>-bf16.manifest.json, by tests/tools/gguf_manifest.py): every metadata key
// but general.* and tokenizer.* with its value, and every tensor with its type, ne and bytes (ssm_a, -exp(A_log)
// through another libm, to an ulp). So the layout the other GGUF tests use is the converter's.
TEST(GgufCheckpoint, HybridWriterIsLlamaCppsConverter) {
  for (const char* family : {"qwen3_next-a", "qwen3_5-a", "qwen3_5_moe-a"}) {
    std::ifstream in(std::string(NEURON_TEST_DATA) + "/gguf/" + family + "-bf16.manifest.json");
    const nlohmann::json manifest = nlohmann::json::parse(in);
    test_support::TempDir tmp("neuron-gguf-manifest");
    test_support::gguf_from_checkpoint(std::filesystem::path(NEURON_TEST_DATA) / "families" / family, GgmlType::bf16)
        .write(tmp / "m.gguf");
    const GgufFile file(tmp / "m.gguf");
    const GgufMetadata& md = file.metadata();
    for (const auto& [key, want] : manifest.at("metadata").items()) {
      const GgufValue* v = md.find(key);
      ASSERT_NE(v, nullptr) << family << ": " << key;
      if (want.is_array()) {
        std::vector<std::int64_t> w;
        for (const auto& x : want) w.push_back(x.is_boolean() ? x.get<bool>() : x.get<std::int64_t>());
        EXPECT_EQ(v->integers, w) << family << ": " << key;
        EXPECT_EQ(v->elem == GgufType::boolean, want.at(0).is_boolean()) << family << ": " << key;
      } else if (want.is_number_float()) {
        EXPECT_EQ(static_cast<float>(md.real(key).value_or(0)), want.get<float>()) << family << ": " << key;  // f32 keys
      } else {
        EXPECT_EQ(md.integer(key), want.get<std::int64_t>()) << family << ": " << key;
      }
    }
    for (const auto& [key, _] : md.values()) {
      if (key.starts_with("general.") || key.starts_with("tokenizer.") || key.ends_with(".vocab_size")) continue;
      EXPECT_TRUE(manifest.at("metadata").contains(key)) << family << ": the converter writes no " << key;
    }
    std::map<std::string, const GgufTensor*> ours;
    for (const GgufTensor& t : file.tensors()) ours.emplace(t.name, &t);
    EXPECT_EQ(ours.size(), manifest.at("tensors").size()) << family;
    for (const auto& want : manifest.at("tensors")) {
      const std::string name = want.at("name").get<std::string>();
      ASSERT_TRUE(ours.count(name)) << family << ": " << name;
      const GgufTensor& t = *ours.at(name);
      EXPECT_EQ(static_cast<int>(t.type), want.at("type").get<int>()) << family << ": " << name;
      EXPECT_EQ(t.ne, want.at("ne").get<std::vector<std::int64_t>>()) << family << ": " << name;
      if (want.contains("values")) {
        const auto w = want.at("values").get<std::vector<float>>();
        const auto got = t.view().to_f32();
        ASSERT_EQ(got.size(), w.size());
        for (std::size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(got[i], w[i], 2.4e-7f * std::abs(w[i])) << name;
        continue;
      }
      std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64 of the tensor's bytes
      for (std::uint64_t i = 0; i < t.nbytes; ++i) h = (h ^ static_cast<std::uint8_t>(t.data[i])) * 0x100000001b3ull;
      char hex[17];
      std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
      EXPECT_EQ(std::string(hex), want.at("fnv1a").get<std::string>()) << family << ": " << name;
    }
  }
}

TEST(GgufCheckpoint, ConfigRefusesOtherArchitectures) {
  test_support::TempDir tmp("neuron-gguf");
  GgufWriter w;
  w.add_string("general.architecture", "gemma3");
  w.write(tmp / "m.gguf");
  try {
    (void)model::load_model_configs(tmp / "m.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::unsupported_arch);
    EXPECT_NE(std::string(e.what()).find("'gemma3'"), std::string::npos) << e.what();
  }
  // llama.cpp's Gated DeltaNet hybrids are read: a file without their keys is malformed, the key named.
  for (const char* arch : {"qwen3next", "qwen35", "qwen35moe"}) {
    GgufWriter h;
    h.add_string("general.architecture", arch);
    h.write(tmp / "h.gguf");
    try {
      (void)model::load_model_configs(tmp / "h.gguf");
      FAIL() << arch;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), errc::bad_model);
      EXPECT_NE(std::string(e.what()).find(std::string(arch) + ".embedding_length"), std::string::npos) << e.what();
    }
  }
  GgufWriter q;
  q.add_string("general.architecture", "qwen3");
  q.write(tmp / "q.gguf");
  try {
    (void)model::load_model_configs(tmp / "q.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::bad_model);
    EXPECT_NE(std::string(e.what()).find("qwen3.embedding_length"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace neuron::io
