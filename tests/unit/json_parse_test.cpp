// Bounded JSON parsing: util/json_parse.hpp itself, and every entry point
// where outside text becomes JSON refusing deep nesting with the limit named.
// Without the bound, a 100,000-deep document is a stack overflow when
// nlohmann copies or frees it, so a regression here crashes the test binary.
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/formatter.hpp"
#include "io/safetensors.hpp"
#include "model/config.hpp"
#include "server/api_error.hpp"
#include "server/model_spec.hpp"
#include "server/openai_request.hpp"
#include "server/serve_options.hpp"
#include "server/tool_calls.hpp"
#include "support/temp_dir.hpp"
#include "tokenizer/tokenizer.hpp"
#include "tp/messages.hpp"
#include "util/error.hpp"
#include "util/json_parse.hpp"

namespace neuron {
namespace {

constexpr int kDeep = 100'000;

// `depth` arrays inside each other around `inner`.
std::string nested_arrays(int depth, const std::string& inner = "1") {
  return std::string(static_cast<std::size_t>(depth), '[') + inner + std::string(static_cast<std::size_t>(depth), ']');
}

// `depth` objects inside each other: {"a":{"a":...}}.
std::string nested_objects(int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += "{\"a\":";
  s += "1";
  s += std::string(static_cast<std::size_t>(depth), '}');
  return s;
}

struct Caught {
  std::string kind, message;
};

Caught error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.kind(), e.what()};
  }
  return {"no error", ""};
}

void expect_depth_error(const std::function<void()>& f, const std::string& kind, int limit, const std::string& label) {
  const Caught c = error_of(f);
  EXPECT_EQ(c.kind, kind) << label << ": " << c.message;
  EXPECT_NE(c.message.find("nests deeper than " + std::to_string(limit) + " levels"), std::string::npos) << label << ": " << c.message;
}

TEST(JsonParse, AcceptsNestingUpToTheLimitAndRefusesOneMore) {
  EXPECT_EQ(parse_json(nested_arrays(kMaxJsonDepth), "doc").dump(), nested_arrays(kMaxJsonDepth));
  EXPECT_EQ(parse_json<nlohmann::ordered_json>(nested_objects(kMaxJsonDepth), "doc").dump(), nested_objects(kMaxJsonDepth));
  expect_depth_error([] { (void)parse_json(nested_arrays(kMaxJsonDepth + 1), "doc"); }, errc::invalid_argument, kMaxJsonDepth, "arrays");
  expect_depth_error([] { (void)parse_json<nlohmann::ordered_json>(nested_objects(kMaxJsonDepth + 1), "doc"); }, errc::invalid_argument,
                     kMaxJsonDepth, "objects");
  // Depth is nesting, not the number of containers: siblings do not add up.
  std::string wide = "[";
  for (int i = 0; i < 1000; ++i) wide += (i ? "," : "") + nested_arrays(kMaxJsonDepth - 1);
  wide += "]";
  EXPECT_EQ(parse_json(wide, "doc").size(), 1000u);
}

TEST(JsonParse, HundredThousandLevelsAreRefusedWithoutBuildingThem) {
  for (const std::string& text : {nested_arrays(kDeep), nested_objects(kDeep), std::string(kDeep, '['), "{\"a\":" + nested_arrays(kDeep)}) {
    expect_depth_error([&] { (void)parse_json(text, "request body", "custom_kind"); }, "custom_kind", kMaxJsonDepth, text.substr(0, 8));
    expect_depth_error([&] { (void)parse_json<nlohmann::ordered_json>(text, "request body"); }, errc::invalid_argument, kMaxJsonDepth,
                       text.substr(0, 8));
  }
}

TEST(JsonParse, TheLimitIsTheCallersAndMessagesNameTheInput) {
  expect_depth_error([] { (void)parse_json("[[[1]]]", "tokenizer.json", errc::bad_model, 2); }, errc::bad_model, 2, "limit 2");
  EXPECT_NO_THROW((void)parse_json("[[1]]", "x", errc::bad_model, 2));
  EXPECT_NO_THROW((void)parse_json("7", "x", errc::bad_model, 0));
  const Caught c = error_of([] { (void)parse_json("[[1]]", "the thing", errc::bad_model, 1); });
  EXPECT_EQ(c.message.rfind("the thing nests deeper than 1 levels", 0), 0u) << c.message;
}

TEST(JsonParse, MalformedTextIsAnErrorOfTheGivenKind) {
  for (const std::string text : {"", "{", "[1,]", "{\"a\" 1}", "1 2", "[1] x", "\"\xff\"", "\"\\ud800\"", "1e999", "-1e999", "nul"}) {
    const Caught c = error_of([&] { (void)parse_json(text, "body", "k"); });
    EXPECT_EQ(c.kind, "k") << text;
    EXPECT_NE(c.message.find("body is not valid JSON"), std::string::npos) << text << ": " << c.message;
  }
  EXPECT_EQ(parse_json(" {\"a\": [1, 2.5, \"x\", null, true]}\n", "body")["a"][1], 2.5);
  EXPECT_EQ(parse_json("18446744073709551615", "body").get<std::uint64_t>(), 18446744073709551615u);
}

TEST(JsonParse, OrderedParseKeepsKeyOrder) {
  EXPECT_EQ(parse_json<nlohmann::ordered_json>(R"({"z":1,"a":2})", "x").dump(), R"({"z":1,"a":2})");
}

// ---- every entry point ----

TEST(JsonParseEntryPoints, HttpBodiesAreInvalidJsonNamingTheLimit) {
  for (const std::string& body : {nested_arrays(kDeep), "{\"tools\": " + nested_arrays(kDeep) + "}"}) {
    try {
      (void)server::parse_body(body);
      ADD_FAILURE() << "accepted";
    } catch (const server::FieldError& e) {
      EXPECT_EQ(e.kind(), server::http_errc::invalid_json);
      EXPECT_NE(std::string(e.what()).find("nests deeper than " + std::to_string(kMaxJsonDepth)), std::string::npos) << e.what();
      EXPECT_EQ(server::classify(e.kind(), e.what()).status, 400);
    }
  }
}

TEST(JsonParseEntryPoints, ModelSpecTextAndServeConfigFile) {
  expect_depth_error([] { (void)server::parse_model_spec_text("{\"model_id\": " + nested_arrays(kDeep) + "}"); }, errc::invalid_argument,
                     kMaxJsonDepth, "--model JSON");
  test_support::TempDir dir;
  const auto config = dir.write("serve.json", "{\"models\": " + nested_arrays(kDeep) + "}");
  server::ServeFlags flags;
  flags.config = config.string();
  const auto no_env = [](const std::string&) -> std::optional<std::string> { return std::nullopt; };
  expect_depth_error([&] { (void)server::resolve_serve_options(flags, no_env); }, errc::invalid_argument, kMaxJsonDepth, "--config");
}

TEST(JsonParseEntryPoints, ModelConfigs) {
  const std::string deep = "{\"architectures\": " + nested_arrays(kDeep) + "}";
  expect_depth_error([&] { (void)model::ModelConfig::parse(deep); }, errc::bad_model, kMaxJsonDepth, "config.json");
  expect_depth_error([&] { (void)model::GenerationDefaults::parse(deep); }, errc::bad_model, kMaxJsonDepth, "generation_config.json");
  test_support::TempDir dir;
  dir.write("config.json", deep);
  const Caught c = error_of([&] { (void)model::load_model_configs(dir.path()); });
  EXPECT_EQ(c.kind, errc::bad_model);
  EXPECT_NE(c.message.find("config.json"), std::string::npos) << c.message;
}

TEST(JsonParseEntryPoints, TokenizerJsonHasATighterLimit) {
  // 17 levels is nothing for a request but more than any tokenizer.json has.
  const std::string text = "{\"model\": " + nested_arrays(16) + "}";
  expect_depth_error([&] { (void)tokenizer::Tokenizer::from_json(text); }, errc::bad_model, 16, "tokenizer.json");
  expect_depth_error([&] { (void)tokenizer::Tokenizer::from_json(nested_objects(kDeep)); }, errc::bad_model, 16, "deep tokenizer.json");
}

TEST(JsonParseEntryPoints, TokenizerConfigForTheChatTemplate) {
  test_support::TempDir dir;
  const auto path = dir.write("tokenizer_config.json", "{\"chat_template\": " + nested_arrays(kDeep) + "}");
  expect_depth_error([&] { (void)chat::ChatFormatter::from_tokenizer_config(path); }, errc::bad_model, kMaxJsonDepth,
                     "tokenizer_config.json");
}

TEST(JsonParseEntryPoints, TpRpcLines) {
  const std::string line = "{\"op\": \"ping\", \"x\": " + nested_arrays(kDeep) + "}\n";
  expect_depth_error([&] { (void)tp::parse_request(line); }, errc::bad_request, kMaxJsonDepth, "request line");
  expect_depth_error([&] { (void)tp::parse_response(line); }, errc::bad_request, kMaxJsonDepth, "response line");
}

TEST(JsonParseEntryPoints, SafetensorsHeader) {
  const std::string header = "{\"__metadata__\": " + nested_arrays(kDeep) + "}";
  std::vector<std::byte> file(8 + header.size());
  for (int i = 0; i < 8; ++i) file[static_cast<std::size_t>(i)] = static_cast<std::byte>((header.size() >> (8 * i)) & 0xff);
  for (std::size_t i = 0; i < header.size(); ++i) file[8 + i] = static_cast<std::byte>(header[i]);
  const Caught c = error_of([&] { (void)io::parse_safetensors(file, "model.safetensors"); });
  EXPECT_EQ(c.kind, errc::bad_model);
  EXPECT_NE(c.message.find("nests deeper than"), std::string::npos) << c.message;
}

TEST(JsonParseEntryPoints, SafetensorsIndex) {
  test_support::TempDir dir;
  dir.write("model.safetensors.index.json", "{\"weight_map\": " + nested_objects(kDeep) + "}");
  const Caught c = error_of([&] { (void)io::checkpoint_files(dir.path()); });
  EXPECT_EQ(c.kind, errc::bad_model);
  EXPECT_NE(c.message.find("nests deeper than"), std::string::npos) << c.message;
}

TEST(JsonParseEntryPoints, ToolCallArgumentsAreScannedNotParsed) {
  // The extractor counts brackets (no recursion) and passes the arguments on
  // as the model's text, so any nesting is harmless.
  const std::string text = "<tool_call>\n{\"name\": \"f\", \"arguments\": " + nested_arrays(kDeep) + "}\n</tool_call>";
  const auto r = server::ToolCallExtractor::split(text);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, nested_arrays(kDeep));
  EXPECT_EQ(r.content, "");
}

}  // namespace
}  // namespace neuron
