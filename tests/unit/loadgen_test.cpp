// The serving benchmark's pieces without a server: SSE parsing at every
// split point, judging a completion stream, percentiles and level summaries.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "loadgen/completion_stream.hpp"
#include "loadgen/load.hpp"
#include "loadgen/sse.hpp"
#include "loadgen/stats.hpp"
#include "util/error.hpp"

namespace neuron::loadgen {
namespace {

using namespace std::chrono_literals;

std::vector<SseEvent> parse_all(const std::vector<std::string>& pieces) {
  SseParser p;
  std::vector<SseEvent> out;
  for (const auto& piece : pieces) p.feed(piece, out);
  return out;
}

// A body in the shape servers send: CRLF and LF line ends, a keep-alive
// comment, a named event, a two-line data field, multi-byte UTF-8, [DONE].
const std::string kBody =
    "data: {\"choices\":[{\"text\":\"h\\u00e9\"}]}\r\n\r\n"
    ": keep-alive\n\n"
    "event: note\ndata: line one\ndata: line two\n\n"
    "data:{\"text\":\"\xc3\xa9\xe2\x82\xac\"}\r\r"
    "id: 7\nretry: 10\n\n"  // no data: no event
    "data: [DONE]\n\n";

void expect_body_events(const std::vector<SseEvent>& ev) {
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[0].data, "{\"choices\":[{\"text\":\"h\\u00e9\"}]}");
  EXPECT_EQ(ev[0].event, "");
  EXPECT_EQ(ev[1].event, "note");
  EXPECT_EQ(ev[1].data, "line one\nline two");
  EXPECT_EQ(ev[2].data, "{\"text\":\"\xc3\xa9\xe2\x82\xac\"}");
  EXPECT_EQ(ev[3].data, "[DONE]");
}

TEST(LoadgenSse, WholeBody) { expect_body_events(parse_all({kBody})); }

TEST(LoadgenSse, EverySplitIntoTwo) {
  for (std::size_t i = 0; i <= kBody.size(); ++i) {
    SCOPED_TRACE("split at " + std::to_string(i));
    expect_body_events(parse_all({kBody.substr(0, i), kBody.substr(i)}));
  }
}

TEST(LoadgenSse, OneByteAtATime) {
  std::vector<std::string> bytes;
  for (char c : kBody) bytes.emplace_back(1, c);
  expect_body_events(parse_all(bytes));
}

TEST(LoadgenSse, PartialEventIsHeldAndReported) {
  SseParser p;
  std::vector<SseEvent> out;
  p.feed("data: {\"a\":", out);
  EXPECT_TRUE(out.empty());
  EXPECT_TRUE(p.has_partial());
  p.feed("1}\n", out);
  EXPECT_TRUE(out.empty());  // no blank line yet
  EXPECT_TRUE(p.has_partial());
  p.feed("\n", out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].data, "{\"a\":1}");
  EXPECT_FALSE(p.has_partial());
}

// A completion stream with `n` one-token chunks 10 ms apart, the first at 50 ms.
struct Fake {
  Clock::time_point t0 = Clock::time_point{} + 1h;
  CompletionStream s{t0};
  void feed(const std::string& bytes, std::chrono::milliseconds at) { s.on_bytes(bytes, t0 + at); }
  void tokens(int n, bool with_usage, bool done = true, int prompt = 16) {
    for (int i = 0; i < n; ++i)
      feed("data: {\"choices\":[{\"text\":\"t" + std::to_string(i) + "\",\"finish_reason\":null}]}\n\n", 50ms + i * 10ms);
    feed("data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}]}\n\n", 50ms + n * 10ms);
    if (with_usage)
      feed("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":" + std::to_string(prompt) +
               ",\"completion_tokens\":" + std::to_string(n) + "}}\n\n",
           50ms + n * 10ms);
    if (done) feed("data: [DONE]\n\n", 51ms + n * 10ms);
  }
};

TEST(LoadgenStream, TimesAndCountsAGoodStream) {
  Fake f;
  f.tokens(5, /*with_usage=*/true);
  RequestRecord r = f.s.finish(f.t0 + 100ms, 5);
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.output_tokens, 5);
  EXPECT_TRUE(r.tokens_from_usage);
  EXPECT_EQ(r.prompt_tokens, 16);
  EXPECT_EQ(r.content_chunks, 5);
  EXPECT_DOUBLE_EQ(r.ttft_ms, 50.0);
  EXPECT_DOUBLE_EQ(r.tpot_ms, 10.0);  // (90 - 50) / (5 - 1)
  EXPECT_DOUBLE_EQ(r.latency_ms, 100.0);
}

TEST(LoadgenStream, ChatDeltasCountAsContent) {
  Fake f;
  f.feed("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n", 5ms);  // no content
  f.feed("data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"x\"}}]}\n\n", 20ms);
  f.feed("data: {\"choices\":[{\"delta\":{\"content\":\"y\"},\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n", 30ms);
  RequestRecord r = f.s.finish(f.t0 + 31ms, 2);
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_FALSE(r.tokens_from_usage);
  EXPECT_EQ(r.output_tokens, 2);
  EXPECT_DOUBLE_EQ(r.ttft_ms, 20.0);
  EXPECT_DOUBLE_EQ(r.tpot_ms, 10.0);
}

TEST(LoadgenStream, UsageBeatsChunkCount) {
  Fake f;
  f.tokens(3, /*with_usage=*/false);
  RequestRecord chunks = f.s.finish(f.t0 + 100ms, 3);
  EXPECT_TRUE(chunks.ok) << chunks.error;
  EXPECT_FALSE(chunks.tokens_from_usage);
  EXPECT_EQ(chunks.prompt_tokens, -1);

  Fake held;  // 4 tokens in 3 chunks (a server holding partial UTF-8)
  held.feed("data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choices\":[{\"text\":\"b\"}]}\n\n", 10ms);
  held.feed("data: {\"choices\":[{\"text\":\"\xc3\xa9\",\"finish_reason\":\"length\"}],\"usage\":{\"completion_tokens\":4}}\n\n", 40ms);
  held.feed("data: [DONE]\n\n", 41ms);
  RequestRecord r = held.s.finish(held.t0 + 41ms, 4);
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.output_tokens, 4);
  EXPECT_DOUBLE_EQ(r.tpot_ms, 10.0);  // (40 - 10) / 3
}

TEST(LoadgenStream, WrongTokenCountIsAnError) {
  Fake f;
  f.tokens(3, true);
  RequestRecord r = f.s.finish(f.t0 + 100ms, 4);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, "generated 3 tokens, asked for 4 (usage)");
}

TEST(LoadgenStream, TruncatedStreamIsAnError) {
  Fake f;
  f.tokens(3, true, /*done=*/false);
  RequestRecord r = f.s.finish(f.t0 + 100ms, 3);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, "truncated stream: no data: [DONE]");

  Fake mid;
  mid.feed("data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: {\"choi", 10ms);
  r = mid.s.finish(mid.t0 + 20ms, 0);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, "truncated stream: ended inside an event");

  Fake no_finish;
  no_finish.feed("data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DONE]\n\n", 10ms);
  r = no_finish.s.finish(no_finish.t0 + 20ms, 1);
  EXPECT_EQ(r.error, "no chunk carried a finish_reason");

  Fake empty;
  empty.feed("data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n", 10ms);
  r = empty.s.finish(empty.t0 + 20ms, 0);
  EXPECT_EQ(r.error, "no chunk carried content");
}

TEST(LoadgenStream, ErrorEventsAndMalformedChunks) {
  Fake f;  // neuron and llama-server: an OpenAI error envelope as a data event
  f.feed("data: {\"choices\":[{\"text\":\"a\"}]}\n\n", 10ms);
  f.feed("data: {\"error\":{\"message\":\"model crashed\",\"type\":\"server_error\"}}\n\ndata: [DONE]\n\n", 20ms);
  EXPECT_TRUE(f.s.failed());
  RequestRecord r = f.s.finish(f.t0 + 30ms, 1);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, "error event: model crashed");

  Fake named;  // an `event: error` with a non-envelope payload
  named.feed("event: error\ndata: {\"detail\":\"boom\"}\n\n", 10ms);
  EXPECT_EQ(named.s.finish(named.t0 + 10ms, 0).error, "error event: {\"detail\":\"boom\"}");

  Fake bad;
  bad.feed("data: {not json\n\n", 10ms);
  EXPECT_TRUE(bad.s.failed());
  EXPECT_EQ(bad.s.finish(bad.t0 + 10ms, 0).error, "malformed chunk: {not json");

  Fake after;
  after.tokens(1, true);
  after.feed("data: {\"choices\":[{\"text\":\"late\"}]}\n\n", 200ms);
  EXPECT_EQ(after.s.finish(after.t0 + 200ms, 1).error, "data after [DONE]: {\"choices\":[{\"text\":\"late\"}]}");
}

TEST(LoadgenStats, PercentileInterpolatesLikeNumpy) {
  // numpy.percentile([1, 2, 3, 4], [0, 25, 50, 90, 99, 100]) = 1, 1.75, 2.5, 3.7, 3.97, 4
  const std::vector<double> v{4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 25), 1.75);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 2.5);
  EXPECT_NEAR(percentile(v, 90), 3.7, 1e-12);
  EXPECT_NEAR(percentile(v, 99), 3.97, 1e-12);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 4.0);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7.0);
  std::vector<double> hundred;
  for (int i = 1; i <= 100; ++i) hundred.push_back(i);
  EXPECT_NEAR(percentile(hundred, 99), 99.01, 1e-9);
  EXPECT_THROW(percentile({}, 50), Error);
  EXPECT_THROW(percentile(v, 101), Error);
  EXPECT_THROW(percentile(v, -1), Error);
}

RequestRecord ok_record(double ttft, double tpot, std::int64_t tokens) {
  RequestRecord r;
  r.ok = true;
  r.ttft_ms = ttft;
  r.tpot_ms = tpot;
  r.latency_ms = ttft + tpot * static_cast<double>(tokens - 1);
  r.output_tokens = tokens;
  r.prompt_tokens = 16;
  r.tokens_from_usage = true;
  return r;
}

TEST(LoadgenStats, SummaryCountsErrorsAndThroughput) {
  std::vector<RequestRecord> rs{ok_record(10, 2, 8), ok_record(30, 4, 8), ok_record(20, 3, 8)};
  RequestRecord bad;
  bad.error = "HTTP 503: busy";
  rs.push_back(bad);
  rs.push_back(bad);
  RequestRecord one = ok_record(5, 0, 1);  // one token: no TPOT
  rs.push_back(one);
  const LevelSummary s = summarize(4, 2.0, rs);
  EXPECT_EQ(s.concurrency, 4);
  EXPECT_EQ(s.requests, 6u);
  EXPECT_EQ(s.ok, 4u);
  EXPECT_EQ(s.errors, 2u);
  ASSERT_EQ(s.error_counts.size(), 1u);
  EXPECT_EQ(s.error_counts.at("HTTP 503: busy"), 2u);
  EXPECT_EQ(s.output_tokens, 25);
  EXPECT_DOUBLE_EQ(s.output_tok_s, 12.5);
  EXPECT_DOUBLE_EQ(s.requests_per_s, 2.0);
  EXPECT_DOUBLE_EQ(s.mean_prompt_tokens, 16.0);
  EXPECT_EQ(s.tokens_from, "usage");
  EXPECT_EQ(s.ttft_ms.count, 4u);
  EXPECT_DOUBLE_EQ(s.ttft_ms.p50, 15.0);  // of 5, 10, 20, 30
  EXPECT_DOUBLE_EQ(s.ttft_ms.max, 30.0);
  EXPECT_EQ(s.tpot_ms.count, 3u);
  EXPECT_DOUBLE_EQ(s.tpot_ms.p50, 3.0);
  EXPECT_DOUBLE_EQ(s.tpot_ms.mean, 3.0);

  const auto j = to_json(s);
  for (const char* key : {"concurrency", "requests", "ok", "errors", "error_counts", "wall_s", "output_tokens",
                          "output_tok_s", "requests_per_s", "mean_prompt_tokens", "tokens_from", "ttft_ms", "tpot_ms",
                          "latency_ms"})
    EXPECT_TRUE(j.contains(key)) << key;
  EXPECT_EQ(j["error_counts"]["HTTP 503: busy"], 2);
  EXPECT_DOUBLE_EQ(j["ttft_ms"]["p99"].get<double>(), s.ttft_ms.p99);
  EXPECT_NE(table_row(s).find("12.5"), std::string::npos);
}

TEST(LoadgenStats, AllFailedLevel) {
  RequestRecord bad;
  bad.error = "transport: Connection (no response)";
  const LevelSummary s = summarize(1, 0.5, {bad});
  EXPECT_EQ(s.ok, 0u);
  EXPECT_EQ(s.errors, 1u);
  EXPECT_EQ(s.output_tok_s, 0.0);
  EXPECT_EQ(s.ttft_ms.count, 0u);
  EXPECT_EQ(s.mean_prompt_tokens, -1.0);
}

TEST(LoadgenLoad, ParsesUrls) {
  Endpoint e = parse_url("http://127.0.0.1:13131");
  EXPECT_EQ(e.host, "127.0.0.1");
  EXPECT_EQ(e.port, 13131);
  EXPECT_EQ(e.base_path, "");
  e = parse_url("http://example.internal/api/");
  EXPECT_EQ(e.host, "example.internal");
  EXPECT_EQ(e.port, 80);
  EXPECT_EQ(e.base_path, "/api");
  for (const char* bad : {"https://x:1", "127.0.0.1:8080", "http://:80", "http://h:0", "http://h:99999", "http://h:8x", "http://h:"})
    EXPECT_THROW(parse_url(bad), Error) << bad;
}

TEST(LoadgenLoad, PromptsAreExactRandomAndReproducible) {
  Workload w;
  w.prompt_len = 64;
  w.vocab = 1000;
  const auto a = random_prompt(w, 0, 1, 2);
  EXPECT_EQ(a.size(), 64u);
  for (auto id : a) EXPECT_TRUE(id >= 0 && id < 1000);
  EXPECT_EQ(a, random_prompt(w, 0, 1, 2));
  EXPECT_NE(a, random_prompt(w, 0, 1, 3));
  EXPECT_NE(a, random_prompt(w, 0, 2, 2));
  EXPECT_NE(a, random_prompt(w, 1, 1, 2));

  Target t;
  t.model = "m";
  const auto body = completion_body(t, w, a);
  EXPECT_EQ(body["prompt"].size(), 64u);
  EXPECT_EQ(body["max_tokens"], 128);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(body["model"], "m");
  EXPECT_EQ(body["temperature"], 0.0);
  w.temperature.reset();
  t.model.clear();
  const auto server_defaults = completion_body(t, w, a);
  EXPECT_FALSE(server_defaults.contains("temperature"));
  EXPECT_FALSE(server_defaults.contains("model"));
}

}  // namespace
}  // namespace neuron::loadgen
