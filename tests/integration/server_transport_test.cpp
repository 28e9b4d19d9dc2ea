// The HTTP transport's limits, against a real `neuron serve`: what slow,
// greedy, silent or hostile clients get, and that none of them can stop the
// daemon answering everyone else. The daemon needs ulimit -n >= 4096 for its
// default connection cap (it raises its soft limit to the hard one itself);
// the tests raise this process's limit the same way.
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/resource.h>

#include <atomic>
#include <memory>
#include <thread>

#include "server_daemon.hpp"
#include "util/sanitizers.hpp"
#include "support/process.hpp"

namespace neuron::server {
namespace {

using namespace testing_support;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }

// Raises this process's descriptor limit to its hard limit; false if that is below `need`.
bool raise_nofile(rlim_t need) {
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) != 0) return false;
  rl.rlim_cur = rl.rlim_max;
  ::setrlimit(RLIMIT_NOFILE, &rl);
  return rl.rlim_cur >= need;
}

using test_support::rss_kib;

std::string model_of(const Daemon& d) { return json::parse(d.client().Get("/v1/models")->body)["data"][0]["id"]; }

// A long streaming completion: runs until cancelled, for all practical purposes.
std::string long_stream_request(const std::string& model) {
  json body = {{"model", model}, {"prompt", "Go on forever"}, {"max_tokens", 4000}, {"ignore_eos", true}, {"stream", true}};
  std::string text = body.dump();
  return "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(text.size()) + "\r\n\r\n" + text;
}

// A raw connection whose receive buffer is as small as the kernel allows, so
// that not reading fills the path from the daemon quickly.
std::unique_ptr<RawConnection> small_window_connection(int port) { return std::make_unique<RawConnection>(port, 1); }

// Time for one GET /health on a fresh connection, or -1 when it failed.
double health_ms(int port) {
  const auto t0 = Clock::now();
  RawConnection c(port);
  c.send("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  const std::string got = c.read_until([](const std::string&) { return false; });
  if (got.rfind("HTTP/1.1 200", 0) != 0 || got.find("\"status\":\"ok\"") == std::string::npos) return -1;
  return ms_since(t0);
}

TEST(ServerTransport, HealthAnswersFastUnderSlowConnectionsAndOpenStreams) {
  constexpr int kSlow = 1000, kStreams = 256;
  if (!raise_nofile(kSlow + kStreams + 256)) GTEST_SKIP() << "ulimit -n hard limit too low for this test";
  Daemon d({"--model", tiny_model_dir(), "--queue-depth", "1024", "--header-timeout-ms", "300000"});
  const std::string model = model_of(d);

  // Slowloris: half a request head each, then nothing.
  std::vector<std::unique_ptr<RawConnection>> slow;
  for (int i = 0; i < kSlow; ++i) {
    slow.push_back(std::make_unique<RawConnection>(d.port()));
    slow.back()->send("GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Half: ");
  }
  // Streams that each hold a generation (one running, the rest queued):
  // half read slowly, half never read past the response head.
  std::vector<std::unique_ptr<RawConnection>> streams;
  const std::string request = long_stream_request(model);
  for (int i = 0; i < kStreams; ++i) {
    streams.push_back(small_window_connection(d.port()));
    streams.back()->send(request);
  }
  for (auto& s : streams) {
    const std::string head = s->read_until([](const std::string& got) { return got.find("\r\n\r\n") != std::string::npos; });
    ASSERT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head.substr(0, 300);
  }
  std::atomic<bool> stop{false};
  std::thread slow_reader([&] {
    char buf[256];
    while (!stop) {
      for (std::size_t i = 0; i < streams.size(); i += 2) streams[i]->read_some(buf, sizeof buf);
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });

  std::vector<double> times;
  for (int i = 0; i < 20; ++i) {
    times.push_back(health_ms(d.port()));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  stop = true;
  slow_reader.join();
  std::sort(times.begin(), times.end());
  std::printf("/health under %d slow connections and %d open streams: min %.2f ms, median %.2f ms, max %.2f ms\n", kSlow, kStreams,
              times.front(), times[times.size() / 2], times.back());
  EXPECT_GE(times.front(), 0) << "a /health request failed";
#if !NEURON_ASAN  // the sanitized daemon is several times slower: only the answers count there
  // Answered within 50 ms (the 90th percentile of 20; the worst may meet a
  // busy shared CPU, but never a transport that waits for a free thread).
  EXPECT_LT(times[times.size() * 9 / 10 - 1], 50.0) << "/health took too long under load";
  EXPECT_LT(times.back(), 250.0) << "/health took too long under load";
#endif
  // Every stream is still open: nothing was dropped to make room.
  auto metrics = d.client().Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_EQ(metric_sum(metrics->body, "neuron_requests_in_flight"), kStreams);

  slow.clear();
  streams.clear();
  EXPECT_EQ(d.stop(), 0);
}

TEST(ServerTransport, SlowAndIdleConnectionsAreClosedAtTheirDeadlines) {
  Daemon d({"--model", tiny_model_dir(), "--header-timeout-ms", "400", "--idle-timeout-ms", "1500"});
  // Half a head: closed once the head deadline passes, not before.
  RawConnection half(d.port());
  const auto t0 = Clock::now();
  half.send("GET /health HTTP/1.1\r\nHost: x\r\nX-Half: ");
  EXPECT_TRUE(half.wait_closed(std::chrono::milliseconds(5000))) << "a slowloris head was left open";
  EXPECT_GE(ms_since(t0), 350);
  // Nothing at all: the same deadline.
  RawConnection silent(d.port());
  EXPECT_TRUE(silent.wait_closed(std::chrono::milliseconds(5000)));
  // A head that trickles in byte by byte still meets the deadline from its first byte.
  RawConnection trickle(d.port());
  const auto t1 = Clock::now();
  bool closed = false;
  for (char c : std::string("GET /health HTTP/1.1\r\nHost: x\r\nX-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n")) {
    trickle.send(std::string(1, c));
    if ((closed = trickle.wait_closed(std::chrono::milliseconds(50)))) break;
  }
  EXPECT_TRUE(closed) << "a trickled head was let through past the deadline";
  EXPECT_LT(ms_since(t1), 2000);
  // A keep-alive connection: answered, then kept while idle, closed after the idle deadline.
  RawConnection keep(d.port());
  keep.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string first = keep.read_until([](const std::string& s) { return s.find("\"status\"") != std::string::npos && s.back() == '}'; });
  EXPECT_EQ(first.rfind("HTTP/1.1 200", 0), 0u) << first;
  EXPECT_FALSE(keep.wait_closed(std::chrono::milliseconds(700))) << "closed before the idle deadline";
  EXPECT_TRUE(keep.wait_closed(std::chrono::milliseconds(3000))) << "an idle keep-alive connection was never closed";
  EXPECT_EQ(d.client().Get("/health")->status, 200);
  EXPECT_EQ(d.stop(), 0);
}

TEST(ServerTransport, ChunkedBodyOverTheLimitIs413AndMemoryStaysBounded) {
#if NEURON_ASAN
  GTEST_SKIP() << "ASan's allocator makes RSS meaningless";
#endif
  constexpr std::size_t kLimit = 1 << 20, kTotal = 256u << 20, kChunk = 64 << 10;
  Daemon d({"--model", tiny_model_dir(), "--max-body-bytes", std::to_string(kLimit)});
  ASSERT_EQ(d.client().Get("/health")->status, 200);
  const long before = rss_kib(d.pid());

  RawConnection c(d.port());
  c.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n");
  char size_line[32];
  std::snprintf(size_line, sizeof size_line, "%zx\r\n", kChunk);
  const std::string piece = size_line + std::string(kChunk, 'a') + "\r\n";
  std::size_t sent = 0;
  while (sent < kTotal && !c.readable() && c.send(piece)) sent += kChunk;
  const std::string got = c.read_until([](const std::string& s) {
    auto end = s.find("\r\n\r\n");
    return end != std::string::npos && s.find('}', end) != std::string::npos;
  });
  const long after = rss_kib(d.pid());
  std::printf("chunked upload refused after %zu KiB sent; daemon RSS %ld KiB before, %ld KiB after\n", sent >> 10, before, after);
  EXPECT_EQ(got.rfind("HTTP/1.1 413", 0), 0u) << got.substr(0, 400);
  EXPECT_NE(got.find("payload_too_large"), std::string::npos) << got;
  EXPECT_LT(after - before, static_cast<long>(kLimit / 1024) + 8 * 1024) << "the daemon buffered past the body limit";

  // A declared Content-Length over the limit is refused before any body byte.
  RawConnection declared(d.port());
  declared.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(kLimit + 1) + "\r\n\r\n");
  const std::string early = declared.read_until([](const std::string& s) { return s.find('}') != std::string::npos; });
  EXPECT_EQ(early.rfind("HTTP/1.1 413", 0), 0u) << early;
  EXPECT_EQ(d.client().Get("/health")->status, 200);
  EXPECT_EQ(d.stop(), 0);
}

TEST(ServerTransport, CompressedBodiesAre415AndIdentityIsFine) {
  Daemon d({"--model", tiny_model_dir()});
  const std::string body = json{{"prompt", "hi"}, {"max_tokens", 1}}.dump();
  for (const char* encoding : {"gzip", "deflate", "br", "GZIP"}) {
    RawConnection c(d.port());
    c.send(http_post_text("/v1/completions", body, std::string("Content-Encoding: ") + encoding + "\r\n"));
    const std::string got = c.read_until([](const std::string&) { return false; });
    EXPECT_EQ(got.rfind("HTTP/1.1 415", 0), 0u) << encoding << "\n" << got;
    EXPECT_NE(got.find("\"code\":\"unsupported_media_type\""), std::string::npos) << got;
  }
  RawConnection c(d.port());
  c.send(http_post_text("/v1/completions", body, "Content-Encoding: identity\r\n"));
  const std::string got = c.read_until([](const std::string&) { return false; });
  EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
  EXPECT_EQ(d.stop(), 0);
}

TEST(ServerTransport, ASecondDaemonOnTheSamePortExitsTwo) {
  Daemon first({"--model", tiny_model_dir()}, false);
  const std::string log = ::testing::TempDir() + "/neuron-second-" + std::to_string(::getpid()) + ".log";
  const std::string cmd = std::string(NEURON_BINARY) + " serve --port " + std::to_string(first.port()) + " --model " + tiny_model_dir() +
                          " >" + log + " 2>&1";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status)) << cmd;
  EXPECT_EQ(WEXITSTATUS(status), 2) << read_all(log);
  EXPECT_NE(read_all(log).find("already in use"), std::string::npos) << read_all(log);
  std::remove(log.c_str());
  EXPECT_EQ(first.client().Get("/health")->status, 200) << "the first daemon must be unaffected";
  EXPECT_EQ(first.stop(), 0);
}

TEST(ServerTransport, ConnectionsPastTheCapGet503AndTheCapFreesUp) {
  constexpr int kCap = 8;
  Daemon d({"--model", tiny_model_dir(), "--max-connections", std::to_string(kCap)});
  auto health_on = [](RawConnection& c) {
    c.send("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    return c.read_until([](const std::string& s) { return s.find("\r\n\r\n") != std::string::npos && s.back() == '}'; });
  };
  // Fill the cap with keep-alive connections, each proven accepted by an answer
  // (the harness's own connections may take a moment to be closed).
  std::vector<std::unique_ptr<RawConnection>> held;
  for (int attempt = 0; attempt < 200 && held.size() < kCap; ++attempt) {
    auto c = std::make_unique<RawConnection>(d.port());
    if (health_on(*c).rfind("HTTP/1.1 200", 0) == 0) held.push_back(std::move(c));
    else std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_EQ(held.size(), static_cast<std::size_t>(kCap));
  RawConnection extra(d.port());
  const std::string refused = health_on(extra);
  EXPECT_EQ(refused.rfind("HTTP/1.1 503", 0), 0u) << refused;
  EXPECT_NE(refused.find("\"code\":\"overloaded\""), std::string::npos) << refused;
  EXPECT_NE(refused.find("Retry-After: "), std::string::npos) << refused;
  EXPECT_TRUE(extra.wait_closed(std::chrono::milliseconds(2000)));
  // The held ones still work; one closing makes room for a new one.
  EXPECT_EQ(health_on(*held[0]).rfind("HTTP/1.1 200", 0), 0u);
  held.pop_back();
  bool admitted = false;
  for (int i = 0; i < 100 && !admitted; ++i) {
    RawConnection again(d.port());
    admitted = health_on(again).rfind("HTTP/1.1 200", 0) == 0;
    if (!admitted) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(admitted) << "a closed connection did not give its place back";
  EXPECT_NE(d.log().find("--max-connections"), std::string::npos) << "the refusal is logged";
  held.clear();
  EXPECT_EQ(d.stop(), 0);
}

TEST(ServerTransport, AClientThatStopsReadingIsCancelledAfterTheWriteDeadline) {
  Daemon d({"--model", tiny_model_dir(), "--write-timeout-ms", "1000"});
  const std::string model = model_of(d);
  auto metrics = [&] { return d.client().Get("/metrics")->body; };
  const double cancelled_before = metric_sum(metrics(), "neuron_requests_cancelled_total");
  auto c = small_window_connection(d.port());
  c->send(long_stream_request(model));
  const std::string head = c->read_until([](const std::string& s) { return s.find("data: ") != std::string::npos; });
  ASSERT_EQ(head.rfind("HTTP/1.1 200", 0), 0u) << head;
  // ...and never reads again, but stays connected.
  const auto t0 = Clock::now();
  double cancelled = cancelled_before;
  while (cancelled == cancelled_before && ms_since(t0) < 60000) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    cancelled = metric_sum(metrics(), "neuron_requests_cancelled_total");
  }
  EXPECT_EQ(cancelled, cancelled_before + 1) << "a stream nobody reads was never cancelled";
  std::printf("a client that stopped reading was cancelled %.0f ms after its stream began\n", ms_since(t0));
  EXPECT_LT(metric_sum(metrics(), "neuron_generated_tokens_total"), 4000) << "the generation ran to its end";
  EXPECT_NE(d.log().find("read nothing for 1000 ms"), std::string::npos) << d.log();
  EXPECT_EQ(d.stop(), 0);
}

TEST(ServerTransport, KeepAliveCarriesStreamsPipelinedRequestsAndHead) {
  Daemon d({"--model", tiny_model_dir()});
  const std::string model = model_of(d);
  RawConnection c(d.port());
  json body = {{"model", model}, {"prompt", "hi"}, {"max_tokens", 4}, {"stream", true}};
  const std::string text = body.dump();
  const std::string stream_req = "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: " +
                                 std::to_string(text.size()) + "\r\n\r\n" + text;
  for (int i = 0; i < 2; ++i) {  // two streams, one connection
    c.send(stream_req);
    const std::string got = c.read_until([](const std::string& s) { return s.find("0\r\n\r\n") != std::string::npos; });
    EXPECT_EQ(got.rfind("HTTP/1.1 200", 0), 0u) << got;
    EXPECT_NE(got.find("Transfer-Encoding: chunked"), std::string::npos) << got;
    EXPECT_NE(got.find("data: [DONE]"), std::string::npos) << got;
  }
  // Pipelined: two requests in one write, two answers in order.
  c.send("GET /version HTTP/1.1\r\nHost: x\r\n\r\nHEAD /health HTTP/1.1\r\nHost: x\r\n\r\n");
  const std::string both = c.read_until([](const std::string& s) {
    auto second = s.find("HTTP/1.1 200", 1);
    return second != std::string::npos && s.find("\r\n\r\n", second) != std::string::npos;
  });
  EXPECT_NE(both.find("\"name\":\"neuron\""), std::string::npos) << both;
  const std::string head_answer = both.substr(both.find("HTTP/1.1 200", 1));
  EXPECT_NE(head_answer.find("Content-Length: "), std::string::npos) << head_answer;
  EXPECT_EQ(head_answer.substr(head_answer.find("\r\n\r\n") + 4), "") << "HEAD must have no body";
  // The connection is still good for more.
  c.send("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(c.read_until([](const std::string&) { return false; }).find("\"status\":\"ok\""), std::string::npos);
  EXPECT_EQ(d.stop(), 0);
}

}  // namespace
}  // namespace neuron::server

namespace neuron::server {
namespace {

// Head and body of one exchange on a fresh connection (Connection: close).
std::string exchange(int port, const std::string& request) {
  RawConnection c(port);
  c.send(request);
  return c.read_until([](const std::string&) { return false; });
}

std::string head_of(const std::string& response) { return response.substr(0, response.find("\r\n\r\n") + 2); }

TEST(ServerTransport, BrowsersFromAllowedOriginsGetCorsHeadersAndPreflightsNeedNoKey) {
  Daemon d({"--model", tiny_model_dir(), "--api-key", "k3y", "--allowed-origins", "http://app.example, http://localhost:5173",
            "--max-body-bytes", "4096"},
           false);
  d.api_key = "k3y";
  d.wait_models_loaded();
  const std::string origin = "Origin: http://app.example\r\n";
  // The preflight of a fetch() with the key: answered without one.
  const std::string pre = exchange(d.port(), "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + origin +
                                                 "Access-Control-Request-Method: POST\r\n"
                                                 "Access-Control-Request-Headers: authorization, content-type, x-stainless-os\r\n\r\n");
  EXPECT_EQ(pre.rfind("HTTP/1.1 204", 0), 0u) << pre;
  EXPECT_NE(pre.find("Access-Control-Allow-Origin: http://app.example\r\n"), std::string::npos) << pre;
  EXPECT_NE(pre.find("Vary: Origin\r\n"), std::string::npos) << pre;
  EXPECT_NE(pre.find("Access-Control-Allow-Methods: GET, POST, OPTIONS"), std::string::npos) << pre;
  EXPECT_NE(pre.find("x-stainless-os"), std::string::npos) << pre;
  EXPECT_NE(pre.find("Access-Control-Max-Age: 600"), std::string::npos) << pre;
  EXPECT_EQ(pre.find("Content-Length"), std::string::npos) << "a 204 has no body\n" << pre;
  // From another origin: refused.
  const std::string other = exchange(d.port(), "OPTIONS /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\nOrigin: http://evil.example\r\n"
                                               "Access-Control-Request-Method: GET\r\n\r\n");
  EXPECT_EQ(other.rfind("HTTP/1.1 403", 0), 0u) << other;
  EXPECT_EQ(other.find("Access-Control-Allow-Origin"), std::string::npos) << other;

  // Answers of every kind carry the header: success, a 401, a transport refusal (413), a stream.
  const std::string ok = exchange(d.port(), "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\nAuthorization: Bearer k3y\r\n" + origin + "\r\n");
  EXPECT_EQ(ok.rfind("HTTP/1.1 200", 0), 0u) << ok;
  EXPECT_NE(head_of(ok).find("Access-Control-Allow-Origin: http://app.example\r\n"), std::string::npos) << ok;
  const std::string unauthorized = exchange(d.port(), "GET /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + origin + "\r\n");
  EXPECT_EQ(unauthorized.rfind("HTTP/1.1 401", 0), 0u) << unauthorized;
  EXPECT_NE(head_of(unauthorized).find("Access-Control-Allow-Origin: http://app.example"), std::string::npos) << unauthorized;
  const std::string big = exchange(d.port(), http_post_text("/v1/completions", std::string(8000, ' '), origin + "Authorization: Bearer k3y\r\n"));
  EXPECT_EQ(big.rfind("HTTP/1.1 413", 0), 0u) << big;
  EXPECT_NE(head_of(big).find("Access-Control-Allow-Origin: http://app.example"), std::string::npos) << big;
  const json body = {{"prompt", "hi"}, {"max_tokens", 2}, {"stream", true}};
  const std::string stream = exchange(d.port(), http_post_text("/v1/completions", body.dump(), origin + "authorization: bearer k3y\r\n"));
  EXPECT_EQ(stream.rfind("HTTP/1.1 200", 0), 0u) << stream;
  EXPECT_NE(head_of(stream).find("Access-Control-Allow-Origin: http://app.example"), std::string::npos) << stream;
  EXPECT_NE(stream.find("data: [DONE]"), std::string::npos) << stream;
  // No Origin (curl, SDKs), or one not allowed: no CORS headers.
  const std::string plain = exchange(d.port(), "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_EQ(plain.find("Access-Control"), std::string::npos) << plain;
  const std::string evil = exchange(d.port(), "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\nOrigin: http://evil.example\r\n\r\n");
  EXPECT_EQ(evil.rfind("HTTP/1.1 200", 0), 0u) << evil;
  EXPECT_EQ(evil.find("Access-Control"), std::string::npos) << evil;
  EXPECT_EQ(d.stop(), 0);
}

TEST(ServerTransport, WithoutAllowedOriginsThereIsNoCors) {
  Daemon d({"--model", tiny_model_dir()});
  const std::string pre = exchange(d.port(), "OPTIONS /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\nOrigin: http://app.example\r\n"
                                             "Access-Control-Request-Method: GET\r\n\r\n");
  EXPECT_EQ(pre.rfind("HTTP/1.1 405", 0), 0u) << pre;
  EXPECT_EQ(pre.find("Access-Control"), std::string::npos) << pre;
  EXPECT_EQ(d.stop(), 0);
}

}  // namespace
}  // namespace neuron::server
