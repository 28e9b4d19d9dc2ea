#include "loadgen/load.hpp"

#include <algorithm>
#include <latch>
#include <mutex>
#include <random>
#include <thread>

#include <httplib.h>

#include "util/error.hpp"

namespace neuron::loadgen {

Endpoint parse_url(std::string_view url) {
  constexpr std::string_view scheme = "http://";
  if (url.substr(0, scheme.size()) != scheme)
    fail(errc::invalid_argument, "--url '" + std::string(url) + "': only http://host[:port][/prefix] is supported");
  std::string_view rest = url.substr(scheme.size());
  Endpoint e;
  const auto slash = rest.find('/');
  if (slash != std::string_view::npos) {
    e.base_path = std::string(rest.substr(slash));
    while (!e.base_path.empty() && e.base_path.back() == '/') e.base_path.pop_back();
    rest = rest.substr(0, slash);
  }
  const auto colon = rest.rfind(':');
  e.host = std::string(rest.substr(0, colon));
  if (colon != std::string_view::npos) {
    const std::string port(rest.substr(colon + 1));
    std::size_t used = 0;
    int p = -1;
    try {
      p = std::stoi(port, &used);
    } catch (const std::exception&) {
    }
    if (port.empty() || used != port.size() || p < 1 || p > 65535)
      fail(errc::invalid_argument, "--url '" + std::string(url) + "': bad port '" + port + "'");
    e.port = p;
  }
  if (e.host.empty()) fail(errc::invalid_argument, "--url '" + std::string(url) + "': no host");
  return e;
}

std::vector<std::int32_t> random_prompt(const Workload& w, std::uint64_t level, std::uint64_t client, std::uint64_t request) {
  std::seed_seq seq{static_cast<std::uint32_t>(w.seed), static_cast<std::uint32_t>(w.seed >> 32),
                    static_cast<std::uint32_t>(level), static_cast<std::uint32_t>(client),
                    static_cast<std::uint32_t>(request), static_cast<std::uint32_t>(request >> 32)};
  std::mt19937 rng(seq);
  std::uniform_int_distribution<std::int32_t> id(0, w.vocab - 1);
  std::vector<std::int32_t> out(static_cast<std::size_t>(w.prompt_len));
  for (auto& t : out) t = id(rng);
  return out;
}

nlohmann::json completion_body(const Target& t, const Workload& w, const std::vector<std::int32_t>& prompt) {
  nlohmann::json body = {{"prompt", prompt},
                         {"max_tokens", w.gen},
                         {"ignore_eos", true},
                         {"stream", true},
                         {"stream_options", {{"include_usage", true}}}};
  if (!t.model.empty()) body["model"] = t.model;
  if (w.temperature) body["temperature"] = *w.temperature;
  return body;
}

struct Client::Impl {
  explicit Impl(const Target& t) : http(t.endpoint.host, t.endpoint.port) {
    http.set_keep_alive(true);
    http.set_tcp_nodelay(true);
    http.set_connection_timeout(std::chrono::seconds(10));
    http.set_read_timeout(t.timeout);
    http.set_write_timeout(std::chrono::seconds(60));
  }
  httplib::Client http;
  bool used = false;  // a request went out on it: the connection may be a kept-alive one
};

Client::Client(Target target) : target_(std::move(target)), impl_(std::make_unique<Impl>(target_)) {}
Client::~Client() = default;

RequestRecord Client::complete(const std::string& body, std::int64_t expected_tokens) {
  // A kept-alive connection the server has closed since the last response
  // (llama-server closes them after a stream) fails at once with no response.
  // As HTTP clients do, send such a request once more on a new connection;
  // the record times the attempt that was answered.
  const bool reused = impl_->used;
  impl_->used = true;
  bool answered = false;
  RequestRecord r = attempt(body, expected_tokens, &answered);
  // Only a quick failure: a server that took the request and then closed without an answer failed it.
  if (!answered && reused && r.latency_ms < 1000) {
    r = attempt(body, expected_tokens, &answered);
    r.reconnected = true;
  }
  return r;
}

RequestRecord Client::attempt(const std::string& body, std::int64_t expected_tokens, bool* answered) {
  httplib::Request req;
  req.method = "POST";
  req.path = target_.endpoint.base_path + "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}, {"Accept", "text/event-stream"}};
  if (!target_.api_key.empty()) req.headers.emplace("Authorization", "Bearer " + target_.api_key);
  req.body = body;

  int status = 0;
  std::string error_body;
  const Clock::time_point sent = Clock::now();
  CompletionStream stream(sent);
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, std::size_t n, std::uint64_t, std::uint64_t) {
    const Clock::time_point now = Clock::now();
    if (status != 200) {
      if (error_body.size() < 2000) error_body.append(data, std::min<std::size_t>(n, 2000 - error_body.size()));
      return true;
    }
    stream.on_bytes({data, n}, now);
    return !stream.failed();  // an error event ends the request; the connection is reopened for the next
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent_ok = impl_->http.send(req, res, err);
  const Clock::time_point end = Clock::now();
  *answered = status != 0;

  if (status != 200 && status != 0) {
    RequestRecord r;
    r.latency_ms = std::chrono::duration<double, std::milli>(end - sent).count();
    r.error = "HTTP " + std::to_string(status) + ": " + error_body;
    return r;
  }
  RequestRecord r = stream.finish(end, expected_tokens);
  if (!sent_ok && !stream.failed()) {
    // The transport broke: say so, whatever the stream held until then.
    r.ok = false;
    r.error = "transport: " + httplib::to_string(err) + (status == 0 ? " (no response)" : " (mid-stream)");
  }
  return r;
}

LevelRun run_level(const Target& t, const Workload& w, const LevelOptions& o, std::uint64_t level) {
  if (o.concurrency < 1) fail(errc::invalid_argument, "concurrency must be at least 1");
  const bool timed = o.duration.count() > 0;
  if (!timed && o.requests_per_client < 1) fail(errc::invalid_argument, "requests per client must be at least 1");

  LevelRun run;
  std::mutex mu;
  std::latch ready(o.concurrency);
  std::vector<Clock::time_point> begins(static_cast<std::size_t>(o.concurrency)), ends(begins.size());
  {
    std::vector<std::jthread> clients;
    clients.reserve(static_cast<std::size_t>(o.concurrency));
    for (int c = 0; c < o.concurrency; ++c) {
      clients.emplace_back([&, c] {
        Client client(t);
        std::vector<RequestRecord> mine;
        ready.arrive_and_wait();
        const Clock::time_point begin = Clock::now();
        begins[static_cast<std::size_t>(c)] = begin;
        for (std::uint64_t i = 0;; ++i) {
          if (timed ? Clock::now() - begin >= o.duration : i >= static_cast<std::uint64_t>(o.requests_per_client)) break;
          const std::string body = completion_body(t, w, random_prompt(w, level, static_cast<std::uint64_t>(c), i)).dump();
          mine.push_back(client.complete(body, w.gen));
        }
        ends[static_cast<std::size_t>(c)] = Clock::now();
        std::lock_guard lock(mu);
        run.records.insert(run.records.end(), mine.begin(), mine.end());
      });
    }
  }  // joins every client
  const Clock::time_point first = *std::min_element(begins.begin(), begins.end());
  const Clock::time_point last = *std::max_element(ends.begin(), ends.end());
  run.wall_s = std::chrono::duration<double>(last - first).count();
  return run;
}

}  // namespace neuron::loadgen
