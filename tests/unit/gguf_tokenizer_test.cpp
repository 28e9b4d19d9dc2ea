// A .gguf alone is a complete model: its tokenizer (tokenizer.ggml.*) and
// chat template (tokenizer.chat_template) must equal what the fixture's
// tokenizer.json and tokenizer_config.json give, on the transformers goldens.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "chat/formatter.hpp"
#include "engine/model_assets.hpp"
#include "io/gguf.hpp"
#include "support/gguf_writer.hpp"
#include "support/temp_dir.hpp"
#include "tokenizer/gguf_vocab.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer_test_util.hpp"
#include "util/error.hpp"

namespace neuron {
namespace {

const std::filesystem::path kDir = std::filesystem::path(NEURON_REPO_ROOT) / "models" / "qwen3-tiny-a";

nlohmann::json golden(const char* name) {
  std::ifstream in(std::filesystem::path(NEURON_TEST_DATA) / name);
  return nlohmann::json::parse(in);
}

class GgufAssets : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new test_support::TempDir("neuron-gguf-tok");
    path_ = *tmp_ / "tiny.gguf";
    test_support::gguf_from_checkpoint(kDir, quant::GgmlType::bf16).write(path_);
    assets_ = new engine::ModelAssets(engine::load_model_assets(path_));
  }
  static void TearDownTestSuite() {
    delete assets_;
    delete tmp_;
  }
  static inline test_support::TempDir* tmp_ = nullptr;
  static inline std::filesystem::path path_;
  static inline engine::ModelAssets* assets_ = nullptr;
};

TEST_F(GgufAssets, TokenizerMatchesTokenizerJsonOnGoldens) {
  const tokenizer::Tokenizer& g = *assets_->tokenizer;
  const tokenizer::Tokenizer& h = tokenizer::testing::qwen();
  EXPECT_EQ(g.vocab_size(), h.vocab_size());
  const auto j = golden("tokenizer-golden.json");
  ASSERT_EQ(j.at("cases").size(), 27u);
  for (const auto& c : j.at("cases")) {
    const auto text = c.at("text").get<std::string>();
    const auto ids = c.at("ids").get<std::vector<std::int32_t>>();
    EXPECT_EQ(g.encode(text), ids) << text;
    EXPECT_EQ(g.decode(ids), c.at("decoded").get<std::string>()) << text;
  }
  for (std::int32_t id = 0; id < 151936; ++id) {
    ASSERT_EQ(g.is_known(id), h.is_known(id)) << id;
    if (!h.is_known(id)) continue;
    ASSERT_EQ(g.token_bytes(id), h.token_bytes(id)) << id;
    ASSERT_EQ(g.is_special(id), h.is_special(id)) << id;
  }
}

TEST_F(GgufAssets, ChatTemplateRendersTheGoldens) {
  ASSERT_TRUE(assets_->chat.has_value());
  const auto j = golden("chat-template-golden.json");
  ASSERT_EQ(j["cases"].size(), 8u);
  for (const auto& c : j["cases"]) {
    nlohmann::json extra = nlohmann::json::object();
    if (!c["enable_thinking"].is_null()) extra["enable_thinking"] = c["enable_thinking"];
    const std::string rendered = assets_->chat->apply(c["messages"], nullptr, c["add_generation_prompt"].get<bool>(), extra);
    EXPECT_EQ(rendered, c["rendered"].get<std::string>());
    if (c.contains("ids")) {
      EXPECT_EQ(assets_->tokenizer->encode(rendered), c["ids"].get<std::vector<std::int32_t>>());
    }
  }
}

TEST_F(GgufAssets, StopIdsAndConfigMatchTheDirectory) {
  const auto dir = model::load_model_configs(kDir);
  EXPECT_EQ(assets_->configs.model, dir.model);
  auto a = assets_->configs.stop_ids(), b = dir.stop_ids();
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  EXPECT_EQ(a, b);  // {151643, 151645}
}

TEST(GgufTokenizer, RefusesOtherModelsAndMalformedVocabularies) {
  auto md_of = [](auto&& build) {
    test_support::GgufWriter w;
    build(w);
    auto bytes = w.bytes();
    return io::parse_gguf(bytes, "t.gguf").metadata;  // strings are copied out of the bytes
  };
  auto error_of = [](const io::GgufMetadata& md) {
    try {
      (void)tokenizer::tokenizer_from_gguf(md);
    } catch (const Error& e) {
      return std::string(e.kind()) + ": " + e.what();
    }
    return std::string("accepted");
  };
  EXPECT_NE(error_of(md_of([](auto& w) { w.add_string("tokenizer.ggml.model", "llama"); })).find("unsupported_arch"),
            std::string::npos);
  EXPECT_NE(error_of(md_of([](auto&) {})).find("carries no tokenizer"), std::string::npos);
  EXPECT_NE(error_of(md_of([](auto& w) {
              w.add_string("tokenizer.ggml.model", "gpt2");
              w.add_string("tokenizer.ggml.pre", "deepseek-llm");
            })).find("'deepseek-llm'"),
            std::string::npos);
  auto base = [](auto& w) {
    w.add_string("tokenizer.ggml.model", "gpt2");
    w.add_string("tokenizer.ggml.pre", "qwen2");
  };
  EXPECT_NE(error_of(md_of([&](auto& w) {
              base(w);
              w.add_strings("tokenizer.ggml.tokens", {"a", "b"});
              w.add_i32s("tokenizer.ggml.token_type", {1});
            })).find("token_type has 1 entries for 2 tokens"),
            std::string::npos);
  EXPECT_NE(error_of(md_of([&](auto& w) {
              base(w);
              w.add_strings("tokenizer.ggml.tokens", {"a", "a"});
            })).find("appears twice"),
            std::string::npos);
  EXPECT_NE(error_of(md_of([&](auto& w) {
              base(w);
              w.add_strings("tokenizer.ggml.tokens", {"a", "b"});
              w.add_strings("tokenizer.ggml.merges", {"a"});
            })).find("bad_model"),
            std::string::npos);
  // Bytes that are not UTF-8 cannot be tokenizer.json text: refused, not thrown from the JSON library.
  EXPECT_NE(error_of(md_of([&](auto& w) {
              base(w);
              w.add_strings("tokenizer.ggml.tokens", {"a", std::string("\xff\xfe", 2)});
            })).find("token 1 is not valid UTF-8"),
            std::string::npos);
  EXPECT_NE(error_of(md_of([&](auto& w) {
              base(w);
              w.add_strings("tokenizer.ggml.tokens", {"a", "b"});
              w.add_strings("tokenizer.ggml.merges", {std::string("a \xc3", 3)});
            })).find("merge 0 is not valid UTF-8"),
            std::string::npos);
}

}  // namespace
}  // namespace neuron
