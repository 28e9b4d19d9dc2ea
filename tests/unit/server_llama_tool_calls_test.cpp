// Tool calls out of Llama 3.x answers (chat::ToolCallFormat::llama_json): the
// answer is the call, {"name": ..., "parameters": {...}} (the <|python_tag|>
// before it and the <|eom_id|>/<|eot_id|> after it are special tokens the
// streamed text never shows). The same calls however the text is cut into
// deltas, blocking and streamed, and as OpenAI's tool_calls with
// finish_reason "tool_calls"; answers that are not calls stay content.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/tool_call_format.hpp"
#include "grammar/cache.hpp"
#include "grammar/matcher.hpp"
#include "grammar/token_trie.hpp"
#include "server/messages_api.hpp"
#include "server/openai_response.hpp"
#include "server/responses_api.hpp"
#include "server/tool_calls.hpp"
#include "support/streamed_tool_calls.hpp"

namespace neuron::server {
namespace {

using nlohmann::json;
constexpr auto kLlama = chat::ToolCallFormat::llama_json;

using tool_call_test::cut_every;
using tool_call_test::Streamed;
Streamed llama_pieces(const std::vector<std::string>& pieces, const std::string& engine_reason = "stop") {
  return tool_call_test::run_pieces(ToolCallSyntax{kLlama, {}}, pieces, engine_reason);
}

const std::string kArgs = R"({"city": "Paris", "unit": "c", "days": [1, 2], "note": "a \"quoted\" }{ brace"})";
const std::string kCall = R"({"name": "get_weather", "parameters": )" + kArgs + "}";

TEST(LlamaToolCalls, BlockingAnswerIsOneCall) {
  const ToolCallExtractor::Result r = ToolCallExtractor::split(kCall, kLlama);
  EXPECT_EQ(r.content, "");
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(r.calls[0].arguments), json::parse(kArgs));
  EXPECT_EQ(r.calls[0].arguments, kArgs) << "arguments are the model's JSON text, verbatim";
  EXPECT_EQ(r.finish_reason("stop"), "tool_calls");
  EXPECT_EQ(r.finish_reason("length"), "length");
  // Blanks around the call (the model's "\n\n" after the header, a newline before <|eot_id|>) are not content.
  const ToolCallExtractor::Result padded = ToolCallExtractor::split(" \n" + kCall + "\n", kLlama);
  EXPECT_EQ(padded.content, "");
  ASSERT_EQ(padded.calls.size(), 1u);
  EXPECT_EQ(padded.calls[0].arguments, kArgs);
}

TEST(LlamaToolCalls, SameCallWhateverTheCuts) {
  const std::string text = "\n" + kCall;
  for (std::size_t cut = 0; cut <= text.size(); ++cut) {
    const Streamed s = llama_pieces({text.substr(0, cut), text.substr(cut)});
    ASSERT_EQ(s.calls.size(), 1u) << "cut at " << cut;
    EXPECT_EQ(s.calls[0].name, "get_weather");
    EXPECT_EQ(s.calls[0].arguments, kArgs) << "cut at " << cut;
    EXPECT_EQ(s.content, "") << "cut at " << cut;
    EXPECT_EQ(s.finish_reason, "tool_calls");
  }
}

TEST(LlamaToolCalls, ACallSplitAcrossManySmallDeltasStreamsItsArguments) {
  for (std::size_t n : {1u, 2u, 3u, 5u}) {
    const Streamed s = llama_pieces(cut_every(kCall, n));
    ASSERT_EQ(s.calls.size(), 1u) << n;
    EXPECT_EQ(s.calls[0].name, "get_weather");
    EXPECT_EQ(s.calls[0].arguments, kArgs) << n;
    // Announced when "parameters" begins, then the arguments as they come: many fragments, not one at the end.
    EXPECT_GE(s.fragments, kArgs.size() / n - 1) << n;
    EXPECT_EQ(s.content, "");
    EXPECT_EQ(s.finish_reason, "tool_calls");
  }
}

TEST(LlamaToolCalls, SeveralCallsSeparatedBySemicolons) {
  const std::string text = R"({"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "get_time", "parameters": {}})";
  for (std::size_t n : {std::size_t{1}, std::size_t{4}, text.size()}) {
    const Streamed s = llama_pieces(cut_every(text, n));
    ASSERT_EQ(s.calls.size(), 2u) << n;
    EXPECT_EQ(s.calls[0].name, "get_weather");
    EXPECT_EQ(s.calls[0].arguments, R"({"city": "Paris"})");
    EXPECT_EQ(s.calls[1].name, "get_time");
    EXPECT_EQ(s.calls[1].arguments, "{}");
    EXPECT_NE(s.calls[0].id, s.calls[1].id);
    EXPECT_EQ(s.content, "");
  }
}

TEST(LlamaToolCalls, ArgumentsKeyAndArgumentsAsTextAreReadToo) {
  auto r = ToolCallExtractor::split(R"({"name": "f", "arguments": {"x": 1}})", kLlama);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].arguments, R"({"x": 1})");
  // Arguments before the name, and written as a JSON string: sent decoded.
  r = ToolCallExtractor::split(R"({"parameters": "{\"x\": 1}", "name": "f"})", kLlama);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.calls[0].name, "f");
  EXPECT_EQ(r.calls[0].arguments, R"({"x": 1})");
}

TEST(LlamaToolCalls, AnswersThatAreNotCallsAreContent) {
  const std::vector<std::string> answers = {
      "The weather in Paris is sunny.",
      "  Sure: {\"name\": \"get_weather\", \"parameters\": {}}",   // a call is only the whole answer
      "{\"answer\": 42}",                                           // JSON without a name
      "{\"name\": \"Bob\", \"age\": 3}",                            // a name but no arguments: an answer, not a call
      "{\"name\": 7, \"parameters\": {}}",                          // a name that is not a string
      "{not json at all",
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",  // Hermes tags mean nothing here
      "{\"name\": \"get_weather\", \"parameters\": {\"city\"",          // cut off before the arguments are whole...
  };
  for (const std::string& text : answers) {
    for (std::size_t n : {std::size_t{1}, std::size_t{3}, text.size()}) {
      const Streamed s = llama_pieces(cut_every(text, n), "stop");
      if (text.rfind("{\"name\": \"get_weather\", \"parameters\": {\"city\"", 0) == 0) {
        // ...it was announced: it stays a call (the client sees what was written), finish "length" in real life.
        ASSERT_EQ(s.calls.size(), 1u) << text;
        EXPECT_EQ(s.calls[0].arguments, "{\"city\"");
        continue;
      }
      EXPECT_EQ(s.content, text) << "pieces of " << n;
      EXPECT_TRUE(s.calls.empty()) << text;
      EXPECT_EQ(s.finish_reason, "stop");
    }
  }
  // Plain text streams as it comes, without waiting for the end.
  const Streamed s = llama_pieces({"Hello", " world"});
  EXPECT_EQ(s.streamed, "Hello world");
  // A blank answer is its text.
  EXPECT_EQ(ToolCallExtractor::split(" ", kLlama).content, " ");
}

TEST(LlamaToolCalls, TextAfterACallIsContent) {
  const auto r = ToolCallExtractor::split(R"({"name": "f", "parameters": {}} Done.)", kLlama);
  ASSERT_EQ(r.calls.size(), 1u);
  EXPECT_EQ(r.content, "Done.");  // the blanks between the call and the text go with the call
  const auto only_separator = ToolCallExtractor::split(R"({"name": "f", "parameters": {}};  )", kLlama);
  ASSERT_EQ(only_separator.calls.size(), 1u);
  EXPECT_EQ(only_separator.content, "");
}

TEST(LlamaToolCalls, HermesFormatIsUnchangedByIt) {
  // The default extractor still wants <tool_call> tags: a bare Llama call is its content.
  const auto r = ToolCallExtractor::split(kCall);
  EXPECT_TRUE(r.calls.empty());
  EXPECT_EQ(r.content, kCall);
}

// The streamed chat completion as a client reads it: chunks of tool_calls
// deltas, reassembled by index, then finish_reason "tool_calls".
TEST(LlamaToolCalls, StreamedChunksReassembleToTheCall) {
  const ResponseMeta meta{true, "chatcmpl-x", 1, "llama"};
  ToolCallExtractor x(kLlama);
  std::vector<json> chunks;
  for (const std::string& piece : cut_every(kCall, 2)) {
    ToolCallExtractor::Output o = x.feed(piece);
    EXPECT_EQ(o.content, "");
    if (!o.deltas.empty()) chunks.push_back(tool_call_deltas_chunk(meta, o.deltas));
  }
  ToolCallExtractor::Output rest = x.finish();
  if (!rest.deltas.empty()) chunks.push_back(tool_call_deltas_chunk(meta, rest.deltas));
  chunks.push_back(finish_chunk(meta, x.finish_reason("stop")));

  std::vector<json> calls;
  for (const json& c : chunks) {
    const json& delta = c["choices"][0]["delta"];
    if (!delta.contains("tool_calls")) continue;
    for (const json& t : delta["tool_calls"]) {
      const std::size_t index = t["index"].get<std::size_t>();
      if (t.contains("id")) {
        ASSERT_EQ(index, calls.size());
        EXPECT_EQ(t["type"], "function");
        calls.push_back({{"id", t["id"]}, {"name", t["function"]["name"]}, {"arguments", ""}});
      }
      ASSERT_LT(index, calls.size());
      calls[index]["arguments"] = calls[index]["arguments"].get<std::string>() + t["function"]["arguments"].get<std::string>();
    }
  }
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0]["name"], "get_weather");
  EXPECT_EQ(json::parse(calls[0]["arguments"].get<std::string>()), json::parse(kArgs));
  EXPECT_EQ(chunks.back()["choices"][0]["finish_reason"], "tool_calls");
  EXPECT_GT(chunks.size(), 3u) << "the arguments stream in pieces";
}

// The Messages and Responses streams take the model's format too.
TEST(LlamaToolCalls, MessagesAndResponsesStreamsReadTheFormat) {
  MessagesTurnShaper messages("msg_1", "llama", 5, ToolCallSyntax{kLlama, {}});
  std::string sse = messages.open();
  for (const std::string& piece : cut_every(kCall, 7)) sse += messages.delta(piece, "");
  sse += messages.close(TurnEnd{"stop", {5, 20, 0}, 0, {}});
  EXPECT_NE(sse.find(R"("type":"tool_use")"), std::string::npos) << sse;
  EXPECT_NE(sse.find(R"("name":"get_weather")"), std::string::npos) << sse;
  EXPECT_NE(sse.find(R"("stop_reason":"tool_use")"), std::string::npos) << sse;
  EXPECT_EQ(sse.find("text_delta"), std::string::npos) << "no text block: the answer was the call";

  bool done = false;
  ResponsesTurnShaper responses("resp_1", 1, "llama", json::object(), ToolCallSyntax{kLlama, {}}, [&](const nlohmann::ordered_json& response, const Turn& turn) {
    done = true;
    ASSERT_EQ(turn.calls.size(), 1u);
    EXPECT_EQ(turn.calls[0].name, "get_weather");
    EXPECT_EQ(turn.calls[0].arguments, kArgs);
    ASSERT_EQ(response["output"].size(), 1u) << response.dump();
    EXPECT_EQ(response["output"][0]["type"], "function_call");
  });
  sse = responses.open();
  for (const std::string& piece : cut_every(kCall, 7)) sse += responses.delta(piece, "");
  sse += responses.close(TurnEnd{"stop", {5, 20, 0}, 0, {}});
  EXPECT_TRUE(done);
  EXPECT_NE(sse.find("response.function_call_arguments.done"), std::string::npos) << sse;
}

// A forced call (tool_choice required or named) is constrained to the
// model's format, so what the grammar lets through is what the extractor reads.
TEST(LlamaToolCalls, ForcedCallGrammarWritesTheLlamaFormat) {
  std::vector<std::string> bytes;  // every byte a token (id = byte)
  for (int b = 0; b < 256; ++b) bytes.emplace_back(1, static_cast<char>(b));
  const auto trie = std::make_shared<const grammar::TokenTrie>(bytes);
  grammar::Constraint c = grammar::Constraint::tool_call(
      {{"get_weather", nlohmann::ordered_json::parse(R"({"type":"object","properties":{"city":{"type":"string"}},"required":["city"]})")}});
  const std::string hermes_key = c.key();
  c.tool_format = kLlama;
  EXPECT_NE(c.key(), hermes_key) << "the cache keeps the two grammars apart";
  const auto g = std::make_shared<const grammar::CompiledGrammar>(c.compile(), trie);
  auto accepts = [&](std::string_view text) {
    grammar::Matcher m(g);
    return m.accept_bytes(text) && m.complete();
  };
  const std::string call = R"({"name": "get_weather", "parameters": {"city": "Paris"}})";
  EXPECT_TRUE(accepts(call));
  EXPECT_FALSE(accepts(R"({"name": "get_weather", "arguments": {"city": "Paris"}})"));
  EXPECT_FALSE(accepts("<tool_call>\n" + call + "\n</tool_call>"));
  EXPECT_FALSE(accepts(R"({"name": "other", "parameters": {"city": "Paris"}})"));
  const auto split = ToolCallExtractor::split(call, kLlama);
  ASSERT_EQ(split.calls.size(), 1u);
  EXPECT_EQ(split.calls[0].arguments, R"({"city": "Paris"})");
}

}  // namespace
}  // namespace neuron::server
