// `neuron bench-serve` and its client library against servers: a real daemon
// with the bundled tiny model (every request must come back with exactly the
// asked-for tokens and no error), and in-process fake servers that misbehave
// (truncated streams, dropped connections, errors) to show that each such
// request is counted as an error, never dropped.
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <functional>
#include <sstream>
#include <memory>
#include <string>
#include <sys/wait.h>
#include <thread>

#include "loadgen/load.hpp"
#include "loadgen/stats.hpp"
#include "server_daemon.hpp"

namespace neuron::loadgen {
namespace {

using namespace server::testing_support;
using nlohmann::json;

struct CommandResult {
  int status = -1;
  std::string out;
};

// Runs `neuron bench-serve ARGS` and returns its exit status and stdout.
CommandResult bench_serve(const std::string& args) {
  const std::string cmd = std::string(NEURON_BINARY) + " bench-serve " + args;
  CommandResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

std::vector<json> json_lines(const std::string& out) {
  std::vector<json> lines;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) {
      lines.push_back(json::parse(line));
    }
  return lines;
}

class BenchServeDaemon : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { daemon_ = new Daemon({"--model", tiny_model_dir(), "--queue-depth", "16"}); }
  static void TearDownTestSuite() {
    if (daemon_) {
      EXPECT_EQ(daemon_->stop(), 0);
    }
    delete daemon_;
    daemon_ = nullptr;
  }
  static std::string url() { return "http://127.0.0.1:" + std::to_string(daemon_->port()); }
  static Daemon* daemon_;
};
Daemon* BenchServeDaemon::daemon_ = nullptr;

TEST_F(BenchServeDaemon, EveryRequestMakesExactlyGenTokens) {
  Target t;
  t.endpoint = parse_url(url());
  Workload w;
  w.prompt_len = 12;
  w.gen = 9;
  LevelOptions o;
  o.concurrency = 2;
  o.requests_per_client = 3;
  const LevelRun run = run_level(t, w, o, 0);
  ASSERT_EQ(run.records.size(), 6u);
  for (const auto& r : run.records) {
    EXPECT_TRUE(r.ok) << r.error;
    EXPECT_EQ(r.output_tokens, 9);
    EXPECT_TRUE(r.tokens_from_usage);
    EXPECT_EQ(r.prompt_tokens, 12);
    EXPECT_GT(r.ttft_ms, 0.0);
    EXPECT_GE(r.latency_ms, r.ttft_ms);
  }
  const LevelSummary s = summarize(o.concurrency, run.wall_s, run.records);
  EXPECT_EQ(s.errors, 0u);
  EXPECT_EQ(s.output_tokens, 54);
  EXPECT_GT(s.output_tok_s, 0.0);
  EXPECT_EQ(s.tpot_ms.count, 6u);
}

TEST_F(BenchServeDaemon, CommandPrintsOneJsonObjectPerLevel) {
  const CommandResult r = bench_serve("--url " + url() +
                                      " --concurrency 1,2 --requests-per-client 2 --prompt-len 10 --gen 6 --warmup 1 --json");
  ASSERT_EQ(r.status, 0) << r.out;
  const auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    const json& l = lines[i];
    for (const char* key : {"url", "model", "prompt_len", "gen", "requests_per_client", "concurrency", "requests", "ok",
                            "errors", "error_counts", "wall_s", "output_tokens", "output_tok_s", "requests_per_s",
                            "mean_prompt_tokens", "tokens_from", "ttft_ms", "tpot_ms", "latency_ms"})
      EXPECT_TRUE(l.contains(key)) << key << " missing in " << l.dump();
    for (const char* d : {"ttft_ms", "tpot_ms", "latency_ms"})
      for (const char* key : {"count", "mean", "p50", "p90", "p99", "max"}) EXPECT_TRUE(l[d].contains(key)) << d << "." << key;
    const int c = i == 0 ? 1 : 2;
    EXPECT_EQ(l["concurrency"], c);
    EXPECT_EQ(l["requests"], 2 * c);
    EXPECT_EQ(l["ok"], 2 * c);
    EXPECT_EQ(l["errors"], 0);
    EXPECT_EQ(l["output_tokens"], 6 * 2 * c);
    EXPECT_EQ(l["mean_prompt_tokens"], 10.0);
    EXPECT_EQ(l["tokens_from"], "usage");
    EXPECT_EQ(l["model"], "qwen3-tiny-a");  // named by GET /v1/models: the folder name
    EXPECT_GT(l["output_tok_s"].get<double>(), 0.0);
    EXPECT_GT(l["ttft_ms"]["p50"].get<double>(), 0.0);
  }
}

TEST_F(BenchServeDaemon, RefusedRequestsAreCountedAndFailTheRun) {
  const CommandResult r = bench_serve("--url " + url() +
                                      " --model no-such-model --concurrency 2 --requests-per-client 2 --gen 4 --prompt-len 4 --warmup 0 --json");
  EXPECT_EQ(r.status, 1) << r.out;
  const auto lines = json_lines(r.out);
  ASSERT_EQ(lines.size(), 1u) << r.out;
  EXPECT_EQ(lines[0]["requests"], 4);
  EXPECT_EQ(lines[0]["ok"], 0);
  EXPECT_EQ(lines[0]["errors"], 4);
  ASSERT_EQ(lines[0]["error_counts"].size(), 1u);
  EXPECT_EQ(lines[0]["error_counts"].begin().key().rfind("HTTP 404: ", 0), 0u) << lines[0]["error_counts"].dump();
}

TEST_F(BenchServeDaemon, TooFewTokensIsAnError) {
  // The tiny model's context is far below 100000 tokens: the server refuses the request.
  Target t;
  t.endpoint = parse_url(url());
  Workload w;
  w.prompt_len = 4;
  w.gen = 100000;
  Client client(t);
  const RequestRecord r = client.complete(completion_body(t, w, random_prompt(w, 0, 0, 0)).dump(), w.gen);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error.rfind("HTTP 400: ", 0), 0u) << r.error;
}

TEST(BenchServeCommand, BadFlagsExitTwo) {
  for (const char* args : {"--concurrency 0", "--concurrency 1,-4", "--gen 0", "--prompt-len 0", "--url https://x:1",
                           "--url 127.0.0.1:80", "--requests-per-client 0", "--requests-per-client 2 --duration 3"}) {
    const CommandResult r = bench_serve(std::string(args) + " 2>/dev/null");
    EXPECT_EQ(r.status, 2) << args;
  }
}

TEST(BenchServeCommand, NoServerIsAClearFailure) {
  // Port 9 (discard) on loopback: nothing listens there in a test environment.
  const CommandResult r = bench_serve("--url http://127.0.0.1:9 --concurrency 1 2>&1");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("is not ready"), std::string::npos) << r.out;
}

// An in-process server answering /v1/completions with a canned body.
class FakeServer {
 public:
  explicit FakeServer(std::function<void(const httplib::Request&, httplib::Response&)> completions) {
    server_.Get("/v1/models", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(R"({"data":[{"id":"fake"}]})", "application/json");
    });
    server_.Post("/v1/completions", std::move(completions));
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeServer() {
    server_.stop();
    thread_.join();
  }
  Target target() const {
    Target t;
    t.endpoint = parse_url("http://127.0.0.1:" + std::to_string(port_));
    t.timeout = std::chrono::seconds(10);
    return t;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

std::string token_chunk(int i) { return "data: {\"choices\":[{\"text\":\"t" + std::to_string(i) + "\"}]}\n\n"; }

RequestRecord one_request(const FakeServer& s, std::int32_t gen) {
  Workload w;
  w.prompt_len = 3;
  w.gen = gen;
  Client c(s.target());
  return c.complete(completion_body(s.target(), w, random_prompt(w, 0, 0, 0)).dump(), gen);
}

TEST(BenchServeFake, CleanEndWithoutDoneIsTruncated) {
  FakeServer s([](const httplib::Request&, httplib::Response& res) {
    res.set_chunked_content_provider("text/event-stream", [](std::size_t, httplib::DataSink& sink) {
      for (int i = 0; i < 2; ++i) sink.write(token_chunk(i).data(), token_chunk(i).size());
      sink.done();
      return true;
    });
  });
  const RequestRecord r = one_request(s, 2);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, "truncated stream: no data: [DONE]");
  EXPECT_EQ(r.content_chunks, 2);
}

TEST(BenchServeFake, DroppedConnectionIsATransportError) {
  FakeServer s([](const httplib::Request&, httplib::Response& res) {
    res.set_chunked_content_provider("text/event-stream", [](std::size_t, httplib::DataSink& sink) {
      const std::string c = token_chunk(0) + "data: {\"choi";
      sink.write(c.data(), c.size());
      return false;  // abort: the connection closes mid-body
    });
  });
  const RequestRecord r = one_request(s, 2);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error.rfind("transport: ", 0), 0u) << r.error;
}

TEST(BenchServeFake, ServerErrorStatusAndErrorEvent) {
  FakeServer busy([](const httplib::Request&, httplib::Response& res) {
    res.status = 503;
    res.set_content(R"({"error":{"message":"queue full"}})", "application/json");
  });
  RequestRecord r = one_request(busy, 2);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, R"(HTTP 503: {"error":{"message":"queue full"}})");

  FakeServer failing([](const httplib::Request&, httplib::Response& res) {
    res.set_content(token_chunk(0) + "data: {\"error\":{\"message\":\"step failed\"}}\n\ndata: [DONE]\n\n", "text/event-stream");
  });
  r = one_request(failing, 2);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, "error event: step failed");
}

std::string good_stream(int tokens) {
  std::string out;
  for (int i = 0; i < tokens; ++i) out += token_chunk(i);
  return out + "data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n";
}

// A raw HTTP/1.1 server: answers each connection's first request with `response`,
// then closes it 200 ms later without reading on (as llama-server sometimes does
// after a stream), though the response said nothing about closing.
class ClosingServer {
 public:
  explicit ClosingServer(std::string response) : response_(std::move(response)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::listen(fd_, 16);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] {
      for (;;) {
        const int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;  // the listening socket was shut down
        ++connections_;
        std::string got;
        char buf[4096];
        // Headers, then the body by Content-Length.
        while (got.find("\r\n\r\n") == std::string::npos) {
          const ssize_t n = ::recv(c, buf, sizeof buf, 0);
          if (n <= 0) break;
          got.append(buf, static_cast<std::size_t>(n));
        }
        const auto head_end = got.find("\r\n\r\n");
        const auto cl = got.find("Content-Length: ");
        if (head_end != std::string::npos && cl != std::string::npos) {
          const std::size_t want = head_end + 4 + std::stoul(got.substr(cl + 16));
          while (got.size() < want) {
            const ssize_t n = ::recv(c, buf, sizeof buf, 0);
            if (n <= 0) break;
            got.append(buf, static_cast<std::size_t>(n));
          }
        }
        ::send(c, response_.data(), response_.size(), MSG_NOSIGNAL);
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        ::close(c);
      }
    });
  }
  ~ClosingServer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  Target target() const {
    Target t;
    t.endpoint = parse_url("http://127.0.0.1:" + std::to_string(port_));
    t.timeout = std::chrono::seconds(10);
    return t;
  }
  int connections() const { return connections_; }

 private:
  std::string response_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<int> connections_{0};
  std::thread thread_;
};

TEST(BenchServeFake, ClosedKeptAliveConnectionIsReopenedOnce) {
  const std::string body = good_stream(3);
  ClosingServer s("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: " + std::to_string(body.size()) +
                  "\r\n\r\n" + body);
  Workload w;
  w.prompt_len = 3;
  w.gen = 3;
  Client c(s.target());
  const std::string request = completion_body(s.target(), w, random_prompt(w, 0, 0, 0)).dump();
  RequestRecord first = c.complete(request, 3);
  EXPECT_TRUE(first.ok) << first.error;
  EXPECT_FALSE(first.reconnected);
  RequestRecord second = c.complete(request, 3);  // on the kept-alive connection, which gets no answer
  EXPECT_TRUE(second.ok) << second.error;
  EXPECT_TRUE(second.reconnected);
  EXPECT_EQ(s.connections(), 2);
  EXPECT_EQ(summarize(1, 1.0, {first, second}).reconnects, 1u);
}

TEST(BenchServeFake, GoodStreamWithoutUsageCountsChunks) {
  FakeServer s([](const httplib::Request& req, httplib::Response& res) {
    const json body = json::parse(req.body);
    std::string out;
    for (int i = 0; i < body["max_tokens"].get<int>(); ++i) out += token_chunk(i);
    out += "data: {\"choices\":[{\"text\":\"\",\"finish_reason\":\"length\"}]}\n\ndata: [DONE]\n\n";
    res.set_content(out, "text/event-stream");
  });
  const RequestRecord r = one_request(s, 5);
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.output_tokens, 5);
  EXPECT_FALSE(r.tokens_from_usage);
}

}  // namespace
}  // namespace neuron::loadgen
