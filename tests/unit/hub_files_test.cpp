// Which files of a hub repository a model needs, and ids that never reach the network.
#include <gtest/gtest.h>

#include <algorithm>

#include "io/hub_client.hpp"
#include "util/error.hpp"

namespace neuron::io {
namespace {

RepoRevision repo(std::vector<std::string> files) {
  RepoRevision r;
  r.id = parse_hf_model_id("org/model");
  r.commit = std::string(40, 'a');
  r.files = std::move(files);
  return r;
}

std::string kind_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.kind();
  }
  return "no error";
}

TEST(HubFiles, PicksConfigTokenizerAndSafetensors) {
  const auto files = select_model_files(
      repo({"README.md", ".gitattributes", "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
            "vocab.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
            "model.safetensors.index.json", "original/consolidated.safetensors", "model.Q4_K_M.gguf"}),
      std::nullopt);
  const std::vector<std::string> expected = {"config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json",
                                             "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                             "model.safetensors.index.json"};
  EXPECT_EQ(files, expected);
}

TEST(HubFiles, QuantPicksTheOneMatchingGgufCaseInsensitively) {
  const auto r = repo({"README.md", "Qwen3-8B-Q4_K_M.gguf", "Qwen3-8B-Q8_0.gguf", "Qwen3-8B-Q4_K_S.gguf"});
  EXPECT_EQ(select_model_files(r, "q4_k_m"), std::vector<std::string>{"Qwen3-8B-Q4_K_M.gguf"});
  try {
    select_model_files(r, "Q5_K_M");
    FAIL() << "no file for the quant";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), errc::not_found);
    EXPECT_NE(std::string(e.what()).find("Q5_K_M"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Qwen3-8B-Q8_0.gguf"), std::string::npos) << "names the files there: " << e.what();
  }
  EXPECT_EQ(kind_of([&] { select_model_files(r, "Q4_K"); }), errc::invalid_argument) << "ambiguous";
  EXPECT_EQ(kind_of([&] { select_model_files(r, std::nullopt); }), errc::not_found) << "no config.json";
}

TEST(HubFiles, RepositoryWithoutWeightsIsNotFound) {
  EXPECT_EQ(kind_of([] { select_model_files(repo({"config.json", "tokenizer.json"}), std::nullopt); }), errc::not_found);
}

// An id that could escape the cache or the URL is refused before a request is made.
TEST(HubFiles, HostileIdsAreRefusedBeforeAnyRequest) {
  HubOptions o;
  o.endpoint = "http://127.0.0.1:9";  // the discard port: nothing may be sent there anyway
  const HubClient hub(o);
  for (const char* id : {"../x", "org/../x", "a/b/c", "org/na me", "org/x%2F..", "org/x?y", "org/x#y", "org/x@..",
                         "org/x@a/../../b", "/abs/x"}) {
    EXPECT_EQ(kind_of([&] { hub.revision(parse_hf_model_id(id)); }), errc::invalid_argument) << id;
  }
  HubOptions bad;
  bad.endpoint = "file:///etc";
  EXPECT_EQ(kind_of([&] { HubClient h(bad); }), errc::invalid_argument);
}

}  // namespace
}  // namespace neuron::io
