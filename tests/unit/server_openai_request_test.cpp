// Request parsing and validation for the OpenAI endpoints, without sockets:
// each bad field must be refused with the field named in `param`.
#include <gtest/gtest.h>

#include <string>

#include "server/api_error.hpp"
#include "server/openai_request.hpp"

namespace neuron::server {
namespace {

using nlohmann::json;

// Runs `fn`, expects a FieldError, returns it as the API would report it.
template <class Fn>
ApiError expect_field_error(Fn fn) {
  try {
    fn();
  } catch (const FieldError& e) {
    return from_exception(e);
  }
  ADD_FAILURE() << "no FieldError thrown";
  return {};
}

json chat_body(json extra = json::object()) {
  json body = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  body.update(extra);
  return body;
}

json completion_body(json extra = json::object()) {
  json body = {{"model", "m"}, {"prompt", "Once upon"}};
  body.update(extra);
  return body;
}

// Image input is refused as such (every load is text-only), naming the part; a file part
// stays a plain unsupported content type.
TEST(ServerOpenAiRequest, ImageInputIsRefusedAsTextOnly) {
  json body = chat_body();
  body["messages"] = json::array(
      {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "what is this?"}}, {{"type", "image_url"}, {"image_url", {{"url", "data:image/png;base64,AA=="}}}}}}}});
  ApiError e = expect_field_error([&] { parse_chat_request(body); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "messages[0].content[1].type");
  EXPECT_NE(e.message.find("image input"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("text-only"), std::string::npos) << e.message;
  body["messages"][0]["content"][1] = {{"type", "file"}, {"file", {{"file_id", "f"}}}};
  e = expect_field_error([&] { parse_chat_request(body); });
  EXPECT_EQ(e.param, "messages[0].content[1].type");
  EXPECT_EQ(e.message.find("image input"), std::string::npos) << e.message;
}

TEST(ServerOpenAiRequest, ParsesAFullChatRequest) {
  json body = chat_body({{"max_tokens", 16},
                         {"temperature", 0},
                         {"top_p", 0.9},
                         {"top_k", 20},
                         {"min_p", 0.05},
                         {"seed", 7},
                         {"stop", {"\n\n", "END"}},
                         {"presence_penalty", 0.5},
                         {"frequency_penalty", -0.5},
                         {"repetition_penalty", 1.1},
                         {"n", 1},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}},
                         {"chat_template_kwargs", {{"enable_thinking", false}}}});
  body["messages"] = json::array({{{"role", "system"}, {"content", "be brief"}},
                                  {{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}},
                                  {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", json::array()}},
                                  {{"role", "tool"}, {"content", "42"}, {"tool_call_id", "c1"}}});
  OpenAiRequest r = parse_chat_request(body);
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[1].content, "a\nb");
  EXPECT_EQ(r.messages[3].tool_call_id, "c1");
  EXPECT_EQ(r.max_tokens, 16);
  EXPECT_EQ(r.sampling.temperature, 0.0f);
  EXPECT_FLOAT_EQ(*r.sampling.top_p, 0.9f);
  EXPECT_EQ(r.sampling.top_k, 20);
  EXPECT_EQ(r.sampling.seed, 7u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n\n", "END"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.chat_template_kwargs["enable_thinking"], false);
}

TEST(ServerOpenAiRequest, NullMeansUnset) {
  OpenAiRequest r = parse_chat_request(chat_body({{"temperature", nullptr}, {"stop", nullptr}, {"max_tokens", nullptr}}));
  EXPECT_FALSE(r.sampling.temperature);
  EXPECT_TRUE(r.stop.empty());
  EXPECT_FALSE(r.max_tokens);
}

TEST(ServerOpenAiRequest, MaxCompletionTokensIsAnAlias) {
  EXPECT_EQ(parse_chat_request(chat_body({{"max_completion_tokens", 5}})).max_tokens, 5);
  ApiError e = expect_field_error([] { parse_chat_request(chat_body({{"max_completion_tokens", 5}, {"max_tokens", 6}})); });
  EXPECT_EQ(e.param, "max_tokens");
}

TEST(ServerOpenAiRequest, NamesTheBadField) {
  struct Case {
    json extra;
    std::string param;
  };
  const Case cases[] = {
      {{{"model", 3}}, "model"},
      {{{"max_tokens", -1}}, "max_tokens"},
      {{{"max_tokens", 0}}, "max_tokens"},
      {{{"max_tokens", 1e12}}, "max_tokens"},
      {{{"max_tokens", 99999999999999LL}}, "max_tokens"},
      {{{"max_tokens", "10"}}, "max_tokens"},
      {{{"temperature", "hot"}}, "temperature"},
      {{{"temperature", 2.5}}, "temperature"},
      {{{"temperature", -0.1}}, "temperature"},
      {{{"top_p", 0}}, "top_p"},
      {{{"top_p", 1.5}}, "top_p"},
      {{{"top_k", -2}}, "top_k"},
      {{{"top_k", 1.5}}, "top_k"},
      {{{"min_p", 2}}, "min_p"},
      {{{"presence_penalty", 3}}, "presence_penalty"},
      {{{"frequency_penalty", -3}}, "frequency_penalty"},
      {{{"repetition_penalty", 0}}, "repetition_penalty"},
      {{{"seed", "x"}}, "seed"},
      {{{"stop", 5}}, "stop"},
      {{{"stop", {"a", "b", "c", "d", "e"}}}, "stop"},
      {{{"stop", {"a", 1}}}, "stop[1]"},
      {{{"stop", ""}}, "stop"},
      {{{"stream", "yes"}}, "stream"},
      {{{"stream_options", 1}}, "stream_options"},
      {{{"stream_options", {{"include_usage", "y"}}}}, "stream_options.include_usage"},
      {{{"chat_template_kwargs", "x"}}, "chat_template_kwargs"},
      {{{"tools", {1}}}, "tools[0]"},
  };
  for (const auto& c : cases) {
    ApiError e = expect_field_error([&] { parse_chat_request(chat_body(c.extra)); });
    EXPECT_EQ(e.status, 400) << c.extra.dump();
    EXPECT_EQ(e.param, c.param) << c.extra.dump();
    EXPECT_EQ(e.type, "invalid_request_error");
  }
}

TEST(ServerOpenAiRequest, ChoicesAreBounded) {
  EXPECT_EQ(parse_chat_request(chat_body()).n, 1);
  EXPECT_EQ(parse_chat_request(chat_body({{"n", 16}})).n, 16);
  EXPECT_EQ(parse_completion_request(completion_body({{"n", 3}})).n, 3);
  for (json n : {json(0), json(17), json(-1), json("2")}) {
    ApiError e = expect_field_error([&] { parse_chat_request(chat_body({{"n", n}})); });
    EXPECT_EQ(e.param, "n") << n.dump();
    EXPECT_EQ(e.status, 400);
  }
}

TEST(ServerOpenAiRequest, LogprobsInOpenAisTwoDialects) {
  // Chat: logprobs true, top_logprobs 0..20 (needs logprobs).
  EXPECT_EQ(parse_chat_request(chat_body()).top_logprobs, -1);
  EXPECT_EQ(parse_chat_request(chat_body({{"logprobs", false}})).top_logprobs, -1);
  EXPECT_EQ(parse_chat_request(chat_body({{"logprobs", true}})).top_logprobs, 0);
  EXPECT_EQ(parse_chat_request(chat_body({{"logprobs", true}, {"top_logprobs", 20}})).top_logprobs, 20);
  for (json extra : {json{{"top_logprobs", 2}}, json{{"logprobs", true}, {"top_logprobs", 21}},
                     json{{"logprobs", true}, {"top_logprobs", -1}}}) {
    ApiError e = expect_field_error([&] { parse_chat_request(chat_body(extra)); });
    EXPECT_EQ(e.param, "top_logprobs") << extra.dump();
  }
  EXPECT_EQ(expect_field_error([] { parse_chat_request(chat_body({{"logprobs", 3}})); }).param, "logprobs");
  // Completions: logprobs N in 0..5.
  EXPECT_EQ(parse_completion_request(completion_body({{"logprobs", 0}})).top_logprobs, 0);
  EXPECT_EQ(parse_completion_request(completion_body({{"logprobs", 5}})).top_logprobs, 5);
  EXPECT_EQ(parse_completion_request(completion_body({{"logprobs", nullptr}})).top_logprobs, -1);
  EXPECT_EQ(expect_field_error([] { parse_completion_request(completion_body({{"logprobs", 6}})); }).param, "logprobs");
  // echo is cheap; the prompt's own logprobs are not (refused, naming echo).
  EXPECT_TRUE(parse_completion_request(completion_body({{"echo", true}})).echo);
  ApiError e = expect_field_error([] { parse_completion_request(completion_body({{"echo", true}, {"logprobs", 1}})); });
  EXPECT_EQ(e.param, "echo");
  EXPECT_EQ(e.code, "unsupported_parameter");
}

TEST(ServerOpenAiRequest, RefusesUnsupportedFeaturesClearly) {
  for (json extra : {json{{"logit_bias", {{"1", 5}}}}}) {
    ApiError e = expect_field_error([&] { parse_chat_request(chat_body(extra)); });
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.code, "unsupported_parameter") << extra.dump();
    EXPECT_NE(e.message.find("not supported"), std::string::npos);
  }
  EXPECT_NO_THROW(parse_chat_request(chat_body({{"logprobs", false}, {"logit_bias", json::object()}})));
  for (json extra : {json{{"best_of", 2}}, json{{"suffix", "x"}}}) {
    ApiError e = expect_field_error([&] { parse_completion_request(completion_body(extra)); });
    EXPECT_EQ(e.code, "unsupported_parameter") << extra.dump();
  }
}

TEST(ServerOpenAiRequest, AnEarlierTurnsReasoningUnderEitherName) {
  for (const char* key : {"reasoning_content", "reasoning"}) {
    json body = chat_body();
    body["messages"] = {{{"role", "user"}, {"content", "hi"}}, {{"role", "assistant"}, {"content", "hello"}, {key, "they greet"}}};
    const OpenAiRequest r = parse_chat_request(body);
    ASSERT_TRUE(r.messages[1].reasoning_content) << key;
    EXPECT_EQ(*r.messages[1].reasoning_content, "they greet");
    body["messages"][1][key] = 5;
    EXPECT_EQ(expect_field_error([&] { parse_chat_request(body); }).param, std::string("messages[1].") + key);
  }
}

TEST(ServerOpenAiRequest, ValidatesMessages) {
  struct Case {
    json messages;
    std::string param;
  };
  const Case cases[] = {
      {json(nullptr), "messages"},
      {json("hi"), "messages"},
      {json::array(), "messages"},
      {json::array({1}), "messages[0]"},
      {json::array({{{"content", "x"}}}), "messages[0].role"},
      {json::array({{{"role", "wizard"}, {"content", "x"}}}), "messages[0].role"},
      {json::array({{{"role", "user"}}}), "messages[0].content"},
      {json::array({{{"role", "user"}, {"content", 5}}}), "messages[0].content"},
      {json::array({{{"role", "user"}, {"content", {{{"type", "image_url"}, {"image_url", "x"}}}}}}), "messages[0].content[0].type"},
      {json::array({{{"role", "user"}, {"content", {{{"type", "text"}}}}}}), "messages[0].content[0].text"},
      {json::array({{{"role", "user"}, {"content", "a"}}, {{"role", "user"}, {"content", "b"}, {"name", 1}}}), "messages[1].name"},
  };
  for (const auto& c : cases) {
    json body = chat_body();
    body["messages"] = c.messages;
    ApiError e = expect_field_error([&] { parse_chat_request(body); });
    EXPECT_EQ(e.param, c.param) << c.messages.dump();
  }
  json body = chat_body();
  body["messages"] = json::array({{{"role", "developer"}, {"content", "rules"}}});
  EXPECT_EQ(parse_chat_request(body).messages[0].role, "system");
}

TEST(ServerOpenAiRequest, AcceptsEveryPromptShape) {
  using Ids = std::vector<std::int32_t>;
  EXPECT_EQ(std::get<std::string>(parse_completion_request(completion_body()).prompt), "Once upon");
  EXPECT_EQ(std::get<Ids>(parse_completion_request(completion_body({{"prompt", {1, 2, 3}}})).prompt), (Ids{1, 2, 3}));
  EXPECT_EQ(std::get<std::string>(parse_completion_request(completion_body({{"prompt", {"solo"}}})).prompt), "solo");
  EXPECT_EQ(std::get<Ids>(parse_completion_request(completion_body({{"prompt", {{4, 5}}}})).prompt), (Ids{4, 5}));
}

TEST(ServerOpenAiRequest, RefusesBadPrompts) {
  for (json prompt : {json(nullptr), json(5), json::array(), json::array({"a", "b"}), json::array({1, -2}),
                      json::array({1, 1.5}), json::array({1, "a"}), json::array({json::array()}), json::array({true})}) {
    ApiError e = expect_field_error([&] { parse_completion_request(completion_body({{"prompt", prompt}})); });
    EXPECT_EQ(e.status, 400) << prompt.dump();
    EXPECT_EQ(e.param.rfind("prompt", 0), 0u) << prompt.dump() << " -> " << e.param;
  }
}

TEST(ServerOpenAiRequest, BodyMustBeAJsonObject) {
  for (std::string body : {"", "{", "[1,2]", "\"x\"", "{\"a\":1,}", "{\"model\": \"\xff\xfe\"}", "{\"model\": \"\\ud800\"}",
                           "777777e77779", "{\"max_tokens\": 1e999}"}) {  // numbers that overflow a double: out_of_range, not parse_error
    ApiError e = expect_field_error([&] { parse_body(body); });
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.code, "invalid_json") << body;
  }
  EXPECT_EQ(parse_body("{\"model\": \"caf\xc3\xa9\"}")["model"], "caf\xc3\xa9");
}

}  // namespace
}  // namespace neuron::server

// ---- ModelSpec from /models/load bodies and --model text ----
#include "server/model_spec.hpp"

namespace neuron::server {
namespace {

TEST(ServerModelSpec, ParsesLoadBodies) {
  LoadRequest r = parse_load_request(
      {{"model_id", "Qwen/Qwen3-8B"}, {"tensor_parallel", 2}, {"devices", {0, 1}}, {"device", "cuda"}, {"quant", nullptr}, {"wait", true}});
  EXPECT_EQ(r.spec.model_id, "Qwen/Qwen3-8B");
  EXPECT_EQ(r.spec.tensor_parallel, 2);
  EXPECT_EQ(r.spec.devices, (std::vector<int>{0, 1}));
  EXPECT_EQ(r.spec.device, "cuda");
  EXPECT_FALSE(r.spec.quant);
  EXPECT_TRUE(r.wait);
  EXPECT_FALSE(r.spec.expert_parallel);
  EXPECT_TRUE(parse_load_request({{"model_id", "m"}, {"tensor_parallel", 2}, {"expert_parallel", true}}).spec.expert_parallel);
  for (auto [body, param] : std::vector<std::pair<nlohmann::json, std::string>>{
           {nlohmann::json::object(), "model_id"},
           {{{"model_id", 5}}, "model_id"},
           {{{"model_id", ""}}, "model_id"},
           {{{"model_id", "a\nb"}}, "model_id"},
           {{{"model_id", "m"}, {"tensor_parallel", 0}}, "tensor_parallel"},
           {{{"model_id", "m"}, {"tensor_parallel", 1e9}}, "tensor_parallel"},
           {{{"model_id", "m"}, {"devices", {0, -1}}}, "devices[1]"},
           {{{"model_id", "m"}, {"wait", "yes"}}, "wait"},
           {{{"model_id", "m"}, {"expert_parallel", 1}}, "expert_parallel"},
           {{{"model_id", "m"}, {"expert_parallel", "true"}}, "expert_parallel"}}) {
    ApiError e = expect_field_error([&body = body] { parse_load_request(body); });
    EXPECT_EQ(e.param, param) << body.dump();
    EXPECT_EQ(e.status, 400) << body.dump();
  }
}

TEST(ServerModelSpec, ParsesCommandLineSpecs) {
  engine::ModelSpec plain = parse_model_spec_text("/srv/models/qwen");
  EXPECT_EQ(plain.model_id, "/srv/models/qwen");
  EXPECT_EQ(plain.tensor_parallel, 1);
  engine::ModelSpec opts = parse_model_spec_text("Qwen/Qwen3-8B:tp=2,device=cuda,devices=0+1");
  EXPECT_EQ(opts.model_id, "Qwen/Qwen3-8B");
  EXPECT_EQ(opts.tensor_parallel, 2);
  EXPECT_EQ(opts.device, "cuda");
  EXPECT_EQ(opts.devices, (std::vector<int>{0, 1}));
  // A ':' without options stays part of the id.
  EXPECT_EQ(parse_model_spec_text("dir:with:colons").model_id, "dir:with:colons");
  // A value with a ':' (the README's device=cuda:N), after an id with one.
  engine::ModelSpec ordinal = parse_model_spec_text("/srv/a:b/qwen:device=cuda:1,max_context=4096");
  EXPECT_EQ(ordinal.model_id, "/srv/a:b/qwen");
  EXPECT_EQ(ordinal.device, "cuda:1");
  EXPECT_EQ(ordinal.max_context, 4096);
  engine::ModelSpec json_spec = parse_model_spec_text(R"({"model_id": "m", "tensor_parallel": 4})");
  EXPECT_EQ(json_spec.tensor_parallel, 4);
  EXPECT_TRUE(parse_model_spec_text("m:tp=2,ep=true").expert_parallel);
  EXPECT_TRUE(parse_model_spec_text("m:tp=2,expert_parallel=1").expert_parallel);
  EXPECT_FALSE(parse_model_spec_text("m:tp=2,ep=false").expert_parallel);
  for (std::string bad : {"m:tp=two", "m:ep=yes", "m:colour=red", "{\"model_id\": 1}", "{not json", "m:tp=2,oops", "{\"tensor_parallel\": 1e999}"}) {
    try {
      parse_model_spec_text(bad);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), errc::invalid_argument) << bad;
    }
  }
}

}  // namespace
}  // namespace neuron::server

namespace neuron::server {
namespace {

TEST(ServerOpenAiRequest, ResponseFormatAndGuidedJsonBecomeConstraints) {
  using nlohmann::ordered_json;
  auto body = [](ordered_json extra) {
    ordered_json b = {{"model", "m"}, {"messages", {{{"role", "user"}, {"content", "hi"}}}}};
    for (auto& [k, v] : extra.items()) b[k] = v;
    return b;
  };
  EXPECT_FALSE(parse_chat_request(body({{"response_format", {{"type", "text"}}}})).constraint);
  auto obj = parse_chat_request(body({{"response_format", {{"type", "json_object"}}}}));
  ASSERT_TRUE(obj.constraint);
  EXPECT_EQ(obj.constraint->kind, grammar::Constraint::Kind::json_object);
  auto schema = parse_chat_request(body(
      {{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}, {"strict", true}, {"schema", {{"type", "string"}}}}}}}}));
  ASSERT_TRUE(schema.constraint);
  EXPECT_EQ(schema.constraint->schema["type"], "string");
  EXPECT_EQ(schema.constraint_param, "response_format");
  auto guided = parse_completion_request(ordered_json{{"prompt", "x"}, {"guided_json", R"({"type":"integer"})"}});
  ASSERT_TRUE(guided.constraint);
  EXPECT_EQ(guided.constraint->schema["type"], "integer");
  auto rf_completion = parse_completion_request(ordered_json{{"prompt", "x"}, {"response_format", {{"type", "json_object"}}}});
  EXPECT_TRUE(rf_completion.constraint);
  for (const ordered_json& bad :
       {ordered_json{{"response_format", {{"type", "yaml"}}}}, ordered_json{{"response_format", {{"type", "json_schema"}}}},
        ordered_json{{"response_format", {{"type", "json_schema"}, {"json_schema", {{"name", "x"}}}}}},
        ordered_json{{"response_format", "json"}}, ordered_json{{"guided_json", "{not json"}},
        ordered_json{{"guided_json", {{"type", "string"}}}, {"response_format", {{"type", "json_object"}}}}}) {
    try {
      parse_chat_request(body(bad));
      ADD_FAILURE() << "accepted " << bad.dump();
    } catch (const FieldError& e) {
      EXPECT_TRUE(e.param().starts_with("response_format") || e.param() == "guided_json") << e.param();
    }
  }
}

}  // namespace
}  // namespace neuron::server
