#pragma once
// The socket side: cpp-httplib behind neuron's own request/response types.
// Every method and path reaches the one handler (the Router decides 404/405),
// bodies over the limit get 413 in the OpenAI envelope before the handler
// runs, and streaming responses go out as chunked server-sent events.
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "server/http_types.hpp"

namespace neuron::server {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 13131;  // 0: any free port
  std::size_t max_body_bytes = 8u << 20;
  int threads = 64;  // connection threads; a streaming response holds one for its duration
};

// Called once per finished exchange (after a streamed body is complete), for
// the access log and the request metrics.
using ExchangeObserver = std::function<void(const std::string& method, const std::string& path, int status, double ms)>;

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, std::function<HttpResponse(const HttpRequest&)> handler, ExchangeObserver observer);
  ~HttpServer();  // stops and joins
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and starts accepting on a background thread; returns the bound
  // port. Throws Error{io} when the address cannot be bound.
  int start();
  // Stops accepting and waits for every connection thread to finish its
  // exchange (callers cancel long streams first).
  void stop();
  int port() const noexcept { return port_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace neuron::server
